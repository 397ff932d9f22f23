// SPDX-License-Identifier: Apache-2.0
#include "runtime/plan.hpp"

#include "common/error.hpp"
#include "nvme/nvme_backend.hpp"
#include "nvme/passthru_backend.hpp"

namespace tutti {

namespace {

// direct_to_blocks=on where vectored I/O into the blocks would be used but cannot be.
void check_direct(const Config& cfg, const KvBinding& kv, BackendKind b) {
  if (cfg.direct != DirectMode::kOn || kv.on_device() || cfg.io_mode == IoMode::kPerBlockBaseline ||
      b == BackendKind::kPassthru)  // passthru reads into staging
    return;
  TUTTI_EXPECT(kv.direct_capable(),
               "direct_to_blocks=on needs 4 KiB aligned blocks whose K (and V) rows are contiguous per block");
}

}  // namespace

Plan make_plan(const Config& cfg, BackendKind opened, const KvBinding& kv) {
  const std::string named = backend_name(cfg.backend);
  const bool cuda = kv.on_device();
  const bool per_block = cfg.io_mode == IoMode::kPerBlockBaseline;
  const BackendKind b = cfg.backend;
  const bool gpu_uring = b == BackendKind::kGpuUring, cufile = b == BackendKind::kCufile, dram = b == BackendKind::kDram;
  const bool nvme = b == BackendKind::kNvme, passthru = b == BackendKind::kPassthru;
  TUTTI_EXPECT_CODE(!(gpu_uring || cufile) || cuda, TUTTI_EUNSUPPORTED,
                    "backend " + named + " loads into CUDA memory: register a KV cache with TUTTI_MEMORY_CUDA");
  TUTTI_EXPECT_CODE(!(passthru || nvme) || !cuda, TUTTI_EUNSUPPORTED,
                    "backend " + named + " loads into host memory (GPU memory needs the GPU producer, not built yet)");
  TUTTI_EXPECT_CODE(!(passthru || nvme) || !per_block, TUTTI_EUNSUPPORTED,
                    "backend " + named + " moves whole extents (io_mode=object)");
  TUTTI_EXPECT_CODE(!per_block || kv.shape().chunk_tokens % kv.block_tokens() == 0, TUTTI_EUNSUPPORTED,
                    "io_mode=per-block-baseline moves whole blocks: chunk_tokens must be a multiple of block_tokens");
  if (cuda && per_block) {
    // The baseline copies each block's K (V) whole: it must lie contiguous in the block.
    TUTTI_EXPECT_CODE(kv.copy_layout().run_kind == gpu::kRunBlock, TUTTI_EUNSUPPORTED,
                      "io_mode=per-block-baseline in CUDA memory needs blocks whose K and V are contiguous (NHD)");
    TUTTI_EXPECT_CODE(!gpu_uring && !cufile && !dram, TUTTI_EUNSUPPORTED,
                      "io_mode=per-block-baseline runs on the uring and posix backends");
  }
  // A load given up on keeps its late bytes out of the blocks: the host paths stage every read,
  // the copy kernels pass a fence. gpu-uring's read kernel counts completions per stream, not
  // per batch, and cannot be told to give up: no fence there yet.
  TUTTI_EXPECT_CODE(!cfg.load_timeout_ms || !gpu_uring, TUTTI_EUNSUPPORTED,
                    "option load_timeout_ms: not yet with backend gpu-uring (its GPU kernel polls the reads and "
                    "cannot be told to give up); use uring or posix, or set it to 0");
  TUTTI_EXPECT_CODE(!cfg.dram_tier || !(gpu_uring || cufile || dram), TUTTI_EUNSUPPORTED,
                    "dram_tier sits in front of the CPU producers (uring, posix, passthru, nvme), not backend " + named);
  if (cfg.backend != BackendKind::kAuto) check_direct(cfg, kv, b);  // auto: once settled
  Plan plan;
  plan.backend = opened;
  return plan;
}

void settle_plan(Plan& plan, const Config& cfg, const KvBinding& kv, const Pool& pool, const BackendConfig& bc) {
  const bool cuda = kv.on_device();
  const bool per_block = cfg.io_mode == IoMode::kPerBlockBaseline;
  // auto: for a pool on NVMe and a KV cache in host memory, the controller's own commands,
  // through tutti_kmod's queues when it has a controller sharing the pool's namespace, else
  // through io_uring passthrough on the stock driver. A pool wholly on tmpfs is best moved
  // through its mapping (dram): write() to one tmpfs file serializes on its inode, and io_uring
  // copies reads inline in its ring threads. Measured with Llama-3-8B KV from /dev/shm: into
  // HBM (H100 machine, 32K tokens) loads dram 37.5, posix 35.7, uring 15.3 GB/s, stores 7.2,
  // 4.3, 4.3; into host memory (2 cores, 8K tokens) loads 12.5, 11.6, 6.3, stores 11.3, 8.7,
  // 4.8. The per-block baseline and a DRAM tier need a CPU backend: posix then, as for files
  // that refuse O_DIRECT.
  if (cfg.backend == BackendKind::kAuto) {
    const std::string nvme_why = cuda || per_block ? "no" : nvme_unavailable_reason(bc);
    const std::string passthru_why = cuda || per_block || nvme_why.empty() ? "no" : passthru_unavailable_reason(bc.fds);
    if (nvme_why.empty()) {
      plan.backend = BackendKind::kNvme, plan.why = "auto: the pool is on an NVMe namespace that tutti_kmod drives";
    } else if (passthru_why.empty()) {
      plan.backend = BackendKind::kPassthru, plan.why = "auto: the pool is on an NVMe namespace (nvme: " + nvme_why + ")";
    } else {
      bool in_memory = pool.files() > 0;
      for (size_t i = 0; i < pool.files(); ++i) in_memory = in_memory && pool.file(i).in_memory;
      if (in_memory && !per_block && !cfg.dram_tier) {
        plan.backend = BackendKind::kDram;
        plan.why = "auto: the pool is on tmpfs, where its mapping moves bytes faster than read() and write()";
      } else {
        for (size_t i = 0; i < pool.files(); ++i)
          if (!pool.file(i).direct || pool.file(i).in_memory) {
            plan.backend = BackendKind::kPosix;
            plan.why = "auto: " + pool.file(i).path + " is on tmpfs or refuses O_DIRECT, where posix is faster";
          }
      }
      if (plan.why.empty()) plan.why = std::string("auto: ") + backend_name(plan.backend);
    }
  }
  const BackendKind b = plan.backend;
  if (cfg.backend == BackendKind::kAuto) check_direct(cfg, kv, b);
  const bool gpu_uring = b == BackendKind::kGpuUring, dram = b == BackendKind::kDram;
  const bool passthru = b == BackendKind::kPassthru;
  plan.uring_stores = gpu_uring || b == BackendKind::kCufile || passthru || b == BackendKind::kNvme;
  // Vectored I/O straight into host-memory blocks (passthru reads into staging).
  plan.direct = !cuda && !per_block && !passthru && cfg.direct != DirectMode::kOff && kv.direct_capable();
  if (!cuda) {
    plan.load = plan.store = per_block ? PathKind::kHostPerBlock : PathKind::kHost;
  } else if (per_block) {
    plan.load = plan.store = PathKind::kCudaPerBlock;
  } else if (dram) {
    plan.load = plan.store = PathKind::kMappedCuda;
  } else {
    plan.load = gpu_uring ? PathKind::kGpuUring : PathKind::kStagedCuda;
    plan.store = PathKind::kStagedCuda;
  }
}

}  // namespace tutti
