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

/// Every bf16 (f16) parameter element equals bf16(master) (f16(master)), bit for bit; returns
/// the elements checked.
int64_t expectParamsAreRoundedMasters(CompiledPlan &p, const std::string &when) {
  int64_t checked = 0;
  for (const MasterCopy &c : masterCopies(p.program)) {
    const bool half = p.program.buffers(c.paramBuf).dtype() == schema::F16;
    std::vector<char> mb = p.readBytes(c.masterBuf), pb = p.readBytes(c.paramBuf);
    const float *m = reinterpret_cast<const float *>(mb.data()) + c.masterOff;
    const uint16_t *w = reinterpret_cast<const uint16_t *>(pb.data()) + c.paramOff;
    for (int64_t i = 0; i < c.n; ++i, ++checked)
      if (w[i] != (half ? rt::f16::fromFloat(m[i]) : rt::bf16::fromFloat(m[i]))) {
        rt::bf16 h;
        h.bits = w[i];
        ADD_FAILURE() << when << ": " << p.program.buffers(c.paramBuf).name() << "["
                      << c.paramOff + i << "] = " << (half ? rt::f16::toFloat(w[i]) : float(h))
                      << " is not " << (half ? "f16" : "bf16") << "(master " << m[i] << ")";
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

/// The buffer of a host-scalar role, -1 when the program has none.
int roleBuffer(const schema::Program &p, schema::ScalarRole role) {
  for (int b = 0; b < p.buffers_size(); ++b)
    if (p.buffers(b).scalar_role() == role)
      return b;
  return -1;
}

/// --fp16: the grad scaler's initial state, as trainrun writes it (from the plan's metadata).
void initLossScaler(CompiledPlan &p) {
  int b = roleBuffer(p.program, schema::LOSS_SCALE);
  if (b < 0)
    return;
  auto meta = [&](const char *k) { return std::stod(p.program.metadata().at(k)); };
  double fixed = meta("training.loss_scale");
  p.writeIndex(b, {fixed > 0 ? fixed : meta("training.initial_loss_scale")});
  if (int g = roleBuffer(p.program, schema::LOSS_SCALE_GROWTH_TRACKER); g >= 0)
    p.writeIndex(g, {0.0});
  if (int h = roleBuffer(p.program, schema::LOSS_SCALE_HYSTERESIS_TRACKER); h >= 0)
    p.writeIndex(h, {meta("training.hysteresis")});
}

TEST(Bf16Plan, BuffersHaveMegatronsDtypes) {
  CompiledPlan p("tiny-llama", multiRankFlags(1, 1, 2, {"--bf16"}));
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
  std::vector<std::string> f = multiRankFlags(1, mbs, gbs);
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
  std::vector<double> losses, updates, scales; // scales: fp16's loss scale after each step
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
    initLossScaler(p);
    History &h = hist[size_t(r)];
    for (size_t it = 0; it < batches.size(); ++it) {
      h.losses.push_back(p.step(rankSamples(batches[it], dp, r, mbs), 3e-3, double(it + 1), 0.1));
      h.updates.push_back(p.read("update_successful")[0]);
      if (int b = roleBuffer(p.program, schema::LOSS_SCALE); b >= 0)
        h.scales.push_back(p.readIndex(b)[0]);
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
  std::vector<Samples> batches = makeBatches(iters, gbs, 300);
  static std::vector<History> ref = train(multiRankFlags(1, mbs, gbs, {"--bf16"}), 1, mbs, batches);
  ASSERT_EQ(ref.size(), 1u);
  std::vector<std::string> extra = {"--bf16"};
  if (v.distributed)
    extra.push_back("--use-distributed-optimizer");
  if (v.bucket) {
    extra.push_back("--ddp-bucket-size");
    extra.push_back(std::to_string(v.bucket));
  }
  std::vector<History> h = train(multiRankFlags(dp, mbs, gbs, extra), dp, mbs, batches);
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

//===----------------------------------------------------------------------===//
// --fp16: f16 parameters and activations, Megatron's loss scaler on device
//===----------------------------------------------------------------------===//

int countKernels(const schema::Program &p, const std::string &name) {
  int n = 0;
  for (const schema::Function &fn : p.functions())
    for (const schema::Instruction &ins : fn.body())
      n += ins.op_case() == schema::Instruction::kKernel && ins.kernel().kernel() == name;
  return n;
}

TEST(Fp16Plan, BuffersAndTheLossScaler) {
  CompiledPlan p("tiny-llama", multiRankFlags(1, 1, 2, {"--fp16"}));
  ASSERT_TRUE(p.ok());
  int params = 0;
  for (const schema::Buffer &b : p.program.buffers()) {
    if (b.kind() == schema::PARAMETER) {
      ++params;
      EXPECT_EQ(b.dtype(), schema::F16) << b.name();
    }
    if (b.kind() == schema::MASTER_PARAM || b.kind() == schema::MAIN_GRAD ||
        b.kind() == schema::OPTIMIZER_STATE)
      EXPECT_EQ(b.dtype(), schema::F32) << b.name();
  }
  EXPECT_GT(params, 0);
  EXPECT_EQ(int(masterCopies(p.program).size()), params);
  for (schema::ScalarRole r : {schema::LOSS_SCALE, schema::LOSS_SCALE_GROWTH_TRACKER,
                               schema::LOSS_SCALE_HYSTERESIS_TRACKER}) {
    int b = roleBuffer(p.program, r);
    ASSERT_GE(b, 0) << schema::ScalarRole_Name(r);
    EXPECT_EQ(p.program.buffers(b).kind(), schema::SCALAR);
  }
  EXPECT_EQ(countKernels(p.program, "loss_scale_update"), 1);
  EXPECT_EQ(p.program.metadata().at("training.hysteresis"), "2");
  EXPECT_EQ(std::stod(p.program.metadata().at("training.initial_loss_scale")), 4294967296.0);
  // A static scale (--loss-scale): the scale buffer, no update and no trackers.
  CompiledPlan q("tiny-llama", multiRankFlags(1, 1, 2, {"--fp16", "--loss-scale", "128"}));
  ASSERT_TRUE(q.ok());
  EXPECT_GE(roleBuffer(q.program, schema::LOSS_SCALE), 0);
  EXPECT_LT(roleBuffer(q.program, schema::LOSS_SCALE_GROWTH_TRACKER), 0);
  EXPECT_EQ(countKernels(q.program, "loss_scale_update"), 0);
  // bf16 and fp32 plans have no loss scaler.
  CompiledPlan r("tiny-llama", multiRankFlags(1, 1, 2, {"--bf16"}));
  ASSERT_TRUE(r.ok());
  EXPECT_LT(roleBuffer(r.program, schema::LOSS_SCALE), 0);
  EXPECT_EQ(countKernels(r.program, "loss_scale_update"), 0);
}

/// The persistent state a step must leave alone when it is skipped.
std::map<int, std::vector<char>> stateBytes(CompiledPlan &p) {
  std::map<int, std::vector<char>> out;
  for (int b = 0; b < p.program.buffers_size(); ++b) {
    schema::BufferKind k = p.program.buffers(b).kind();
    if (k == schema::PARAMETER || k == schema::MASTER_PARAM || k == schema::OPTIMIZER_STATE)
      out[b] = p.readBytes(b);
  }
  return out;
}

/// Megatron's DynamicGradScaler (grad_scaler.py), written out for the test.
struct RefScaler {
  double scale, minScale;
  int64_t window, hysteresis, growth = 0, hyst;
  void update(bool foundInf) {
    if (foundInf) {
      growth = 0;
      if (--hyst <= 0)
        scale = std::max(scale * 0.5, minScale);
    } else if (++growth == window) {
      growth = 0;
      hyst = hysteresis;
      scale *= 2.0;
    }
  }
};

// fp16 vs fp32 from the same initialisation (rounded to f16) over 20 iterations; params are
// f16(master) bitwise after every step; the first step's main grads are unscaled (equal the
// fp32 plan's up to f16 rounding, not 2^12 times them).
TEST(Fp16SingleRank, TracksFp32AndGradsAreUnscaled) {
  const int64_t mbs = 1, gbs = 4, iters = 20;
  std::vector<std::string> f = multiRankFlags(1, mbs, gbs);
  CompiledPlan ref("tiny-llama", f);
  for (const char *x : {"--fp16", "--initial-loss-scale", "4096"})
    f.push_back(x);
  CompiledPlan p("tiny-llama", f);
  ASSERT_TRUE(p.ok() && ref.ok());
  ASSERT_TRUE(rt::initializeParameters(ref.ex(), 5).ok());
  ASSERT_TRUE(rt::initializeParameters(p.ex(), 5).ok());
  initLossScaler(p);
  EXPECT_GT(expectParamsAreRoundedMasters(p, "after initialisation"), 1000);
  const int64_t vocab = ref.plan.model.vocab_size;
  double maxRel = 0;
  for (int64_t it = 1; it <= iters; ++it) {
    Samples s = randomSamples(gbs, ref.plan.model.seq_length, vocab, 40 + uint32_t(it));
    double l32 = ref.step(s, 3e-3, double(it), 0.1);
    double l16 = p.step(s, 3e-3, double(it), 0.1);
    ASSERT_EQ(p.read("update_successful")[0], 1.0) << "iteration " << it;
    double d = std::abs(l16 - l32) / l32;
    maxRel = std::max(maxRel, d);
    EXPECT_LT(d, 1e-2) << "iteration " << it << ": fp16 " << l16 << " fp32 " << l32;
    std::printf("iteration %lld: fp32 loss %.6f, fp16 loss %.6f\n", (long long)it, l32, l16);
    if (it == 1)
      for (const schema::Parameter &q : ref.program.parameters()) {
        double g = relDiff(p.readGrad(q.name()), ref.readGrad(q.name()));
        EXPECT_LT(g, 2e-2) << q.name();
      }
    expectParamsAreRoundedMasters(p, "after step " + std::to_string(it));
  }
  std::printf("fp16 (scale 4096) vs fp32 over %lld iterations: max loss rel diff %.3g\n",
              (long long)iters, maxRel);
  EXPECT_EQ(p.readIndex(roleBuffer(p.program, schema::LOSS_SCALE))[0], 4096.0); // window 1000
}

// --initial-loss-scale 2^40 overflows the f16 backward: steps are skipped (params, master
// weights, Adam states bitwise unchanged), the scale follows DynamicGradScaler (the first inf
// only spends hysteresis, then it halves per skip), training resumes once the scale is small
// enough, and after --loss-scale-window successful steps the scale doubles.
TEST(Fp16SingleRank, OverflowSkipsStepsAndTheScaleBacksOffWithHysteresis) {
  const int64_t mbs = 1, gbs = 4, iters = 40, window = 5, hysteresis = 2;
  std::vector<std::string> f =
      multiRankFlags(1, mbs, gbs, {"--fp16", "--initial-loss-scale", "1099511627776", "--loss-scale-window",
                          std::to_string(window), "--hysteresis", std::to_string(hysteresis),
                          "--min-loss-scale", "1"});
  CompiledPlan p("tiny-llama", f);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(rt::initializeParameters(p.ex(), 5).ok());
  initLossScaler(p);
  RefScaler want{1099511627776.0, 1.0, window, hysteresis, 0, hysteresis};
  const int scaleBuf = roleBuffer(p.program, schema::LOSS_SCALE);
  int64_t skipped = 0, successful = 0, firstSuccess = 0;
  std::vector<int64_t> growthAt;
  for (int64_t it = 1; it <= iters; ++it) {
    std::map<int, std::vector<char>> before = stateBytes(p);
    Samples s = randomSamples(gbs, p.plan.model.seq_length, p.plan.model.vocab_size,
                              40 + uint32_t(it));
    double loss = p.step(s, 3e-3, double(successful + 1), 0.1); // Adam's step: successes + 1
    EXPECT_TRUE(std::isfinite(loss)) << it; // the forward and the loss are not scaled
    const bool ok = p.read("update_successful")[0] == 1.0;
    EXPECT_EQ(ok, std::isfinite(p.read("grad_norm")[0])) << it;
    if (!ok) {
      ++skipped;
      EXPECT_EQ(stateBytes(p), before) << "iteration " << it << " was skipped but changed state";
    } else {
      ++successful;
      if (!firstSuccess)
        firstSuccess = it;
      EXPECT_NE(stateBytes(p), before) << "iteration " << it;
    }
    double prev = want.scale;
    want.update(!ok);
    if (want.scale > prev)
      growthAt.push_back(it);
    ASSERT_EQ(p.readIndex(scaleBuf)[0], want.scale) << "iteration " << it;
    if (it <= 2)
      EXPECT_FALSE(ok) << "2^40 must overflow f16 gradients";
  }
  std::printf("2^40 start: %lld skipped steps, first successful step %lld, final scale %g, "
              "growth at",
              (long long)skipped, (long long)firstSuccess, want.scale);
  for (int64_t g : growthAt)
    std::printf(" %lld", (long long)g);
  std::printf("\n");
  // The first skip spends hysteresis (scale unchanged), each later one halves: at least 2^40 /
  // 2^16 needs ~24 halvings before f16 gradients fit.
  EXPECT_GE(skipped, 10);
  EXPECT_GT(firstSuccess, 0) << "training never resumed";
  EXPECT_GE(successful, window); // the scale grew at least once
  EXPECT_FALSE(growthAt.empty());
}

// A static --loss-scale never changes; an overflowing one skips every step.
TEST(Fp16SingleRank, StaticScaleStaysAndOverflowAlwaysSkips) {
  for (auto [scale, expectSkip] : {std::pair{"1024", false}, std::pair{"1099511627776", true}}) {
    CompiledPlan p("tiny-llama", multiRankFlags(1, 1, 4, {"--fp16", "--loss-scale", scale}));
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(rt::initializeParameters(p.ex(), 5).ok());
    initLossScaler(p);
    for (int64_t it = 1; it <= 3; ++it) {
      Samples s = randomSamples(4, p.plan.model.seq_length, p.plan.model.vocab_size, 7 + uint32_t(it));
      p.step(s, 3e-3, 1.0, 0.1);
      EXPECT_EQ(p.read("update_successful")[0], expectSkip ? 0.0 : 1.0) << scale << " " << it;
      EXPECT_EQ(p.readIndex(roleBuffer(p.program, schema::LOSS_SCALE))[0], std::stod(scale));
    }
  }
}

class Fp16DataParallel : public ::testing::TestWithParam<DpVariant> {};

TEST_P(Fp16DataParallel, MatchesTheFp16SingleRankPlan) {
  const DpVariant v = GetParam();
  const int64_t gbs = 8, mbs = 1, iters = 20, dp = 2;
  std::vector<Samples> batches = makeBatches(iters, gbs, 300);
  const std::vector<std::string> fp16 = {"--fp16", "--initial-loss-scale", "4096"};
  static std::vector<History> ref = train(multiRankFlags(1, mbs, gbs, fp16), 1, mbs, batches);
  ASSERT_EQ(ref.size(), 1u);
  std::vector<std::string> extra = fp16;
  if (v.distributed)
    extra.push_back("--use-distributed-optimizer");
  std::vector<History> h = train(multiRankFlags(dp, mbs, gbs, extra), dp, mbs, batches);
  ASSERT_EQ(int64_t(h.size()), dp);
  ASSERT_EQ(h[0].losses.size(), size_t(iters));
  double maxLoss = 0, maxMaster = 0, maxGrad = 0, firstLoss = 0;
  for (int64_t i = 0; i < iters; ++i) {
    double d = rel(h[0].losses[size_t(i)], ref[0].losses[size_t(i)]);
    if (i == 0)
      firstLoss = d;
    maxLoss = std::max(maxLoss, d);
    EXPECT_EQ(h[0].updates[size_t(i)], ref[0].updates[size_t(i)]) << "iteration " << i + 1;
    EXPECT_EQ(h[1].scales[size_t(i)], ref[0].scales[size_t(i)]) << "iteration " << i + 1;
  }
  EXPECT_LT(firstLoss, 1e-5); // the same weights: only the order of the loss sums differs
  EXPECT_LT(maxLoss, 1e-5);   // measured 2.9e-6 over 20 iterations (plain and ZeRO-1)
  for (auto &[name, w] : ref[0].masters1) {
    int64_t held = 0;
    for (int64_t r = 0; r < dp; ++r) {
      double d = relDiffHeld(h[size_t(r)].masters1.at(name), w, held);
      maxMaster = std::max(maxMaster, d);
      EXPECT_LT(d, 1e-5) << "rank " << r << " master " << name;
    }
    if (!v.distributed) {
      double d = relDiff(h[0].grads1.at(name), ref[0].grads1.at(name));
      maxGrad = std::max(maxGrad, d);
      EXPECT_LT(d, 1e-5) << name;
    }
  }
  std::printf("fp16 dp 2 (%s) vs dp 1 over %lld iterations: loss rel diff %.3g at iteration 1, "
              "max %.3g; after step 1 max master rel diff %.3g, max main-grad rel diff %.3g\n",
              v.distributed ? "distributed optimizer" : "plain", (long long)iters, firstLoss,
              maxLoss, maxMaster, maxGrad);
}

INSTANTIATE_TEST_SUITE_P(Plans, Fp16DataParallel,
                         ::testing::Values(DpVariant{false, 0}, DpVariant{true, 0}),
                         [](const auto &i) { return i.param.distributed ? "zero1" : "plain"; });

} // namespace
