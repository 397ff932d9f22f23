/* Runs inside the QEMU guest as root (tests/kmod/run.sh): the tutti kernel module's device and
 * ioctls, lease cleanup when a process is killed, and the io_uring NVMe passthrough route of the
 * stock driver. Prints "ok ..." / "FAIL ..." lines; exits 0 only if every check passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/nvme_ioctl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

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
  if (argc > 2) test_passthrough(argv[1], argv[2]);
  printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
