// SPDX-License-Identifier: Apache-2.0
// The nvme backend's GPU producer (kernels/nvme_producer.cu) writes the same submission queue
// entries, PRP lists and SGL segments as the CPU producer, from the same builder, and rings the
// doorbell with the same tail. There is no NVMe controller next to this GPU: host memory
// mapped for the device stands in for the queue memory and the doorbell page of tutti_kmod.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/nvme_producer.hpp"

namespace {

namespace nv = tutti::nvme;

struct Mapped {  // host memory the device addresses directly
  explicit Mapped(size_t n) : bytes(n) {
    EXPECT_EQ(cudaHostAlloc(&p, n, cudaHostAllocMapped), cudaSuccess);
    std::memset(p, 0, n);
  }
  ~Mapped() { cudaFreeHost(p); }
  void* p = nullptr;
  size_t bytes;
};

template <class T>
T* on_device(const std::vector<T>& v) {
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, v.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<T*>(d);
}

// A layer's plan: `pieces` blocks of `piece` bytes at scattered bus addresses, `per` to a command.
void check_same_bytes(uint32_t piece, uint32_t pieces, uint32_t per, bool sgl) {
  std::vector<nv::Segment> segs;
  for (uint32_t i = 0; i < pieces; ++i) segs.push_back({0x7f0000000000ull + uint64_t{(i * 37 + 11) % 4096} * piece, piece});
  std::vector<nv::Planned> cmds;
  for (uint32_t c = 0; c * per < pieces; ++c) cmds.push_back({1000 + uint64_t{c} * per * piece / 512, per * piece / 512, c * per, per});
  const uint32_t depth = 64, tail = 60, n = static_cast<uint32_t>(cmds.size());  // the tail wraps
  const uint16_t first_cid = 5;
  const uint64_t lists_bus = 0x40000000ull;

  Mapped sq(depth * 64), lists(depth * 4096), doorbell(4096);
  tutti::gpu::NvmeQueueView q;
  q.sq = sq.p, q.depth = depth, q.tail = tail, q.lists = lists.p, q.lists_bus = lists_bus;
  q.doorbell = static_cast<uint32_t*>(doorbell.p);
  nv::Planned* d_cmds = on_device(cmds);
  nv::Segment* d_segs = on_device(segs);
  tutti::gpu::nvme_submit(d_cmds, n, d_segs, nv::kOpRead, 1, sgl, first_cid, q, nullptr);
  cudaFree(d_cmds);
  cudaFree(d_segs);

  std::vector<std::byte> want_sq(depth * 64), want_lists(depth * 4096);
  for (uint32_t i = 0; i < n; ++i) {
    const auto cid = static_cast<uint16_t>(first_cid + i);
    nv::Sqe s;
    nv::build(s, nv::kOpRead, cid, 1, cmds[i], segs.data(), sgl, want_lists.data() + size_t{cid} * 4096,
              lists_bus + uint64_t{cid} * 4096);
    std::memcpy(want_sq.data() + (tail + i) % depth * 64, &s, 64);
  }
  EXPECT_EQ(std::memcmp(sq.p, want_sq.data(), want_sq.size()), 0) << "submission queue entries differ";
  EXPECT_EQ(std::memcmp(lists.p, want_lists.data(), want_lists.size()), 0) << "PRP lists / SGL segments differ";
  EXPECT_EQ(*static_cast<uint32_t*>(doorbell.p), (tail + n) % depth) << "doorbell";
  // And the entries say what they should: a read of the planned LBAs with the chosen pointer.
  auto* first = static_cast<nv::Sqe*>(sq.p) + tail;
  EXPECT_EQ(first->cdw[0] & 0xff, nv::kOpRead);
  EXPECT_EQ(first->cdw[0] >> 16, first_cid);
  EXPECT_EQ((first->cdw[0] >> 14) & 3, sgl ? 1u : 0u);
  EXPECT_EQ(first->cdw[10], 1000u);
  EXPECT_EQ(first->cdw[12], per * piece / 512 - 1);
}

TEST(GpuNvme, PrpCommandsEqualTheCpuProducers) { check_same_bytes(32768, 64, 4, false); }
TEST(GpuNvme, SglCommandsEqualTheCpuProducers) { check_same_bytes(32768, 64, 4, true); }
TEST(GpuNvme, SglSubPagePiecesEqualTheCpuProducers) { check_same_bytes(2048, 512, 16, true); }

}  // namespace
