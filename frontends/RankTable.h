//===- RankTable.h - Megatron's rank order and communicator groups -------===//
//
// Global rank r of a job with sizes (tp, cp, ep, dp, pp) has coordinates in Megatron's order
// tp-cp-ep-dp-pp, tp fastest (megatron/core/parallel_state.py, RankGenerator with order
// "tp-cp-ep-dp-pp"):
//   r = tp_rank + TP * (cp_rank + CP * (ep_rank + EP * (dp_rank + DP * pp_rank)))
// With cp = ep = 1 this is r = tp + TP * dp + TP * DP * pp.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_FRONTENDS_RANKTABLE_H
#define TRAINC_FRONTENDS_RANKTABLE_H

#include <cstdint>
#include <string>
#include <vector>

namespace trainc::config {

struct ParallelConfig;

/// A communicator group: name and member global ranks in group-rank order.
struct RankGroup {
  std::string name;
  std::vector<int64_t> ranks;
};

class RankTable {
public:
  /// Axis sizes in Megatron order; each must be >= 1 (the caller validated the config).
  RankTable(int64_t tp, int64_t cp, int64_t ep, int64_t dp, int64_t pp);
  explicit RankTable(const ParallelConfig &parallel);

  /// {"tp", "cp", "ep", "dp", "pp"}: fastest-varying first.
  static const std::vector<std::string> &axisNames();
  const std::vector<int64_t> &axisSizes() const { return sizes_; }
  int64_t worldSize() const;
  /// Coordinates of `rank` on each axis (axisNames() order).
  std::vector<int64_t> coords(int64_t rank) const;
  int64_t rankOf(const std::vector<int64_t> &coords) const;

  /// Every group of one kind over the whole job, each in group-rank order, sorted by first rank:
  /// "tp", "cp", "ep", "dp", "pp" (ranks that differ only on that axis), "mp" (tensor x pipeline:
  /// ranks with the same cp, ep, dp coordinates), "embd" (the first and last pipeline stage of
  /// each pipeline group; just the rank itself when pp = 1). Unknown kinds give an empty list.
  std::vector<std::vector<int64_t>> groups(const std::string &kind) const;
  /// The groups `rank` belongs to, one per kind, in the order tp, cp, ep, dp, pp, mp, embd.
  std::vector<RankGroup> groupsOf(int64_t rank) const;

private:
  std::vector<int64_t> sizes_;
};

} // namespace trainc::config

#endif
