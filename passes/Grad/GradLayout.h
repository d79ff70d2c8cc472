//===- GradLayout.h - The main-grad buffer layout, buckets and DP shards --===//
//
// Plain C++ (no MLIR) so that the layout rules can be property-tested alone. Semantics follow
// Megatron-LM's _ParamAndGradBuffer (megatron/core/distributed/param_and_grad_buffer.py) and
// DistributedOptimizer (megatron/core/optimizer/distrib_optimizer.py):
//  - parameters are packed contiguously in the order given (the order their gradients become
//    final in backward, i.e. Megatron's reverse order of use);
//  - a bucket closes after the parameter that brings it to at least `bucketSize` elements (so a
//    parameter never spans two buckets), and the last bucket takes the rest;
//  - with the distributed optimizer each bucket is padded at its end to a multiple of dp, and DP
//    rank r owns the contiguous shard [start + r * size / dp, start + (r + 1) * size / dp) of
//    every bucket; a parameter may straddle two shards; padding belongs to no parameter;
//  - with the distributed optimizer a parameter marked `ownBucket` (the word embedding tied
//    across pipeline stages) gets a bucket of its own: the bucket before it closes and it closes
//    its own (Megatron's _does_param_require_new_bucket), so both stages shard it alike and the
//    embd all-reduce can sum the two copies' shards after the DP reduce-scatter.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_PASSES_GRAD_GRADLAYOUT_H
#define TRAINC_PASSES_GRAD_GRADLAYOUT_H

#include <algorithm>
#include <cstdint>
#include <vector>

namespace trainc::grad {

/// Megatron's default bucket size in elements: max(40M, 1M x dp).
inline int64_t defaultBucketSize(int64_t dp) { return std::max<int64_t>(40000000, 1000000 * dp); }

struct GradLayout {
  int64_t dp = 1;
  bool distributed = false;
  /// Per parameter (in layout order): element offset and number of elements.
  std::vector<int64_t> offsets, sizes;
  /// bounds.size() == numBuckets() + 1; bucket b is [bounds[b], bounds[b + 1]).
  std::vector<int64_t> bounds{0};
  /// Index of the last parameter of each bucket.
  std::vector<size_t> lastParam;

  int64_t numel() const { return bounds.back(); }
  int64_t numBuckets() const { return int64_t(bounds.size()) - 1; }
  /// The range of bucket b that DP rank `rank` reduces and updates: its shard with the
  /// distributed optimizer, the whole bucket otherwise.
  int64_t shardBegin(int64_t b, int64_t rank) const {
    return distributed ? bounds[size_t(b)] + rank * shardSize(b) : bounds[size_t(b)];
  }
  int64_t shardEnd(int64_t b, int64_t rank) const {
    return distributed ? shardBegin(b, rank) + shardSize(b) : bounds[size_t(b) + 1];
  }
  int64_t shardSize(int64_t b) const {
    return (bounds[size_t(b) + 1] - bounds[size_t(b)]) / (distributed ? dp : 1);
  }

  /// Lays out parameters of `sizes` elements (each > 0) for `dp` ranks; bucketSize <= 0 means
  /// defaultBucketSize(dp). `ownBucket` (empty, or one flag per parameter) marks the
  /// parameters that get a bucket of their own when `distributed`.
  static GradLayout compute(const std::vector<int64_t> &sizes, int64_t dp, int64_t bucketSize,
                            bool distributed, const std::vector<bool> &ownBucket = {}) {
    GradLayout l;
    l.dp = dp;
    l.distributed = distributed;
    l.sizes = sizes;
    const int64_t limit = bucketSize > 0 ? bucketSize : defaultBucketSize(dp);
    int64_t offset = 0;
    auto close = [&](size_t last) {
      int64_t len = offset - l.bounds.back();
      if (distributed)
        len = (len + dp - 1) / dp * dp;
      offset = l.bounds.back() + len;
      l.bounds.push_back(offset);
      l.lastParam.push_back(last);
    };
    for (size_t i = 0; i < sizes.size(); ++i) {
      const bool own = distributed && i < ownBucket.size() && ownBucket[i];
      if (own && offset > l.bounds.back())
        close(i - 1);
      l.offsets.push_back(offset);
      offset += sizes[i];
      if (offset - l.bounds.back() >= limit || i + 1 == sizes.size() || own)
        close(i);
    }
    return l;
  }

  /// A contiguous part of one parameter inside one of a rank's shards.
  struct Piece {
    size_t param;
    int64_t bucket;
    /// [begin, end) in buffer elements.
    int64_t begin, end;
    /// Where the piece starts in the rank's optimizer state (the concatenation of its shards of
    /// every bucket; bucket b's shard starts at bounds[b] / dp).
    int64_t stateOffset;
  };
  /// The parameter pieces inside `rank`'s shards, in buffer order (padding excluded).
  std::vector<Piece> shardPieces(int64_t rank) const {
    std::vector<Piece> out;
    for (int64_t b = 0; b < numBuckets(); ++b) {
      int64_t lo = shardBegin(b, rank), hi = shardEnd(b, rank);
      for (size_t i = 0; i < offsets.size(); ++i) {
        int64_t begin = std::max(offsets[i], lo), end = std::min(offsets[i] + sizes[i], hi);
        if (begin < end)
          out.push_back({i, b, begin, end, bounds[size_t(b)] / (distributed ? dp : 1) + (begin - lo)});
      }
    }
    return out;
  }
};

} // namespace trainc::grad

#endif
