// SPDX-License-Identifier: Apache-2.0
// DataPath: backends that move bytes between pool files and host memory. A backend executes
// IoOps asynchronously on its own threads; the op's hooks run on those threads, so gather,
// scatter and checksums are spread over the I/O threads instead of the submitter.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tutti {

class IoOp {
 public:
  virtual ~IoOp() = default;
  // Runs on an I/O thread just before the I/O (a store gathers its bytes here).
  virtual void prepare() {}
  // Runs on an I/O thread when the I/O is over: res = bytes moved (== length) or -errno.
  virtual void complete(int64_t res) = 0;

  uint32_t file = 0;  // index into the backend's file table
  uint64_t offset = 0;
  uint64_t length = 0;
  bool write = false;
  // The memory: one buffer (buf_index >= 0 if it lies in registered staging) or iovecs.
  std::byte* buf = nullptr;
  int buf_index = -1;
  const iovec* iov = nullptr;
  int iovcnt = 0;

  // Backend bookkeeping for short transfers and interrupted ones.
  uint64_t done = 0;
  std::vector<iovec> rest;
  uint32_t retries = 0;
};

struct BackendConfig {
  std::vector<int> fds;                // pool files, indexed by IoOp::file
  // Per file: uring and gpu-uring hand its reads to io_uring's worker threads (IOSQE_ASYNC),
  // for files whose bytes the submitting thread's CPU would copy (option async_reads).
  std::vector<uint8_t> async_reads;
  std::vector<iovec> staging;          // regions to register (io_uring fixed buffers)
  unsigned rings = 4;                  // uring: rings, each with its own thread
  unsigned queue_depth = 64;           // uring: I/Os in flight per ring
  unsigned sqpoll_idle_ms = 2;         // gpu-uring: idle time before a SQPOLL thread sleeps
  bool sqpoll_shared = true;           // gpu-uring: one SQPOLL thread for all rings
  bool gpu_completions = true;         // gpu-uring: the read kernels poll the CQs (else the host reaps)
  unsigned threads = 16;               // posix: worker threads
  // A store backend's threads (rings, workers) are named "<name>-st" and run at this nice
  // value, so a load's threads and the engine's own preempt them (reads before writes, on the
  // CPU as on the device: a zram or software-RAID write spends CPU in the writing thread).
  bool stores = false;
  int nice = 0;
  unsigned nvme_controller = 0;        // nvme: tutti_kmod's controller number
  std::string nvme_data_pointer = "auto";  // nvme: auto (SGL where supported) | sgl | prp
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Queues ops; each completes exactly once through IoOp::complete.
  virtual void submit(std::span<IoOp* const> ops) = 0;
  // What the backend set up, for `tutti info` and the bench.
  virtual std::string describe() const = 0;
};

// Every backend by name: the one table behind the option, tutti info and tutti_runtime_backend.
enum class BackendKind { kAuto, kUring, kPosix, kGpuUring, kCufile, kDram, kPassthru, kNvme };
const char* backend_name(BackendKind kind);  // a static string
BackendKind backend_named(const std::string& name);  // throws EINVAL naming the known ones
std::string backend_names();  // "auto, uring, posix, ..."

// "" when io_uring works here, else why not.
std::string uring_unavailable_reason();

// auto -> the best backend that works here for any pool (uring, else posix; register_kv may
// settle on another for the pool it opens). Throws EUNSUPPORTED with the reason when the named
// backend cannot work on this machine.
BackendKind resolve_backend(BackendKind kind);
// The CPU producers behind the others: kUring or kPosix.
std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendConfig& cfg);
std::unique_ptr<Backend> make_posix_backend(const BackendConfig& cfg);
std::unique_ptr<Backend> make_uring_backend(const BackendConfig& cfg);

// A pool of cfg.threads threads, each running one op at a time through `transfer`, which moves
// [op.done, op.length) and returns op.length or -errno.
using Transfer = std::function<int64_t(IoOp&)>;
std::unique_ptr<Backend> make_thread_backend(const BackendConfig& cfg, std::string name, std::string describe,
                                             Transfer transfer);

// Moves as much of [op.done, op.length) as one call can: the remainder as iovecs.
void remaining_iovecs(IoOp& op);

}  // namespace tutti
