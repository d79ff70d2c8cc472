//===- LossOptimizerKernelsTest.cpp - cross entropy, vocab-parallel CE, AdamW, grad norm ===//
//
// Forward kernels against naive f64 references written here; cross_entropy_backward against
// central finite differences of loss_sum in f64 (norm-wise relative error <= 1e-6); the
// vocab-parallel pieces, combined as the all-reduces would combine them, against the unsharded
// kernel (1e-12 in f64: only the summation order differs); AdamW against a torch.optim.AdamW-style
// f64 reference; f32 and bf16 storage against f64 on the same (rounded) inputs.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include <cmath>
#include <tuple>
#include <limits>

using namespace trainc::rt;
using namespace trainc::rt::test;

namespace {

constexpr double kFdTol = 1e-6;

HostTensor scalarOf(DType t, double v) {
  HostTensor s(t, {});
  s.set(0, v);
  return s;
}

HostTensor maskOf(DType t, const std::vector<double> &m) {
  HostTensor r(t, {int64_t(m.size())});
  for (size_t i = 0; i < m.size(); ++i)
    r.set(int64_t(i), m[i]);
  return r;
}

/// Columns [c0, c1) of a [N, V] tensor (same dtype).
HostTensor columns(const HostTensor &x, int64_t c0, int64_t c1) {
  int64_t N = x.shape[0], V = x.shape[1];
  HostTensor r(x.dtype, {N, c1 - c0});
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = c0; j < c1; ++j)
      r.set(i * (c1 - c0) + j - c0, x.get(i * V + j));
  return r;
}

/// Writes `part` into columns [c0, c0 + width) of x.
void setColumns(HostTensor &x, const HostTensor &part, int64_t c0) {
  int64_t N = x.shape[0], V = x.shape[1], W = part.shape[1];
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < W; ++j)
      x.set(i * V + c0 + j, part.get(i * W + j));
}

std::vector<AttrArg> vocabAttrs(int64_t vocabStart, int64_t validVocab) {
  return {AttrArg("vocab_start", vocabStart), AttrArg("valid_vocab", validVocab)};
}

//===----------------------------------------------------------------------===//
// Naive f64 reference of cross entropy (global ids 0..V-1, ids >= validVocab are padding).
//===----------------------------------------------------------------------===//

struct CeRef {
  double lossSum = 0, tokens = 0;
  HostTensor lse, dlogits; // dlogits for dloss
};

CeRef crossEntropyRef(const HostTensor &logits, const HostTensor &labels, const HostTensor &mask,
                      int64_t validVocab, double dloss) {
  int64_t N = logits.shape[0], V = logits.shape[1];
  int64_t nv = validVocab < 0 ? V : validVocab;
  CeRef r;
  r.lse = HostTensor(DType::F64, {N});
  r.dlogits = HostTensor(DType::F64, {N, V});
  for (int64_t i = 0; i < N; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < nv; ++j)
      m = std::max(m, logits.get(i * V + j));
    double s = 0;
    for (int64_t j = 0; j < nv; ++j)
      s += std::exp(logits.get(i * V + j) - m);
    double lse = m + std::log(s);
    r.lse.set(i, lse);
    int64_t label = int64_t(labels.get(i));
    bool inRange = label >= 0 && label < nv;
    double mk = mask.get(i);
    r.tokens += mk;
    if (mk != 0)
      r.lossSum += mk * (lse - (inRange ? logits.get(i * V + label) : 0.0));
    for (int64_t j = 0; j < nv; ++j) {
      double p = std::exp(logits.get(i * V + j) - lse);
      r.dlogits.set(i * V + j, dloss * mk * (p - (j == label ? 1.0 : 0.0)));
    }
  }
  return r;
}

/// The common test problem: N = 9 rows, V = 257 columns of which 250 are real vocabulary, a ragged
/// mask (zeros and a 0.5), padding columns set large (they would dominate the softmax if they were
/// not excluded), one masked-out row with label -100 and one masked-in row whose label is a padding
/// id (documented behaviour: that row contributes its lse only).
struct CeProblem {
  int64_t N = 9, V = 257, validVocab = 250;
  HostTensor logits, labels, mask;
  explicit CeProblem(DType maskType = DType::F64) {
    logits = randomTensor(DType::F64, {N, V}, 21, -4, 4);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = validVocab; j < V; ++j)
        logits.set(i * V + j, 30.0 + double(j % 5));
    labels = randomInts(DType::I32, {N}, 22, 0, validVocab);
    labels.set(2, -100); // masked out below
    labels.set(5, 252);  // a padding id on a masked-in row
    mask = maskOf(maskType, {1, 1, 0, 1, 0.5, 1, 0, 1, 1});
  }
};

//===----------------------------------------------------------------------===//
// cross_entropy / cross_entropy_backward
//===----------------------------------------------------------------------===//

TEST(CrossEntropy, ForwardMatchesReference) {
  CeProblem p;
  HostTensor loss(DType::F64, {}), tokens(DType::F64, {}), lse(DType::F64, {p.N});
  runKernel("cross_entropy", {&p.logits, &p.labels, &p.mask}, {&loss, &tokens, &lse},
            vocabAttrs(0, p.validVocab));
  CeRef ref = crossEntropyRef(p.logits, p.labels, p.mask, p.validVocab, 1.0);
  EXPECT_NEAR(loss.get(0), ref.lossSum, 1e-12 * std::abs(ref.lossSum));
  EXPECT_EQ(tokens.get(0), 6.5);
  EXPECT_LT(relError(lse, ref.lse), 1e-14);
  // The lse of a masked-out row is still written; padding was excluded (lse would be ~34 otherwise).
  EXPECT_NEAR(lse.get(2), ref.lse.get(2), 1e-13);
  EXPECT_LT(lse.get(2), 10.0);

  // valid_vocab = -1: every column is vocabulary (the large "padding" logits now dominate).
  HostTensor lseAll(DType::F64, {p.N});
  runKernel("cross_entropy", {&p.logits, &p.labels, &p.mask}, {&loss, &tokens, &lseAll});
  CeRef refAll = crossEntropyRef(p.logits, p.labels, p.mask, -1, 1.0);
  EXPECT_NEAR(loss.get(0), refAll.lossSum, 1e-12 * std::abs(refAll.lossSum));
  EXPECT_LT(relError(lseAll, refAll.lse), 1e-14);
  EXPECT_GT(lseAll.get(0), 30.0);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  CeProblem p;
  const double dloss = 0.7;
  auto attrs = vocabAttrs(0, p.validVocab);
  ForwardFn fwd = [&](std::vector<HostTensor> &x) {
    HostTensor loss(DType::F64, {}), tokens(DType::F64, {}), lse(DType::F64, {p.N});
    runKernel("cross_entropy", {&x[0], &p.labels, &p.mask}, {&loss, &tokens, &lse}, attrs);
    return std::vector<HostTensor>{loss};
  };
  HostTensor fd = finiteDifference(fwd, {p.logits}, {scalarOf(DType::F64, dloss)}, 0);

  HostTensor loss(DType::F64, {}), tokens(DType::F64, {}), lse(DType::F64, {p.N});
  runKernel("cross_entropy", {&p.logits, &p.labels, &p.mask}, {&loss, &tokens, &lse}, attrs);
  HostTensor dl = scalarOf(DType::F64, dloss), dx(DType::F64, p.logits.shape);
  runKernel("cross_entropy_backward", {&p.logits, &p.labels, &p.mask, &lse, &dl}, {&dx}, attrs);
  EXPECT_LT(relError(dx, fd), kFdTol);
  CeRef ref = crossEntropyRef(p.logits, p.labels, p.mask, p.validVocab, dloss);
  EXPECT_LT(relError(dx, ref.dlogits), 1e-14);
  for (int64_t i = 0; i < p.N; ++i)
    for (int64_t j = 0; j < p.V; ++j)
      if (j >= p.validVocab || p.mask.get(i) == 0) {
        EXPECT_EQ(dx.get(i * p.V + j), 0.0) << "row " << i << " column " << j;
      }

  // In place of the logits (as Megatron computes it in the softmax buffer): the same result.
  HostTensor inPlace = p.logits;
  runKernel("cross_entropy_backward", {&inPlace, &p.labels, &p.mask, &lse, &dl}, {&inPlace},
            attrs);
  EXPECT_EQ(inPlace.bytes, dx.bytes);
}

TEST(CrossEntropy, LowPrecisionAgreesWithF64) {
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    CeProblem p(DType::F32);
    HostTensor lo = p.logits.as(t);
    HostTensor x64 = lo.as(DType::F64); // the same (rounded) values
    auto attrs = vocabAttrs(0, p.validVocab);
    HostTensor loss(DType::F32, {}), tokens(DType::F32, {}), lse(DType::F32, {p.N});
    runKernel("cross_entropy", {&lo, &p.labels, &p.mask}, {&loss, &tokens, &lse}, attrs);
    CeRef ref = crossEntropyRef(x64, p.labels, p.mask, p.validVocab, 0.5);
    EXPECT_NEAR(loss.get(0), ref.lossSum, 1e-5 * std::abs(ref.lossSum));
    EXPECT_EQ(tokens.get(0), 6.5);
    EXPECT_LT(relError(lse, ref.lse), 1e-6); // f32 statistics: a few ulps
    HostTensor dl = scalarOf(DType::F32, 0.5), dx(t, p.logits.shape);
    runKernel("cross_entropy_backward", {&lo, &p.labels, &p.mask, &lse, &dl}, {&dx}, attrs);
    // f32: ~1e-6 from the f32 lse and exp; bf16 storage of dlogits: 8-bit mantissa (2^-9).
    EXPECT_LT(relError(dx, ref.dlogits), t == DType::F32 ? 1e-5 : 4e-3);
  }
}

// Rows wider than the kernels' 512-column chunks (three chunks and a tail, padding columns in the
// last): the f32 and bf16 loops (vectorised exp, 16 partial sums) against the f64 reference, and
// the backward in place of the logits equal to out of place.
TEST(CrossEntropy, ChunkedLowPrecisionRowsAgreeWithF64AndRunInPlace) {
  const int64_t N = 5, V = 1700, validVocab = 1690;
  HostTensor logits = randomTensor(DType::F64, {N, V}, 31, -6, 6);
  HostTensor labels = randomInts(DType::I32, {N}, 32, 0, validVocab);
  labels.set(1, 1600); // the target in the tail chunk
  labels.set(2, 511);  // the last column of the first chunk
  HostTensor mask = maskOf(DType::F32, {1, 1, 1, 0, 0.5});
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    HostTensor lo = logits.as(t);
    HostTensor x64 = lo.as(DType::F64);
    auto attrs = vocabAttrs(0, validVocab);
    HostTensor loss(DType::F32, {}), tokens(DType::F32, {}), lse(DType::F32, {N});
    runKernel("cross_entropy", {&lo, &labels, &mask}, {&loss, &tokens, &lse}, attrs);
    CeRef ref = crossEntropyRef(x64, labels, mask, validVocab, 0.25);
    EXPECT_NEAR(loss.get(0), ref.lossSum, 1e-5 * std::abs(ref.lossSum));
    EXPECT_LT(relError(lse, ref.lse), 1e-6);
    HostTensor dl = scalarOf(DType::F32, 0.25), dx(t, lo.shape);
    runKernel("cross_entropy_backward", {&lo, &labels, &mask, &lse, &dl}, {&dx}, attrs);
    EXPECT_LT(relError(dx, ref.dlogits), t == DType::F32 ? 1e-5 : 4e-3);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = validVocab; j < V; ++j)
        EXPECT_EQ(dx.get(i * V + j), 0.0);
    HostTensor inPlace = lo;
    runKernel("cross_entropy_backward", {&inPlace, &labels, &mask, &lse, &dl}, {&inPlace}, attrs);
    EXPECT_EQ(inPlace.bytes, dx.bytes);
  }
}

//===----------------------------------------------------------------------===//
// Vocab-parallel pieces, combined as the all-reduces combine them
//===----------------------------------------------------------------------===//

struct ShardCase {
  int64_t V, validVocab;
  int shards;
};

void PrintTo(const ShardCase &c, std::ostream *os) {
  *os << "V=" << c.V << " valid_vocab=" << c.validVocab << " shards=" << c.shards;
}

class VocabParallelTest : public ::testing::TestWithParam<ShardCase> {};

TEST_P(VocabParallelTest, ShardedPiecesEqualUnshardedCrossEntropy) {
  ShardCase sc = GetParam();
  const int64_t N = 9, W = sc.V / sc.shards;
  ASSERT_EQ(W * sc.shards, sc.V);
  int64_t nv = sc.validVocab < 0 ? sc.V : sc.validVocab;
  HostTensor logits = randomTensor(DType::F64, {N, sc.V}, 31, -5, 5);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = nv; j < sc.V; ++j)
      logits.set(i * sc.V + j, 40.0);
  HostTensor labels = randomInts(DType::I32, {N}, 32, 0, nv);
  labels.set(1, -100);               // masked out
  labels.set(4, int32_t(sc.V - 1));  // a padding id (or the last id) on a masked-in row
  labels.set(6, int32_t(nv + 1000)); // beyond every shard, masked in: lse only everywhere
  HostTensor mask = maskOf(DType::F64, {1, 0, 1, 1, 1, 0.25, 1, 0, 1});

  // Unsharded.
  HostTensor loss(DType::F64, {}), tokens(DType::F64, {}), lse(DType::F64, {N});
  runKernel("cross_entropy", {&logits, &labels, &mask}, {&loss, &tokens, &lse},
            vocabAttrs(0, sc.validVocab));
  CeRef ref = crossEntropyRef(logits, labels, mask, sc.validVocab, 1.0);
  EXPECT_NEAR(loss.get(0), ref.lossSum, 1e-12 * std::abs(ref.lossSum));

  // Per shard: local max, then all-reduce MAX.
  std::vector<HostTensor> parts;
  HostTensor gmax(DType::F64, {N});
  for (int64_t i = 0; i < N; ++i)
    gmax.set(i, -INFINITY);
  std::vector<HostTensor> localMax;
  for (int k = 0; k < sc.shards; ++k) {
    parts.push_back(columns(logits, k * W, (k + 1) * W));
    HostTensor mx(DType::F64, {N});
    runKernel("ce_local_max", {&parts[k]}, {&mx}, vocabAttrs(k * W, sc.validVocab));
    bool anyValid = k * W < nv;
    for (int64_t i = 0; i < N; ++i) {
      if (!anyValid) { // a shard of padding only: the lowest finite value, never -inf
        EXPECT_EQ(mx.get(i), std::numeric_limits<double>::lowest());
      }
      gmax.set(i, std::max(gmax.get(i), mx.get(i)));
    }
    localMax.push_back(mx);
  }
  // sumexp with the global max and target logits, then all-reduce SUM.
  HostTensor gsum(DType::F64, {N}), gtarget(DType::F64, {N}), rescaled(DType::F64, {N});
  for (int k = 0; k < sc.shards; ++k) {
    auto attrs = vocabAttrs(k * W, sc.validVocab);
    HostTensor se(DType::F64, {N}), tg(DType::F64, {N}), seLocal(DType::F64, {N});
    runKernel("ce_local_sumexp", {&parts[k], &gmax}, {&se}, attrs);
    runKernel("ce_target_logit", {&parts[k], &labels}, {&tg}, attrs);
    // The alternative protocol (local max, rescaled by exp(local - global) before the sum).
    runKernel("ce_local_sumexp", {&parts[k], &localMax[k]}, {&seLocal}, attrs);
    for (int64_t i = 0; i < N; ++i) {
      gsum.set(i, gsum.get(i) + se.get(i));
      gtarget.set(i, gtarget.get(i) + tg.get(i));
      rescaled.set(i, rescaled.get(i) +
                          seLocal.get(i) * std::exp(localMax[k].get(i) - gmax.get(i)));
    }
  }
  EXPECT_LT(relError(rescaled, gsum), 1e-13);
  EXPECT_EQ(gtarget.get(1), 0.0);
  EXPECT_EQ(gtarget.get(6), 0.0);

  HostTensor sLoss(DType::F64, {}), sTokens(DType::F64, {}), sLse(DType::F64, {N});
  runKernel("ce_combine", {&gmax, &gsum, &gtarget, &mask}, {&sLoss, &sTokens, &sLse});
  EXPECT_NEAR(sLoss.get(0), loss.get(0), 1e-12 * std::abs(loss.get(0)));
  EXPECT_EQ(sTokens.get(0), tokens.get(0));
  EXPECT_LT(relError(sLse, lse), 1e-12);

  // Per-shard backward with the global lse and the shard's vocab_start, concatenated.
  HostTensor dl = scalarOf(DType::F64, 1.3), full(DType::F64, {N, sc.V}),
             cat(DType::F64, {N, sc.V});
  runKernel("cross_entropy_backward", {&logits, &labels, &mask, &lse, &dl}, {&full},
            vocabAttrs(0, sc.validVocab));
  for (int k = 0; k < sc.shards; ++k) {
    HostTensor d(DType::F64, {N, W});
    runKernel("cross_entropy_backward", {&parts[k], &labels, &mask, &sLse, &dl}, {&d},
              vocabAttrs(k * W, sc.validVocab));
    setColumns(cat, d, k * W);
  }
  EXPECT_LT(relError(cat, full), 1e-12);
  CeRef ref13 = crossEntropyRef(logits, labels, mask, sc.validVocab, 1.3);
  EXPECT_LT(relError(full, ref13.dlogits), 1e-14);

  // f32: the pieces agree with unsharded f32 cross_entropy to f32 accuracy.
  HostTensor l32 = logits.as(DType::F32), m32 = mask.as(DType::F32);
  HostTensor loss32(DType::F32, {}), tok32(DType::F32, {}), lse32(DType::F32, {N});
  runKernel("cross_entropy", {&l32, &labels, &m32}, {&loss32, &tok32, &lse32},
            vocabAttrs(0, sc.validVocab));
  HostTensor gmax32(DType::F32, {N}), gsum32(DType::F32, {N}), gt32(DType::F32, {N});
  for (int64_t i = 0; i < N; ++i)
    gmax32.set(i, -INFINITY);
  for (int k = 0; k < sc.shards; ++k) {
    HostTensor part = columns(l32, k * W, (k + 1) * W), mx(DType::F32, {N});
    runKernel("ce_local_max", {&part}, {&mx}, vocabAttrs(k * W, sc.validVocab));
    for (int64_t i = 0; i < N; ++i)
      gmax32.set(i, std::max(gmax32.get(i), mx.get(i)));
  }
  for (int k = 0; k < sc.shards; ++k) {
    HostTensor part = columns(l32, k * W, (k + 1) * W), se(DType::F32, {N}), tg(DType::F32, {N});
    runKernel("ce_local_sumexp", {&part, &gmax32}, {&se}, vocabAttrs(k * W, sc.validVocab));
    runKernel("ce_target_logit", {&part, &labels}, {&tg}, vocabAttrs(k * W, sc.validVocab));
    for (int64_t i = 0; i < N; ++i) {
      gsum32.set(i, gsum32.get(i) + se.get(i));
      gt32.set(i, gt32.get(i) + tg.get(i));
    }
  }
  HostTensor sl32(DType::F32, {}), st32(DType::F32, {}), slse32(DType::F32, {N});
  runKernel("ce_combine", {&gmax32, &gsum32, &gt32, &m32}, {&sl32, &st32, &slse32});
  EXPECT_NEAR(sl32.get(0), loss32.get(0), 1e-5 * std::abs(loss32.get(0)));
  EXPECT_LT(relError(slse32, lse32), 1e-6);
  EXPECT_NEAR(sl32.get(0), loss.get(0), 1e-5 * std::abs(loss.get(0)));
}

INSTANTIATE_TEST_SUITE_P(Shards, VocabParallelTest,
                         ::testing::Values(ShardCase{258, 251, 2}, ShardCase{258, 251, 3},
                                           ShardCase{258, -1, 3},
                                           // The last of 3 shards is all padding.
                                           ShardCase{12, 7, 3}));

TEST(CrossEntropy, VocabStartShiftsLabelsAndPadding) {
  // A single shard holding global ids 100..104 of a vocabulary of 103: columns 3, 4 are padding.
  HostTensor x = randomTensor(DType::F64, {2, 5}, 41, -1, 1);
  HostTensor labels(DType::I32, {2});
  labels.set(0, 101);
  labels.set(1, 103); // padding id: not a target on any shard
  HostTensor tg(DType::F64, {2}), mx(DType::F64, {2});
  runKernel("ce_target_logit", {&x, &labels}, {&tg}, vocabAttrs(100, 103));
  EXPECT_EQ(tg.get(0), x.get(1));
  EXPECT_EQ(tg.get(1), 0.0);
  runKernel("ce_local_max", {&x}, {&mx}, vocabAttrs(100, 103));
  EXPECT_EQ(mx.get(0), std::max({x.get(0), x.get(1), x.get(2)}));
  EXPECT_EQ(mx.get(1), std::max({x.get(5), x.get(6), x.get(7)}));
  // A negative vocab_start: columns of negative global ids are not vocabulary either.
  labels.set(0, -1);
  labels.set(1, 2);
  runKernel("ce_target_logit", {&x, &labels}, {&tg}, vocabAttrs(-2, -1));
  EXPECT_EQ(tg.get(0), 0.0);
  EXPECT_EQ(tg.get(1), x.get(5 + 4));
  runKernel("ce_local_max", {&x}, {&mx}, vocabAttrs(-2, -1));
  EXPECT_EQ(mx.get(0), std::max({x.get(2), x.get(3), x.get(4)}));
}

TEST(CrossEntropy, MaskedOutRowsContributeNothingEvenWhenNonFinite) {
  // Row 1 is masked out and its logits are NaN (e.g. garbage in a padded position): loss_sum,
  // num_tokens and the other rows' gradients are unaffected and its gradient row is exactly 0.
  const int64_t N = 3, V = 6;
  HostTensor x = randomTensor(DType::F64, {N, V}, 45, -2, 2);
  for (int64_t j = 0; j < V; ++j)
    x.set(V + j, NAN);
  HostTensor labels = randomInts(DType::I32, {N}, 46, 0, V), mask = maskOf(DType::F64, {1, 0, 1});
  HostTensor loss(DType::F64, {}), tokens(DType::F64, {}), lse(DType::F64, {N});
  runKernel("cross_entropy", {&x, &labels, &mask}, {&loss, &tokens, &lse});
  HostTensor x2 = columns(x, 0, V);
  for (int64_t j = 0; j < V; ++j)
    x2.set(V + j, 0.0);
  CeRef ref = crossEntropyRef(x2, labels, mask, -1, 2.0);
  EXPECT_NEAR(loss.get(0), ref.lossSum, 1e-13 * std::abs(ref.lossSum));
  EXPECT_EQ(tokens.get(0), 2.0);
  HostTensor dl = scalarOf(DType::F64, 2.0), dx(DType::F64, {N, V});
  runKernel("cross_entropy_backward", {&x, &labels, &mask, &lse, &dl}, {&dx});
  EXPECT_LT(relError(dx, ref.dlogits), 1e-14);
  for (int64_t j = 0; j < V; ++j)
    EXPECT_EQ(dx.get(V + j), 0.0);
  // ce_combine: a masked-out row whose lse is -inf (sumexp 0) or NaN does not poison the sum.
  HostTensor mx = maskOf(DType::F64, {1, 0, 2}), se = maskOf(DType::F64, {2, 0, 1}),
             tg = maskOf(DType::F64, {0.5, 7, 1.5}), m3 = maskOf(DType::F64, {1, 0, 0.5});
  HostTensor cl(DType::F64, {}), ct(DType::F64, {}), clse(DType::F64, {N});
  runKernel("ce_combine", {&mx, &se, &tg, &m3}, {&cl, &ct, &clse});
  EXPECT_DOUBLE_EQ(cl.get(0), (1 + std::log(2.0) - 0.5) + 0.5 * (2 - 1.5));
  EXPECT_EQ(ct.get(0), 1.5);
  EXPECT_TRUE(std::isinf(clse.get(1)) && clse.get(1) < 0);
  EXPECT_EQ(clse.get(2), 2.0);
}

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

struct AdamState {
  HostTensor param, expAvg, expAvgSq;
};

/// torch.optim.AdamW's _single_tensor_adamw, written out in f64.
void adamwRef(AdamState &s, const HostTensor &grad, double lr, double wd, int step,
              double gradScale, double b1, double b2, double eps, bool decay) {
  double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
  for (int64_t i = 0; i < s.param.numel(); ++i) {
    double g = grad.get(i) * gradScale, p = s.param.get(i);
    if (decay)
      p *= 1 - lr * wd;
    double m = s.expAvg.get(i) + (1 - b1) * (g - s.expAvg.get(i)); // lerp
    double v = s.expAvgSq.get(i) * b2 + (1 - b2) * g * g;
    double denom = std::sqrt(v) / std::sqrt(bc2) + eps;
    p -= (lr / bc1) * m / denom;
    s.param.set(i, p);
    s.expAvg.set(i, m);
    s.expAvgSq.set(i, v);
  }
}

class AdamWTest : public ::testing::TestWithParam<int> {};

TEST_P(AdamWTest, ThreeStepsMatchReference) {
  const int decay = GetParam();
  const double b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  const double lrs[3] = {1e-3, 2e-3, 1.5e-3}, scales[3] = {1.0, 0.5, 0.8};
  std::vector<AttrArg> attrs = {AttrArg("beta1", b1), AttrArg("beta2", b2), AttrArg("eps", eps),
                                AttrArg("decay", decay)};
  for (DType t : {DType::F64, DType::F32}) {
    SCOPED_TRACE(dtypeName(t));
    const int64_t n = 37;
    AdamState ref{randomTensor(DType::F64, {n}, 51).as(t).as(DType::F64),
                  HostTensor(DType::F64, {n}), HostTensor(DType::F64, {n})};
    AdamState dev{ref.param.as(t), HostTensor(t, {n}), HostTensor(t, {n})};
    for (int step = 1; step <= 3; ++step) {
      HostTensor grad = randomTensor(DType::F64, {n}, 60 + step).as(t);
      HostTensor lr = scalarOf(t, lrs[step - 1]), wdT = scalarOf(t, wd),
                 stepT = scalarOf(t, step), gs = scalarOf(t, scales[step - 1]),
                 upd = scalarOf(t, 1);
      // The reference uses the scalars as the kernel sees them (rounded to t).
      adamwRef(ref, grad, lr.get(0), wdT.get(0), step, gs.get(0), b1, b2, eps, decay != 0);
      runKernel("adamw",
                {&dev.param, &grad, &dev.expAvg, &dev.expAvgSq, &lr, &wdT, &stepT, &gs, &upd},
                {&dev.param, &dev.expAvg, &dev.expAvgSq}, attrs);
      double tol = t == DType::F64 ? 1e-14 : 1e-6;
      EXPECT_LT(relError(dev.param, ref.param), tol) << "step " << step;
      EXPECT_LT(relError(dev.expAvg, ref.expAvg), tol) << "step " << step;
      EXPECT_LT(relError(dev.expAvgSq, ref.expAvgSq), tol) << "step " << step;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Decay, AdamWTest, ::testing::Values(1, 0));

// The vectorised f32 update (omp simd, AVX2 clone) gives the bits of the documented scalar
// formula evaluated element by element in f32, in place, for a length that is no multiple of the
// vector width or of the thread blocks, with decay on and off. volatile keeps the reference
// loop scalar.
TEST(AdamW, F32VectorisedEqualsTheScalarFormulaBitwise) {
  const double b1d = 0.9, b2d = 0.95, epsd = 1e-8;
  for (int decay : {1, 0}) {
    SCOPED_TRACE(decay);
    const int64_t n = 70001;
    HostTensor p = randomTensor(DType::F32, {n}, 301), g = randomTensor(DType::F32, {n}, 302),
               m = randomTensor(DType::F32, {n}, 303, -1e-2, 1e-2),
               v = randomTensor(DType::F32, {n}, 304, 0, 1e-4);
    HostTensor lr = scalarOf(DType::F32, 1e-3), wd = scalarOf(DType::F32, 0.1),
               step = scalarOf(DType::F32, 4), gs = scalarOf(DType::F32, 0.7),
               upd = scalarOf(DType::F32, 1);
    std::vector<float> rp(static_cast<size_t>(n)), rm(rp.size()), rv(rp.size());
    const float lrf = float(lr.get(0)), wdf = float(wd.get(0)), gsf = float(gs.get(0));
    const float b1 = float(b1d), b2 = float(b2d), eps = float(epsd);
    const float omb1 = float(1.0 - b1d), omb2 = float(1.0 - b2d);
    const float bc1 = float(1.0 - std::pow(b1d, 4.0)), bc2 = float(1.0 - std::pow(b2d, 4.0));
    const float decayFactor = decay ? 1.0f - lrf * wdf : 1.0f;
    for (int64_t i = 0; i < n; ++i) {
      volatile float gi = float(g.get(i)) * gsf;
      volatile float mi = b1 * float(m.get(i)) + omb1 * gi;
      volatile float vi = b2 * float(v.get(i)) + omb2 * gi * gi;
      volatile float mhat = mi / bc1, vhat = vi / bc2;
      volatile float pi = float(p.get(i)) * decayFactor;
      pi = pi - lrf * mhat / (std::sqrt(float(vhat)) + eps);
      rp[size_t(i)] = pi;
      rm[size_t(i)] = mi;
      rv[size_t(i)] = vi;
    }
    runKernel("adamw", {&p, &g, &m, &v, &lr, &wd, &step, &gs, &upd}, {&p, &m, &v},
              {AttrArg("beta1", b1d), AttrArg("beta2", b2d), AttrArg("eps", epsd),
               AttrArg("decay", decay)});
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(float(p.get(i)), rp[size_t(i)]) << i;
      ASSERT_EQ(float(m.get(i)), rm[size_t(i)]) << i;
      ASSERT_EQ(float(v.get(i)), rv[size_t(i)]) << i;
    }
  }
}

TEST(AdamW, DecayFlagChangesOnlyTheDecoupledDecay) {
  // One step from m = v = 0: the Adam update is lr * sign(g) / (1 + eps/|g|) either way.
  const int64_t n = 11;
  HostTensor param = randomTensor(DType::F64, {n}, 71), grad = randomTensor(DType::F64, {n}, 72);
  HostTensor lr = scalarOf(DType::F64, 0.01), wd = scalarOf(DType::F64, 0.5),
             step = scalarOf(DType::F64, 1), gs = scalarOf(DType::F64, 1),
             upd = scalarOf(DType::F64, 1);
  HostTensor results[2];
  for (int decay = 0; decay < 2; ++decay) {
    HostTensor p = param, m(DType::F64, {n}), v(DType::F64, {n});
    runKernel("adamw", {&p, &grad, &m, &v, &lr, &wd, &step, &gs, &upd}, {&p, &m, &v},
              {AttrArg("decay", decay)});
    results[decay] = p;
  }
  for (int64_t i = 0; i < n; ++i) {
    double adam = 0.01 * grad.get(i) / (std::abs(grad.get(i)) + 1e-8);
    EXPECT_NEAR(results[0].get(i), param.get(i) - adam, 1e-15);
    EXPECT_NEAR(results[1].get(i), param.get(i) * (1 - 0.005) - adam, 1e-15);
  }
}

TEST(AdamW, UpdateZeroLeavesStateBitwiseUnchanged) {
  for (DType t : {DType::F64, DType::F32}) {
    SCOPED_TRACE(dtypeName(t));
    const int64_t n = 29;
    HostTensor p = randomTensor(t, {n}, 81), m = randomTensor(t, {n}, 82, -0.1, 0.1),
               v = randomTensor(t, {n}, 83, 0, 0.01), grad = randomTensor(t, {n}, 84);
    grad.set(3, INFINITY); // the reason a step is skipped
    grad.set(7, NAN);
    HostTensor lr = scalarOf(t, 1e-3), wd = scalarOf(t, 0.1), step = scalarOf(t, 5),
               gs = scalarOf(t, 1), upd = scalarOf(t, 0);
    const HostTensor p0 = p, m0 = m, v0 = v;
    // In place.
    runKernel("adamw", {&p, &grad, &m, &v, &lr, &wd, &step, &gs, &upd}, {&p, &m, &v});
    EXPECT_EQ(p.bytes, p0.bytes);
    EXPECT_EQ(m.bytes, m0.bytes);
    EXPECT_EQ(v.bytes, v0.bytes);
    // Out of place: the outputs become copies of the inputs.
    HostTensor po = randomTensor(t, {n}, 85), mo = randomTensor(t, {n}, 86),
               vo = randomTensor(t, {n}, 87);
    runKernel("adamw", {&p, &grad, &m, &v, &lr, &wd, &step, &gs, &upd}, {&po, &mo, &vo});
    EXPECT_EQ(po.bytes, p0.bytes);
    EXPECT_EQ(mo.bytes, m0.bytes);
    EXPECT_EQ(vo.bytes, v0.bytes);
    EXPECT_EQ(p.bytes, p0.bytes);
    // update = 1 with finite gradients does change the state (the predicate is what held it).
    grad.set(3, 0.5);
    grad.set(7, -0.5);
    HostTensor one = scalarOf(t, 1);
    runKernel("adamw", {&p, &grad, &m, &v, &lr, &wd, &step, &gs, &one}, {&p, &m, &v});
    EXPECT_NE(p.bytes, p0.bytes);
  }
}

TEST(AdamW, SegmentsUpdateOnlyTheirRangesWithTheirOwnDecay) {
  // The distributed optimizer's call on one bucket shard: pieces of two parameters (decay and no
  // decay) and padding. Each piece must equal a separate call on that range alone, bitwise, and
  // the elements outside every segment must keep their values.
  for (DType t : {DType::F64, DType::F32}) {
    SCOPED_TRACE(dtypeName(t));
    const int64_t n = 20;
    HostTensor p = randomTensor(t, {n}, 101), m = randomTensor(t, {n}, 102, -0.1, 0.1),
               v = randomTensor(t, {n}, 103, 0, 0.01), grad = randomTensor(t, {n}, 104);
    HostTensor lr = scalarOf(t, 1e-2), wd = scalarOf(t, 0.1), step = scalarOf(t, 3),
               gs = scalarOf(t, 0.5), upd = scalarOf(t, 1);
    const HostTensor p0 = p, m0 = m, v0 = v;
    runKernel("adamw", {&p, &grad, &m, &v, &lr, &wd, &step, &gs, &upd}, {&p, &m, &v},
              {AttrArg("segments", std::vector<int64_t>{2, 9, 1, 9, 16, 0})});
    auto slice = [&](const HostTensor &x, int64_t b, int64_t e) {
      HostTensor y(t, {e - b});
      for (int64_t i = b; i < e; ++i)
        y.set(i - b, x.get(i));
      return y;
    };
    for (auto [b, e, decay] : {std::tuple<int64_t, int64_t, int>{2, 9, 1}, {9, 16, 0}}) {
      HostTensor ps = slice(p0, b, e), ms = slice(m0, b, e), vs = slice(v0, b, e),
                 gsl = slice(grad, b, e);
      runKernel("adamw", {&ps, &gsl, &ms, &vs, &lr, &wd, &step, &gs, &upd}, {&ps, &ms, &vs},
                {AttrArg("decay", decay)});
      EXPECT_EQ(slice(p, b, e).bytes, ps.bytes) << "segment [" << b << ", " << e << ")";
      EXPECT_EQ(slice(m, b, e).bytes, ms.bytes);
      EXPECT_EQ(slice(v, b, e).bytes, vs.bytes);
    }
    for (int64_t i : {0, 1, 16, 17, 18, 19}) {
      EXPECT_EQ(p.get(i), p0.get(i)) << "element " << i << " is outside every segment";
      EXPECT_EQ(m.get(i), m0.get(i));
      EXPECT_EQ(v.get(i), v0.get(i));
    }
    // Out of place: the untouched elements are copies of the inputs.
    HostTensor po = randomTensor(t, {n}, 105), mo = randomTensor(t, {n}, 106),
               vo = randomTensor(t, {n}, 107);
    HostTensor pi = p0, mi = m0, vi = v0;
    runKernel("adamw", {&pi, &grad, &mi, &vi, &lr, &wd, &step, &gs, &upd}, {&po, &mo, &vo},
              {AttrArg("segments", std::vector<int64_t>{2, 9, 1, 9, 16, 0})});
    EXPECT_EQ(po.bytes, p.bytes);
    EXPECT_EQ(mo.bytes, m.bytes);
    EXPECT_EQ(vo.bytes, v.bytes);
  }
}

TEST(AdamW, BadSegmentsAreRejectedWithTheSegmentNamed) {
  const int64_t n = 10;
  HostTensor p(DType::F32, {n}), m(DType::F32, {n}), v(DType::F32, {n}), g(DType::F32, {n});
  HostTensor s = scalarOf(DType::F32, 1);
  auto check = [&](std::vector<int64_t> seg) {
    return verifyKernel("adamw", {&p, &g, &m, &v, &s, &s, &s, &s, &s}, {&p, &m, &v},
                        {AttrArg("segments", std::move(seg))});
  };
  EXPECT_EQ(check({0, 4, 1, 4, 10, 0}), "");
  EXPECT_NE(check({0, 4}).find("2 values, expected (begin, end, decay) triples"),
            std::string::npos);
  EXPECT_NE(check({0, 4, 1, 3, 6, 0}).find("segment 1 [3, 6) is reversed, out of order or "
                                            "outside the 10 elements"),
            std::string::npos)
      << check({0, 4, 1, 3, 6, 0});
  EXPECT_NE(check({0, 11, 1}).find("segment 0 [0, 11)"), std::string::npos);
  EXPECT_NE(check({6, 5, 1}).find("segment 0 [6, 5)"), std::string::npos);
  EXPECT_EQ(check({0, 0, 0}), ""); // a shard of padding only: nothing to update
}

TEST(AdamW, GradScaleMultipliesTheGradientAndOutOfPlaceMatchesInPlace) {
  const int64_t n = 23;
  HostTensor p = randomTensor(DType::F64, {n}, 91), m = randomTensor(DType::F64, {n}, 92),
             v = randomTensor(DType::F64, {n}, 93, 0, 1), grad = randomTensor(DType::F64, {n}, 94);
  HostTensor scaled = grad;
  for (int64_t i = 0; i < n; ++i)
    scaled.set(i, grad.get(i) * 0.25); // exact
  HostTensor lr = scalarOf(DType::F64, 1e-2), wd = scalarOf(DType::F64, 0.1),
             step = scalarOf(DType::F64, 2), upd = scalarOf(DType::F64, 1),
             quarter = scalarOf(DType::F64, 0.25), one = scalarOf(DType::F64, 1);
  HostTensor pa = p, ma = m, va = v, pb = p, mb = m, vb = v, pc = p, mc = m, vc = v;
  runKernel("adamw", {&pa, &grad, &ma, &va, &lr, &wd, &step, &quarter, &upd}, {&pa, &ma, &va});
  runKernel("adamw", {&pb, &scaled, &mb, &vb, &lr, &wd, &step, &one, &upd}, {&pb, &mb, &vb});
  runKernel("adamw", {&pc, &grad, &mc, &vc, &lr, &wd, &step, &one, &upd}, {&pc, &mc, &vc});
  EXPECT_EQ(pa.bytes, pb.bytes);
  EXPECT_EQ(ma.bytes, mb.bytes);
  EXPECT_EQ(va.bytes, vb.bytes);
  EXPECT_GT(relError(ma, mc), 1e-3); // the scale is not ignored
  // Out of place gives the in-place result and leaves the inputs alone.
  HostTensor po(DType::F64, {n}), mo(DType::F64, {n}), vo(DType::F64, {n});
  const HostTensor p0 = p;
  runKernel("adamw", {&p, &grad, &m, &v, &lr, &wd, &step, &quarter, &upd}, {&po, &mo, &vo});
  EXPECT_EQ(po.bytes, pa.bytes);
  EXPECT_EQ(mo.bytes, ma.bytes);
  EXPECT_EQ(vo.bytes, va.bytes);
  EXPECT_EQ(p.bytes, p0.bytes);
}

//===----------------------------------------------------------------------===//
// sum_squares, grad_norm_finalize
//===----------------------------------------------------------------------===//

TEST(SumSquares, AccumulatesInDoubleSequentially) {
  for (DType t : {DType::F64, DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    // 100003 elements: an f32 running sum would be off by many ulps; the double sum rounds once.
    HostTensor x = randomTensor(t, {100003}, 101, -1, 1);
    double ref = 0;
    for (int64_t i = 0; i < x.numel(); ++i)
      ref += x.get(i) * x.get(i);
    DType s = statsDType(t);
    HostTensor out(s, {});
    runKernel("sum_squares", {&x}, {&out});
    EXPECT_EQ(out.get(0), scalarOf(s, ref).get(0));
    // beta = 1 adds to the existing value.
    HostTensor acc = scalarOf(s, 2.5);
    runKernel("sum_squares", {&x}, {&acc}, {AttrArg("beta", 1.0)});
    EXPECT_EQ(acc.get(0), scalarOf(s, 2.5 + ref).get(0));
  }
  // A scalar and a matrix.
  HostTensor m(DType::F64, {2, 3});
  for (int i = 0; i < 6; ++i)
    m.set(i, i - 2.0); // 4 + 1 + 0 + 1 + 4 + 9
  HostTensor out(DType::F64, {});
  runKernel("sum_squares", {&m}, {&out});
  EXPECT_EQ(out.get(0), 19.0);
}

TEST(SumSquares, SegmentsSumOnlyFlaggedRanges) {
  // The distributed optimizer's bucket shard under tensor parallelism: only the ranges with a
  // non-zero flag, each summed as a whole tensor would be; (0, 0, 0) alone sums nothing.
  for (DType t : {DType::F64, DType::F32}) {
    SCOPED_TRACE(dtypeName(t));
    HostTensor x = randomTensor(t, {40}, 103, -1, 1);
    double ref = 0;
    for (int64_t i : {2, 3, 4, 5, 6, 20, 21, 22})
      ref += x.get(i) * x.get(i);
    DType s = statsDType(t);
    HostTensor out = scalarOf(s, 7.0);
    runKernel("sum_squares", {&x}, {&out},
              {AttrArg("segments", std::vector<int64_t>{2, 7, 1, 9, 16, 0, 20, 23, 1})});
    EXPECT_NEAR(out.get(0), ref, 1e-6 * ref);
    HostTensor none = scalarOf(s, 7.0);
    runKernel("sum_squares", {&x}, {&none}, {AttrArg("segments", std::vector<int64_t>{0, 0, 0})});
    EXPECT_EQ(none.get(0), 0.0);
    HostTensor acc = scalarOf(s, 2.0);
    runKernel("sum_squares", {&x}, {&acc},
              {AttrArg("beta", 1.0), AttrArg("segments", std::vector<int64_t>{0, 0, 0})});
    EXPECT_EQ(acc.get(0), 2.0);
  }
  HostTensor x(DType::F32, {8}), out(DType::F32, {});
  EXPECT_NE(verifyKernel("sum_squares", {&x}, {&out},
                         {AttrArg("segments", std::vector<int64_t>{4, 9, 1})}),
            "");
}

TEST(GradNormFinalize, NormClipCoefficientAndUpdatePredicate) {
  for (DType s : {DType::F64, DType::F32}) {
    SCOPED_TRACE(dtypeName(s));
    auto run = [&](double sumsq, double maxNorm, double &norm, double &scale, double &update) {
      HostTensor in = scalarOf(s, sumsq), n(s, {}), g(s, {}), u(s, {});
      runKernel("grad_norm_finalize", {&in}, {&n, &g, &u}, {AttrArg("max_norm", maxNorm)});
      norm = n.get(0);
      scale = g.get(0);
      update = u.get(0);
    };
    double norm, scale, update;
    run(16, 1.0, norm, scale, update); // clipped: 1 / (4 + 1e-6)
    EXPECT_EQ(norm, 4.0);
    EXPECT_EQ(scale, scalarOf(s, 1.0 / (4.0 + 1e-6)).get(0));
    EXPECT_EQ(update, 1.0);
    run(16, 10.0, norm, scale, update); // below max_norm: no clipping
    EXPECT_EQ(scale, 1.0);
    EXPECT_EQ(update, 1.0);
    run(16, 4.0, norm, scale, update); // max_norm == norm: coefficient just below 1
    EXPECT_EQ(scale, scalarOf(s, 4.0 / (4.0 + 1e-6)).get(0));
    run(16, 0.0, norm, scale, update); // max_norm 0: clipping disabled
    EXPECT_EQ(scale, 1.0);
    EXPECT_EQ(update, 1.0);
    run(0, 1.0, norm, scale, update); // zero gradients: finite, min(1, 1/1e-6) = 1
    EXPECT_EQ(norm, 0.0);
    EXPECT_EQ(scale, 1.0);
    EXPECT_EQ(update, 1.0);
    run(INFINITY, 1.0, norm, scale, update);
    EXPECT_TRUE(std::isinf(norm));
    EXPECT_EQ(scale, 1.0);
    EXPECT_EQ(update, 0.0);
    run(NAN, 1.0, norm, scale, update);
    EXPECT_TRUE(std::isnan(norm));
    EXPECT_EQ(scale, 1.0);
    EXPECT_EQ(update, 0.0);
  }
}

TEST(GradNormFinalize, EndToEndWithSumSquaresAndAdamW) {
  // Two gradient tensors -> sum_squares (beta 1 for the second) -> finalize -> AdamW uses the
  // clip coefficient: the step equals AdamW on the explicitly clipped gradient.
  HostTensor g1 = randomTensor(DType::F64, {13}, 111, -3, 3), g2 = randomTensor(DType::F64, {7}, 112, -3, 3);
  HostTensor sumsq(DType::F64, {}), norm(DType::F64, {}), gs(DType::F64, {}), upd(DType::F64, {});
  runKernel("sum_squares", {&g1}, {&sumsq});
  runKernel("sum_squares", {&g2}, {&sumsq}, {AttrArg("beta", 1.0)});
  runKernel("grad_norm_finalize", {&sumsq}, {&norm, &gs, &upd}, {AttrArg("max_norm", 1.0)});
  double ref = 0;
  for (int64_t i = 0; i < 13; ++i)
    ref += g1.get(i) * g1.get(i);
  for (int64_t i = 0; i < 7; ++i)
    ref += g2.get(i) * g2.get(i);
  EXPECT_NEAR(norm.get(0), std::sqrt(ref), 1e-14 * std::sqrt(ref));
  double coeff = 1.0 / (std::sqrt(ref) + 1e-6);
  ASSERT_LT(coeff, 1.0);
  EXPECT_NEAR(gs.get(0), coeff, 1e-15);
  AdamState ref1{randomTensor(DType::F64, {13}, 113), HostTensor(DType::F64, {13}),
                 HostTensor(DType::F64, {13})};
  AdamState dev{ref1.param, ref1.expAvg, ref1.expAvgSq};
  HostTensor lr = scalarOf(DType::F64, 1e-3), wd = scalarOf(DType::F64, 0.01),
             step = scalarOf(DType::F64, 1);
  runKernel("adamw", {&dev.param, &g1, &dev.expAvg, &dev.expAvgSq, &lr, &wd, &step, &gs, &upd},
            {&dev.param, &dev.expAvg, &dev.expAvgSq});
  adamwRef(ref1, g1, 1e-3, 0.01, 1, gs.get(0), 0.9, 0.999, 1e-8, true);
  EXPECT_LT(relError(dev.param, ref1.param), 1e-14);
  EXPECT_LT(relError(dev.expAvg, ref1.expAvg), 1e-14);
}

//===----------------------------------------------------------------------===//
// Signature errors
//===----------------------------------------------------------------------===//

TEST(LossOptimizerSignatures, ErrorsNameTheOperand) {
  HostTensor logits(DType::F32, {4, 10}), labels(DType::I32, {4}), mask64(DType::F64, {4});
  HostTensor loss(DType::F32, {}), tokens(DType::F32, {}), lse(DType::F32, {4});
  EXPECT_EQ(verifyKernel("cross_entropy", {&logits, &labels, &mask64}, {&loss, &tokens, &lse}),
            "input 2: dtype f64, expected f32");
  HostTensor labels5(DType::I32, {5}), mask(DType::F32, {4});
  EXPECT_EQ(verifyKernel("cross_entropy", {&logits, &labels5, &mask}, {&loss, &tokens, &lse}),
            "input 1: shape [5] has 5 elements, expected 4 (one label per row of the logits)");
  HostTensor labels64(DType::I64, {4});
  EXPECT_EQ(verifyKernel("ce_target_logit", {&logits, &labels64}, {&lse}),
            "input 1: dtype i64, expected i32");
  HostTensor lse5(DType::F32, {5});
  EXPECT_EQ(verifyKernel("ce_combine", {&lse, &lse, &lse, &mask}, {&loss, &tokens, &lse5}),
            "output 2: shape [5] has 5 elements, expected 4 (one per row)");

  HostTensor p(DType::BF16, {8}), s(DType::BF16, {});
  EXPECT_EQ(verifyKernel("adamw", {&p, &p, &p, &p, &s, &s, &s, &s, &s}, {&p, &p, &p}),
            "input 0: dtype bf16, expected f32 or f64 (master weights)");
  HostTensor q(DType::F32, {8}), sc(DType::F32, {});
  EXPECT_EQ(verifyKernel("adamw", {&q, &q, &q, &q, &sc, &sc, &sc, &sc, &sc}, {&q, &q, &q},
                         {AttrArg("beta2", 1.0)}),
            "attribute beta2 = 1.000000, expected 0 <= beta2 < 1");
  HostTensor out64(DType::F64, {});
  EXPECT_EQ(verifyKernel("sum_squares", {&q}, {&out64}), "output 0: dtype f64, expected f32");
  HostTensor vec(DType::F32, {2});
  EXPECT_EQ(verifyKernel("grad_norm_finalize", {&vec}, {&sc, &sc, &sc}),
            "input 0: shape [2], expected a scalar (one element)");
}

} // namespace

//===----------------------------------------------------------------------===//
// Threaded kernels: the same bits on 1 and 2 OpenMP threads (sizes above the threading thresholds)
//===----------------------------------------------------------------------===//

TEST(ThreadCount, SumSquaresCrossEntropyAdamWSameBitsOn1And2Threads) {
  for (DType t : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(dtypeName(t));
    DType s = statsDType(t);
    HostTensor x = randomTensor(t, {300001}, 201, -1, 1);
    HostTensor o1(s, {}), o2(s, {});
    withOmpThreads(1, [&] { runKernel("sum_squares", {&x}, {&o1}); });
    withOmpThreads(2, [&] { runKernel("sum_squares", {&x}, {&o2}); });
    EXPECT_EQ(o1.bytes, o2.bytes);
    double ref = 0;
    for (int64_t i = 0; i < x.numel(); ++i)
      ref += x.get(i) * x.get(i);
    EXPECT_EQ(o1.get(0), scalarOf(s, ref).get(0)); // the sequential double sum, rounded to S

    const int64_t N = 37, V = 5003;
    HostTensor logits = randomTensor(t, {N, V}, 202, -5, 5);
    HostTensor labels = randomInts(DType::I32, {N}, 203, 0, V);
    HostTensor mask = randomTensor(s, {N}, 204, 0, 1);
    mask.set(3, 0.0);
    HostTensor ls[2] = {HostTensor(s, {}), HostTensor(s, {})}, nt[2] = {HostTensor(s, {}), HostTensor(s, {})},
               lse[2] = {HostTensor(s, {N}), HostTensor(s, {N})},
               dx[2] = {HostTensor(t, {N, V}), HostTensor(t, {N, V})};
    HostTensor dloss = scalarOf(s, 0.125);
    for (int k = 0; k < 2; ++k)
      withOmpThreads(k + 1, [&] {
        runKernel("cross_entropy", {&logits, &labels, &mask}, {&ls[k], &nt[k], &lse[k]},
                  {AttrArg("valid_vocab", int64_t(5000))});
        runKernel("cross_entropy_backward", {&logits, &labels, &mask, &lse[k], &dloss}, {&dx[k]},
                  {AttrArg("valid_vocab", int64_t(5000))});
      });
    EXPECT_EQ(ls[0].bytes, ls[1].bytes);
    EXPECT_EQ(nt[0].bytes, nt[1].bytes);
    EXPECT_EQ(lse[0].bytes, lse[1].bytes);
    EXPECT_EQ(dx[0].bytes, dx[1].bytes);

    if (t == DType::BF16)
      continue; // adamw takes f32 or f64
    const int64_t n = 100003;
    HostTensor g = randomTensor(t, {n}, 205), lr = scalarOf(t, 1e-3), wd = scalarOf(t, 0.1),
               step = scalarOf(t, 3), gs = scalarOf(t, 0.5), upd = scalarOf(t, 1);
    HostTensor p[2], m[2], v[2];
    for (int k = 0; k < 2; ++k) {
      p[k] = randomTensor(t, {n}, 206);
      m[k] = randomTensor(t, {n}, 207, -1e-2, 1e-2);
      v[k] = randomTensor(t, {n}, 208, 0, 1e-4);
      withOmpThreads(k + 1, [&] {
        runKernel("adamw", {&p[k], &g, &m[k], &v[k], &lr, &wd, &step, &gs, &upd},
                  {&p[k], &m[k], &v[k]});
      });
    }
    EXPECT_EQ(p[0].bytes, p[1].bytes);
    EXPECT_EQ(m[0].bytes, m[1].bytes);
    EXPECT_EQ(v[0].bytes, v[1].bytes);
  }
}
