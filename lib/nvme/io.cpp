#include "nvme/io.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace tutti::nvme {

namespace {
constexpr uint32_t kPage = 4096;
constexpr uint32_t kMaxPrp = kPage / 8 + 1;  // PRP1 and one list page (one per command id)
constexpr uint32_t kMaxSgl = kPage / 16;     // one segment page of data descriptors
}  // namespace

IoCounts read(QueuePair& qp, const ControllerInfo& ci, uint32_t nsid, const std::vector<FileExtent>& extents,
              const std::vector<Piece>& pieces, DataPointer dp) {
  IoCounts c;
  auto reap = [&] {
    qp.poll([&](uint16_t, uint16_t status) {
      if (status && !c.status) c.status = status;
    });
  };
  auto drain = [&] {
    while (qp.room() < qp.depth() - 1) reap();
  };
  uint64_t want = 0, have = 0;
  for (const auto& e : extents) want += e.length;
  for (const auto& p : pieces) have += p.len;
  TUTTI_EXPECT(want == have, "nvme: " + std::to_string(want) + " device bytes for " + std::to_string(have) + " bytes of memory");
  const bool sgl = dp == DataPointer::kSgl;
  size_t pi = 0, ei = 0;
  uint64_t po = 0, eo = 0;
  std::vector<Segment> segs, trial;
  try {  // nothing in flight may outlive this call
    while (pi < pieces.size() && ei < extents.size()) {
      const uint64_t limit = std::min<uint64_t>(ci.max_bytes, extents[ei].length - eo);
      segs.clear();
      uint64_t take = 0;
      while (take < limit && pi < pieces.size()) {
        const Piece& p = pieces[pi];
        const uint64_t n = std::min(p.len - po, limit - take);
        trial = segs;
        p.mem->segments(p.offset + po, n, trial);
        const auto k = static_cast<uint32_t>(trial.size());
        const bool fits = sgl ? k <= kMaxSgl : prp_ok(trial.data(), k, kPage) && prp_entries(trial.data(), k, kPage) <= kMaxPrp;
        if (!fits) break;  // the command ends here (a piece alone, at most MDTS, always fits)
        segs.swap(trial);
        take += n, po += n;
        if (po == p.len) ++pi, po = 0;
      }
      if (take == 0 || take % ci.lba_bytes)
        fail(TUTTI_EINVAL, "nvme: a command would end inside an LBA (after " + std::to_string(take) + " bytes; LBA " +
                               std::to_string(ci.lba_bytes) + " bytes)");
      while (qp.room() == 0) reap();
      Sqe s;
      rw(s, kOpRead, 0, nsid, (extents[ei].physical + eo) / ci.lba_bytes, static_cast<uint32_t>(take / ci.lba_bytes));
      const uint16_t cid = qp.next_cid();
      const auto n = static_cast<uint32_t>(segs.size());
      if (sgl) {
        nvme::sgl(s, segs.data(), n, static_cast<SglDesc*>(qp.list(cid)), qp.list_bus(cid));
        c.pointers += n;
      } else {
        prp(s, segs.data(), n, kPage, static_cast<uint64_t*>(qp.list(cid)), qp.list_bus(cid));
        c.pointers += prp_entries(segs.data(), n, kPage);
      }
      qp.submit(s);
      ++c.commands;
      eo += take;
      if (eo == extents[ei].length) ++ei, eo = 0;
    }
  } catch (...) {
    drain();
    throw;
  }
  drain();
  return c;
}

}  // namespace tutti::nvme
