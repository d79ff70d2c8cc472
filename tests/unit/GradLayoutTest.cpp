//===- GradLayoutTest.cpp - Property tests of the main-grad bucket layout -===//
//
// Random parameter sizes, dp in 1..16, random bucket sizes: every bucket a multiple of dp under
// the distributed optimizer, shards disjoint and covering each bucket, and the parameter pieces
// of all ranks (what the grad norm sums, what AdamW updates and what the all-gather returns)
// covering every parameter element exactly once and no padding element.
//
//===----------------------------------------------------------------------===//

#include "passes/Grad/GradLayout.h"

#include <gtest/gtest.h>

#include <random>

using trainc::grad::GradLayout;

namespace {

TEST(GradLayoutTest, MegatronDefaultBucketSize) {
  EXPECT_EQ(trainc::grad::defaultBucketSize(1), 40000000);
  EXPECT_EQ(trainc::grad::defaultBucketSize(64), 64000000);
}

TEST(GradLayoutTest, BucketClosesAfterTheParameterReachingTheSize) {
  GradLayout l = GradLayout::compute({5, 4, 3, 10, 1}, 1, 8, false);
  // 5+4 = 9 >= 8 closes bucket 0 after param 1; 3+10 closes bucket 1; the rest is bucket 2.
  EXPECT_EQ(l.bounds, (std::vector<int64_t>{0, 9, 22, 23}));
  EXPECT_EQ(l.offsets, (std::vector<int64_t>{0, 5, 9, 12, 22}));
  EXPECT_EQ(l.lastParam, (std::vector<size_t>{1, 3, 4}));
  // Distributed optimizer with dp = 4: each bucket padded to a multiple of 4.
  GradLayout z = GradLayout::compute({5, 4, 3, 10, 1}, 4, 8, true);
  EXPECT_EQ(z.bounds, (std::vector<int64_t>{0, 12, 28, 32}));
  EXPECT_EQ(z.offsets, (std::vector<int64_t>{0, 5, 12, 15, 28}));
  // Rank 1's shard of bucket 0 is [3, 6): the end of param 0 and the start of param 1.
  EXPECT_EQ(z.shardBegin(0, 1), 3);
  EXPECT_EQ(z.shardEnd(0, 1), 6);
  std::vector<GradLayout::Piece> p = z.shardPieces(1);
  ASSERT_GE(p.size(), 2u);
  EXPECT_EQ(p[0].param, 0u);
  EXPECT_EQ(p[0].begin, 3);
  EXPECT_EQ(p[0].end, 5);
  EXPECT_EQ(p[0].stateOffset, 0);
  EXPECT_EQ(p[1].param, 1u);
  EXPECT_EQ(p[1].begin, 5);
  EXPECT_EQ(p[1].end, 6);
  EXPECT_EQ(p[1].stateOffset, 2);
}

// Megatron's _does_param_require_new_bucket: with the distributed optimizer the shared embedding
// closes the bucket before it and its own, so both pipeline stages shard it alike; without it the
// flag changes nothing.
TEST(GradLayoutTest, SharedEmbeddingGetsItsOwnBucketUnderTheDistributedOptimizer) {
  // Shared parameter last (stage 0: the embedding's gradient is the last one), dp 4, bucket 8.
  GradLayout first = GradLayout::compute({5, 2, 6}, 4, 8, true, {false, false, true});
  EXPECT_EQ(first.bounds, (std::vector<int64_t>{0, 8, 16}));
  EXPECT_EQ(first.offsets, (std::vector<int64_t>{0, 5, 8}));
  // Shared parameter first (last stage: the output layer's gradient comes first).
  GradLayout last = GradLayout::compute({6, 5, 2}, 4, 8, true, {true, false, false});
  EXPECT_EQ(last.bounds, (std::vector<int64_t>{0, 8, 16}));
  EXPECT_EQ(last.lastParam, (std::vector<size_t>{0, 2}));
  // Its shards cover the same elements of the parameter on both stages.
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(first.shardBegin(1, r) - first.offsets[2], last.shardBegin(0, r) - last.offsets[0]);
    EXPECT_EQ(first.shardSize(1), last.shardSize(0));
  }
  // In the middle: closes the bucket before it even below the size.
  GradLayout mid = GradLayout::compute({1, 3, 2}, 1, 100, true, {false, true, false});
  EXPECT_EQ(mid.bounds, (std::vector<int64_t>{0, 1, 4, 6}));
  // Without the distributed optimizer the flag is ignored (Megatron's condition).
  GradLayout plain = GradLayout::compute({1, 3, 2}, 1, 100, false, {false, true, false});
  EXPECT_EQ(plain.bounds, (std::vector<int64_t>{0, 6}));
}

TEST(GradLayoutTest, RandomLayoutsShardDisjointlyAndCoverEveryParameterOnce) {
  std::mt19937 g(12345);
  for (int trial = 0; trial < 400; ++trial) {
    int64_t dp = 1 + int64_t(g() % 16);
    bool distributed = g() % 2;
    size_t n = 1 + g() % 30;
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < n; ++i)
      sizes.push_back(1 + int64_t(g() % (g() % 4 == 0 ? 5000 : 50)));
    int64_t bucket = g() % 5 == 0 ? 0 : 1 + int64_t(g() % 3000);
    GradLayout l = GradLayout::compute(sizes, dp, bucket, distributed);
    SCOPED_TRACE("trial " + std::to_string(trial) + " dp " + std::to_string(dp) + " bucket " +
                 std::to_string(bucket) + (distributed ? " zero-1" : ""));
    // Parameters are packed in order, inside one bucket each, never overlapping.
    int64_t paramsTotal = 0;
    for (size_t i = 0; i < n; ++i) {
      paramsTotal += sizes[i];
      if (i > 0)
        EXPECT_GE(l.offsets[i], l.offsets[i - 1] + sizes[i - 1]);
      auto b = std::upper_bound(l.bounds.begin(), l.bounds.end(), l.offsets[i]);
      ASSERT_NE(b, l.bounds.end());
      EXPECT_LE(l.offsets[i] + sizes[i], *b) << "param " << i << " spans two buckets";
    }
    // Buckets: non-empty, a multiple of dp under ZeRO-1, padding < dp per bucket.
    for (int64_t b = 0; b < l.numBuckets(); ++b) {
      int64_t len = l.bounds[size_t(b) + 1] - l.bounds[size_t(b)];
      EXPECT_GT(len, 0);
      if (distributed)
        EXPECT_EQ(len % dp, 0) << "bucket " << b;
    }
    EXPECT_LT(l.numel() - paramsTotal, distributed ? dp * l.numBuckets() : 1);
    // Shards: disjoint and covering each bucket (rank order = buffer order).
    int64_t ranks = distributed ? dp : 1;
    for (int64_t b = 0; b < l.numBuckets(); ++b) {
      int64_t at = l.bounds[size_t(b)];
      for (int64_t r = 0; r < ranks; ++r) {
        EXPECT_EQ(l.shardBegin(b, r), at);
        at = l.shardEnd(b, r);
      }
      EXPECT_EQ(at, l.bounds[size_t(b) + 1]);
    }
    // Pieces over all ranks: every parameter element exactly once, no padding; state offsets
    // index each rank's concatenated shards without overlap.
    std::vector<int> owner(size_t(l.numel()), 0);
    for (int64_t r = 0; r < ranks; ++r) {
      std::vector<char> state(size_t(l.numel() / ranks), 0);
      for (const GradLayout::Piece &p : l.shardPieces(r)) {
        ASSERT_LT(p.param, n);
        EXPECT_GE(p.begin, l.offsets[p.param]);
        EXPECT_LE(p.end, l.offsets[p.param] + sizes[p.param]);
        EXPECT_GE(p.begin, l.shardBegin(p.bucket, r));
        EXPECT_LE(p.end, l.shardEnd(p.bucket, r));
        for (int64_t e = p.begin; e < p.end; ++e)
          ++owner[size_t(e)];
        for (int64_t e = p.stateOffset; e < p.stateOffset + (p.end - p.begin); ++e) {
          ASSERT_LT(e, int64_t(state.size()));
          EXPECT_EQ(state[size_t(e)]++, 0) << "state element " << e << " used twice";
        }
      }
    }
    for (size_t i = 0; i < n; ++i)
      for (int64_t e = l.offsets[i]; e < l.offsets[i] + sizes[i]; ++e)
        ASSERT_EQ(owner[size_t(e)]--, 1) << "param " << i << " element " << e;
    for (int c : owner)
      ASSERT_EQ(c, 0) << "a padding element belongs to a piece";
  }
}

} // namespace
