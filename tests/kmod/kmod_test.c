// SPDX-License-Identifier: Apache-2.0
/* Runs inside the QEMU guest as root (tests/kmod/run.sh): the tutti kernel module's device and
 * ioctls, lease cleanup when a process is killed, pins held against RLIMIT_MEMLOCK, privilege
 * checked at every call that drives a controller, which doorbell pages may be mapped, and the
 * io_uring NVMe passthrough route of the stock driver. Prints "ok ..." / "FAIL ..." lines;
 * exits 0 only if every check passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/capability.h>
#include <linux/nvme_ioctl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../kmod/tutti_nvme.h"
#include "../../kmod/uapi/tutti_kmod.h"

static int failures;

#define CHECK(cond, ...)                      \
  do {                                        \
    if (cond) {                               \
      printf("ok   " __VA_ARGS__);            \
    } else {                                  \
      printf("FAIL " __VA_ARGS__);            \
      printf("     (errno %d: %s)\n", errno, strerror(errno)); \
      failures++;                             \
    }                                         \
    printf("\n");                             \
  } while (0)

static long param(const char* name) {
  char path[128], buf[32] = "";
  snprintf(path, sizeof path, "/sys/module/tutti_kmod/parameters/%s", name);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
  fclose(f);
  return strtol(buf, NULL, 10);
}

static void test_device(void) {
  int fd = open("/dev/tutti", O_RDWR);
  CHECK(fd >= 0, "open /dev/tutti as root");
  if (fd < 0) return;
  CHECK(param("leases") == 1, "one lease while the file is open");

  struct tutti_version v = {.size = sizeof v};
  CHECK(ioctl(fd, TUTTI_IOC_GET_VERSION, &v) == 0 && v.abi == TUTTI_KMOD_ABI && v.size == sizeof v,
        "GET_VERSION: abi %u, version %u.%u.%u", v.abi, v.major, v.minor, v.patch);
  struct tutti_version bad = {.size = 3};
  CHECK(ioctl(fd, TUTTI_IOC_GET_VERSION, &bad) == -1 && errno == EINVAL, "GET_VERSION with a wrong size: EINVAL");
  CHECK(ioctl(fd, _IOWR(TUTTI_IOC_MAGIC, 0x7f, struct tutti_version), &v) == -1 && errno == ENOTTY,
        "an unknown command: ENOTTY");
  CHECK(ioctl(fd, _IOWR(TUTTI_IOC_MAGIC, 0x00, struct tutti_pin), &v) == -1 && errno == ENOTTY,
        "a known number with another layout: ENOTTY");
  CHECK(ioctl(fd, TUTTI_IOC_GET_VERSION, (void*)8) == -1 && errno == EFAULT, "a bad pointer: EFAULT");

  const size_t len = 1 << 20;
  char* buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  struct tutti_pin p = {.size = sizeof p, .addr = (uintptr_t)buf + 1, .length = len};
  CHECK(ioctl(fd, TUTTI_IOC_PIN, &p) == -1 && errno == EINVAL, "pin an unaligned address: EINVAL");
  p.addr = (uintptr_t)buf, p.length = 0;
  CHECK(ioctl(fd, TUTTI_IOC_PIN, &p) == -1 && errno == EINVAL, "pin nothing: EINVAL");
  p.length = TUTTI_PIN_MAX * 2;
  CHECK(ioctl(fd, TUTTI_IOC_PIN, &p) == -1 && errno == EINVAL, "pin more than TUTTI_PIN_MAX: EINVAL");
  p.length = 2 * len;  /* runs past the mapping */
  CHECK(ioctl(fd, TUTTI_IOC_PIN, &p) == -1 && errno == EFAULT, "pin past the mapping: EFAULT");
  CHECK(param("pinned_pages") == 0, "a failed pin leaves nothing pinned");
  p.length = len;
  CHECK(ioctl(fd, TUTTI_IOC_PIN, &p) == 0 && p.handle != 0, "pin 1 MiB: handle %llu", (unsigned long long)p.handle);
  CHECK(param("pinned_pages") == (long)(len / 4096), "pinned_pages = %ld", param("pinned_pages"));
  uint64_t h = p.handle, nope = 12345;
  CHECK(ioctl(fd, TUTTI_IOC_UNPIN, &nope) == -1 && errno == ENOENT, "unpin an unknown handle: ENOENT");
  CHECK(ioctl(fd, TUTTI_IOC_UNPIN, &h) == 0 && param("pinned_pages") == 0, "unpin");
  CHECK(ioctl(fd, TUTTI_IOC_PIN, &p) == 0, "pin again, then close without unpinning");
  close(fd);
  CHECK(param("leases") == 0 && param("pinned_pages") == 0, "close releases the lease and its pins");
  munmap(buf, len);
}

/* A process holding pinned memory is killed with SIGKILL: its lease goes with it. */
static void test_kill(void) {
  int ready[2];
  if (pipe(ready) != 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open("/dev/tutti", O_RDWR);
    const size_t len = 8 << 20;
    char* buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct tutti_pin p = {.size = sizeof p, .addr = (uintptr_t)buf, .length = len};
    char c = fd >= 0 && ioctl(fd, TUTTI_IOC_PIN, &p) == 0 ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    for (;;) pause();
  }
  char c = 0;
  CHECK(read(ready[0], &c, 1) == 1 && c == 'y', "child pinned 8 MiB");
  CHECK(param("leases") == 1 && param("pinned_pages") == 2048, "the child's lease holds 2048 pages");
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status) && param("leases") == 0 && param("pinned_pages") == 0,
        "SIGKILL: the lease and its pins are gone");
}

static void test_not_root(void) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    int fd = open("/dev/tutti", O_RDWR);
    _exit(fd < 0 && (errno == EACCES || errno == EPERM) ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "an unprivileged process cannot open /dev/tutti");
}

/* Removes capabilities from this process's effective, permitted and inheritable sets. */
static int drop_caps(uint64_t caps) {
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) != 0) return -1;
  for (int i = 0; i < 2; i++) {
    uint32_t m = (uint32_t)(caps >> (32 * i));
    d[i].effective &= ~m, d[i].permitted &= ~m, d[i].inheritable &= ~m;
  }
  return (int)syscall(SYS_capset, &h, d);
}

/* This process's VmPin (/proc/self/status), in KiB. */
static long vm_pin_kib(void) {
  char line[128];
  long kib = -1;
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmPin: %ld kB", &kib) == 1) break;
  fclose(f);
  return kib;
}

static int pin(int fd, void* addr, size_t len, uint64_t* handle) {
  struct tutti_pin p = {.size = sizeof p, .addr = (uintptr_t)addr, .length = len};
  int rc = ioctl(fd, TUTTI_IOC_PIN, &p);
  if (rc == 0 && handle) *handle = p.handle;
  return rc;
}

/* Becomes a process of root without CAP_IPC_LOCK whose RLIMIT_MEMLOCK is 1 MiB. */
static int limit_memlock(void) {
  struct rlimit rl = {1 << 20, 1 << 20};
  return drop_caps(1ull << CAP_IPC_LOCK) == 0 && setrlimit(RLIMIT_MEMLOCK, &rl) == 0 ? 0 : -1;
}

/* Which BAR pages may be mapped as a queue pair's doorbell page (kmod/tutti_nvme.h), for
 * page sizes this guest does not have; with its own 4 KiB pages the QEMU runs map them. */
static void test_doorbell_pages(void) {
  int all = 1, none = 1;
  for (unsigned q = 1; q <= 64; q++) all &= tutti_doorbell_page_ok((0x1000 + 8 * q) & ~0xfffull, 4096, 0, 64);
  CHECK(all, "4 KiB pages, stride 4: the page of every queue's doorbells holds doorbells only");
  for (unsigned long long page = 16384; page <= 65536; page *= 4)
    for (unsigned q = 1; q <= 64; q++) none &= !tutti_doorbell_page_ok((0x1000 + 8 * q) & ~(page - 1), page, 0, 64);
  CHECK(none, "16 and 64 KiB pages, stride 4: the doorbells share a page with CC, AQA, ASQ, ACQ: refused");
  CHECK(!tutti_doorbell_page_ok(0x4000, 16384, 0, 2047),
        "16 KiB pages: a page running past the doorbells of the last queue granted is refused");
  all = 1;
  for (unsigned q = 1; q <= 64; q++)
    all &= tutti_doorbell_page_ok((0x1000 + 2ull * q * (4 << 13)) & ~0xffffull, 65536, 13, 64);
  CHECK(all && !tutti_doorbell_page_ok(0, 65536, 13, 64),
        "64 KiB pages, a 32 KiB doorbell stride: every I/O queue's doorbell page holds doorbells only");
}

/* Pins count against RLIMIT_MEMLOCK, for a process without CAP_IPC_LOCK, and the charge goes
 * back on UNPIN and on close; VmPin shows it. */
static void test_memlock(void) {
  pid_t pid = fork();
  if (pid == 0) {
    failures = 0;
    if (limit_memlock() != 0) _exit(100);
    const size_t mib = 1 << 20;
    char* buf = mmap(NULL, 2 * mib, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int fd = open("/dev/tutti", O_RDWR);
    uint64_t h = 0;
    CHECK(fd >= 0 && pin(fd, buf, mib / 2, &h) == 0 && vm_pin_kib() == 512,
          "RLIMIT_MEMLOCK 1 MiB, no CAP_IPC_LOCK: pin 512 KiB (VmPin %ld kB)", vm_pin_kib());
    CHECK(pin(fd, buf + mib / 2, mib, NULL) == -1 && errno == ENOMEM && vm_pin_kib() == 512 &&
              param("pinned_pages") == 128,
          "pinning 1 MiB more, beyond the limit: ENOMEM, nothing more pinned");
    CHECK(pin(fd, buf, 2 * mib, NULL) == -1 && errno == ENOMEM, "pinning 2 MiB at once: ENOMEM");
    CHECK(ioctl(fd, TUTTI_IOC_UNPIN, &h) == 0 && vm_pin_kib() == 0, "UNPIN gives the charge back (VmPin %ld kB)",
          vm_pin_kib());
    CHECK(pin(fd, buf, mib, NULL) == 0 && vm_pin_kib() == 1024, "then the whole 1 MiB can be pinned");
    close(fd);
    CHECK(vm_pin_kib() == 0 && param("pinned_pages") == 0, "close gives it back (VmPin %ld kB)", vm_pin_kib());
    fd = open("/dev/tutti", O_RDWR);
    CHECK(fd >= 0 && pin(fd, buf, mib, NULL) == 0, "a new lease pins the whole 1 MiB again");
    close(fd);
    fflush(stdout);
    _exit(failures);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 100, "a child without CAP_IPC_LOCK, RLIMIT_MEMLOCK 1 MiB");
  failures += WIFEXITED(status) && WEXITSTATUS(status) != 100 ? WEXITSTATUS(status) : 0;
}

/* In a child limited to 1 MiB of locked memory: pins `len` bytes; 0 or the errno. */
static int pin_limited(size_t len) {
  pid_t pid = fork();
  if (pid == 0) {
    if (limit_memlock() != 0) _exit(100);
    char* buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int fd = open("/dev/tutti", O_RDWR);
    _exit(fd >= 0 && pin(fd, buf, len, NULL) == 0 ? 0 : errno);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The limit is the user's, as for io_uring: one process of it holding 1 MiB leaves the others
 * nothing; its death gives the charge back. */
static void test_memlock_kill(void) {
  int ready[2];
  if (pipe(ready) != 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    const size_t len = 1 << 20;
    char* buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int fd = limit_memlock() == 0 ? open("/dev/tutti", O_RDWR) : -1;
    char c = fd >= 0 && pin(fd, buf, len, NULL) == 0 ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    for (;;) pause();
  }
  char c = 0;
  CHECK(read(ready[0], &c, 1) == 1 && c == 'y' && param("pinned_pages") == 256,
        "a child limited to 1 MiB pins 1 MiB and waits");
  CHECK(pin_limited(4096) == ENOMEM, "another process of the same user, limited alike, cannot pin 4 KiB: ENOMEM");
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status) && param("pinned_pages") == 0, "SIGKILL: the first child's pins are gone");
  CHECK(pin_limited(1 << 20) == 0, "then the other can pin the whole 1 MiB: the charge went with the lease");
  close(ready[0]);
  close(ready[1]);
}

/* A lease opened by root and kept after the privilege went, or handed to a process that never
 * had it: everything that drives a controller is refused, at every call. */
static void test_privilege_per_call(void) {
  int fd = open("/dev/tutti", O_RDWR);
  void* id = NULL;
  if (fd < 0 || posix_memalign(&id, 4096, 4096) != 0) {
    CHECK(0, "open /dev/tutti");
    return;
  }
  struct tutti_ctrl_info info = {.size = sizeof info, .identify = (uintptr_t)id};
  struct tutti_qp q = {.size = sizeof q, .depth = 8};
  CHECK(ioctl(fd, TUTTI_IOC_CTRL_INFO, &info) == 0 && ioctl(fd, TUTTI_IOC_CREATE_QP, &q) == 0,
        "root: CTRL_INFO and CREATE_QP on controller 0");
  for (int nobody = 0; nobody < 2; nobody++) {
    pid_t pid = fork();
    if (pid == 0) {
      int ok = nobody ? setgid(65534) == 0 && setuid(65534) == 0 : drop_caps(1ull << CAP_SYS_ADMIN) == 0;
      struct tutti_version v = {.size = sizeof v};
      struct tutti_qp q2 = {.size = sizeof q2, .depth = 8};
      char* buf = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      uint64_t h = 0, iovas[16];
      struct tutti_dma_map m = {.size = sizeof m, .dmabuf_fd = -1, .iovas = (uintptr_t)iovas, .npages = 16};
      ok = ok && ioctl(fd, TUTTI_IOC_GET_VERSION, &v) == 0;
      ok = ok && ioctl(fd, TUTTI_IOC_CTRL_INFO, &info) == -1 && errno == EPERM;
      ok = ok && ioctl(fd, TUTTI_IOC_CREATE_QP, &q2) == -1 && errno == EPERM;
      ok = ok && mmap(NULL, q.region_bytes[TUTTI_QP_SQ], PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                      (off_t)(q.token * TUTTI_QP_REGIONS + TUTTI_QP_SQ) * 4096) == MAP_FAILED && errno == EPERM;
      ok = ok && mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                      (off_t)(q.token * TUTTI_QP_REGIONS + TUTTI_QP_DOORBELLS) * 4096) == MAP_FAILED && errno == EPERM;
      ok = ok && pin(fd, buf, 65536, &h) == 0;  /* its own memory, under its RLIMIT_MEMLOCK */
      m.pinned = h;
      ok = ok && ioctl(fd, TUTTI_IOC_MAP_DMA, &m) == -1 && errno == EPERM;
      ok = ok && ioctl(fd, TUTTI_IOC_UNPIN, &h) == 0;
      _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the file %s: CTRL_INFO, CREATE_QP, mmap, MAP_DMA: EPERM; GET_VERSION, PIN, UNPIN work",
          nobody ? "inherited by a process of another user" : "kept after CAP_SYS_ADMIN was dropped");
  }
  void* sq = mmap(NULL, q.region_bytes[TUTTI_QP_SQ], PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                  (off_t)(q.token * TUTTI_QP_REGIONS + TUTTI_QP_SQ) * 4096);
  CHECK(sq != MAP_FAILED, "root still maps the queue pair through the same file");
  if (sq != MAP_FAILED) munmap(sq, q.region_bytes[TUTTI_QP_SQ]);
  CHECK(ioctl(fd, TUTTI_IOC_DELETE_QP, &q.token) == 0, "and deletes it");
  close(fd);
  free(id);
}

/* The stock driver's generic char device with IORING_OP_URING_CMD: NVMe Read of LBA 0. */
static void test_passthrough(const char* dev, const char* expect) {
  int fd = open(dev, O_RDONLY);
  CHECK(fd >= 0, "open %s", dev);
  if (fd < 0) return;
  struct io_uring ring;
  int rc = io_uring_queue_init(4, &ring, IORING_SETUP_SQE128 | IORING_SETUP_CQE32);
  CHECK(rc == 0, "io_uring with 128-byte SQEs");
  if (rc) return;
  void* buf = NULL;
  if (posix_memalign(&buf, 4096, 4096) != 0) return;
  memset(buf, 0, 4096);
  struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  if (!sqe) return;
  memset(sqe, 0, 128); /* a 128-byte entry (IORING_SETUP_SQE128): the command fills its second half */
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd;
  sqe->cmd_op = NVME_URING_CMD_IO;
  struct nvme_uring_cmd* cmd = (struct nvme_uring_cmd*)sqe->cmd;
  cmd->opcode = 0x02; /* Read */
  cmd->nsid = 1;
  cmd->addr = (uintptr_t)buf;
  cmd->data_len = 4096;
  cmd->cdw10 = 0, cmd->cdw11 = 0;   /* starting LBA 0 */
  cmd->cdw12 = 4096 / 512 - 1;      /* blocks - 1, 512-byte LBAs */
  io_uring_submit(&ring);
  struct io_uring_cqe* cqe = NULL;
  rc = io_uring_wait_cqe(&ring, &cqe);
  CHECK(rc == 0 && cqe->res == 0, "NVMe Read through IORING_OP_URING_CMD (res %d)", rc == 0 ? cqe->res : rc);
  CHECK(memcmp(buf, expect, strlen(expect)) == 0, "LBA 0 holds the bytes written on the host: \"%.15s\"", (char*)buf);
  io_uring_queue_exit(&ring);
  close(fd);
  free(buf);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_device();
  test_kill();
  test_not_root();
  test_doorbell_pages();
  test_memlock();
  test_memlock_kill();
  test_privilege_per_call();
  if (argc > 2) test_passthrough(argv[1], argv[2]);
  printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
