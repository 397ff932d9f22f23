// SPDX-License-Identifier: Apache-2.0
#include "nvme/io.hpp"

#include <algorithm>
#include <chrono>

#include "common/error.hpp"

namespace tutti::nvme {

namespace {
constexpr uint32_t kPage = 4096;
constexpr uint32_t kMaxPrp = kPage / 8 + 1;  // PRP1 and one list page (one per command id)
constexpr uint32_t kMaxSgl = kPage / 16;     // one segment page of data descriptors
constexpr std::chrono::seconds kNoCompletion{30};
}  // namespace

Plan plan(const ControllerInfo& ci, const std::vector<FileExtent>& extents, const std::vector<Piece>& pieces,
          DataPointer dp) {
  uint64_t want = 0, have = 0;
  for (const auto& e : extents) want += e.length;
  for (const auto& p : pieces) have += p.len;
  TUTTI_EXPECT(want == have, "nvme: " + std::to_string(want) + " device bytes for " + std::to_string(have) + " bytes of memory");
  Plan out;
  out.dp = dp;
  const bool sgl = dp == DataPointer::kSgl;
  size_t pi = 0, ei = 0;
  uint64_t po = 0, eo = 0;
  std::vector<Segment> segs;  // the current command's
  while (pi < pieces.size() && ei < extents.size()) {
    const uint64_t limit = std::min<uint64_t>(ci.max_bytes, extents[ei].length - eo);
    segs.clear();
    uint64_t take = 0;
    while (take < limit && pi < pieces.size()) {
      const Piece& p = pieces[pi];
      const uint64_t n = std::min(p.len - po, limit - take);
      // Tries `len` bytes of the piece on the command's segments; undo() takes them off again
      // (the first may have merged into the last segment).
      const size_t kept = segs.size();
      const uint32_t kept_len = kept ? segs.back().len : 0;
      auto undo = [&] {
        segs.resize(kept);
        if (kept) segs.back().len = kept_len;
      };
      auto fits = [&](uint64_t len) {
        undo();
        p.mem->segments(p.offset + po, len, segs);
        const auto k = static_cast<uint32_t>(segs.size());
        return sgl ? k <= kMaxSgl : prp_ok(segs.data(), k, kPage) && prp_entries(segs.data(), k, kPage) <= kMaxPrp;
      };
      uint64_t m = n;
      if (!fits(m)) {
        // The longest prefix of the piece that still fits and ends the command on a whole LBA
        // (a big piece of scattered pages may need more entries than one list page holds).
        const uint64_t lba = ci.lba_bytes, r = (lba - take % lba) % lba;
        const int64_t first = r ? 0 : 1;  // prefix lengths r + j * lba, j >= first
        int64_t lo = first - 1, hi = n >= r ? static_cast<int64_t>((n - r) / lba) : first - 1;
        while (lo < hi) {  // the largest j whose prefix fits (lo: known to fit, or none)
          const int64_t mid = (lo + hi + 1) / 2;
          if (fits(r + static_cast<uint64_t>(mid) * lba))
            lo = mid;
          else
            hi = mid - 1;
        }
        if (lo < first) {  // nothing more fits: the command ends here
          undo();
          break;
        }
        m = r + static_cast<uint64_t>(lo) * lba;
        fits(m);  // leaves its segments on the command
      }
      take += m, po += m;
      if (po == p.len) ++pi, po = 0;
      if (m < n) break;
    }
    if (take == 0 || take % ci.lba_bytes)
      fail(TUTTI_EINVAL, "nvme: a command would end inside an LBA (after " + std::to_string(take) + " bytes; LBA " +
                             std::to_string(ci.lba_bytes) + " bytes)");
    out.commands.push_back({(extents[ei].physical + eo) / ci.lba_bytes, static_cast<uint32_t>(take / ci.lba_bytes),
                            static_cast<uint32_t>(out.segments.size()), static_cast<uint32_t>(segs.size())});
    out.segments.insert(out.segments.end(), segs.begin(), segs.end());
    eo += take;
    if (eo == extents[ei].length) ++ei, eo = 0;
  }
  return out;
}

IoCounts read(QueuePair& qp, uint32_t nsid, const Plan& plan) {
  IoCounts c;
  // A controller that stops completing must not hang the caller for ever.
  auto deadline = std::chrono::steady_clock::now() + kNoCompletion;
  auto reap = [&] {
    if (qp.poll([&](uint16_t, uint16_t status) {
          if (status && !c.status) c.status = status;
        }))
      deadline = std::chrono::steady_clock::now() + kNoCompletion;
    else if (std::chrono::steady_clock::now() > deadline)
      fail(TUTTI_EIO, "nvme: queue pair " + std::to_string(qp.qid()) + " completed nothing for " +
                          std::to_string(kNoCompletion.count()) + " s");
  };
  for (const Planned& cmd : plan.commands) {
    while (qp.room() == 0) reap();
    Sqe s;
    const uint16_t cid = qp.next_cid();
    c.pointers += build(s, kOpRead, cid, nsid, cmd, plan.segments.data(), plan.dp == DataPointer::kSgl, qp.list(cid),
                        qp.list_bus(cid));
    qp.submit(s);
    ++c.commands;
  }
  while (qp.room() < qp.depth() - 1) reap();
  return c;
}

}  // namespace tutti::nvme
