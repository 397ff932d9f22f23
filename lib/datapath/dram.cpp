// SPDX-License-Identifier: Apache-2.0
#include "datapath/dram.hpp"

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/error.hpp"

namespace tutti {

namespace {

// The threads inside touch_mapped and where each jumps back to. A table, not thread_local: the
// handler must not touch TLS, whose first use in a thread of a dlopen-ed library allocates.
constexpr size_t kTouchers = 128;
std::atomic<pid_t> g_toucher[kTouchers];
sigjmp_buf* g_recover[kTouchers];
struct sigaction g_previous;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
  for (size_t i = 0; i < kTouchers; ++i)
    if (g_toucher[i].load(std::memory_order_acquire) == self) siglongjmp(*g_recover[i], 1);
  // Not a touch of the pool: as if tutti had never installed a handler.
  if (g_previous.sa_flags & SA_SIGINFO) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler == SIG_DFL || g_previous.sa_handler == SIG_IGN) {
    ::signal(sig, SIG_DFL);  // the access faults again on return, now with the default action
  } else {
    g_previous.sa_handler(sig);
  }
}

[[gnu::noinline]] size_t claim_toucher(pid_t self) {  // its loop stays out of sigsetjmp's frame
  for (;;) {
    for (size_t i = 0; i < kTouchers; ++i) {
      pid_t free = 0;
      if (g_toucher[i].load(std::memory_order_relaxed) == 0 &&
          g_toucher[i].compare_exchange_strong(free, self, std::memory_order_acq_rel))
        return i;
    }
    std::this_thread::yield();  // more touching threads than entries: rare, and brief
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
  const size_t slot = claim_toucher(static_cast<pid_t>(::syscall(SYS_gettid)));
  sigjmp_buf here;
  g_recover[slot] = &here;
  if (sigsetjmp(here, 1) != 0) {  // 1: the jump back restores the signal mask (SIGBUS unblocked)
    g_toucher[slot].store(0, std::memory_order_release);
    return false;
  }
  fn(arg);
  g_toucher[slot].store(0, std::memory_order_release);
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
