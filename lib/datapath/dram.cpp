#include "datapath/dram.hpp"

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "common/error.hpp"

namespace tutti {

namespace {

// Initial-exec: the handler reads it, and must not be the first to touch a thread's TLS block.
thread_local sigjmp_buf* t_recover __attribute__((tls_model("initial-exec"))) = nullptr;
struct sigaction g_previous;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (sigjmp_buf* r = t_recover) siglongjmp(*r, 1);
  // Not a touch of the pool: as if tutti had never installed a handler.
  if (g_previous.sa_flags & SA_SIGINFO) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler == SIG_DFL || g_previous.sa_handler == SIG_IGN) {
    ::signal(sig, SIG_DFL);  // the access faults again on return, now with the default action
  } else {
    g_previous.sa_handler(sig);
  }
}

}  // namespace

bool touch_mapped(void (*fn)(void*), void* arg) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
  sigjmp_buf here;
  if (sigsetjmp(here, 1) != 0) {  // 1: the jump restores the signal mask (SIGBUS unblocked)
    t_recover = nullptr;
    return false;
  }
  t_recover = &here;
  fn(arg);
  t_recover = nullptr;
  return true;
}

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
