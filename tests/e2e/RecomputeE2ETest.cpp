//===- RecomputeE2ETest.cpp - Activation recompute on the runtime ---------===//
//
// - Full recompute (uniform groups of 1 and 2 layers, block of the first layer) and selective
//   recompute (core attention, with attention dropout) train tiny-gpt with hidden dropout 0.1
//   (fp32) and tiny-llama to bitwise the same losses, gradients and weights as no recompute over
//   several iterations: the replayed layer forward / attention draws the same dropout masks.
// - The plan with recompute stashes less per microbatch, adds hardware FLOPs only (model FLOPs
//   equal the plan's without recompute), and the runtime touches exactly the planned arena.
// - llama3-8b's stash, peak and added FLOPs against closed forms; --recompute-memory-budget's
//   choice fits, adds fewer FLOPs than full recompute, and an impossible budget is named.
//
//===----------------------------------------------------------------------===//

#include "CompiledPlan.h"

#include "mlir/IR/Diagnostics.h"

#include <cstdio>
#include <map>

using namespace trainc;
using namespace trainc::test;

namespace {

std::vector<std::string> recomputeFlags(std::vector<std::string> extra) {
  std::vector<std::string> f = {"--micro-batch-size", "2",   "--global-batch-size", "4",
                                "--lr",               "1e-3", "--hidden-dropout",   "0.1",
                                "--attention-dropout", "0"};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

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

struct Method {
  const char *name;
  const char *preset;
  std::vector<std::string> flags;
  bool smallerArena = true; // false: one group over every layer replays them all at once
  std::vector<std::string> shared = {}; // flags of both plans
};

class Recompute : public ::testing::TestWithParam<Method> {};

TEST_P(Recompute, IsBitwiseEqualToNoRecomputeAndTouchesThePlannedArena) {
  const Method m = GetParam();
  std::vector<std::string> withRecompute = m.shared;
  withRecompute.insert(withRecompute.end(), m.flags.begin(), m.flags.end());
  CompiledPlan none(m.preset, recomputeFlags(m.shared));
  CompiledPlan full(m.preset, recomputeFlags(withRecompute));
  ASSERT_TRUE(none.ok() && full.ok());
  none.rngSeed = full.rngSeed = 1234;
  for (CompiledPlan *p : {&none, &full})
    ASSERT_TRUE(rt::initializeParameters(p->ex(), 7).ok());
  for (int it = 1; it <= 3; ++it) {
    Samples s = randomSamples(4, none.plan.model.seq_length, none.plan.model.vocab_size,
                              uint32_t(20 + it));
    EXPECT_EQ(none.step(s, 1e-3, it), full.step(s, 1e-3, it)) << "loss, iteration " << it;
    auto gn = grads(none), gf = grads(full);
    for (auto &[name, g] : gn)
      EXPECT_EQ(g, gf[name]) << "grad " << name << ", iteration " << it;
  }
  auto wn = params(none), wf = params(full);
  for (auto &[name, w] : wn)
    EXPECT_EQ(w, wf[name]) << "param " << name;

  const schema::Reports &rn = none.program.reports(), &rf = full.program.reports();
  EXPECT_LT(rf.memory().stash_bytes_per_microbatch(), rn.memory().stash_bytes_per_microbatch());
  // One group over every layer (uniform 2 on two layers) replays all residuals at once at the
  // start of the backward, so its peak is no-recompute's; smaller groups lower it.
  EXPECT_LE(full.program.arena_bytes(), none.program.arena_bytes());
  if (m.smallerArena)
    EXPECT_LT(full.program.arena_bytes(), none.program.arena_bytes());
  // Recompute adds hardware FLOPs (the replayed forward) but no model FLOPs.
  EXPECT_GT(rf.flops().flops_per_iteration(), rn.flops().flops_per_iteration());
  EXPECT_EQ(rf.flops().model_flops_per_iteration(), rn.flops().flops_per_iteration());
  EXPECT_EQ(rn.flops().model_flops_per_iteration(), rn.flops().flops_per_iteration());
  // The arena is the touched high-water mark rounded up to the planner's 64-byte alignment.
  auto aligned = [](uint64_t x) { return (x + 63) / 64 * 64; };
  EXPECT_EQ(aligned(full.ex().highWaterMark()), full.program.arena_bytes());
  EXPECT_EQ(aligned(none.ex().highWaterMark()), none.program.arena_bytes());
}

std::string methodName(const ::testing::TestParamInfo<Method> &i) {
  return i.param.name;
}

INSTANTIATE_TEST_SUITE_P(
    Methods, Recompute,
    ::testing::Values(
        Method{"gpt_uniform1", "tiny-gpt",
               {"--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"}},
        Method{"gpt_uniform2", "tiny-gpt",
               {"--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "2"},
               false},
        Method{"gpt_block1", "tiny-gpt",
               {"--recompute-granularity", "full", "--recompute-method", "block",
                "--recompute-num-layers", "1"}},
        Method{"llama_uniform1", "tiny-llama",
               {"--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"}},
        // Selective (core attention), with attention dropout on: the replayed kernel draws the
        // forward's mask.
        Method{"gpt_selective_attention_dropout", "tiny-gpt",
               {"--recompute-activations"}, true, {"--attention-dropout", "0.1"}},
        Method{"llama_selective", "tiny-llama", {"--recompute-granularity", "selective"}},
        // Megatron's --recompute-modules mlp: linear_fc1 and the activation (GeLU with bias,
        // SwiGLU) re-run from the pre-MLP norm output.
        Method{"gpt_selective_mlp", "tiny-gpt",
               {"--recompute-granularity", "selective", "--recompute-modules", "mlp"}},
        Method{"llama_selective_attn_mlp", "tiny-llama",
               {"--recompute-granularity", "selective", "--recompute-modules", "core_attn",
                "mlp"}}),
    methodName);

/// The reports of the llama3-8b preset compiled at micro batch 1, seq 4096 (no run: fp32 is 171
/// GB), with the given recompute flags.
schema::Reports llama8b(std::vector<std::string> extra, config::PlanConfig *plan) {
  std::vector<std::string> f = {"--micro-batch-size", "1", "--global-batch-size", "1",
                                "--seq-length", "4096", "--eval-iters", "0"};
  f.insert(f.end(), extra.begin(), extra.end());
  std::vector<schema::Program> all = CompiledPlan::compileAllRanks("llama3-8b", f, plan);
  EXPECT_EQ(all.size(), 1u);
  return all.empty() ? schema::Reports() : all.front().reports();
}

// Closed forms of the stash (fp32 bytes, T = tokens of a microbatch): a layer's residuals are
// R = 4T (5h + 2 kv + 3F + heads + 2) (both norm outputs and rstds, roped q and k, v, the
// attention output and lse, the residual sum, fc1's and swiglu's outputs). Full recompute keeps
// one input per layer and the head's residuals (last layer output, final norm output and rstd,
// logits, cross-entropy lse): 4T ((L + 2) h + V + 2); no recompute adds L x R. Selective drops the
// attention output and lse of every layer: L x 4T (h + heads). The replay adds one layer forward
// per layer (full) or one causal attention forward (selective) to the hardware FLOPs only.
TEST(RecomputeLlama3_8B, StashPeakAndFlopsMatchClosedForms) {
  config::PlanConfig plan;
  schema::Reports none = llama8b({}, &plan);
  schema::Reports full = llama8b({"--recompute-granularity", "full", "--recompute-method",
                                  "uniform", "--recompute-num-layers", "1"},
                                 &plan);
  schema::Reports sel = llama8b({"--recompute-activations"}, &plan);
  const config::ModelConfig &m = plan.model;
  const double T = 4096, h = double(m.hidden_size), L = double(m.num_layers),
               a = double(m.num_attention_heads), F = double(m.ffn_hidden_size),
               kv = double(m.num_query_groups * m.kv_channels), V = double(m.padded_vocab_size);
  ASSERT_EQ(m.num_query_groups * m.kv_channels, 1024);
  const double R = 4 * T * (5 * h + 2 * kv + 3 * F + a + 2);
  EXPECT_EQ(double(full.memory().stash_bytes_per_microbatch()), 4 * T * ((L + 2) * h + V + 2));
  EXPECT_EQ(double(none.memory().stash_bytes_per_microbatch()),
            double(full.memory().stash_bytes_per_microbatch()) + L * R);
  EXPECT_EQ(double(none.memory().stash_bytes_per_microbatch()) -
                double(sel.memory().stash_bytes_per_microbatch()),
            L * 4 * T * (h + a));
  // The peak: full recompute's is one replayed layer's working set above the stash at most where
  // a layer's backward runs; for this model the output layer's (fp32 logits of 128256 columns)
  // is larger, and there no recompute holds every layer's residuals on top: exactly L x R more.
  EXPECT_EQ(double(none.memory().flowing_peak_bytes() - full.memory().flowing_peak_bytes()),
            L * R);
  EXPECT_GE(double(full.memory().flowing_peak_bytes()),
            double(full.memory().stash_bytes_per_microbatch()) + R);
  EXPECT_LT(sel.memory().flowing_peak_bytes(), none.memory().flowing_peak_bytes());
  // Selective mlp drops fc1's and the activation's outputs: L x 4T x 3F, for one fc1 GEMM each.
  schema::Reports mlp = llama8b({"--recompute-granularity", "selective", "--recompute-modules",
                                 "mlp"},
                                &plan);
  EXPECT_EQ(double(none.memory().stash_bytes_per_microbatch()) -
                double(mlp.memory().stash_bytes_per_microbatch()),
            L * 4 * T * 3 * F);
  // With a small head (vocab 256) the peak is one layer's backward: the stash plus one layer's
  // working set, its replayed residuals R, its two norm weights' gradients (4 x 2h bytes: the
  // layer's backward returns them; the weight-gradient GEMMs accumulate straight into main_grad,
  // so no 4 x (matrix parameters) temporaries) and 4T (3F + 2h) of gradient temporaries (d fc1
  // output, d swiglu output, two d hidden).
  schema::Reports smallHead = llama8b({"--vocab-size", "256", "--recompute-granularity", "full",
                                       "--recompute-method", "uniform",
                                       "--recompute-num-layers", "1"},
                                      &plan);
  EXPECT_EQ(double(smallHead.memory().flowing_peak_bytes()),
            double(smallHead.memory().stash_bytes_per_microbatch()) + R + 4 * (2 * h) +
                4 * T * (3 * F + 2 * h));
  const double layerForward = 2 * T * h * (2 * h + 2 * kv + 3 * F) + 2 * T * T * h;
  auto added = [](const schema::Reports &r) {
    return r.flops().flops_per_iteration() - r.flops().model_flops_per_iteration();
  };
  EXPECT_EQ(none.flops().model_flops_per_iteration(), none.flops().flops_per_iteration());
  EXPECT_EQ(full.flops().model_flops_per_iteration(), none.flops().flops_per_iteration());
  EXPECT_EQ(sel.flops().model_flops_per_iteration(), none.flops().flops_per_iteration());
  EXPECT_NEAR(added(full), L * layerForward, 1e-9 * L * layerForward);
  EXPECT_NEAR(added(sel), L * 2 * T * T * h, 1e-9 * L * 2 * T * T * h);
  EXPECT_NEAR(added(mlp), L * 2 * T * h * 2 * F, 1e-9 * L * 2 * T * h * 2 * F);
  std::printf("llama3-8b mbs 1 seq 4096 fp32: flowing peak / stash / added FLOPs\n"
              "  none      %llu / %llu / 0\n  selective %llu / %llu / %.4e\n"
              "  full      %llu / %llu / %.4e\n",
              (unsigned long long)none.memory().flowing_peak_bytes(),
              (unsigned long long)none.memory().stash_bytes_per_microbatch(),
              (unsigned long long)sel.memory().flowing_peak_bytes(),
              (unsigned long long)sel.memory().stash_bytes_per_microbatch(), added(sel),
              (unsigned long long)full.memory().flowing_peak_bytes(),
              (unsigned long long)full.memory().stash_bytes_per_microbatch(), added(full));
}

// --recompute-memory-budget on tiny-gpt (hidden dropout 0.1): a budget between the selective and
// the no-recompute arenas gets a plan whose arena fits and that adds fewer FLOPs than full
// recompute, and trains bitwise like no recompute; a budget below full recompute's arena is
// refused naming it.
TEST(RecomputeBudget, ChoiceFitsAddsLessThanFullAndIsBitwiseEqual) {
  CompiledPlan none("tiny-gpt", recomputeFlags({}));
  CompiledPlan sel("tiny-gpt", recomputeFlags({"--recompute-activations"}));
  CompiledPlan full("tiny-gpt", recomputeFlags({"--recompute-granularity", "full",
                                                "--recompute-method", "uniform",
                                                "--recompute-num-layers", "1"}));
  ASSERT_TRUE(none.ok() && sel.ok() && full.ok());
  const uint64_t budget = (sel.program.arena_bytes() + none.program.arena_bytes()) / 2;
  ASSERT_LT(sel.program.arena_bytes(), none.program.arena_bytes());
  CompiledPlan chosen("tiny-gpt",
                      recomputeFlags({"--recompute-memory-budget", std::to_string(budget)}));
  ASSERT_TRUE(chosen.ok());
  EXPECT_LE(chosen.program.arena_bytes(), budget);
  auto added = [](CompiledPlan &p) {
    return p.program.reports().flops().flops_per_iteration() -
           p.program.reports().flops().model_flops_per_iteration();
  };
  EXPECT_GT(added(chosen), 0);
  EXPECT_LT(added(chosen), added(full));
  none.rngSeed = chosen.rngSeed = 1234;
  for (CompiledPlan *p : {&none, &chosen})
    ASSERT_TRUE(rt::initializeParameters(p->ex(), 7).ok());
  for (int it = 1; it <= 2; ++it) {
    Samples s = randomSamples(4, none.plan.model.seq_length, none.plan.model.vocab_size,
                              uint32_t(40 + it));
    EXPECT_EQ(none.step(s, 1e-3, it), chosen.step(s, 1e-3, it)) << "loss, iteration " << it;
  }
  auto gn = grads(none), gc = grads(chosen);
  for (auto &[name, g] : gn)
    EXPECT_EQ(g, gc[name]) << "grad " << name;
  auto aligned = [](uint64_t x) { return (x + 63) / 64 * 64; };
  EXPECT_EQ(aligned(chosen.ex().highWaterMark()), chosen.program.arena_bytes());

  // Too small: the error names the smallest feasible budget, full recompute's arena.
  std::string errors;
  mlir::MLIRContext ctx;
  mlir::ScopedDiagnosticHandler h(&ctx, [&](mlir::Diagnostic &d) {
    errors += d.str();
    return mlir::success();
  });
  std::optional<config::ModelConfig> base = config::findPreset("tiny-gpt");
  config::FlagParseOptions po;
  po.base_model = &*base;
  llvm::Expected<config::PlanConfig> cfg = config::parseMegatronFlags(
      recomputeFlags({"--recompute-memory-budget", std::to_string(full.program.arena_bytes() - 1)}),
      po);
  ASSERT_TRUE(bool(cfg)) << llvm::toString(cfg.takeError());
  mlir::trainc::CompileOptions o;
  EXPECT_TRUE(mlir::failed(mlir::trainc::compilePlan(ctx, *cfg, o)));
  EXPECT_NE(errors.find("--recompute-memory-budget " +
                        std::to_string(full.program.arena_bytes() - 1) +
                        " bytes is below every plan's arena; the smallest feasible budget is " +
                        std::to_string(full.program.arena_bytes()) + " bytes"),
            std::string::npos)
      << errors;
}

// Full recompute under the test-only all-forward-first order (both microbatches' stashes live
// at once): bitwise the same step, and the arena larger by exactly one more stash set, the
// recomputed plan's smaller one.
TEST(RecomputeSchedules, AllForwardFirstIsBitwiseEqualAndHoldsOneMoreStash) {
  const std::vector<std::string> full = {"--recompute-granularity", "full", "--recompute-method",
                                         "uniform", "--recompute-num-layers", "1"};
  CompiledPlan a("tiny-gpt", recomputeFlags(full), "fp32", "no-pipelining");
  CompiledPlan b("tiny-gpt", recomputeFlags(full), "fp32", "all-forward-first");
  ASSERT_TRUE(a.ok() && b.ok());
  a.rngSeed = b.rngSeed = 1234;
  for (CompiledPlan *p : {&a, &b})
    ASSERT_TRUE(rt::initializeParameters(p->ex(), 7).ok());
  Samples s = randomSamples(4, a.plan.model.seq_length, a.plan.model.vocab_size, 51);
  EXPECT_EQ(a.step(s, 1e-3, 1), b.step(s, 1e-3, 1));
  auto ga = grads(a), gb = grads(b);
  for (auto &[name, g] : ga)
    EXPECT_EQ(g, gb[name]) << "grad " << name;
  const schema::MemoryReport &ma = a.program.reports().memory();
  EXPECT_EQ(b.program.reports().memory().stash_slots(), 2u);
  EXPECT_EQ(b.program.arena_bytes() - a.program.arena_bytes(), ma.stash_bytes_per_microbatch());
  auto aligned = [](uint64_t x) { return (x + 63) / 64 * 64; };
  EXPECT_EQ(aligned(b.ex().highWaterMark()), b.program.arena_bytes());
}

} // namespace
