// SPDX-License-Identifier: Apache-2.0
// A build without CUDA: every device call fails with the reason; nothing else changes.
#include "common/error.hpp"
#include "kernels/device.hpp"
#include "kernels/gpu_uring.hpp"
#include "kernels/nvme_producer.hpp"

namespace tutti::gpu {
namespace {
[[noreturn]] void no_cuda() { fail(TUTTI_EUNSUPPORTED, "this build of tutti has no CUDA (configure with TUTTI_ENABLE_CUDA)"); }
}  // namespace

std::string unavailable_reason() { return "this build of tutti has no CUDA"; }
int device_count() { return 0; }
Device::Device(int ordinal, bool) : ordinal_(ordinal) { no_cuda(); }
Device::~Device() = default;
bool Device::owns(const void*) const { return false; }
uint64_t Device::pin(void*, size_t) { no_cuda(); }
void Device::unpin(void*) {}
void Device::set_layers(uint32_t) { no_cuda(); }
void Device::set_staging(uint64_t, uint64_t) { no_cuda(); }
void Device::begin_epoch(uint64_t) {}
void Device::mark_ready(uint32_t, uint64_t) {}
void Device::mark_queued(uint32_t, uint64_t) noexcept {}
bool Device::enqueue_wait(void*, uint32_t, uint64_t, std::chrono::milliseconds) { no_cuda(); }
void Device::sync_scatters() {}
void* Device::record_event(void*) { no_cuda(); }
void Device::sync_event(void*) { no_cuda(); }
void Device::destroy_event(void*) noexcept {}
void* Device::record_reached(void*) { no_cuda(); }
bool Device::event_done(void*) noexcept { return false; }
void* Device::host_alloc(size_t, uint64_t*) { no_cuda(); }
void Device::host_free(void*) {}
void Device::scatter(const CopyLayout&, void*, void*, uint64_t, size_t, uint64_t, void (*)(void*), void*, uint64_t,
                     uint64_t, bool, void*) {
  no_cuda();
}
void Device::layer_terms_sync(const CopyLayout&, const void*, const void*, uint64_t, size_t, uint64_t, uint64_t) {
  no_cuda();
}
void Device::page_hashes(const void*, size_t, uint64_t*) { no_cuda(); }
void Device::copy_sync(void*, const void*, size_t) { no_cuda(); }
void Device::gather(const CopyLayout&, const void*, const void*, uint64_t, size_t, uint64_t, uint64_t) { no_cuda(); }
void* alloc(int, size_t) { no_cuda(); }
void free(void*) {}
void copy_to_device(void*, const void*, size_t) { no_cuda(); }
void copy_to_host(void*, const void*, size_t) { no_cuda(); }
void fill_zero(void*, size_t) { no_cuda(); }
double h2d_gbps(int, uint64_t, uint64_t, unsigned, uint64_t) { no_cuda(); }

UringDriver::UringDriver(Device& dev, const std::vector<RingView>&, bool) : dev_(dev) { no_cuda(); }
UringDriver::~UringDriver() = default;
uint32_t UringDriver::max_per_ring() const { return 0; }
void UringDriver::read_layer(uint32_t, const LayerLoad&, void (*)(void*), void*, bool*) { no_cuda(); }

void nvme_submit(const nvme::Planned*, uint32_t, const nvme::Segment*, uint8_t, uint32_t, bool, uint16_t,
                 const NvmeQueueView&, void*) {
  no_cuda();
}

}  // namespace tutti::gpu
