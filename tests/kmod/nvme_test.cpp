// SPDX-License-Identifier: Apache-2.0
// Runs inside the QEMU guest as root: NVMe queue pairs that tutti_kmod sets up on a controller
// dedicated to it (the second controller of the NVM subsystem; the first one stays with the
// stock nvme driver, which keeps the namespace's ext4 mounted). Loads a file's bytes through
// the module's queues with PRPs and with SGLs, straight into scattered "KV blocks" of pinned
// host memory and of a vgem dma-buf, and compares them with what the filesystem reads.
// Also: bad requests refused, admin completions that answer no command the module sent are
// skipped, a process killed mid-I/O leaves nothing behind, and (with an IOMMU) a bus address
// that is not mapped fails the command instead of reaching memory.
//   nvme_test FILE        (FILE on the ext4 of the shared namespace)
#include <fcntl.h>
#include <linux/nvme_ioctl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "kmod/uapi/tutti_kmod.h"
#include "nvme/extents.hpp"
#include "nvme/io.hpp"
#include "nvme/queue.hpp"

namespace nv = tutti::nvme;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) std::printf("  (errno %d: %s)", errno, std::strerror(errno)), ++failures;
  std::printf("\n");
}

long param(const char* name) {
  std::ifstream f(std::string("/sys/module/tutti_kmod/parameters/") + name);
  long v = -1;
  f >> v;
  return v;
}

struct Aligned {  // page-aligned host memory
  explicit Aligned(size_t n) : bytes(n) {
    if (posix_memalign(&p, 4096, n) != 0) tutti::fail(TUTTI_ENOMEM, "posix_memalign");
    std::memset(p, 0, n);
  }
  ~Aligned() { std::free(p); }
  std::byte* data() const { return static_cast<std::byte*>(p); }
  void* p = nullptr;
  size_t bytes;
};

// Where each piece of an object goes: `len` bytes at offset `dst` of the destination memory,
// in object order (a layer's K and V blocks of one chunk, as a block table places them).
struct Piece {
  size_t dst;
  uint32_t len;
};

struct Counts {
  uint32_t commands = 0, pointers = 0;  // NVMe commands; PRP entries or SGL descriptors
  bool ok = true;                       // every command succeeded
};

// The object at file extents `ext` into `pieces` of `mem`, through lib/nvme/io.
Counts load(nv::QueuePair& qp, const nv::DmaMemory& mem, const nv::ControllerInfo& ci,
            const std::vector<nv::FileExtent>& ext, const std::vector<Piece>& pieces, bool use_sgl) {
  std::vector<nv::Piece> in;
  for (const Piece& p : pieces) in.push_back({&mem, p.dst, p.len});
  const nv::IoCounts io = nv::read(qp, ci, 1, ext, in, use_sgl ? nv::DataPointer::kSgl : nv::DataPointer::kPrp);
  return {io.commands, io.pointers, io.status == 0};
}

// The file's bytes [off, off + len) as the pieces should hold them.
bool pieces_match(const std::byte* mem, const std::vector<Piece>& pieces, const std::vector<char>& file, size_t off) {
  for (const Piece& p : pieces) {
    if (std::memcmp(mem + p.dst, file.data() + off, p.len) != 0) return false;
    off += p.len;
  }
  return true;
}

// `count` pieces of `len` bytes placed at scattered slots of a region of `slots` slots.
std::vector<Piece> scattered(size_t count, uint32_t len, size_t slots) {
  std::vector<Piece> v;
  for (size_t i = 0; i < count; ++i) v.push_back({(i * 37 + 11) % slots * len, len});
  return v;
}

// Read commands the namespace has executed, as the controller counts them (SMART / Health log,
// Host Read Commands), asked through the stock driver's controller: both controllers of the
// subsystem serve the one namespace.
uint64_t host_read_commands() {
  const int fd = ::open("/dev/nvme0", O_RDONLY);
  if (fd < 0) return 0;
  alignas(4096) static unsigned char log[512];
  nvme_admin_cmd cmd{};
  cmd.opcode = 0x02;  // Get Log Page
  cmd.nsid = 0xffffffff;
  cmd.addr = reinterpret_cast<uintptr_t>(log);
  cmd.data_len = sizeof log;
  cmd.cdw10 = ((sizeof log / 4 - 1) << 16) | 0x02;  // NUMDL, log 02h
  const int rc = ::ioctl(fd, NVME_IOCTL_ADMIN_CMD, &cmd);
  ::close(fd);
  uint64_t n = 0;
  if (rc == 0) std::memcpy(&n, log + 64, sizeof n);  // bytes 79:64, little endian; the low half
  return n;
}

bool iommu_present() {
  DIR* d = ::opendir("/sys/class/iommu");
  if (!d) return false;
  bool any = false;
  while (dirent* e = ::readdir(d)) any = any || e->d_name[0] != '.';
  ::closedir(d);
  return any;
}

// A vgem dumb buffer exported as a dma-buf (the DRM uapi: MODE_CREATE_DUMB, PRIME_HANDLE_TO_FD).
struct DumbCreate {
  uint32_t height, width, bpp, flags, handle, pitch;
  uint64_t size;
};
struct PrimeHandle {
  uint32_t handle, flags;
  int32_t fd;
};
constexpr unsigned long kDrmCreateDumb = _IOWR('d', 0xB2, DumbCreate);
constexpr unsigned long kDrmPrimeHandleToFd = _IOWR('d', 0x2d, PrimeHandle);

int vgem_dmabuf(size_t bytes) {
  for (int i = 0; i < 8; ++i) {
    const std::string card = "/dev/dri/card" + std::to_string(i);
    const int fd = ::open(card.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    DumbCreate d{};
    d.width = 1024, d.bpp = 32, d.height = static_cast<uint32_t>(bytes / 4096);
    PrimeHandle h{};
    if (::ioctl(fd, kDrmCreateDumb, &d) == 0) {
      h.handle = d.handle, h.flags = O_RDWR | O_CLOEXEC;
      if (::ioctl(fd, kDrmPrimeHandleToFd, &h) == 0) return h.fd;  // the card fd may go: the buffer lives on
    }
    ::close(fd);
  }
  return -1;
}

void test_bad_requests(const nv::Lease& lease, const nv::ControllerInfo& ci) {
  const int fd = lease.fd();
  tutti_qp q{};
  q.size = sizeof q;
  q.ctrl = 7;
  q.depth = 16;
  check(::ioctl(fd, TUTTI_IOC_CREATE_QP, &q) == -1 && errno == ENODEV, "a queue pair on a controller that is not bound: ENODEV");
  q.ctrl = 0;
  q.depth = 1;
  check(::ioctl(fd, TUTTI_IOC_CREATE_QP, &q) == -1 && errno == EINVAL, "depth 1: EINVAL");
  q.depth = ci.mqes + 1;
  check(::ioctl(fd, TUTTI_IOC_CREATE_QP, &q) == -1 && errno == EINVAL, "depth above MQES: EINVAL");
  q.size = 8;
  q.depth = 16;
  check(::ioctl(fd, TUTTI_IOC_CREATE_QP, &q) == -1 && errno == EINVAL, "a wrong struct size: EINVAL");
  uint64_t token = 999;
  check(::ioctl(fd, TUTTI_IOC_DELETE_QP, &token) == -1 && errno == ENOENT, "deleting a queue pair it does not hold: ENOENT");
  check(::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 999 * TUTTI_QP_REGIONS * 4096) == MAP_FAILED && errno == ENOENT,
        "mapping a queue pair it does not hold: ENOENT");

  q.size = sizeof q;
  q.ctrl = 0;
  q.depth = 8;
  check(::ioctl(fd, TUTTI_IOC_CREATE_QP, &q) == 0, "a queue pair made by hand");
  void* sqmap = ::mmap(nullptr, q.region_bytes[TUTTI_QP_SQ], PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                       static_cast<off_t>(q.token * TUTTI_QP_REGIONS * 4096));
  check(sqmap != MAP_FAILED, "its submission queue mapped");
  check(::ioctl(fd, TUTTI_IOC_DELETE_QP, &q.token) == -1 && errno == EBUSY,
        "deleting a queue pair whose memory is still mapped: EBUSY");
  if (sqmap != MAP_FAILED) ::munmap(sqmap, q.region_bytes[TUTTI_QP_SQ]);
  check(::ioctl(fd, TUTTI_IOC_DELETE_QP, &q.token) == 0, "unmapped, it can be deleted");

  tutti_dma_map m{};
  m.size = sizeof m;
  m.dmabuf_fd = -1;
  m.pinned = 12345;
  check(::ioctl(fd, TUTTI_IOC_MAP_DMA, &m) == -1 && errno == ENOENT, "DMA-mapping a pin it does not hold: ENOENT");
  const int file = ::open("/init", O_RDONLY);
  m.dmabuf_fd = file;
  check(::ioctl(fd, TUTTI_IOC_MAP_DMA, &m) == -1 && errno == EINVAL, "DMA-mapping a file that is no dma-buf: EINVAL");
  ::close(file);
  m.dmabuf_fd = 1 << 20;
  check(::ioctl(fd, TUTTI_IOC_MAP_DMA, &m) == -1 && errno == EBADF, "DMA-mapping a closed descriptor: EBADF");

  Aligned buf(16 * 4096);
  tutti_pin pin{};
  pin.size = sizeof pin;
  pin.addr = reinterpret_cast<uintptr_t>(buf.p);
  pin.length = buf.bytes;
  check(::ioctl(fd, TUTTI_IOC_PIN, &pin) == 0, "pin 16 pages");
  uint64_t iovas[16];
  m.dmabuf_fd = -1;
  m.pinned = pin.handle;
  m.iovas = reinterpret_cast<uintptr_t>(iovas);
  m.npages = 4;
  check(::ioctl(fd, TUTTI_IOC_MAP_DMA, &m) == -1 && errno == ENOSPC && m.npages == 16,
        "DMA-mapping into too small an address array: ENOSPC, with the size needed");
  m.npages = 16;
  m.ctrl = 3;
  check(::ioctl(fd, TUTTI_IOC_MAP_DMA, &m) == -1 && errno == ENODEV, "DMA-mapping for a controller that is not bound: ENODEV");
  m.ctrl = 0;
  check(::ioctl(fd, TUTTI_IOC_MAP_DMA, &m) == 0, "DMA-map the pinned pages");
  check(::ioctl(fd, TUTTI_IOC_UNPIN, &pin.handle) == -1 && errno == EBUSY, "unpinning memory that is still DMA-mapped: EBUSY");
  check(::ioctl(fd, TUTTI_IOC_UNMAP_DMA, &m.handle) == 0 && ::ioctl(fd, TUTTI_IOC_UNPIN, &pin.handle) == 0,
        "unmap, then unpin");
  check(::ioctl(fd, TUTTI_IOC_UNMAP_DMA, &m.handle) == -1 && errno == ENOENT, "unmapping twice: ENOENT");
}

// LBA 0 (it carries a marker) read through `qp` into `page` (4 KiB, DMA-mapped as `mem`).
bool read_marker(nv::QueuePair& qp, const nv::DmaMemory& mem, const Aligned& page, const nv::ControllerInfo& ci) {
  std::memset(page.p, 0, 4096);
  std::vector<nv::Segment> segs;
  mem.segments(0, 4096, segs);
  nv::Sqe s;
  nv::rw(s, nv::kOpRead, 0, 1, 0, 4096 / ci.lba_bytes);
  nv::prp(s, segs.data(), static_cast<uint32_t>(segs.size()), 4096, nullptr, 0);
  qp.submit(s);
  uint16_t st = 0xffff;
  while (!qp.poll([&](uint16_t, uint16_t status) { st = status; })) {
  }
  return st == 0 && std::memcmp(page.p, "TUTTI-NVME-LBA0", 15) == 0;
}

// The admin queue's doorbells share a page with every queue pair's, so a lease can make the
// controller run admin entries the module did not send: entries it zeroed, command id 0. Their
// completions answer nothing the module waits for; none may pass for the completion of a
// command it sent (taken first, a stale entry's error made CREATE_QP fail while the real
// command still ran on the controller, on memory the module then freed).
void test_foreign_completions(const nv::Lease& lease, const nv::ControllerInfo& ci) {
  const int fd = lease.fd();
  Aligned first(4096), again(4096), page(4096);
  tutti_ctrl_info info{};
  info.size = sizeof info;
  info.identify = reinterpret_cast<uintptr_t>(first.p);
  tutti_qp q{};
  q.size = sizeof q;
  q.depth = 8;
  void* db = MAP_FAILED;
  if (::ioctl(fd, TUTTI_IOC_CTRL_INFO, &info) == 0 && ::ioctl(fd, TUTTI_IOC_CREATE_QP, &q) == 0)
    db = ::mmap(nullptr, q.region_bytes[TUTTI_QP_DOORBELLS], PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                static_cast<off_t>((q.token * TUTTI_QP_REGIONS + TUTTI_QP_DOORBELLS) * 4096));
  // The admin submission queue's tail doorbell, 2 * qid strides before the pair's.
  const long admin_at = static_cast<long>(q.sq_doorbell) - 2L * q.qid * (4L << info.dstrd);
  check(db != MAP_FAILED && admin_at >= 0, "a queue pair whose doorbell page holds the admin queue's doorbells too");
  if (db == MAP_FAILED || admin_at < 0) return;
  volatile uint32_t* admin_tail = reinterpret_cast<volatile uint32_t*>(static_cast<char*>(db) + admin_at);
  // One admin command (Identify Controller); true if its data are those read before.
  auto identify = [&] {
    tutti_ctrl_info i{};
    i.size = sizeof i;
    i.identify = reinterpret_cast<uintptr_t>(again.p);
    std::memset(again.p, 0, 4096);
    return ::ioctl(fd, TUTTI_IOC_CTRL_INFO, &i) == 0 && std::memcmp(again.p, first.p, 4096) == 0;
  };
  // The controller runs the admin queue up to `tail` and posts a completion for each entry.
  auto stale_write = [&](uint32_t tail) {
    *admin_tail = tail;
    ::usleep(200000);
  };
  auto skip = [](unsigned n) { std::ofstream("/sys/module/tutti_kmod/parameters/admin_skip") << n; };
  nv::DmaMemory mem(lease, 0, page.p, 4096);

  long seen = param("admin_foreign_completions");
  stale_write(5);
  const bool identified = identify();
  check(identified, "the admin doorbell written from user space (tail 5): the next admin command, Identify, brings "
                    "the controller's data (" + std::to_string(param("admin_foreign_completions") - seen) +
                    " foreign completions skipped)");
  // That command went into entry 5, where the controller stood: the next one goes into 6.
  seen = param("admin_foreign_completions");
  stale_write(26);
  {
    std::unique_ptr<nv::QueuePair> qp;
    try {
      qp = std::make_unique<nv::QueuePair>(lease, 0, 16);
    } catch (const std::exception& e) {
      check(false, std::string("a queue pair after a stale admin doorbell: ") + e.what());
      return;
    }
    check(param("admin_foreign_completions") - seen == 20 && read_marker(*qp, mem, page, ci),
          "20 zeroed admin entries run from user space (tail 26): their completions skipped, the next queue pair "
          "is made and reads LBA 0");
    seen = param("admin_foreign_completions");
    skip(7);
    check(identify() && param("admin_foreign_completions") - seen == 7,
          "7 zeroed entries run ahead of an Identify (admin_skip): their completions, arriving while it is awaited, "
          "are skipped; its own brings the controller's data");
    seen = param("admin_foreign_completions");
    skip(3);
    const uint16_t qid = qp->qid();
    qp.reset();
    check(param("admin_foreign_completions") - seen == 3,
          "3 zeroed entries run ahead of Delete I/O SQ: their completions skipped while it is awaited");
    // The module frees a queue id (and the memory) only once the controller deleted the queues.
    nv::QueuePair again_qp(lease, 0, 16);
    check(again_qp.qid() == qid && read_marker(again_qp, mem, page, ci),
          "queue id " + std::to_string(qid) + " deleted on the controller: made again, it reads LBA 0");
  }
  ::munmap(db, q.region_bytes[TUTTI_QP_DOORBELLS]);
  check(::ioctl(fd, TUTTI_IOC_DELETE_QP, &q.token) == 0 && identify(), "the admin queue still serves the module");
}

// A child drives a queue pair at full depth; it is SIGKILLed mid-I/O. The lease goes with it:
// queues deleted on the controller, memory unmapped and unpinned.
void test_kill(const nv::ControllerInfo& ci) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) tutti::fail_errno(errno, "pipe");
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      nv::Lease lease;
      nv::QueuePair qp(lease, 0, 64);
      Aligned buf(8 << 20);
      nv::DmaMemory mem(lease, 0, buf.p, buf.bytes);
      uint64_t done = 0, i = 0;
      bool told = false;
      for (;;) {
        for (; qp.room() > 0; ++i) {  // reads of 128 KiB anywhere in the first 6 MiB of the namespace
          nv::Sqe s;
          const uint64_t off = (i * 131072) % (6 << 20);
          nv::rw(s, nv::kOpRead, 0, 1, off / ci.lba_bytes, 131072 / ci.lba_bytes);
          std::vector<nv::Segment> segs;
          mem.segments((i % 64) * 131072, 131072, segs);
          const uint16_t cid = qp.next_cid();
          nv::sgl(s, segs.data(), static_cast<uint32_t>(segs.size()), static_cast<nv::SglDesc*>(qp.list(cid)),
                  qp.list_bus(cid));
          qp.submit(s);
        }
        done += qp.poll([](uint16_t, uint16_t) {});
        if (done >= 200 && !told) told = ::write(pipefd[1], "x", 1) == 1;
      }
    } catch (const std::exception& e) {
      std::printf("FAIL child: %s\n", e.what());
      std::fflush(stdout);
      ::_exit(1);
    }
  }
  char x;
  const bool started = ::read(pipefd[0], &x, 1) == 1;
  check(started && param("queue_pairs") == 1 && param("leases") == 1 && param("pinned_pages") == 2048,
        "a child drives a queue pair of depth 64 into 8 MiB of pinned memory (queue pairs " +
            std::to_string(param("queue_pairs")) + ", leases " + std::to_string(param("leases")) + ", pinned pages " +
            std::to_string(param("pinned_pages")) + ")");
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  check(WIFSIGNALED(status) && param("queue_pairs") == 0 && param("leases") == 0 && param("pinned_pages") == 0,
        "SIGKILL mid-I/O: its queue pair is deleted, its memory unmapped and unpinned, its lease gone");
  ::close(pipefd[0]);
  ::close(pipefd[1]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: nvme_test FILE\n");
    return 2;
  }
  try {
    const int fd = ::open(argv[1], O_RDONLY);
    if (fd < 0) tutti::fail_errno(errno, std::string("open ") + argv[1]);
    const auto size = static_cast<size_t>(::lseek(fd, 0, SEEK_END));
    std::vector<char> file(size);
    if (::pread(fd, file.data(), size, 0) != static_cast<ssize_t>(size)) tutti::fail_errno(errno, "pread");

    nv::Lease lease;
    const nv::ControllerInfo ci = lease.controller(0);
    std::printf("ok   controller 0 (%s, %s): %u I/O queue pairs, depth up to %u, largest command %u KiB, SGL %s; "
                "namespace 1: %llu LBAs of %u bytes\n",
                ci.bdf.c_str(), ci.model.c_str(), ci.max_queues, ci.mqes, ci.max_bytes / 1024,
                ci.sgl ? (ci.sgl_dword_aligned ? "yes (dword aligned)" : "yes") : "no",
                static_cast<unsigned long long>(ci.lbas), ci.lba_bytes);
    check(ci.sgl, "the controller supports SGLs");
    test_bad_requests(lease, ci);
    test_foreign_completions(lease, ci);

    nv::QueuePair qp(lease, 0, 64);
    check(param("queue_pairs") == 1, "queue pair " + std::to_string(qp.qid()) + " of depth 64, mapped with its doorbells");
    Aligned kv(8 << 20);  // the "KV cache": 8 MiB of blocks
    nv::DmaMemory mem(lease, 0, kv.p, kv.bytes);
    check(param("pinned_pages") == 2048, "8 MiB pinned and DMA-mapped for the controller");

    // LBA 0 carries the marker the host wrote before the filesystem.
    {
      std::vector<nv::Segment> segs;
      mem.segments(0, 4096, segs);
      nv::Sqe s;
      nv::rw(s, nv::kOpRead, 0, 1, 0, 4096 / ci.lba_bytes);
      nv::prp(s, segs.data(), static_cast<uint32_t>(segs.size()), 4096, nullptr, 0);
      qp.submit(s);
      uint16_t st = 0xffff;
      while (!qp.poll([&](uint16_t, uint16_t status) { st = status; })) {
      }
      check(st == 0 && std::memcmp(kv.p, "TUTTI-NVME-LBA0", 15) == 0, "LBA 0 read through the module's queue: the marker");
    }

    // One layer of one 256-token chunk, as the pool stores it and a paged cache wants it.
    struct Shape {
      const char* name;
      uint32_t piece;
    } shapes[] = {{"llama3-8b NHD, 16-token blocks: 32 KiB pieces", 32768},
                  {"HND, 8-token blocks, head dim 128: 2 KiB pieces", 2048}};
    const size_t object = 1 << 20;  // K and V of 8 heads x 128 dims x 256 tokens x 2 bytes
    std::printf("     per layer load of a 1 MiB object (commands submitted = counted by the controller / data pointer entries):\n");
    for (const Shape& sh : shapes) {
      const auto pieces = scattered(object / sh.piece, sh.piece, kv.bytes / sh.piece);
      const auto ext = nv::file_extents(fd, object, object);
      Counts by[2];
      uint64_t counted[2];
      for (int use_sgl = 0; use_sgl < 2; ++use_sgl) {
        std::memset(kv.p, 0, kv.bytes);
        const uint64_t before = host_read_commands();
        by[use_sgl] = load(qp, mem, ci, ext, pieces, use_sgl);
        counted[use_sgl] = host_read_commands() - before;
        check(by[use_sgl].ok && pieces_match(kv.data(), pieces, file, object),
              std::string(use_sgl ? "SGL" : "PRP") + ": " + sh.name + " land in their blocks, bytes equal the file's");
        check(counted[use_sgl] == by[use_sgl].commands,
              std::string(use_sgl ? "SGL" : "PRP") + ": the controller counted " + std::to_string(counted[use_sgl]) +
                  " read commands, as many as were submitted");
      }
      std::printf("     %-48s PRP %4u = %4llu / %5u   SGL %4u = %4llu / %5u\n", sh.name, by[0].commands,
                  static_cast<unsigned long long>(counted[0]), by[0].pointers, by[1].commands,
                  static_cast<unsigned long long>(counted[1]), by[1].pointers);
    }

    // The whole file, in order, with PRPs.
    {
      std::memset(kv.p, 0, kv.bytes);
      const Counts c = load(qp, mem, ci, nv::file_extents(fd, 0, size), {{0, static_cast<uint32_t>(size)}}, false);
      check(c.ok && std::memcmp(kv.p, file.data(), size) == 0,
            "the whole " + std::to_string(size >> 20) + " MiB file through the module's queue (" + std::to_string(c.commands) +
                " commands): bytes equal the file's");
    }

    // A dma-buf stands in for GPU memory: vgem pages, mapped for the controller by the module.
    {
      const int dmabuf = vgem_dmabuf(object);
      check(dmabuf >= 0, "a 1 MiB vgem dma-buf");
      if (dmabuf >= 0) {
        {
          nv::DmaMemory dm(lease, 0, dmabuf, object);
          check(dm.bytes() == object, "the dma-buf DMA-mapped for the controller");
          const auto pieces = scattered(object / 32768, 32768, object / 32768);
          const Counts c = load(qp, dm, ci, nv::file_extents(fd, 0, object), pieces, true);
          void* view = ::mmap(nullptr, object, PROT_READ, MAP_SHARED, dmabuf, 0);
          check(view != MAP_FAILED && c.ok && pieces_match(static_cast<std::byte*>(view), pieces, file, 0),
                "SGL reads scattered into the dma-buf: bytes equal the file's");
          if (view != MAP_FAILED) ::munmap(view, object);
        }
        ::close(dmabuf);
      }
    }

    // A bus address unmapped a moment ago, of a page that is still the process's: behind an
    // IOMMU the controller's write is stopped (the page keeps its bytes; the IOMMU logs a
    // fault); without one it lands, which is why DMA is for root only.
    {
      Aligned page(4096);
      std::memset(page.p, 0xa5, 4096);
      uint64_t stale;
      {
        nv::DmaMemory once(lease, 0, page.p, 4096);
        stale = once.bus(0);
      }
      nv::Sqe s;
      nv::rw(s, nv::kOpRead, 0, 1, 0, 4096 / ci.lba_bytes);
      const nv::Segment seg{stale, 4096};
      nv::sgl(s, &seg, 1, nullptr, 0);
      qp.submit(s);
      uint16_t st = 0;
      while (!qp.poll([&](uint16_t, uint16_t status) { st = status; })) {
      }
      const bool untouched = std::all_of(page.data(), page.data() + 4096, [](std::byte b) { return b == std::byte{0xa5}; });
      char status[16];
      std::snprintf(status, sizeof status, "0x%x", st);
      if (iommu_present())
        check(untouched, std::string("IOMMU: a read into a bus address unmapped a moment ago does not reach the page "
                                     "(the emulated controller reports status ") + status + ")");
      else
        check(!untouched, "no IOMMU: a read into a bus address unmapped a moment ago still reaches the page");
    }

    // Every queue pair the controller granted can be had, and no more.
    {
      std::vector<std::unique_ptr<nv::QueuePair>> all;
      try {
        for (;;) all.push_back(std::make_unique<nv::QueuePair>(lease, 0, 2));
      } catch (const tutti::Error& e) {
        check(all.size() + 1 == ci.max_queues && std::strstr(e.what(), "busy"),
              "queue pairs until the controller's " + std::to_string(ci.max_queues) + " are in use, then: " + e.what());
      }
    }
    check(param("queue_pairs") == 1, "deleted queue pairs are gone from the controller's count");
    ::close(fd);
  } catch (const std::exception& e) {
    std::printf("FAIL %s\n", e.what());
    return 1;
  }
  nv::ControllerInfo ci;
  {
    nv::Lease lease;
    ci = lease.controller(0);
  }  // the parent holds no lease while the child runs
  test_kill(ci);
  check(param("queue_pairs") == 0 && param("leases") == 0 && param("pinned_pages") == 0, "nothing is held at the end");
  std::printf("nvme_test: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
