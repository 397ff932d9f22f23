// SPDX-License-Identifier: Apache-2.0
#include "kernels/cuda_check.hpp"
#include "kernels/nvme_producer.hpp"

namespace tutti::gpu {
namespace {

// One thread per command; the block's last step publishes the tail. The SQEs and lists must
// reach the controller before the doorbell does: a system-scope fence orders them.
__global__ void submit_kernel(const nvme::Planned* commands, uint32_t n, const nvme::Segment* segments, uint8_t opcode,
                              uint32_t nsid, bool use_sgl, uint16_t first_cid, NvmeQueueView q) {
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const auto cid = static_cast<uint16_t>(first_cid + i);
    nvme::Sqe s;
    auto* list = static_cast<char*>(q.lists) + size_t{cid} * 4096;
    nvme::build(s, opcode, cid, nsid, commands[i], segments, use_sgl, list, q.lists_bus + uint64_t{cid} * 4096);
    auto* slot = reinterpret_cast<nvme::Sqe*>(q.sq) + (q.tail + i) % q.depth;
    *slot = s;
  }
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) *reinterpret_cast<volatile uint32_t*>(q.doorbell) = (q.tail + n) % q.depth;
}

}  // namespace

void nvme_submit(const nvme::Planned* commands, uint32_t n, const nvme::Segment* segments, uint8_t opcode, uint32_t nsid,
                 bool use_sgl, uint16_t first_cid, const NvmeQueueView& q, void* stream) {
  TUTTI_EXPECT(n < q.depth && uint32_t{first_cid} + n <= q.depth - 1,
               "nvme_submit: commands " + std::to_string(first_cid) + "+" + std::to_string(n) +
                   " do not fit a queue of depth " + std::to_string(q.depth));
  auto s = static_cast<cudaStream_t>(stream);
  submit_kernel<<<1, 256, 0, s>>>(commands, n, segments, opcode, nsid, use_sgl, first_cid, q);
  check(cudaGetLastError(), "nvme submit kernel");
  check(cudaStreamSynchronize(s), "nvme submit kernel");
}

}  // namespace tutti::gpu
