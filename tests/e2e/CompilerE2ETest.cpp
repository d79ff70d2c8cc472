//===- CompilerE2ETest.cpp - Compiled programs checked on the runtime -----===//
//
// - Whole-model gradients of compiled fp64 tiny GPT and tiny Llama programs equal central finite
//   differences of the per-token loss (relative error <= 1e-6).
// - Gradient accumulation: a global batch of 8 as 8x1, 4x2, 2x4 and 1x8 gives the same gradients and
//   parameters after one step; with ragged loss masks the default mode is the exact global
//   per-token gradient and the legacy mode Megatron's mean of per-microbatch means.
// - Programs are O(layers + microbatches): instruction counts grow additively.
// - The export tags every input buffer with its host role and microbatch, and a compiled plan
//   carries the training plan (Program.plan) the runtime reads instead of metadata.
//
//===----------------------------------------------------------------------===//

#include "CompiledPlan.h"
#include "compiler/Driver.h"
#include "dialects/Model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"

#include "compiler/Export.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

#include <cmath>
#include <set>

#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"

using namespace trainc;
using namespace trainc::test;
using namespace mlir;
namespace model = mlir::trainc::model;

namespace {

std::vector<std::string> tinyFlags(int64_t mbs, int64_t gbs, std::vector<std::string> extra = {}) {
  std::vector<std::string> f = {"--micro-batch-size", std::to_string(mbs), "--global-batch-size",
                                std::to_string(gbs)};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

class GradientCheck : public ::testing::TestWithParam<std::string> {};

TEST_P(GradientCheck, CompiledF64GradientsMatchFiniteDifferences) {
  // 2 microbatches of 1 sample each; no clipping; lr = 0 keeps the parameters, so after a run the
  // main grads hold d(loss_sum / num_tokens)/dw over the global batch.
  CompiledPlan p(GetParam(),
                 tinyFlags(1, 2, {"--clip-grad", "0", "--lr", "0", "--attention-dropout", "0", "--hidden-dropout", "0"}),
                 "fp64");
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(rt::initializeParameters(p.ex(), 3).ok());
  // Larger weights than the 0.02 init so every path carries signal; norm weights around 1.
  for (const schema::Parameter &q : p.program.parameters()) {
    std::vector<double> w = p.readIndex(int(q.buffer()));
    for (size_t e = 0; e < w.size(); ++e)
      w[e] = q.init() == "normal" ? w[e] * 15 : (q.init() == "ones" ? 1 + 0.3 * std::sin(double(e)) : 0.1 * std::cos(double(e)));
    p.writeIndex(int(q.buffer()), w);
  }
  Samples s = randomSamples(2, p.plan.model.seq_length, p.plan.model.vocab_size, 11);
  s.mask[3] = 0; // a ragged mask
  auto loss = [&] { return p.step(s, 0.0); };
  loss();
  // Read every gradient before any perturbation (each FD run overwrites the main grads).
  std::map<std::string, std::vector<double>> analytic;
  for (const schema::Parameter &q : p.program.parameters())
    analytic[q.name()] = p.readGrad(q.name());
  int checked = 0;
  for (const schema::Parameter &q : p.program.parameters()) {
    const std::vector<double> &g = analytic[q.name()];
    std::vector<double> w = p.readIndex(int(q.buffer()));
    double num = 0, den = 0;
    size_t stride = std::max<size_t>(1, w.size() / 16);
    for (size_t e = 0; e < w.size(); e += stride) {
      // Fourth-order central differences (truncation O(h^4), round-off ~1e-16/h).
      const double h = 1e-4, w0 = w[e];
      auto at = [&](double x) {
        w[e] = x;
        p.writeIndex(int(q.buffer()), w);
        return loss();
      };
      double fd = (8 * (at(w0 + h) - at(w0 - h)) - (at(w0 + 2 * h) - at(w0 - 2 * h))) / (12 * h);
      w[e] = w0;
      p.writeIndex(int(q.buffer()), w);
      num += (fd - g[e]) * (fd - g[e]);
      den += fd * fd;
    }
    double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
    // The key bias gets an exactly zero gradient (softmax is invariant to a shift shared by all
    // keys); both sides are then round-off, so it is checked in absolute terms.
    if (q.name().find("linear_k.bias") != std::string::npos) {
      EXPECT_LT(std::sqrt(den), 1e-9) << q.name();
      continue;
    }
    EXPECT_LT(rel, 1e-6) << q.name();
    EXPECT_GT(den, 0) << q.name() << ": sampled gradient is all zero";
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GradientCheck, ::testing::Values("tiny-gpt", "tiny-llama"));

std::map<std::string, std::vector<double>> grads(CompiledPlan &p) {
  std::map<std::string, std::vector<double>> g;
  for (const schema::Parameter &q : p.program.parameters())
    g[q.name()] = p.readGrad(q.name());
  return g;
}

std::map<std::string, std::vector<double>> params(CompiledPlan &p) {
  std::map<std::string, std::vector<double>> g;
  for (const schema::Parameter &q : p.program.parameters())
    g[q.name()] = p.readIndex(int(q.buffer()));
  return g;
}

TEST(GradientAccumulation, SplitsOfOneGlobalBatchGiveTheSameStep) {
  Samples s = randomSamples(8, 9, 37, 5);
  std::map<std::string, std::vector<double>> refG, refW;
  for (int64_t mbs : {8, 4, 2, 1}) {
    CompiledPlan p("tiny-llama", tinyFlags(mbs, 8, {"--lr", "1e-3"}));
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(rt::initializeParameters(p.ex(), 7).ok());
    p.step(s, 1e-3);
    auto g = grads(p), w = params(p);
    if (mbs == 8) {
      refG = g;
      refW = w;
      continue;
    }
    for (auto &[name, v] : g) {
      EXPECT_LT(relDiff(v, refG[name]), 1e-6) << "grad " << name << " micro batch " << mbs;
      EXPECT_LT(relDiff(w[name], refW[name]), 1e-6) << "param " << name << " micro batch " << mbs;
    }
  }
}

// The same microbatches in Megatron's order (F0 B0 F1 B1 ...) and all forwards first (F0..F3
// B0..B3): the same kernels on the same data, so the step is bitwise equal; the second holds every
// microbatch's stash at once, so its arena is larger by exactly 3 stash sets, and the runtime
// touches exactly the planned arena in both.
TEST(UnitSchedule, AllForwardFirstIsBitwiseEqualAndHoldsMMinusOneMoreStashes) {
  struct Variant {
    const char *preset;
    std::vector<std::string> flags;
  };
  const Variant variants[] = {
      {"tiny-llama", {"--lr", "1e-3"}},
      {"tiny-gpt",
       {"--lr", "1e-3", "--hidden-dropout", "0.1", "--attention-dropout", "0",
        "--no-calculate-per-token-loss"}},
  };
  const int64_t m = 4;
  Samples s = randomSamples(8, 9, 37, 11);
  for (const Variant &v : variants) {
    SCOPED_TRACE(v.preset);
    CompiledPlan a(v.preset, tinyFlags(2, 8, v.flags), "fp32", "no-pipelining");
    CompiledPlan b(v.preset, tinyFlags(2, 8, v.flags), "fp32", "all-forward-first");
    ASSERT_TRUE(a.ok() && b.ok());
    a.rngSeed = b.rngSeed = 1234;
    for (CompiledPlan *p : {&a, &b})
      ASSERT_TRUE(rt::initializeParameters(p->ex(), 7).ok());
    double la = 0, lb = 0;
    for (int it = 1; it <= 2; ++it) {
      la = a.step(s, 1e-3, it);
      lb = b.step(s, 1e-3, it);
      EXPECT_EQ(la, lb) << "loss, iteration " << it;
    }
    auto ga = grads(a), gb = grads(b), wa = params(a), wb = params(b);
    for (auto &[name, g] : ga) {
      EXPECT_EQ(g, gb[name]) << "grad " << name;
      EXPECT_EQ(wa[name], wb[name]) << "param " << name;
    }
    const schema::MemoryReport &ma = a.program.reports().memory(), &mb = b.program.reports().memory();
    EXPECT_EQ(ma.stash_slots(), 1u);
    EXPECT_EQ(mb.stash_slots(), uint32_t(m));
    ASSERT_GT(ma.stash_bytes_per_microbatch(), 0u);
    EXPECT_EQ(ma.stash_bytes_per_microbatch(), mb.stash_bytes_per_microbatch());
    EXPECT_EQ(b.program.arena_bytes() - a.program.arena_bytes(),
              uint64_t(m - 1) * ma.stash_bytes_per_microbatch());
    // The arena is the touched high-water mark rounded up to the planner's 64-byte alignment.
    auto aligned = [](uint64_t x) { return (x + 63) / 64 * 64; };
    EXPECT_EQ(aligned(a.ex().highWaterMark()), a.program.arena_bytes());
    EXPECT_EQ(aligned(b.ex().highWaterMark()), b.program.arena_bytes());
  }
}

TEST(GradientAccumulation, RaggedMasksPerTokenAndLegacy) {
  // 4 microbatches of 2 samples; microbatch 1 holds a single valid token.
  Samples s = randomSamples(8, 9, 37, 9);
  for (int64_t i = 2 * 9; i < 4 * 9; ++i)
    s.mask[i] = 0;
  s.mask[2 * 9 + 4] = 1;
  // Reference for the default mode: the whole global batch as one microbatch.
  CompiledPlan whole("tiny-llama", tinyFlags(8, 8, {"--lr", "0"}));
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE(rt::initializeParameters(whole.ex(), 7).ok());
  const double wholeLoss = whole.step(s, 0.0);
  auto exact = grads(whole);

  CompiledPlan split("tiny-llama", tinyFlags(2, 8, {"--lr", "0"}));
  ASSERT_TRUE(split.ok());
  ASSERT_TRUE(rt::initializeParameters(split.ex(), 7).ok());
  split.step(s, 0.0);
  for (auto &[name, v] : grads(split))
    EXPECT_LT(relDiff(v, exact[name]), 1e-6) << name;

  // Legacy: the mean over microbatches of each microbatch's own per-token-mean gradient.
  std::map<std::string, std::vector<double>> mean;
  double meanOfMeans = 0;
  for (int64_t i = 0; i < 4; ++i) {
    CompiledPlan one("tiny-llama", tinyFlags(2, 2, {"--lr", "0"}));
    ASSERT_TRUE(one.ok());
    ASSERT_TRUE(rt::initializeParameters(one.ex(), 7).ok());
    Samples mb;
    mb.n = 2;
    mb.seq = 9;
    mb.tokens.assign(s.tokens.begin() + i * 18, s.tokens.begin() + (i + 1) * 18);
    mb.labels.assign(s.labels.begin() + i * 18, s.labels.begin() + (i + 1) * 18);
    mb.mask.assign(s.mask.begin() + i * 18, s.mask.begin() + (i + 1) * 18);
    meanOfMeans += one.step(mb, 0.0) / 4;
    for (auto &[name, v] : grads(one)) {
      auto &acc = mean[name];
      acc.resize(v.size(), 0.0);
      for (size_t e = 0; e < v.size(); ++e)
        acc[e] += v[e] / 4;
    }
  }
  CompiledPlan legacy("tiny-llama", tinyFlags(2, 8, {"--lr", "0", "--no-calculate-per-token-loss"}));
  ASSERT_TRUE(legacy.ok());
  ASSERT_TRUE(rt::initializeParameters(legacy.ex(), 7).ok());
  const double legacyLoss = legacy.step(s, 0.0);
  // The logged loss is Megatron's in both modes: Sigma loss / Sigma tokens over the global batch
  // (the whole batch as one microbatch), not the mean of the microbatch means (microbatch 1's
  // single token weighs a quarter there).
  EXPECT_NEAR(legacyLoss, wholeLoss, 1e-6 * std::fabs(wholeLoss));
  EXPECT_GT(std::fabs(legacyLoss - meanOfMeans), 1e-3) << "the masks should separate the two";
  bool differs = false;
  for (auto &[name, v] : grads(legacy)) {
    EXPECT_LT(relDiff(v, mean[name]), 1e-6) << name;
    differs |= relDiff(v, exact[name]) > 1e-3;
  }
  EXPECT_TRUE(differs) << "the ragged masks should make the two normalisations differ";
}

size_t instructionCount(const schema::Program &p) {
  size_t n = 0;
  for (const schema::Function &f : p.functions())
    n += size_t(f.body_size());
  return n;
}

TEST(ProgramSize, GrowsAdditivelyInLayersAndMicrobatches) {
  std::map<std::pair<int64_t, int64_t>, size_t> count;
  for (int64_t layers : {2, 4})
    for (int64_t m : {2, 8}) {
      CompiledPlan p("tiny-llama", tinyFlags(1, m, {"--num-layers", std::to_string(layers)}));
      ASSERT_TRUE(p.ok());
      count[{layers, m}] = instructionCount(p.program);
    }
  // Adding layers costs the same whatever m is, and adding microbatches the same whatever L is.
  auto at = [&](int64_t l, int64_t m) { return count[std::make_pair(l, m)]; };
  EXPECT_EQ(at(4, 8) - at(2, 8), at(4, 2) - at(2, 2));
  EXPECT_EQ(at(4, 8) - at(4, 2), at(2, 8) - at(2, 2));
  // Per extra microbatch: a forward and a backward unit in train_step and a call in eval_step.
  EXPECT_EQ(at(2, 8) - at(2, 2), 18u);
}

TEST(Export, TagsInputBuffersWithTheirHostRoleAndMicrobatch) {
  auto exportBuffer = [](const std::string &name, std::string &error) {
    mlir::MLIRContext ctx;
    mlir::trainc::loadTraincDialects(ctx);
    std::string text = "module attributes {rt.arena_bytes = 64 : i64} {\n"
                       "  rt.buffer @" + name +
                       " input {offset = 0 : i64} : memref<2x3xi32>\n"
                       "  func.func @train_step() attributes {rt.entry} { return }\n}\n";
    mlir::OwningOpRef<mlir::ModuleOp> m = mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
    EXPECT_TRUE(m) << text;
    if (!m) { // no program to export (the failure above names the text)
      error = "parse failed";
      return mlir::FailureOr<::trainc::schema::Program>(mlir::failure());
    }
    mlir::ScopedDiagnosticHandler h(&ctx, [&](mlir::Diagnostic &d) {
      error = d.str();
      return mlir::success();
    });
    return mlir::trainc::exportProgram(*m);
  };
  std::string error;
  auto p = exportBuffer("position_ids.3", error);
  ASSERT_TRUE(mlir::succeeded(p)) << error;
  ASSERT_TRUE(p->buffers(0).has_host_input());
  EXPECT_EQ(p->buffers(0).host_input().role(), schema::POSITION_IDS);
  EXPECT_EQ(p->buffers(0).host_input().microbatch(), 3u);
  // A model.input the runtime cannot fill, and a name the lowering does not write.
  EXPECT_TRUE(mlir::failed(exportBuffer("segment_ids.0", error)));
  EXPECT_EQ(error, "'rt.buffer' op export: input buffer 'segment_ids.0': model.input "
                   "'segment_ids' is not an input the runtime fills (expected tokens, "
                   "position_ids, labels, loss_mask, rng or doc_start)");
  EXPECT_TRUE(mlir::failed(exportBuffer("tokens", error)));
  EXPECT_EQ(error, "'rt.buffer' op export: internal error: input buffer 'tokens' is not named "
                   "<model.input>.<microbatch>");
}

TEST(Export, CompiledPlansCarryTheTrainingPlan) {
  // Global batch 6 of micro batch 1 on one rank: 6 microbatches of tokens, position_ids, labels
  // and loss_mask.
  config::PlanConfig cfg;
  std::vector<schema::Program> ranks = CompiledPlan::compileAllRanks(
      "tiny-llama", {"--micro-batch-size", "1", "--global-batch-size", "6"}, &cfg);
  ASSERT_EQ(ranks.size(), 1u);
  const schema::Program *p = &ranks[0];
  ASSERT_TRUE(p->has_plan());
  EXPECT_EQ(p->plan().micro_batch_size(), 1u);
  EXPECT_EQ(p->plan().num_microbatches(), 6u);
  EXPECT_EQ(p->plan().global_batch_size(), 6u);
  EXPECT_EQ(int64_t(p->plan().seq_length()), cfg.model.seq_length);
  EXPECT_EQ(int64_t(p->plan().vocab_size()), cfg.model.vocab_size);
  std::map<schema::InputRole, int> perRole;
  for (const schema::Buffer &b : p->buffers())
    if (b.kind() == schema::INPUT) {
      ASSERT_TRUE(b.has_host_input()) << b.name();
      EXPECT_EQ(b.name(), absl::StrCat(absl::AsciiStrToLower(
                                           schema::InputRole_Name(b.host_input().role())),
                                       ".", b.host_input().microbatch()));
      ++perRole[b.host_input().role()];
    }
  std::map<schema::InputRole, int> want = {
      {schema::TOKENS, 6}, {schema::POSITION_IDS, 6}, {schema::LABELS, 6}, {schema::LOSS_MASK, 6}};
  EXPECT_EQ(perRole, want);
  // The metadata stays, for provenance and trainrun's flag defaults.
  EXPECT_EQ(p->metadata().at("training.micro_batch_size"), "1");
}

} // namespace

TEST(ShardingRule, VerifierNamesTheInconsistentOperandAndDim) {
  // A linear's rule with one thing wrong at a time must be refused with the operand named.
  MLIRContext ctx;
  mlir::trainc::loadTraincDialects(ctx);
  const char *text = R"mlir(
    func.func @f(%x: tensor<2x5x8xf32>, %w: tensor<6x8xf32>) -> tensor<2x5x6xf32> {
      %y = model.linear %x, %w : (tensor<2x5x8xf32>, tensor<6x8xf32>) -> tensor<2x5x6xf32>
      return %y : tensor<2x5x6xf32>
    })mlir";
  OwningOpRef<ModuleOp> m = parseSourceString<ModuleOp>(text, &ctx);
  ASSERT_TRUE(m);
  Operation *linear = nullptr;
  m->walk([&](model::LinearOp op) { linear = op; });
  ASSERT_NE(linear, nullptr);
  auto rule = [&] { return cast<model::ShardingRuleOpInterface>(linear).getShardingRule(); };
  std::string message;
  ScopedDiagnosticHandler h(&ctx, [&](Diagnostic &d) {
    message = d.str();
    return success();
  });
  EXPECT_TRUE(succeeded(model::verifyShardingRule(linear, rule())));
  model::ShardingRule wrongExtent = rule();
  wrongExtent.loops[3].extent = 7; // k
  EXPECT_TRUE(failed(model::verifyShardingRule(linear, wrongExtent)));
  EXPECT_NE(message.find("loop k has extent 7 but indexes dim 2 of operand 0 of size 8"),
            std::string::npos)
      << message;
  model::ShardingRule missing = rule();
  missing.operands.pop_back();
  EXPECT_TRUE(failed(model::verifyShardingRule(linear, missing)));
  EXPECT_NE(message.find("1 operand and 1 result maps for 2 operands and 1 results"),
            std::string::npos)
      << message;
  model::ShardingRule outside = rule();
  outside.results[0] = AffineMap::get(
      4, 0,
      {getAffineDimExpr(0, &ctx), getAffineDimExpr(1, &ctx), getAffineDimExpr(2, &ctx) + 1},
      &ctx);
  EXPECT_TRUE(failed(model::verifyShardingRule(linear, outside)));
  EXPECT_NE(message.find("dim 2 of result 0 is indexed from 1 to 6, outside its size 6"),
            std::string::npos)
      << message;
}

namespace {

/// The `approximate` attribute of every gelu / gelu_backward kernel of `p` (-1 when absent).
std::set<int64_t> geluForms(const schema::Program &p) {
  std::set<int64_t> forms;
  for (const schema::Function &f : p.functions())
    for (const schema::Instruction &ins : f.body())
      if (ins.has_kernel() && (ins.kernel().kernel() == "gelu" ||
                               ins.kernel().kernel() == "gelu_backward")) {
        int64_t v = -1;
        for (const schema::Attr &a : ins.kernel().attrs())
          if (a.name() == "approximate")
            v = a.value().i();
        forms.insert(v);
      }
  return forms;
}

TEST(Gelu, MegatronsFormPerFlagCombination) {
  // Megatron (mlp.py, fused_bias_gelu.py, arguments.py): with biases and the default fusion the
  // MLP runs bias_gelu (the tanh form); --no-bias-gelu-fusion or --disable-bias-linear (which
  // turns the fusion off) leave F.gelu (erf); --openai-gelu is the tanh form whatever the fusion.
  struct Case {
    std::vector<std::string> flags;
    bool tanh;
  };
  const Case cases[] = {{{}, true},
                        {{"--no-bias-gelu-fusion"}, false},
                        {{"--disable-bias-linear"}, false},
                        {{"--openai-gelu"}, true},
                        {{"--openai-gelu", "--no-bias-gelu-fusion"}, true}};
  Samples s = randomSamples(4, 9, 37, 21);
  std::vector<double> losses;
  for (const Case &c : cases) {
    // A wide init makes the MLP's inputs O(1), where the two forms differ visibly.
    std::vector<std::string> flags = {"--lr", "0", "--attention-dropout", "0",
                                      "--hidden-dropout", "0", "--init-method-std", "0.5"};
    flags.insert(flags.end(), c.flags.begin(), c.flags.end());
    SCOPED_TRACE(::testing::PrintToString(c.flags));
    CompiledPlan p("tiny-gpt", tinyFlags(2, 4, flags), "fp64");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(geluForms(p.program), std::set<int64_t>{c.tanh ? 1 : 0});
    EXPECT_EQ(p.program.metadata().at("model.gelu_tanh"), c.tanh ? "true" : "false");
    ASSERT_TRUE(rt::initializeParameters(p.ex(), 5).ok());
    losses.push_back(p.step(s, 0.0));
  }
  // The same tanh function with and without the fusion flags; erf differs.
  EXPECT_EQ(losses[0], losses[3]);
  EXPECT_EQ(losses[0], losses[4]);
  EXPECT_GT(std::fabs(losses[0] - losses[1]), 1e-6) << losses[0] << " " << losses[1];
}

} // namespace
