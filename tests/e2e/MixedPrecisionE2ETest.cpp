//===- MixedPrecisionE2ETest.cpp - --bf16 plans on the runtime ----------===//
//
// - A --bf16 plan has bf16 parameters, fp32 main grads, fp32 master weights and fp32 Adam states;
//   after initialisation and after every step each bf16 parameter is bitwise the round-to-
//   nearest-even of its master weight.
// - Its losses track the fp32 plan's from the same initialisation.
// - Data parallelism (dp 2, with and without the distributed optimizer, one bucket and odd
//   buckets): losses within 1e-2 relative of the bf16 single-rank plan over 20 iterations, main
//   grads and master weights within 1e-5 relative after the first step.
//
//===----------------------------------------------------------------------===//

#include "MultiRank.h"

#include "runtime/comm/GlooCommunicator.h"
#include "runtime/comm/TcpStore.h"
#include "runtime/core/Resolve.h"

#include <thread>

using namespace trainc;
using namespace trainc::test;

namespace {

std::vector<std::string> flags(int64_t dp, int64_t mbs, int64_t gbs,
                               std::vector<std::string> extra = {}) {
  std::vector<std::string> f = {"--micro-batch-size",   std::to_string(mbs),
                                "--global-batch-size",  std::to_string(gbs),
                                "--data-parallel-size", std::to_string(dp),
                                "--hidden-dropout",     "0",
                                "--attention-dropout",  "0"};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

/// One adamw_master instruction's master range (f32) and parameter range (bf16).
struct MasterCopy {
  int masterBuf, paramBuf;
  int64_t masterOff, paramOff, n;
};

std::vector<MasterCopy> masterCopies(const schema::Program &p) {
  std::vector<MasterCopy> out;
  for (const schema::Function &fn : p.functions())
    for (const schema::Instruction &ins : fn.body()) {
      if (ins.op_case() != schema::Instruction::kKernel || ins.kernel().kernel() != "adamw_master")
        continue;
      rt::ResolvedOperand m, w;
      EXPECT_EQ(rt::resolveOperand(p, fn, ins.kernel().inputs(0), m), "");
      EXPECT_EQ(rt::resolveOperand(p, fn, ins.kernel().outputs(3), w), "");
      out.push_back({int(m.base), int(w.base), int64_t(m.elemOffset), int64_t(w.elemOffset),
                     m.view.numel});
    }
  return out;
}

/// Every bf16 parameter element equals bf16(master), bit for bit; returns the elements checked.
int64_t expectParamsAreRoundedMasters(CompiledPlan &p, const std::string &when) {
  int64_t checked = 0;
  for (const MasterCopy &c : masterCopies(p.program)) {
    std::vector<char> mb = p.readBytes(c.masterBuf), pb = p.readBytes(c.paramBuf);
    const float *m = reinterpret_cast<const float *>(mb.data()) + c.masterOff;
    const uint16_t *w = reinterpret_cast<const uint16_t *>(pb.data()) + c.paramOff;
    for (int64_t i = 0; i < c.n; ++i, ++checked)
      if (w[i] != rt::bf16::fromFloat(m[i])) {
        rt::bf16 h;
        h.bits = w[i];
        ADD_FAILURE() << when << ": " << p.program.buffers(c.paramBuf).name() << "["
                      << c.paramOff + i << "] = " << float(h) << " is not bf16(master " << m[i]
                      << ")";
        return checked;
      }
  }
  return checked;
}

/// Master weights by parameter name (this rank's ranges; elements it does not hold are NaN).
std::map<std::string, std::vector<double>> masterWeights(CompiledPlan &p) {
  std::map<int, std::vector<double>> full; // param buffer -> master values at its elements
  for (const MasterCopy &c : masterCopies(p.program)) {
    std::vector<double> &f = full[c.paramBuf];
    f.resize(p.program.buffers(c.paramBuf).byte_size() / 2, std::nan(""));
    std::vector<double> m = p.readIndex(c.masterBuf);
    for (int64_t i = 0; i < c.n; ++i)
      f[size_t(c.paramOff + i)] = m[size_t(c.masterOff + i)];
  }
  std::map<std::string, std::vector<double>> out;
  for (const schema::Parameter &q : p.program.parameters()) {
    int64_t n = 1;
    for (int64_t d : q.slice_size())
      n *= d;
    const std::vector<double> &f = full[int(q.buffer())];
    EXPECT_FALSE(f.empty()) << q.name() << " has no master weights";
    if (!f.empty())
      out[q.name()].assign(f.begin() + int64_t(q.buffer_offset()),
                           f.begin() + int64_t(q.buffer_offset()) + n);
  }
  return out;
}

TEST(Bf16Plan, BuffersHaveMegatronsDtypes) {
  CompiledPlan p("tiny-llama", flags(1, 1, 2, {"--bf16"}));
  ASSERT_TRUE(p.ok());
  int params = 0, masters = 0, grads = 0, states = 0;
  for (const schema::Buffer &b : p.program.buffers()) {
    schema::DType want = b.kind() == schema::PARAMETER ? schema::BF16 : schema::F32;
    params += b.kind() == schema::PARAMETER;
    masters += b.kind() == schema::MASTER_PARAM;
    grads += b.kind() == schema::MAIN_GRAD;
    states += b.kind() == schema::OPTIMIZER_STATE;
    if (b.kind() == schema::PARAMETER || b.kind() == schema::MASTER_PARAM ||
        b.kind() == schema::MAIN_GRAD || b.kind() == schema::OPTIMIZER_STATE)
      EXPECT_EQ(b.dtype(), want) << b.name();
  }
  EXPECT_GT(params, 0);
  EXPECT_EQ(masters, params);
  EXPECT_EQ(states, 2 * params);
  EXPECT_GT(grads, 0);
  EXPECT_EQ(int(masterCopies(p.program).size()), params);
}

class Bf16SingleRank : public ::testing::TestWithParam<std::string> {};

TEST_P(Bf16SingleRank, ParamsAreTheBf16RoundingOfTheMasterWeightsAndTrackFp32) {
  const int64_t mbs = 1, gbs = 4, iters = 8;
  std::vector<std::string> f = flags(1, mbs, gbs);
  CompiledPlan ref(GetParam(), f);
  f.push_back("--bf16");
  CompiledPlan p(GetParam(), f);
  ASSERT_TRUE(p.ok() && ref.ok());
  ASSERT_TRUE(rt::initializeParameters(ref.ex(), 5).ok());
  ASSERT_TRUE(rt::initializeParameters(p.ex(), 5).ok());
  int64_t n = expectParamsAreRoundedMasters(p, "after initialisation");
  EXPECT_GT(n, 1000);
  // The masters start as float(bf16(init)): the fp32 plan's init rounded to bf16.
  std::map<std::string, std::vector<double>> m0 = masterWeights(p);
  for (const schema::Parameter &q : ref.program.parameters()) {
    std::vector<double> w = ref.readParam(q.name());
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_EQ(m0[q.name()][i], double(float(rt::bf16(float(w[i]))))) << q.name() << " " << i;
  }
  const int64_t vocab = ref.plan.model.vocab_size;
  for (int64_t it = 1; it <= iters; ++it) {
    Samples s = randomSamples(gbs, ref.plan.model.seq_length, vocab, 40 + uint32_t(it));
    double l32 = ref.step(s, 3e-3, double(it), 0.1);
    double l16 = p.step(s, 3e-3, double(it), 0.1);
    EXPECT_LT(std::abs(l16 - l32) / l32, 2e-2) << "iteration " << it << ": bf16 " << l16
                                               << " fp32 " << l32;
    std::printf("iteration %lld: fp32 loss %.6f, bf16 loss %.6f\n", (long long)it, l32, l16);
    EXPECT_EQ(p.read("update_successful")[0], 1.0);
    expectParamsAreRoundedMasters(p, "after step " + std::to_string(it));
    // The update changed the masters by more than the bf16 spacing somewhere (it is real).
    if (it == iters) {
      std::map<std::string, std::vector<double>> m = masterWeights(p);
      double moved = 0;
      for (auto &[name, w] : m)
        moved = std::max(moved, relDiff(w, m0[name]));
      EXPECT_GT(moved, 1e-3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Bf16SingleRank, ::testing::Values("tiny-llama", "tiny-gpt"),
                         [](const auto &i) { return i.param == "tiny-llama" ? "llama" : "gpt"; });

//===----------------------------------------------------------------------===//
// Data parallelism
//===----------------------------------------------------------------------===//

struct History {
  std::vector<double> losses;
  /// After the first step: master weights (NaN where this rank holds none) and main grads.
  std::map<std::string, std::vector<double>> masters1, grads1;
};

/// Trains a bf16 plan on every rank (threads over Gloo); returns each rank's history.
std::vector<History> train(const std::vector<std::string> &f, int64_t dp, int64_t mbs,
                           const std::vector<Samples> &batches) {
  config::PlanConfig plan;
  std::vector<schema::Program> programs = CompiledPlan::compileAllRanks("tiny-llama", f, &plan);
  EXPECT_EQ(int64_t(programs.size()), dp);
  if (int64_t(programs.size()) != dp)
    return {};
  std::vector<History> hist(static_cast<size_t>(dp));
  std::unique_ptr<rt::TcpStoreServer> store;
  if (dp > 1) {
    auto s = rt::TcpStoreServer::start("127.0.0.1", 0, kToken);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok())
      return {};
    store = std::move(*s);
  }
  auto rankMain = [&](int64_t r) {
    std::unique_ptr<rt::Communicator> comm =
        dp == 1 ? rt::createLocalCommunicator() : glooRank(r, dp, store->port());
    if (!comm)
      return;
    CompiledPlan p(plan, programs[size_t(r)], std::move(comm));
    if (!p.ok())
      return;
    EXPECT_TRUE(rt::initializeParameters(p.ex(), 17).ok());
    History &h = hist[size_t(r)];
    for (size_t it = 0; it < batches.size(); ++it) {
      h.losses.push_back(p.step(rankSamples(batches[it], dp, r, mbs), 3e-3, double(it + 1), 0.1));
      expectParamsAreRoundedMasters(p, "rank " + std::to_string(r) + " step " +
                                           std::to_string(it + 1));
      if (it == 0) {
        h.masters1 = masterWeights(p);
        for (const schema::Parameter &q : p.program.parameters())
          h.grads1[q.name()] = p.readGrad(q.name());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < dp; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  return hist;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

/// Norm-wise relative difference over the elements `a` holds (not NaN).
double relDiffHeld(const std::vector<double> &a, const std::vector<double> &b, int64_t &held) {
  std::vector<double> x, y;
  for (size_t i = 0; i < a.size(); ++i)
    if (!std::isnan(a[i]))
      x.push_back(a[i]), y.push_back(b[i]);
  held += int64_t(x.size());
  return x.empty() ? 0 : relDiff(x, y);
}

struct DpVariant {
  bool distributed;
  int64_t bucket; // 0: one bucket
};

class Bf16DataParallel : public ::testing::TestWithParam<DpVariant> {};

TEST_P(Bf16DataParallel, MatchesTheBf16SingleRankPlan) {
  const DpVariant v = GetParam();
  const int64_t gbs = 8, mbs = 1, iters = 20, dp = 2;
  std::vector<Samples> batches;
  for (int64_t i = 0; i < iters; ++i)
    batches.push_back(randomSamples(gbs, 9, 37, 300 + uint32_t(i)));
  static std::vector<History> ref = train(flags(1, mbs, gbs, {"--bf16"}), 1, mbs, batches);
  ASSERT_EQ(ref.size(), 1u);
  std::vector<std::string> extra = {"--bf16"};
  if (v.distributed)
    extra.push_back("--use-distributed-optimizer");
  if (v.bucket) {
    extra.push_back("--ddp-bucket-size");
    extra.push_back(std::to_string(v.bucket));
  }
  std::vector<History> h = train(flags(dp, mbs, gbs, extra), dp, mbs, batches);
  ASSERT_EQ(int64_t(h.size()), dp);
  ASSERT_EQ(h[0].losses.size(), size_t(iters));
  double maxLoss = 0, maxMaster = 0, maxGrad = 0;
  for (int64_t i = 0; i < iters; ++i) {
    double d = rel(h[0].losses[size_t(i)], ref[0].losses[size_t(i)]);
    maxLoss = std::max(maxLoss, d);
    EXPECT_LT(d, 1e-2) << "iteration " << i + 1;
  }
  int64_t held = 0, total = 0;
  for (auto &[name, w] : ref[0].masters1) {
    total += int64_t(w.size());
    for (int64_t r = 0; r < dp; ++r) {
      double d = relDiffHeld(h[size_t(r)].masters1.at(name), w, held);
      maxMaster = std::max(maxMaster, d);
      EXPECT_LT(d, 1e-5) << "rank " << r << " master " << name;
    }
    // Main grads: every rank holds the reduced gradient (plain DP) or its shard of it.
    if (!v.distributed) {
      double d = relDiff(h[0].grads1.at(name), ref[0].grads1.at(name));
      maxGrad = std::max(maxGrad, d);
      EXPECT_LT(d, 1e-5) << name;
    }
  }
  std::printf("bf16 dp 2 vs dp 1 over %lld iterations: max loss rel diff %.3g, after step 1 max "
              "master rel diff %.3g, max main-grad rel diff %.3g\n",
              (long long)iters, maxLoss, maxMaster, maxGrad);
  // Without the distributed optimizer every rank holds all master weights; with it, each holds
  // its shard and together they hold every element once.
  EXPECT_EQ(held, v.distributed ? total : dp * total);
}

INSTANTIATE_TEST_SUITE_P(Plans, Bf16DataParallel,
                         ::testing::Values(DpVariant{false, 0}, DpVariant{true, 0},
                                           DpVariant{true, 301}),
                         [](const auto &i) {
                           return std::string(i.param.distributed ? "zero1" : "plain") +
                                  (i.param.bucket ? "_bucket301" : "_onebucket");
                         });

} // namespace
