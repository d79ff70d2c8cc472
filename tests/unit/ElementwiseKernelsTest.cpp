//===- ElementwiseKernelsTest.cpp - matmul, gelu, swiglu, dropout, ... ---===//
//
// Forward kernels against naive f64 references; backward kernels against central finite
// differences in f64 (norm-wise relative error <= 1e-6); f32 against f64 within the tolerances of
// docs/kernels.md.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"
#include "runtime/core/Philox.h"

#include <cmath>

using namespace trainc::rt;
using namespace trainc::rt::test;

namespace {

constexpr double kFdTol = 1e-6;

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

/// Naive f64 reference of matmul with transposes and an optional shared (rank-2) b.
HostTensor matmulRef(const HostTensor &a, const HostTensor &b, bool ta, bool tb, int64_t M,
                     int64_t N, int64_t K, int64_t batch, bool bBatched) {
  std::vector<int64_t> shape = a.shape;
  shape[shape.size() - 2] = M;
  shape[shape.size() - 1] = N;
  HostTensor c(DType::F64, shape);
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          double av = a.get(bi * M * K + (ta ? k * M + i : i * K + k));
          int64_t bo = bBatched ? bi * K * N : 0;
          double bv = b.get(bo + (tb ? j * K + k : k * N + j));
          s += av * bv;
        }
        c.set(bi * M * N + i * N + j, s);
      }
  return c;
}

struct MatmulCase {
  bool ta, tb, bBatched;
  int64_t batch, M, N, K;
};

class MatmulTest : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulTest, ForwardMatchesReferenceAndGradientsMatchFiniteDifferences) {
  MatmulCase p = GetParam();
  std::vector<int64_t> as = {p.batch, p.ta ? p.K : p.M, p.ta ? p.M : p.K};
  std::vector<int64_t> bs = {p.tb ? p.N : p.K, p.tb ? p.K : p.N};
  if (p.bBatched)
    bs.insert(bs.begin(), p.batch);
  HostTensor a = randomTensor(DType::F64, as, 1), b = randomTensor(DType::F64, bs, 2);
  std::vector<AttrArg> attrs = {AttrArg("trans_a", int(p.ta)), AttrArg("trans_b", int(p.tb))};
  HostTensor c(DType::F64, {p.batch, p.M, p.N});
  runKernel("matmul", {&a, &b}, {&c}, attrs);
  HostTensor ref = matmulRef(a, b, p.ta, p.tb, p.M, p.N, p.K, p.batch, p.bBatched);
  EXPECT_LT(relError(c, ref), 1e-14);

  // f32 (oneDNN) against f64.
  HostTensor a32 = a.as(DType::F32), b32 = b.as(DType::F32), c32(DType::F32, c.shape);
  runKernel("matmul", {&a32, &b32}, {&c32}, attrs);
  EXPECT_LT(relError(c32, ref), 1e-6);

  // beta = 1 accumulates; alpha scales.
  HostTensor acc = c;
  runKernel("matmul", {&a, &b}, {&acc},
            {attrs[0], attrs[1], AttrArg("alpha", 0.5), AttrArg("beta", 1.0)});
  for (int64_t i = 0; i < acc.numel(); ++i)
    EXPECT_NEAR(acc.get(i), 1.5 * ref.get(i), 1e-12);

  // Gradients of L = <w, a @ b>: dA = w @ b^T, dB = a^T @ w, computed with the matmul kernel itself
  // (as the compiler lowers the VJP) and checked against finite differences.
  HostTensor w = randomTensor(DType::F64, c.shape, 3);
  ForwardFn fwd = [&](std::vector<HostTensor> &x) {
    HostTensor out(DType::F64, {p.batch, p.M, p.N});
    runKernel("matmul", {&x[0], &x[1]}, {&out}, attrs);
    return std::vector<HostTensor>{out};
  };
  HostTensor fdA = finiteDifference(fwd, {a, b}, {w}, 0);
  HostTensor fdB = finiteDifference(fwd, {a, b}, {w}, 1);
  // dA: if !ta, dA[M,K] = w[M,N] @ op(b)^T; if ta, dA[K,M] = op(b) @ w^T.
  HostTensor dA(DType::F64, as);
  if (!p.ta)
    runKernel("matmul", {&w, &b}, {&dA}, {AttrArg("trans_b", int(!p.tb))});
  else {
    // dA = b_op @ w^T where b_op[K,N]: use matmul(b, w) with trans_a = tb, trans_b = 1 per batch.
    for (int64_t bi = 0; bi < p.batch; ++bi) {
      HostTensor wb(DType::F64, {p.M, p.N}), bb(DType::F64, bs.size() == 3
                                                               ? std::vector<int64_t>(bs.begin() + 1, bs.end())
                                                               : bs),
          out(DType::F64, {p.K, p.M});
      for (int64_t i = 0; i < p.M * p.N; ++i)
        wb.set(i, w.get(bi * p.M * p.N + i));
      for (int64_t i = 0; i < p.K * p.N; ++i)
        bb.set(i, b.get((p.bBatched ? bi * p.K * p.N : 0) + i));
      runKernel("matmul", {&bb, &wb}, {&out}, {AttrArg("trans_a", int(p.tb)), AttrArg("trans_b", 1)});
      for (int64_t i = 0; i < p.K * p.M; ++i)
        dA.set(bi * p.K * p.M + i, out.get(i));
    }
  }
  EXPECT_LT(relError(dA, fdA), kFdTol);
  // dB summed over the batch when b is shared: per batch op(a)^T @ w (or its transpose).
  HostTensor dB(DType::F64, bs);
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    HostTensor ab(DType::F64, {as[1], as[2]}), wb(DType::F64, {p.M, p.N});
    for (int64_t i = 0; i < p.M * p.K; ++i)
      ab.set(i, a.get(bi * p.M * p.K + i));
    for (int64_t i = 0; i < p.M * p.N; ++i)
      wb.set(i, w.get(bi * p.M * p.N + i));
    HostTensor out(DType::F64, {p.tb ? p.N : p.K, p.tb ? p.K : p.N});
    if (!p.tb) // dB[K,N] = op(a)^T @ w
      runKernel("matmul", {&ab, &wb}, {&out}, {AttrArg("trans_a", int(!p.ta))});
    else // dB[N,K] = w^T @ op(a)
      runKernel("matmul", {&wb, &ab}, {&out}, {AttrArg("trans_a", 1), AttrArg("trans_b", int(p.ta))});
    int64_t off = p.bBatched ? bi * p.K * p.N : 0;
    for (int64_t i = 0; i < p.K * p.N; ++i)
      dB.set(off + i, dB.get(off + i) + out.get(i));
  }
  EXPECT_LT(relError(dB, fdB), kFdTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulTest,
                         ::testing::Values(MatmulCase{false, false, false, 1, 5, 7, 3},
                                           MatmulCase{false, true, false, 2, 7, 12, 9},
                                           MatmulCase{true, false, true, 3, 4, 5, 6},
                                           MatmulCase{true, true, true, 2, 9, 4, 7},
                                           MatmulCase{false, false, true, 4, 7, 7, 12}));

// An f32 contraction longer than 4096 and than 2 * max(M, N) runs as slices of K accumulated into
// the output (MatmulKernels.cpp, splitK; the LM head's input gradient). K 9001 gives three slices,
// the last one shorter; every transpose, a batched and a shared b, alpha and beta.
TEST(Matmul, LongContractionInSlicesMatchesF64) {
  const int64_t M = 3, N = 5, K = 9001;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int bBatched = 0; bBatched < 2; ++bBatched) {
        SCOPED_TRACE(testing::Message() << "trans_a " << ta << " trans_b " << tb << " batched b "
                                        << bBatched);
        const int64_t batch = 2;
        std::vector<int64_t> as = {batch, ta ? K : M, ta ? M : K};
        std::vector<int64_t> bs = {tb ? N : K, tb ? K : N};
        if (bBatched)
          bs.insert(bs.begin(), batch);
        HostTensor a = randomTensor(DType::F64, as, 11), b = randomTensor(DType::F64, bs, 12);
        HostTensor ref = matmulRef(a, b, ta, tb, M, N, K, batch, bBatched);
        HostTensor a32 = a.as(DType::F32), b32 = b.as(DType::F32), c32(DType::F32, {batch, M, N});
        std::vector<AttrArg> attrs = {AttrArg("trans_a", ta), AttrArg("trans_b", tb)};
        runKernel("matmul", {&a32, &b32}, {&c32}, attrs);
        EXPECT_LT(relError(c32, ref), 1e-6);
        // c = 0.5 a b + 1 c: alpha on every slice, beta on the first only.
        attrs.push_back(AttrArg("alpha", 0.5));
        attrs.push_back(AttrArg("beta", 1.0));
        runKernel("matmul", {&a32, &b32}, {&c32}, attrs);
        HostTensor want(DType::F64, ref.shape);
        for (int64_t i = 0; i < ref.numel(); ++i)
          want.set(i, 1.5 * ref.get(i));
        EXPECT_LT(relError(c32, want), 1e-6);
      }
}

TEST(Matmul, Bf16AgreesWithF64) {
  HostTensor a = randomTensor(DType::F64, {33, 64}, 4), b = randomTensor(DType::F64, {48, 64}, 5);
  HostTensor c(DType::F64, {33, 48});
  runKernel("matmul", {&a, &b}, {&c}, {AttrArg("trans_b", 1)});
  HostTensor a16 = a.as(DType::BF16), b16 = b.as(DType::BF16), c16(DType::BF16, {33, 48});
  runKernel("matmul", {&a16, &b16}, {&c16}, {AttrArg("trans_b", 1)});
  EXPECT_LT(relError(c16, c), 2e-2); // bf16 storage: 8-bit mantissa.
}

//===----------------------------------------------------------------------===//
// Elementwise families
//===----------------------------------------------------------------------===//

TEST(Elementwise, AddScaleCastFill) {
  HostTensor a = randomTensor(DType::F64, {7, 3}, 1), b = randomTensor(DType::F64, {21}, 2);
  HostTensor c(DType::F64, {21});
  runKernel("add", {&a, &b}, {&c}, {AttrArg("alpha", -2.0)});
  for (int64_t i = 0; i < 21; ++i)
    EXPECT_DOUBLE_EQ(c.get(i), a.get(i) - 2 * b.get(i));
  HostTensor s(DType::F32, {});
  s.set(0, 0.25);
  runKernel("scale_by", {&a, &s}, {&c});
  for (int64_t i = 0; i < 21; ++i)
    EXPECT_DOUBLE_EQ(c.get(i), a.get(i) * 0.25);
  HostTensor h(DType::BF16, {21}), back(DType::F64, {21});
  runKernel("cast", {&a}, {&h});
  runKernel("cast", {&h}, {&back});
  EXPECT_LT(relError(back, a), 4e-3);
  runKernel("fill", {}, {&back}, {AttrArg("value", 1.5)});
  EXPECT_EQ(back.get(20), 1.5);
  HostTensor x(DType::F64, {}), r(DType::F64, {});
  x.set(0, 4);
  runKernel("reciprocal", {&x}, {&r});
  EXPECT_EQ(r.get(0), 0.25);
  x.set(0, 0);
  runKernel("reciprocal", {&x}, {&r});
  EXPECT_EQ(r.get(0), 0.0);
}

TEST(Elementwise, AddBiasAndSumRowsAreAdjoint) {
  HostTensor x = randomTensor(DType::F64, {5, 3, 7}, 1), b = randomTensor(DType::F64, {7}, 2);
  HostTensor y(DType::F64, x.shape);
  runKernel("add_bias", {&x, &b}, {&y});
  EXPECT_DOUBLE_EQ(y.get(7 * 4 + 2), x.get(7 * 4 + 2) + b.get(2));
  HostTensor w = randomTensor(DType::F64, x.shape, 3);
  ForwardFn fwd = [](std::vector<HostTensor> &in) {
    HostTensor out(DType::F64, in[0].shape);
    runKernel("add_bias", {&in[0], &in[1]}, {&out});
    return std::vector<HostTensor>{out};
  };
  HostTensor fd = finiteDifference(fwd, {x, b}, {w}, 1);
  HostTensor db(DType::F64, {7});
  runKernel("sum_rows", {&w}, {&db});
  EXPECT_LT(relError(db, fd), kFdTol);
  runKernel("sum_rows", {&w}, {&db}, {AttrArg("beta", 1.0)});
  HostTensor twice = fd;
  for (int i = 0; i < 7; ++i)
    twice.set(i, 2 * fd.get(i));
  EXPECT_LT(relError(db, twice), kFdTol);
}

/// x rounded to the arithmetic type of dtype t (f32 for f32 and bf16 storage; f64 for f64).
double acc(DType t, double x) { return t == DType::F64 ? x : double(float(x)); }

// add, scale_by, add_bias, sum_rows and fill above their threading threshold (2^20 elements),
// odd row and column counts: every element equals the scalar formula evaluated in the test in
// the kernel's arithmetic type (sum_rows: each column summed in row order, rounded once), in
// place equals out of place, and 1 and 2 threads give the same bits.
TEST(Elementwise, ThreadedAddScaleBiasSumRowsAreTheScalarLoopOnAnyThreadCount) {
  const int64_t R = 701, N = 1601; // 1.12M elements
  for (DType t : {DType::F64, DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    HostTensor a = randomTensor(DType::F64, {R, N}, 31).as(t);
    HostTensor b = randomTensor(DType::F64, {R, N}, 32).as(t);
    HostTensor bias = randomTensor(DType::F64, {N}, 33).as(t);
    HostTensor s(DType::F32, {});
    s.set(0, 0.37);
    const double alpha = -0.625, sv = acc(t, s.get(0));
    HostTensor add[2], addA[2], scaled[2], biased[2], rows[2], rowsAcc[2], filled[2];
    for (int th : {1, 2})
      withOmpThreads(th, [&] {
        int k = th - 1;
        add[k] = HostTensor(t, {R, N});
        runKernel("add", {&a, &b}, {&add[k]});
        addA[k] = a; // in place of a
        runKernel("add", {&addA[k], &b}, {&addA[k]}, {AttrArg("alpha", alpha)});
        scaled[k] = HostTensor(t, {R, N});
        runKernel("scale_by", {&a, &s}, {&scaled[k]});
        biased[k] = b; // in place of x
        runKernel("add_bias", {&biased[k], &bias}, {&biased[k]});
        rows[k] = HostTensor(t, {N});
        runKernel("sum_rows", {&a}, {&rows[k]});
        rowsAcc[k] = bias;
        runKernel("sum_rows", {&a}, {&rowsAcc[k]}, {AttrArg("beta", 1.0)});
        filled[k] = HostTensor(t, {R, N});
        runKernel("fill", {}, {&filled[k]}, {AttrArg("value", 0.5)});
      });
    for (HostTensor *o : {add, addA, scaled, biased, rows, rowsAcc, filled})
      EXPECT_EQ(o[0].bytes, o[1].bytes);
    HostTensor e(t, {R, N}), eA(t, {R, N}), eS(t, {R, N}), eB(t, {R, N});
    for (int64_t i = 0; i < R * N; ++i) {
      double ai = a.get(i), bi = b.get(i);
      e.set(i, acc(t, ai + bi));
      eA.set(i, acc(t, ai + acc(t, acc(t, alpha) * bi)));
      eS.set(i, acc(t, sv * ai));
      eB.set(i, acc(t, bi + bias.get(i % N)));
    }
    EXPECT_EQ(add[0].bytes, e.bytes);
    EXPECT_EQ(addA[0].bytes, eA.bytes);
    EXPECT_EQ(scaled[0].bytes, eS.bytes);
    EXPECT_EQ(biased[0].bytes, eB.bytes);
    HostTensor eR(t, {N}), eRA(t, {N});
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t r = 0; r < R; ++r)
        sum = acc(t, sum + a.get(r * N + j));
      eR.set(j, sum);
      eRA.set(j, acc(t, bias.get(j) + sum));
    }
    EXPECT_EQ(rows[0].bytes, eR.bytes);
    EXPECT_EQ(rowsAcc[0].bytes, eRA.bytes);
    EXPECT_EQ(filled[0].get(R * N - 1), 0.5);
    EXPECT_EQ(filled[0].get(R * N / 2), 0.5);
  }
}

class GeluTest : public ::testing::TestWithParam<int> {};

TEST_P(GeluTest, ForwardAndBackward) {
  int approx = GetParam();
  HostTensor x = randomTensor(DType::F64, {3, 19}, 7, -3, 3);
  HostTensor y(DType::F64, x.shape);
  runKernel("gelu", {&x}, {&y}, {AttrArg("approximate", approx)});
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = x.get(i);
    double ref = approx ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                        : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    EXPECT_NEAR(y.get(i), ref, 1e-15);
  }
  HostTensor w = randomTensor(DType::F64, x.shape, 8);
  ForwardFn fwd = [&](std::vector<HostTensor> &in) {
    HostTensor out(DType::F64, in[0].shape);
    runKernel("gelu", {&in[0]}, {&out}, {AttrArg("approximate", approx)});
    return std::vector<HostTensor>{out};
  };
  HostTensor fd = finiteDifference(fwd, {x}, {w}, 0);
  HostTensor dx(DType::F64, x.shape);
  runKernel("gelu_backward", {&w, &x}, {&dx}, {AttrArg("approximate", approx)});
  EXPECT_LT(relError(dx, fd), kFdTol);
  HostTensor x32 = x.as(DType::F32), y32(DType::F32, x.shape);
  runKernel("gelu", {&x32}, {&y32}, {AttrArg("approximate", approx)});
  EXPECT_LT(relError(y32, y), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Forms, GeluTest, ::testing::Values(0, 1));

// The vectorised f32/bf16 path over a tensor large enough to be split over threads, with inputs
// beyond the limits where the formulas saturate (|x| > 10): f32 and bf16 against f64 on the same
// rounded inputs, in place equal to out of place, and the same bits on 1 and 2 threads.
TEST_P(GeluTest, VectorisedAndThreaded) {
  int approx = GetParam();
  const int64_t n = 100003;
  HostTensor x = randomTensor(DType::F64, {n}, 17, -6, 6), w = randomTensor(DType::F64, {n}, 18);
  for (int64_t i = 0; i < 1000; ++i)
    x.set(i, (i % 2 ? 1 : -1) * (10.0 + double(i) * 0.37));
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    HostTensor xt = x.as(t), wt = w.as(t), x64 = xt.as(DType::F64), w64 = wt.as(DType::F64);
    HostTensor y64(DType::F64, {n}), dx64(DType::F64, {n});
    runKernel("gelu", {&x64}, {&y64}, {AttrArg("approximate", approx)});
    runKernel("gelu_backward", {&w64, &x64}, {&dx64}, {AttrArg("approximate", approx)});
    HostTensor y1(t, {n}), y2(t, {n}), dx1(t, {n}), dx2(t, {n});
    withOmpThreads(1, [&] {
      runKernel("gelu", {&xt}, {&y1}, {AttrArg("approximate", approx)});
      runKernel("gelu_backward", {&wt, &xt}, {&dx1}, {AttrArg("approximate", approx)});
    });
    withOmpThreads(2, [&] {
      runKernel("gelu", {&xt}, {&y2}, {AttrArg("approximate", approx)});
      runKernel("gelu_backward", {&wt, &xt}, {&dx2}, {AttrArg("approximate", approx)});
    });
    EXPECT_EQ(y1.bytes, y2.bytes);
    EXPECT_EQ(dx1.bytes, dx2.bytes);
    double tol = t == DType::F32 ? 1e-6 : 4e-3;
    EXPECT_LT(relError(y1, y64), tol);
    EXPECT_LT(relError(dx1, dx64), tol);
    HostTensor yi = xt, gi = wt;
    runKernel("gelu", {&yi}, {&yi}, {AttrArg("approximate", approx)});
    runKernel("gelu_backward", {&gi, &xt}, {&gi}, {AttrArg("approximate", approx)});
    EXPECT_EQ(yi.bytes, y1.bytes);
    EXPECT_EQ(gi.bytes, dx1.bytes);
    // Saturated inputs: gelu(x) = x and gelu'(x) = 1 from 10 up; both within 1e-20 of 0 from -10
    // down (true values below 1e-21; no clamped exp or overflowing x^3 leaks into them).
    for (int64_t i = 0; i < 1000; ++i) {
      double v = x64.get(i);
      if (v > 0) {
        EXPECT_EQ(y1.get(i), v) << v;
        EXPECT_EQ(dx1.get(i), w64.get(i)) << v;
      } else {
        EXPECT_NEAR(y1.get(i), 0.0, 1e-20) << v;
        EXPECT_NEAR(dx1.get(i), 0.0, 1e-20) << v;
      }
    }
  }
  // f64 keeps the library formula: its threaded run equals the 1-thread run bitwise.
  HostTensor y1(DType::F64, {n}), y2(DType::F64, {n});
  withOmpThreads(1, [&] { runKernel("gelu", {&x}, {&y1}, {AttrArg("approximate", approx)}); });
  withOmpThreads(2, [&] { runKernel("gelu", {&x}, {&y2}, {AttrArg("approximate", approx)}); });
  EXPECT_EQ(y1.bytes, y2.bytes);
}

TEST(Elementwise, SwigluForwardAndBackward) {
  HostTensor x = randomTensor(DType::F64, {3, 2, 14}, 9, -2, 2);
  HostTensor y(DType::F64, {3, 2, 7});
  runKernel("swiglu", {&x}, {&y});
  for (int64_t r = 0; r < 6; ++r)
    for (int j = 0; j < 7; ++j) {
      double a = x.get(r * 14 + j), b = x.get(r * 14 + 7 + j);
      EXPECT_NEAR(y.get(r * 7 + j), a / (1 + std::exp(-a)) * b, 1e-15);
    }
  HostTensor w = randomTensor(DType::F64, y.shape, 10);
  ForwardFn fwd = [](std::vector<HostTensor> &in) {
    HostTensor out(DType::F64, {3, 2, 7});
    runKernel("swiglu", {&in[0]}, {&out});
    return std::vector<HostTensor>{out};
  };
  HostTensor fd = finiteDifference(fwd, {x}, {w}, 0);
  HostTensor dx(DType::F64, x.shape);
  runKernel("swiglu_backward", {&w, &x}, {&dx});
  EXPECT_LT(relError(dx, fd), kFdTol);
}

TEST(Elementwise, DropoutIsCounterBasedAndItsBackwardIsTheSameMask) {
  HostTensor x = randomTensor(DType::F64, {1001}, 11, 0.5, 1.5);
  HostTensor rng(DType::I64, {3});
  rng.set(0, 1234);
  rng.set(1, 7);
  rng.set(2, 1);
  std::vector<AttrArg> attrs = {AttrArg("p", 0.25), AttrArg("op_id", 3)};
  HostTensor y1(DType::F64, x.shape), y2(DType::F64, x.shape);
  runKernel("dropout", {&x, &rng}, {&y1}, attrs);
  runKernel("dropout", {&x, &rng}, {&y2}, attrs);
  int dropped = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(y1.get(i), y2.get(i));
    if (y1.get(i) == 0)
      ++dropped;
    else
      EXPECT_NEAR(y1.get(i), x.get(i) / 0.75, 1e-15);
  }
  // Binomial(1001, 0.25): mean 250, sd 13.7.
  EXPECT_GT(dropped, 250 - 5 * 14);
  EXPECT_LT(dropped, 250 + 5 * 14);
  // A different microbatch, op or iteration gives a different mask.
  HostTensor y3(DType::F64, x.shape), rng2 = rng;
  rng2.set(2, 2);
  runKernel("dropout", {&x, &rng2}, {&y3}, attrs);
  int differ = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    differ += (y3.get(i) == 0) != (y1.get(i) == 0);
  EXPECT_GT(differ, 100);
  // Backward: the gradient of <w, dropout(x)> is dropout applied to w (finite differences).
  HostTensor w = randomTensor(DType::F64, x.shape, 12);
  ForwardFn fwd = [&](std::vector<HostTensor> &in) {
    HostTensor out(DType::F64, in[0].shape);
    runKernel("dropout", {&in[0], &rng}, {&out}, attrs);
    return std::vector<HostTensor>{out};
  };
  HostTensor fd = finiteDifference(fwd, {x}, {w}, 0);
  HostTensor dx(DType::F64, x.shape);
  runKernel("dropout_backward", {&w, &rng}, {&dx}, attrs);
  EXPECT_LT(relError(dx, fd), kFdTol);
}

// 3 samples of 100001 elements (above the 2^18 threshold: threaded; batched Philox, runs cut at the sample boundaries whose
// global indices are not multiples of 4): every element against philoxUniform4 evaluated one
// element at a time here, and the same bits on 1 and 2 threads, in f32 and bf16; a [4] rng key and
// a sequence shard (seq_start, seq_length) take the same path.
TEST(Elementwise, ThreadedDropoutIsTheScalarMaskOnAnyThreadCount) {
  const int64_t S = 3, L = 100001;
  HostTensor x = randomTensor(DType::F64, {S, L}, 21, 0.5, 1.5);
  HostTensor rng(DType::I64, {4});
  rng.set(0, 987654321);
  rng.set(1, 5);
  rng.set(2, 7);
  rng.set(3, 2); // op id offset
  const double p = 0.3;
  for (DType t : {DType::F64, DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    HostTensor xt = x.as(t), y[2] = {HostTensor(t, x.shape), HostTensor(t, x.shape)};
    for (int th : {1, 2})
      withOmpThreads(th, [&] {
        runKernel("dropout", {&xt, &rng}, {&y[th - 1]},
                  {AttrArg("p", p), AttrArg("op_id", 3)});
      });
    EXPECT_EQ(y[0].bytes, y[1].bytes);
    HostTensor expect(t, x.shape);
    for (int64_t b = 0; b < S; ++b)
      for (int64_t i = 0; i < L; ++i) {
        uint64_t g = uint64_t(7 + b) * uint64_t(L) + uint64_t(i);
        float u[4];
        philoxUniform4(987654321, 3 + 2, 5, g / 4, u);
        double xv = xt.get(b * L + i);
        if (t == DType::F64)
          expect.set(b * L + i, double(u[g % 4]) >= p ? xv * (1.0 / (1.0 - p)) : 0.0);
        else
          expect.set(b * L + i, double(u[g % 4]) >= p ? float(xv) * float(1.0 / (1.0 - p)) : 0.0);
      }
    EXPECT_EQ(y[0].bytes, expect.bytes);
  }
  // A sequence shard: positions [16000, 100001) of each sample, threaded, is the whole tensor's
  // slice.
  HostTensor whole(DType::F32, x.shape), xf = x.as(DType::F32);
  runKernel("dropout", {&xf, &rng}, {&whole}, {AttrArg("p", p), AttrArg("op_id", 3)});
  const int64_t s0 = 16000, n = L - s0;
  HostTensor shard(DType::F32, {S, n}), out(DType::F32, {S, n});
  for (int64_t b = 0; b < S; ++b)
    for (int64_t j = 0; j < n; ++j)
      shard.set(b * n + j, xf.get(b * L + s0 + j));
  withOmpThreads(2, [&] {
    runKernel("dropout", {&shard, &rng}, {&out},
              {AttrArg("p", p), AttrArg("op_id", 3), AttrArg("seq_start", s0),
               AttrArg("seq_length", L)});
  });
  for (int64_t b = 0; b < S; ++b)
    for (int64_t j = 0; j < n; ++j)
      ASSERT_EQ(out.get(b * n + j), whole.get(b * L + s0 + j)) << b << " " << j;
}

// A layer function's dropout site with local op id k, given rng_offset's key for layer offset o,
// draws the mask of op id k + o: the same as the flat model's site.
TEST(Elementwise, RngOffsetShiftsTheDropoutOpId) {
  HostTensor x = randomTensor(DType::F32, {257}, 13, 0.5, 1.5);
  HostTensor rng(DType::I64, {3});
  rng.set(0, 99);
  rng.set(1, 4);
  rng.set(2, 3);
  HostTensor key(DType::I64, {4}), key2(DType::I64, {4});
  runKernel("rng_offset", {&rng}, {&key}, {AttrArg("offset", 5)});
  EXPECT_EQ(key.get(0), 99);
  EXPECT_EQ(key.get(1), 4);
  EXPECT_EQ(key.get(2), 3);
  EXPECT_EQ(key.get(3), 5);
  runKernel("rng_offset", {&key}, {&key2}, {AttrArg("offset", 2)}); // offsets add up
  EXPECT_EQ(key2.get(3), 7);
  HostTensor flat(DType::F32, x.shape), local(DType::F32, x.shape), other(DType::F32, x.shape);
  runKernel("dropout", {&x, &rng}, {&flat}, {AttrArg("p", 0.5), AttrArg("op_id", 9)});
  runKernel("dropout", {&x, &key2}, {&local}, {AttrArg("p", 0.5), AttrArg("op_id", 2)});
  runKernel("dropout", {&x, &key}, {&other}, {AttrArg("p", 0.5), AttrArg("op_id", 2)});
  int differ = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(flat.get(i), local.get(i)) << i;
    differ += (other.get(i) == 0) != (flat.get(i) == 0);
  }
  EXPECT_GT(differ, 50); // op id 7 is another site
  HostTensor bad(DType::I64, {5}), out3(DType::I64, {3});
  EXPECT_EQ(verifyKernel("rng_offset", {&bad}, {&key}, {AttrArg("offset", 1)}),
            "input 0: shape [5] has 5 elements, expected 3 (seed, iteration and microbatch (or 4 "
            "with an op_id offset))");
  EXPECT_EQ(verifyKernel("rng_offset", {&rng}, {&out3}, {AttrArg("offset", 1)}),
            "output 0: shape [3] has 3 elements, expected 4 (seed, iteration, microbatch and op_id "
            "offset)");
}

// A sequence shard [b, s/n, h] of [b, s, h] (sequence parallelism) with seq_start / seq_length
// draws the full tensor's mask at its positions: every shard of a 3 x 8 x 5 tensor over 4 ranks
// equals the slice of the whole tensor's dropout (the mask is keyed by the global element).
TEST(Elementwise, DropoutOnASequenceShardIsTheWholeTensorsMask) {
  const int64_t B = 3, S = 8, H = 5, n = 4, ls = S / n;
  HostTensor x = randomTensor(DType::F32, {B, S, H}, 21, 0.5, 1.5);
  HostTensor rng(DType::I64, {3});
  rng.set(0, 77);
  rng.set(1, 2);
  rng.set(2, 6); // the microbatch's first sample in the global batch
  HostTensor whole(DType::F32, x.shape);
  runKernel("dropout", {&x, &rng}, {&whole}, {AttrArg("p", 0.5), AttrArg("op_id", 4)});
  int dropped = 0;
  for (int64_t r = 0; r < n; ++r) {
    HostTensor shard(DType::F32, {B, ls, H}), y(DType::F32, {B, ls, H});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < ls * H; ++j)
        shard.set(b * ls * H + j, x.get(b * S * H + r * ls * H + j));
    for (const char *kernel : {"dropout", "dropout_backward"}) {
      runKernel(kernel, {&shard, &rng}, {&y},
                {AttrArg("p", 0.5), AttrArg("op_id", 4), AttrArg("seq_start", r * ls),
                 AttrArg("seq_length", S)});
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < ls * H; ++j) {
          EXPECT_EQ(y.get(b * ls * H + j), whole.get(b * S * H + r * ls * H + j))
              << kernel << " rank " << r << " sample " << b << " element " << j;
          dropped += y.get(b * ls * H + j) == 0;
        }
    }
  }
  EXPECT_GT(dropped, 2 * 30); // p = 0.5 of 2 x 120 elements: the mask drops some
  EXPECT_LT(dropped, 2 * 90);
  HostTensor shard(DType::F32, {B, ls, H});
  EXPECT_EQ(verifyKernel("dropout", {&shard, &rng}, {&shard},
                         {AttrArg("p", 0.5), AttrArg("seq_start", 7), AttrArg("seq_length", S)}),
            "attribute seq_start = 7, seq_length = 8: expected 0 <= seq_start and seq_start + dim "
            "1 of input 0 (shape [3, 2, 5]) <= seq_length");
}

TEST(Elementwise, SignatureErrorsNameTheOperand) {
  HostTensor a(DType::F32, {4}), b(DType::F64, {4}), c(DType::F32, {4});
  EXPECT_EQ(verifyKernel("add", {&a, &b}, {&c}), "input 1: dtype f64, expected f32 (as input 0)");
  HostTensor x(DType::F32, {3, 5}), y(DType::F32, {3, 3});
  EXPECT_EQ(verifyKernel("swiglu", {&x}, {&y}),
            "input 0: shape [3, 5], expected an even last dim");
  HostTensor r(DType::I32, {3});
  EXPECT_EQ(verifyKernel("dropout", {&x, &r}, {&x}, {AttrArg("p", 0.1)}),
            "input 1: dtype i32, expected i64");
  HostTensor h(DType::F16, {4});
  EXPECT_EQ(verifyKernel("fill", {}, {&h}, {AttrArg("value", 1.0)}), ""); // --fp16 fills f16
  runKernel("fill", {}, {&h}, {AttrArg("value", -2.0)});
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(h.get(i), -2.0);
}

} // namespace
