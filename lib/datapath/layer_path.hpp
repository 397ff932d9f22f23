// SPDX-License-Identifier: Apache-2.0
// LayerPath: how one layer of a batch's chunks moves between the pool and the engine's KV
// blocks. There is one implementation per way a layer lands:
//   host         CPU I/O (uring, posix, passthru, nvme, dram; DRAM tier in front) into host
//                memory, through staging or vectored straight into the blocks
//   staged-cuda  CPU or cuFile I/O into staging, then a copy kernel per wave (the reads
//                submitted before staging ran out) into CUDA memory (stores: a gather
//                kernel, then the writes)
//   per-block    the baseline of other SSD tiers: one I/O per block and K/V, staged
//   gpu-uring    the GPU writes io_uring submissions and polls completions; then the copies
//                as staged-cuda's, queued by gpu-uring's copier thread
//   mapped-cuda  dram: copy kernels between the mapped pool and the blocks, no I/O
// The runtime picks a path once, at register_kv (runtime/plan.hpp). A batch plans once
// (LayerPath::plan), then the scheduler issues its layers in order (PathRun::issue); every
// issued layer ends with exactly one PathSink::layer_landed. A layer_landed call is the last
// thing its caller does with the run and the sink: once the last layer has landed, the batch
// may be freed, its run with it, on another thread. A path whose copies into CUDA memory are
// work on the device's stream (staged-cuda, mapped-cuda, gpu-uring) says so with layer_queued
// first.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "binding/kv_binding.hpp"
#include "binding/staging.hpp"
#include "common/fence.hpp"
#include "datapath/backend.hpp"
#include "pool/pool.hpp"

namespace tutti {

class DramPool;
class DramTier;
class GpuUring;
class ReadsFirst;
namespace gpu {
class Device;
}

// One chunk a batch moves.
struct PathChunk {
  uint64_t slot = 0;
  const int32_t* blocks = nullptr;      // the chunk's block ids, from the one with its first token
  gpu::ChunkSpan span;                  // its first token's place in that block; the tokens that move
  uint32_t first_block = 0;             // where its block ids start in the batch's block-id array
  std::atomic<int> error{0};            // the chunk's first error; later layers skip it
  std::span<const uint64_t> expected;   // load: the per-layer checksums of its commit record
  std::vector<uint64_t> sums;           // store: the per-layer checksums, filled by the path
};

// Bytes and I/Os moved, summed over every batch (tutti_stats).
struct IoCounters {
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0}, ios{0};
};

// What a path reports to the batch it moves.
class PathSink {
 public:
  virtual ~PathSink() = default;
  // Chunk `i` failed at `layer` with a tutti_error; `why` names the file, offset and errno, or
  // the checksum. The first error of a chunk stays.
  virtual void chunk_failed(uint32_t i, uint32_t layer, int code, const std::string& why) = 0;
  // Every transfer of `layer` is over, its loaded chunks checked.
  virtual void layer_landed(uint32_t layer) = 0;
  // A load into CUDA memory: every copy of `layer` is queued on the device's stream (its
  // kernels may still run), so stream-ordered waits may go on as waits on that stream. At
  // most once per layer, before its layer_landed, never in a CUDA host callback.
  virtual void layer_queued(uint32_t layer) = 0;
  // A load that its waiter may give up on (option load_timeout_ms): every byte goes into the
  // blocks through this fence, or not at all. Null otherwise.
  virtual Fence* fence() { return nullptr; }
};

// A path's work for one batch. Destroyed by the batch once every issued layer has landed, on
// a thread that may call CUDA.
class PathRun {
 public:
  virtual ~PathRun() = default;
  virtual void issue(uint32_t layer) = 0;
  // Every issued layer has landed: give back what the batch held for all its layers. May run
  // in a CUDA host callback, so it makes no CUDA call.
  virtual void all_landed() {}
};

// What the paths move bytes with; owned by the runtime, alive while any path is.
struct PathParts {
  const KvBinding* kv = nullptr;
  const Pool* pool = nullptr;
  Backend* backend = nullptr;     // CPU I/O
  Staging* staging = nullptr;     // one I/O each: pinned host memory, or HBM for cufile loads
  DramTier* tier = nullptr;       // in front of `backend`, or null
  gpu::Device* device = nullptr;  // the KV cache is in CUDA memory
  GpuUring* gpu_uring = nullptr;
  const DramPool* dram = nullptr;
  IoCounters* counters = nullptr;
  bool verify = true;             // loads check every chunk-layer's checksum
  bool direct = false;            // host: vectored I/O straight into the blocks
  unsigned lookahead = 4;
  ReadsFirst* reads_first = nullptr;  // stores: each write not staged yet asks it first
  std::vector<uint8_t> async_reads;   // per pool file: BackendConfig::async_reads
  bool gpu_sums = false;              // stores from CUDA memory: hashed by the gather's checksum kernel
};

class LayerPath {
 public:
  virtual ~LayerPath() = default;
  virtual const char* name() const = 0;
  // A run over `chunks` (fixed from now on, items skipped once they fail), reporting to `sink`.
  // Throws, before anything is issued, what cannot be (e.g. staging too small for a layer).
  virtual std::unique_ptr<PathRun> plan(bool load, std::deque<PathChunk>& chunks, PathSink& sink) = 0;
};

enum class PathKind { kHost, kHostPerBlock, kStagedCuda, kCudaPerBlock, kGpuUring, kMappedCuda };
std::unique_ptr<LayerPath> make_layer_path(PathKind kind, const PathParts& parts);

// The ways by name (make_layer_path picks): host and host per-block in io_run.cpp, the three
// fed into CUDA memory in cuda_paths.cpp, gpu-uring in gpu_uring_path.cpp.
std::unique_ptr<LayerPath> make_host_path(const PathParts& parts, bool per_block);
std::unique_ptr<LayerPath> make_staged_cuda_path(const PathParts& parts);
std::unique_ptr<LayerPath> make_per_block_cuda_path(const PathParts& parts);
std::unique_ptr<LayerPath> make_gpu_uring_path(const PathParts& parts);
std::unique_ptr<LayerPath> make_mapped_cuda_path(const PathParts& parts);

}  // namespace tutti
