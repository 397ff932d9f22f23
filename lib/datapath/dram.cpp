#include "datapath/dram.hpp"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"

namespace tutti {

DramPool::DramPool(const Pool& pool, gpu::Device* dev) {
  for (size_t i = 0; i < pool.files(); ++i) {
    const PoolFile& f = pool.file(i);
    TUTTI_EXPECT_CODE(f.in_memory, TUTTI_EUNSUPPORTED,
                      "backend dram keeps the pool in memory: pool file " + f.path +
                          " is not on tmpfs (put it under /dev/shm)");
  }
  try {
    for (size_t i = 0; i < pool.files(); ++i) {
      const PoolFile& f = pool.file(i);
      struct stat st;
      if (::fstat(f.fd.get(), &st) != 0) fail_errno(errno, "stat " + f.path);
      const size_t bytes = static_cast<size_t>(st.st_size);
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, f.fd.get(), 0);
      if (p == MAP_FAILED) fail_errno(errno, "mmap " + f.path);
      maps_.push_back(Map{static_cast<std::byte*>(p), bytes, {}});
      if (dev) maps_.back().pin = gpu::HostPin(*dev, p, bytes);
    }
  } catch (...) {
    unmap();
    throw;
  }
}

DramPool::~DramPool() { unmap(); }

void DramPool::unmap() {
  for (Map& m : maps_) {
    m.pin.reset();  // before the pages go
    ::munmap(m.host, m.bytes);
  }
  maps_.clear();
}

}  // namespace tutti
