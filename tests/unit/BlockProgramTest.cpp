//===- BlockProgramTest.cpp - A whole transformer-block program on the runtime ===//
//
// The hand-assembled program (one block + cross entropy, forward, backward, two microbatches through
// function calls, per-token normalisation, clipping, AdamW) runs, its loss falls over 20 steps, two
// runs are bitwise identical, and in f64 its accumulated gradients equal central finite
// differences of the per-token loss.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Communicator.h"
#include "runtime/core/Executor.h"
#include "runtime/testing/BlockProgram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace trainc::rt;
using namespace trainc::rt::testing;

namespace {

struct Session {
  std::unique_ptr<Backend> backend = createCpuBackend();
  std::unique_ptr<Communicator> comm = createLocalCommunicator();
  std::unique_ptr<Executor> ex;
  explicit Session(const BlockConfig &c) {
    auto e = Executor::create(buildBlockProgram(c), *backend, *comm);
    EXPECT_TRUE(e.ok()) << e.status();
    if (e.ok())
      ex = std::move(*e);
  }
};

std::vector<double> trainLosses(const BlockConfig &c, int steps) {
  Session r(c);
  if (!r.ex)
    return {};
  initBlockParameters(*r.ex, c, 42);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i)
    losses.push_back(runBlockIteration(*r.ex, c, i, 1e-2));
  return losses;
}

TEST(BlockProgram, LossFallsAndRunsAreBitwiseIdentical) {
  BlockConfig c;
  std::vector<double> a = trainLosses(c, 20), b = trainLosses(c, 20);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(std::isfinite(a[i])) << i;
    EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(double)), 0) << "step " << i;
  }
  // Uniform prediction over 64 tokens is ln 64 = 4.16; the initial loss is close to it.
  EXPECT_NEAR(a[0], std::log(64.0), 0.2);
  EXPECT_LT(a[19], a[0] - 1.0) << "first " << a[0] << " last " << a[19];
}

TEST(BlockProgram, F64GradientsMatchFiniteDifferences) {
  BlockConfig c;
  c.dtype = DType::F64;
  c.vocab = 37;
  c.hidden = 16;
  c.heads = 4;
  c.groups = 2;
  c.ffn = 12;
  c.seq = 9;
  c.microBatch = 1;
  c.numMicrobatches = 2;
  c.maxGradNorm = 0; // no clipping
  Session r(c);
  ASSERT_TRUE(r.ex);
  initBlockParameters(*r.ex, c, 7);
  // Larger weights than the 0.02 init so that every path carries signal.
  for (int i = 0; i < r.ex->program().parameters_size(); ++i) {
    const auto &p = r.ex->program().parameters(i);
    const auto &buf = r.ex->program().buffers(p.buffer());
    std::vector<double> v(buf.byte_size() / 8);
    ASSERT_TRUE(r.ex->readBuffer(p.buffer(), v.data(), buf.byte_size()).ok());
    for (size_t e = 0; e < v.size(); ++e)
      v[e] = p.no_weight_decay() ? 1.0 + 0.3 * std::sin(double(e)) : v[e] * 15.0;
    ASSERT_TRUE(r.ex->writeBuffer(p.buffer(), v.data(), buf.byte_size()).ok());
  }
  // lr = 0: AdamW leaves the parameters unchanged, main grads hold dL/dw of the per-token loss.
  auto loss = [&] { return runBlockIteration(*r.ex, c, 0, 0.0); };
  loss();
  const auto &prog = r.ex->program();
  for (int i = 0; i < prog.parameters_size(); ++i) {
    const auto &p = prog.parameters(i);
    int gradBuf = r.ex->findBuffer(p.name() + ".main_grad");
    const auto &buf = prog.buffers(p.buffer());
    size_t n = buf.byte_size() / 8;
    std::vector<double> w(n), g(n);
    loss();
    ASSERT_TRUE(r.ex->readBuffer(gradBuf, g.data(), n * 8).ok());
    ASSERT_TRUE(r.ex->readBuffer(p.buffer(), w.data(), n * 8).ok());
    // Check up to 24 spread-out elements of every parameter.
    double num = 0, den = 0;
    size_t stride = std::max<size_t>(1, n / 24);
    for (size_t e = 0; e < n; e += stride) {
      const double h = 1e-5;
      double w0 = w[e];
      w[e] = w0 + h;
      ASSERT_TRUE(r.ex->writeBuffer(p.buffer(), w.data(), n * 8).ok());
      double lp = loss();
      w[e] = w0 - h;
      ASSERT_TRUE(r.ex->writeBuffer(p.buffer(), w.data(), n * 8).ok());
      double lm = loss();
      w[e] = w0;
      ASSERT_TRUE(r.ex->writeBuffer(p.buffer(), w.data(), n * 8).ok());
      double fd = (lp - lm) / (2 * h);
      num += (fd - g[e]) * (fd - g[e]);
      den += fd * fd;
    }
    double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
    EXPECT_LT(rel, 1e-6) << p.name();
    EXPECT_GT(den, 0) << p.name() << " has an all-zero gradient sample";
  }
}

} // namespace
