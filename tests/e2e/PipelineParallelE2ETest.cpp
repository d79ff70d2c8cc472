//===- PipelineParallelE2ETest.cpp - Pipeline plans vs the single-rank plan ===//
//
// Pipeline-parallel plans (1F1B, pp 2 and 4, with and without dp) are run with one thread per
// rank over Gloo (loopback, a TcpStore) and compared with the single-rank plan of the same global
// batch over 10 iterations: losses, grad norms and every parameter (taken from the stage that
// holds it). Tiny Llama (untied output layer) and tiny GPT (output layer tied to the word
// embedding: the copies on the first and last stage must stay bitwise equal).
//
//===----------------------------------------------------------------------===//

#include "MultiRank.h"

#include "runtime/comm/GlooCommunicator.h"
#include "runtime/comm/TcpStore.h"
#include "runtime/core/Program.h"
#include "runtime/core/ProgramBuilder.h"
#include "compiler/PipelineTimeline.h"
#include "compiler/VerifyPlan.h"
#include "passes/Pipeline/Passes.h"

#include "llvm/ADT/StringRef.h"

#include <functional>
#include <map>
#include <thread>

using namespace trainc;
using namespace trainc::test;

namespace {

std::vector<std::string> flags(int64_t pp, int64_t dp, int64_t mbs, int64_t gbs,
                               std::vector<std::string> extra = {}, int64_t layers = 4) {
  std::vector<std::string> f = {"--pipeline-model-parallel-size", std::to_string(pp),
                                "--num-layers", std::to_string(layers)};
  f.insert(f.end(), extra.begin(), extra.end());
  return multiRankFlags(dp, mbs, gbs, f);
}

struct History {
  std::vector<double> losses, norms;
  /// Every parameter at the end, from the rank holding it (the first such rank).
  std::map<std::string, std::vector<double>> params;
};

int64_t coordOf(const schema::Program &p, const std::string &axis) {
  for (int a = 0; a < p.mesh().axis_names_size(); ++a)
    if (p.mesh().axis_names(a) == axis)
      return p.mesh().coords(a);
  return 0;
}

/// Trains `iters` iterations; every rank in its own thread over Gloo when the plan has more than
/// one. Checks that every rank logs the same losses and grad norms and that a parameter held by
/// several ranks (dp replicas, the tied copies) is bitwise equal on all of them.
History train(const std::string &preset, const std::vector<std::string> &f, int64_t mbs,
              const std::vector<Samples> &batches, int64_t iters) {
  config::PlanConfig plan;
  std::vector<schema::Program> programs = CompiledPlan::compileAllRanks(preset, f, &plan);
  const int64_t world = int64_t(programs.size());
  if (world == 0)
    return {};
  const int64_t dp = plan.parallel.data_parallel_size;
  std::vector<History> hist(static_cast<size_t>(world));
  std::unique_ptr<rt::TcpStoreServer> store;
  if (world > 1) {
    auto s = rt::TcpStoreServer::start("127.0.0.1", 0, kToken);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok())
      return {};
    store = std::move(*s);
  }
  auto rankMain = [&](int64_t r) {
    std::unique_ptr<rt::Communicator> comm;
    if (world == 1)
      comm = rt::createLocalCommunicator();
    else if (!(comm = glooRank(r, world, store->port())))
      return;
    CompiledPlan p(plan, programs[size_t(r)], std::move(comm));
    if (!p.ok())
      return;
    EXPECT_TRUE(rt::initializeParameters(p.ex(), 17).ok());
    History &h = hist[size_t(r)];
    const int64_t d = coordOf(programs[size_t(r)], "dp");
    for (int64_t it = 0; it < iters; ++it) {
      h.losses.push_back(p.step(rankSamples(batches[size_t(it)], dp, d, mbs), 3e-3,
                                double(it + 1), 0.1));
      h.norms.push_back(p.read("grad_norm")[0]);
    }
    for (const schema::Parameter &q : p.program.parameters())
      h.params[q.name()] = p.readParam(q.name());
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  History all = hist[0];
  for (int64_t r = 1; r < world; ++r) {
    EXPECT_EQ(hist[size_t(r)].losses, hist[0].losses) << "rank " << r;
    EXPECT_EQ(hist[size_t(r)].norms, hist[0].norms) << "rank " << r;
    for (auto &[name, w] : hist[size_t(r)].params) {
      auto [it, fresh] = all.params.try_emplace(name, w);
      if (!fresh) // a dp replica or the tied copy on another stage: bitwise equal
        EXPECT_EQ(w, it->second) << "rank " << r << " " << name;
    }
  }
  return all;
}

void expectClose(const History &h, const History &ref, const std::string &what) {
  ASSERT_EQ(h.losses.size(), ref.losses.size()) << what;
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_LT(rel(h.losses[i], ref.losses[i]), 1e-5) << what << " loss at iteration " << i + 1;
    EXPECT_LT(rel(h.norms[i], ref.norms[i]), 1e-5) << what << " grad norm at iteration " << i + 1;
  }
  ASSERT_EQ(h.params.size(), ref.params.size()) << what;
  for (auto &[name, w] : ref.params) {
    ASSERT_TRUE(h.params.count(name)) << what << " has no " << name;
    // The key bias's gradient is zero but for rounding (softmax is invariant to a shift of every
    // key's score by the same query's q.b_k): Adam normalises that noise into full steps, so the
    // bias follows the noise of each plan's summation order.
    if (llvm::StringRef(name).ends_with("linear_k.bias"))
      continue;
    EXPECT_LT(relDiff(h.params.at(name), w), 1e-5) << what << " " << name << " at the end";
  }
}

struct Variant {
  std::string preset;
  int64_t pp, dp, m;
  bool distributedOptimizer = false;
  /// Megatron's uneven split: this many layers on the first stage (0: even).
  int64_t firstStageLayers = 0;
  /// Model chunks per stage (--virtual-pipeline-model-parallel-size; interleaved 1F1B when > 1).
  int64_t vpp = 1;
  int64_t layers = 4;
  /// --pipeline-schedule ("": Megatron's choice from the flags).
  std::string schedule;
};

void PrintTo(const Variant &v, std::ostream *os) {
  *os << v.preset << " pp " << v.pp << " dp " << v.dp << " m " << v.m
      << (v.distributedOptimizer ? " zero-1" : "")
      << (v.firstStageLayers ? " first stage " + std::to_string(v.firstStageLayers) : "")
      << (v.vpp > 1 ? " vpp " + std::to_string(v.vpp) : "") << " layers " << v.layers
      << (v.schedule.empty() ? "" : " " + v.schedule);
}

class PipelineEquivalence : public ::testing::TestWithParam<Variant> {};

TEST_P(PipelineEquivalence, MatchesTheSingleRankPlan) {
  const Variant v = GetParam();
  const int64_t mbs = 1, iters = 10, gbs = mbs * v.dp * v.m;
  std::vector<Samples> batches = makeBatches(iters, gbs, 211);
  History ref = train(v.preset, flags(1, 1, mbs, gbs, {}, v.layers), mbs, batches, iters);
  ASSERT_EQ(ref.losses.size(), size_t(iters));
  std::vector<std::string> extra;
  if (v.distributedOptimizer)
    extra = {"--use-distributed-optimizer", "--ddp-bucket-size", "301"};
  if (v.firstStageLayers > 0) {
    extra.push_back("--decoder-first-pipeline-num-layers");
    extra.push_back(std::to_string(v.firstStageLayers));
  }
  if (v.vpp > 1) {
    extra.push_back("--virtual-pipeline-model-parallel-size");
    extra.push_back(std::to_string(v.vpp));
  }
  if (!v.schedule.empty()) {
    extra.push_back("--pipeline-schedule");
    extra.push_back(v.schedule);
  }
  History h = train(v.preset, flags(v.pp, v.dp, mbs, gbs, extra, v.layers), mbs, batches, iters);
  std::ostringstream what;
  PrintTo(v, &what);
  expectClose(h, ref, what.str());
}

std::string variantName(const ::testing::TestParamInfo<Variant> &i) {
  std::string p = i.param.preset;
  std::replace(p.begin(), p.end(), '-', '_');
  return p + "_pp" + std::to_string(i.param.pp) + "_dp" + std::to_string(i.param.dp) + "_m" +
         std::to_string(i.param.m) + (i.param.distributedOptimizer ? "_zero1" : "") +
         (i.param.firstStageLayers ? "_first" + std::to_string(i.param.firstStageLayers) : "") +
         (i.param.vpp > 1 ? "_vpp" + std::to_string(i.param.vpp) : "") +
         (i.param.layers != 4 ? "_layers" + std::to_string(i.param.layers) : "") +
         (i.param.schedule == "zb-h1" ? "_zbh1" : "");
}

// m in {1, P, 2P + 1}: no steady state, a full pipeline, more microbatches than stages.
INSTANTIATE_TEST_SUITE_P(
    Plans, PipelineEquivalence,
    ::testing::Values(Variant{"tiny-llama", 2, 1, 1}, Variant{"tiny-llama", 2, 1, 2},
                      Variant{"tiny-llama", 2, 1, 5}, Variant{"tiny-gpt", 2, 1, 1},
                      Variant{"tiny-gpt", 2, 1, 2}, Variant{"tiny-gpt", 2, 1, 5},
                      Variant{"tiny-llama", 2, 2, 2}, Variant{"tiny-gpt", 2, 2, 5},
                      Variant{"tiny-llama", 2, 2, 5, true},
                      // Tied with the distributed optimizer: the shared embedding's own bucket.
                      Variant{"tiny-gpt", 2, 2, 5, true},
                      // Uneven [1, 3] of 4 layers (untied and tied).
                      Variant{"tiny-llama", 2, 1, 5, false, 1}, Variant{"tiny-gpt", 2, 1, 2, false, 1},
                      Variant{"tiny-llama", 4, 1, 1}, Variant{"tiny-llama", 4, 1, 4},
                      Variant{"tiny-llama", 4, 1, 9}, Variant{"tiny-gpt", 4, 1, 4},
                      Variant{"tiny-gpt", 4, 1, 9}),
    variantName);

// Interleaved 1F1B (Megatron's forward_backward_pipelining_with_interleaving), 2 model chunks
// per stage: pp 2 (4 layers, one per chunk) and pp 4 (8 layers), m in {P, 2P} (Megatron requires
// m % P == 0), untied and tied, and dp 2 with the distributed optimizer (untied).
INSTANTIATE_TEST_SUITE_P(
    Interleaved, PipelineEquivalence,
    ::testing::Values(Variant{"tiny-llama", 2, 1, 2, false, 0, 2},
                      Variant{"tiny-llama", 2, 1, 4, false, 0, 2},
                      Variant{"tiny-gpt", 2, 1, 2, false, 0, 2},
                      Variant{"tiny-gpt", 2, 1, 4, false, 0, 2},
                      Variant{"tiny-llama", 4, 1, 4, false, 0, 2, 8},
                      Variant{"tiny-llama", 4, 1, 8, false, 0, 2, 8},
                      Variant{"tiny-gpt", 4, 1, 4, false, 0, 2, 8},
                      Variant{"tiny-gpt", 4, 1, 8, false, 0, 2, 8},
                      Variant{"tiny-llama", 2, 2, 4, true, 0, 2}),
    variantName);

// ZB-H1 (backward split into B and W, Ws deferred): pp 2 and 4, m in {P, 2P + 1}, untied and
// tied, and pp 2 x dp 2 (plain and with the distributed optimizer): the single-rank plan's
// losses, grad norms and parameters.
Variant zb(std::string preset, int64_t pp, int64_t dp, int64_t m, bool zero1 = false) {
  Variant v{std::move(preset), pp, dp, m, zero1};
  v.schedule = "zb-h1";
  return v;
}
INSTANTIATE_TEST_SUITE_P(
    ZeroBubble, PipelineEquivalence,
    ::testing::Values(zb("tiny-llama", 2, 1, 2), zb("tiny-llama", 2, 1, 5),
                      zb("tiny-gpt", 2, 1, 2), zb("tiny-gpt", 2, 1, 5),
                      zb("tiny-llama", 4, 1, 4), zb("tiny-llama", 4, 1, 9),
                      zb("tiny-gpt", 4, 1, 4), zb("tiny-gpt", 4, 1, 9),
                      zb("tiny-llama", 2, 1, 1), zb("tiny-gpt", 2, 2, 5),
                      zb("tiny-llama", 2, 2, 5, true)),
    variantName);

/// The touched high-water mark of every rank after one iteration (all ranks over Gloo).
std::vector<uint64_t> highWaterMarks(const config::PlanConfig &plan,
                                     const std::vector<schema::Program> &programs,
                                     const Samples &batch, int64_t mbs) {
  const int64_t world = int64_t(programs.size());
  std::vector<uint64_t> hwm(size_t(world), 0);
  auto s = rt::TcpStoreServer::start("127.0.0.1", 0, kToken);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok())
    return hwm;
  std::unique_ptr<rt::TcpStoreServer> store = std::move(*s);
  auto rankMain = [&](int64_t r) {
    std::unique_ptr<rt::Communicator> comm = glooRank(r, world, store->port());
    if (!comm)
      return;
    CompiledPlan p(plan, programs[size_t(r)], std::move(comm));
    if (!p.ok())
      return;
    EXPECT_TRUE(rt::initializeParameters(p.ex(), 17).ok());
    p.step(rankSamples(batch, 1, 0, mbs), 3e-3, 1, 0.1);
    hwm[size_t(r)] = p.ex().highWaterMark();
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  return hwm;
}

// ZB-H1's memory against 1F1B's, per stage s of P, m = 2P + 1 (tiny GPT and Llama, pp 2 and 4).
// A ZB-H1 stash has a part only B reads (S_b bytes per microbatch, freed at B, held like 1F1B's
// whole stash: min(P - s, m) slots) and the rest (S_w: the forward tensors W reads and B's values
// for W, held until W: min(P, m) slots). So its stash exceeds 1F1B's (S_F in min(P - s, m) slots)
// by  min(P, m) S_w + min(P - s, m) (S_b - S_F),  i.e. P x B's values + s x the forward part W
// reads (S_b + S_w - S_F is B's values). Checked: the slot counts, that something is freed at B on
// every stage, the arena within 1F1B's + that extra + the largest non-stash flowing buffer (the
// planner's first-fit may place the unit workspaces differently around the split slots; measured
// -576 to +2944 bytes), and the runtime's touched high-water mark equal to the planned arena for
// both schedules. ZeroBubble/PipelineEquivalence checks the numbers against the single rank.
TEST(ZeroBubbleMemory, FreesTheBOnlyStashAtB) {
  auto aligned = [](uint64_t x) { return (x + 63) / 64 * 64; };
  for (const char *preset : {"tiny-gpt", "tiny-llama"})
    for (int64_t P : {2, 4}) {
      const int64_t m = 2 * P + 1, mbs = 1;
      SCOPED_TRACE(std::string(preset) + " pp " + std::to_string(P));
      config::PlanConfig onePlan, zbPlan;
      std::vector<schema::Program> one =
          CompiledPlan::compileAllRanks(preset, flags(P, 1, mbs, m), &onePlan);
      std::vector<schema::Program> zb = CompiledPlan::compileAllRanks(
          preset, flags(P, 1, mbs, m, {"--pipeline-schedule", "zb-h1"}), &zbPlan);
      ASSERT_EQ(one.size(), size_t(P));
      ASSERT_EQ(zb.size(), size_t(P));
      Samples batch = randomSamples(m, 9, 37, 5);
      std::vector<uint64_t> oneHwm = highWaterMarks(onePlan, one, batch, mbs);
      std::vector<uint64_t> zbHwm = highWaterMarks(zbPlan, zb, batch, mbs);
      for (int64_t r = 0; r < P; ++r) {
        const int64_t s = coordOf(one[size_t(r)], "pp");
        ASSERT_EQ(coordOf(zb[size_t(r)], "pp"), s);
        SCOPED_TRACE("stage " + std::to_string(s));
        const schema::MemoryReport &a = one[size_t(r)].reports().memory();
        const schema::MemoryReport &z = zb[size_t(r)].reports().memory();
        const int64_t held = std::min(P - s, m), all = std::min(P, m);
        EXPECT_EQ(int64_t(a.stash_slots()), held);
        EXPECT_EQ(int64_t(a.stash_b_slots()), 0);
        EXPECT_EQ(int64_t(z.stash_slots()), all);
        EXPECT_EQ(int64_t(z.stash_b_slots()), held);
        const int64_t sF = int64_t(a.stash_bytes_per_microbatch()),
                      sW = int64_t(z.stash_bytes_per_microbatch()),
                      sB = int64_t(z.stash_b_bytes_per_microbatch());
        EXPECT_GT(sB, 0) << "nothing of the stash is freed at B";
        EXPECT_GE(sB + sW, sF); // the same forward tensors, plus B's values for W
        const int64_t extra = all * sW + held * (sB - sF);
        int64_t largest = 0; // the largest non-stash flowing buffer of the ZB-H1 rank
        for (const schema::Buffer &b : zb[size_t(r)].buffers())
          if ((b.kind() == schema::ACTIVATION || b.kind() == schema::WORKSPACE) &&
              !llvm::StringRef(b.name()).starts_with("stash"))
            largest = std::max(largest, int64_t(b.byte_size()));
        EXPECT_LE(int64_t(zb[size_t(r)].arena_bytes()),
                  int64_t(one[size_t(r)].arena_bytes()) + extra + largest)
            << "1F1B arena " << one[size_t(r)].arena_bytes() << ", extra " << extra;
        // The schedule report's per-call FLOPs add up to the rank's FLOPs per iteration.
        for (const schema::Program *q : {&one[size_t(r)], &zb[size_t(r)]}) {
          const schema::ScheduleReport &sched = q->reports().schedule();
          ASSERT_EQ(sched.step_flops_size(), sched.steps_size());
          double sum = 0;
          for (double f : sched.step_flops())
            sum += f;
          EXPECT_NEAR(sum, q->reports().flops().flops_per_iteration(),
                      1e-9 * q->reports().flops().flops_per_iteration());
        }
        EXPECT_EQ(aligned(oneHwm[size_t(r)]), one[size_t(r)].arena_bytes());
        EXPECT_EQ(aligned(zbHwm[size_t(r)]), zb[size_t(r)].arena_bytes());
      }
    }
}

} // namespace

namespace {

/// Moves rank `rank`'s first backward unit call of train_step (a function named `...<suffix>`),
/// with the receives right before it (its gradient receive, which the lowering moved out of the
/// unit), before its first forward; `*at` is where the first moved instruction (the receive)
/// lands.
void backwardFirst(schema::Program &p, int *at, llvm::StringRef suffix = ".backward") {
  schema::Function &entry = *p.mutable_functions(int(p.entry()));
  auto callee = [&](int i) -> std::string {
    const schema::Instruction &ins = entry.body(i);
    return ins.has_call() ? p.functions(int(ins.call().function())).name() : "";
  };
  int f = -1, b = -1;
  for (int i = 0; i < entry.body_size(); ++i) {
    llvm::StringRef name = callee(i);
    if (f < 0 && name.ends_with(".forward"))
      f = i;
    if (b < 0 && name.ends_with(suffix))
      b = i;
  }
  ASSERT_TRUE(f >= 0 && b > f);
  int a = b;
  while (a - 1 > f && entry.body(a - 1).has_recv())
    --a;
  ASSERT_LT(a, b) << "no receive before the backward call";
  for (int k = a; k <= b; ++k) // instruction k moves to f + (k - a)
    for (int i = k; i > f + (k - a); --i)
      entry.mutable_body()->SwapElements(i, i - 1);
  *at = f;
}

/// The function called by the first instruction of `p`'s train_step at or after `at` that is
/// not a receive ("" if that instruction is no call).
std::string calleeAfterReceives(const schema::Program &p, int at) {
  const schema::Function &entry = p.functions(int(p.entry()));
  while (at < entry.body_size() && entry.body(at).has_recv())
    ++at;
  if (at >= entry.body_size() || !entry.body(at).has_call())
    return "";
  return p.functions(int(entry.body(at).call().function())).name();
}

/// A two-rank program whose train_step is `ops` in order: ("send" | "recv", elements), a
/// synchronous transfer of that many f32 elements with the other rank of group "pp" [0, 1], or
/// ("io", 0), a host_io instruction (which keeps a send and a receive around it apart).
schema::Program p2pProgram(int64_t rank, const std::vector<std::pair<std::string, int>> &ops) {
  rt::ProgramBuilder b;
  b.setMesh({"pp"}, {2}, rank);
  int pp = b.addGroup("pp", {0, 1});
  int x = b.addBuffer("x", schema::ACTIVATION, rt::DType::F32, {64});
  int step = b.addFunction("train_step");
  for (const auto &[kind, numel] : ops) {
    if (kind == "io") {
      b.hostIO(step, schema::FILL_INPUTS, "inputs");
      continue;
    }
    schema::Instruction &ins = *b.proto().mutable_functions(step)->add_body();
    schema::SendRecv &sr = kind == "send" ? *ins.mutable_send() : *ins.mutable_recv();
    sr.set_group(uint32_t(pp));
    sr.set_peer(1 - rank);
    *sr.mutable_operand() = rt::ProgramBuilder::buf(x, 0, {numel});
    ins.set_stream(1);
  }
  return b.finish();
}

/// Puts a host_io instruction between every send and the receive right after it in every
/// function: the same transfers in the same order, none of them batched as a pair.
void unpair(schema::Program &p) {
  for (schema::Function &fn : *p.mutable_functions()) {
    google::protobuf::RepeatedPtrField<schema::Instruction> body;
    for (int i = 0; i < fn.body_size(); ++i) {
      *body.Add() = fn.body(i);
      if (i + 1 < fn.body_size() && rt::runsAsSendRecvPair(fn.body(i), fn.body(i + 1))) {
        schema::Instruction &io = *body.Add();
        io.mutable_host_io()->set_kind(schema::FILL_INPUTS);
        io.mutable_host_io()->set_name("unpaired");
      }
    }
    *fn.mutable_body() = std::move(body);
  }
}

int countPairs(const schema::Program &p) {
  int n = 0;
  for (const schema::Function &fn : p.functions())
    for (int i = 0; i + 1 < fn.body_size(); ++i)
      n += rt::runsAsSendRecvPair(fn.body(i), fn.body(i + 1));
  return n;
}

// The whole-plan verifier simulates every rank's sends, receives and collectives together: the
// plan as compiled finishes; with rank 0's first backward moved before its forwards, rank 0
// waits for a gradient that rank 1 can only send after receiving rank 0's activation.
TEST(PipelineVerifier, RefusesAPlanThatDeadlocks) {
  config::PlanConfig plan;
  std::vector<schema::Program> programs =
      CompiledPlan::compileAllRanks("tiny-llama", flags(2, 1, 1, 2), &plan);
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_EQ(mlir::trainc::verifyPlan(programs), "");
  int at = -1;
  backwardFirst(programs[0], &at);
  std::string e = mlir::trainc::verifyPlan(programs);
  EXPECT_NE(e.find("entry 'train_step' can deadlock: rank 0 waits to receive 144 f32 elements "
                   "from rank 1 (train_step#" + std::to_string(at) + ")"),
            std::string::npos)
      << e;
  EXPECT_EQ(calleeAfterReceives(programs[0], at), "forward_backward.backward");
  EXPECT_NE(e.find("while rank 1 waits to receive 144 f32 elements from rank 0 (train_step#"),
            std::string::npos)
      << e;
}

// The interleaved plan (pp 2, 2 chunks, m 2, synchronous p2p) passes the whole-plan check; with
// rank 0's first backward unit (chunk 1's) moved before its forwards, rank 0 waits for a
// gradient of rank 1, which waits for rank 0's activation: refused, naming both ranks and
// instruction paths.
TEST(PipelineVerifier, RefusesAnInterleavedPlanThatDeadlocks) {
  config::PlanConfig plan;
  std::vector<schema::Program> programs = CompiledPlan::compileAllRanks(
      "tiny-llama",
      flags(2, 1, 1, 2,
            {"--virtual-pipeline-model-parallel-size", "2", "--no-overlap-p2p-communication"}),
      &plan);
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_EQ(plan.parallel.pipeline_schedule, "interleaved");
  EXPECT_EQ(mlir::trainc::verifyPlan(programs), "");
  int at = -1;
  backwardFirst(programs[0], &at);
  std::string e = mlir::trainc::verifyPlan(programs);
  EXPECT_NE(e.find("entry 'train_step' can deadlock: rank 0 waits to receive 144 f32 elements "
                   "from rank 1 (train_step#" + std::to_string(at) + ")"),
            std::string::npos)
      << e;
  EXPECT_EQ(calleeAfterReceives(programs[0], at), "forward_backward.chunk1.backward");
  EXPECT_NE(e.find("while rank 1 waits to receive 144 f32 elements from rank 0 (train_step#"),
            std::string::npos)
      << e;
}

// The ZB-H1 plan (pp 2, m 3) passes the whole-plan check; with rank 0's first B unit moved
// before its forwards, rank 0 waits for a gradient that rank 1 sends only after rank 0's
// activation: refused, naming both ranks and the B unit's instruction path.
TEST(PipelineVerifier, RefusesAZeroBubblePlanThatDeadlocks) {
  config::PlanConfig plan;
  std::vector<schema::Program> programs = CompiledPlan::compileAllRanks(
      "tiny-llama", flags(2, 1, 1, 3, {"--pipeline-schedule", "zb-h1"}), &plan);
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_EQ(plan.parallel.pipeline_schedule, "zb-h1");
  EXPECT_EQ(mlir::trainc::verifyPlan(programs), "");
  int at = -1;
  backwardFirst(programs[0], &at, ".backward.input");
  std::string e = mlir::trainc::verifyPlan(programs);
  EXPECT_NE(e.find("entry 'train_step' can deadlock: rank 0 waits to receive 144 f32 elements "
                   "from rank 1 (train_step#" + std::to_string(at) + ")"),
            std::string::npos)
      << e;
  EXPECT_EQ(calleeAfterReceives(programs[0], at), "forward_backward.backward.input");
}

/// The index in train_step of rank program `p`'s first instruction satisfying `pred`, or -1.
int firstInEntry(const schema::Program &p,
                 const std::function<bool(const schema::Instruction &)> &pred) {
  const schema::Function &entry = p.functions(int(p.entry()));
  for (int i = 0; i < entry.body_size(); ++i)
    if (pred(entry.body(i)))
      return i;
  return -1;
}

// With --overlap-p2p-comm (the interleaved default) the units' receives and sends are async
// instructions of train_step. The plan passes; with rank 0's first async receive moved to the
// front of train_step (before any of its sends: the communication stream runs in issue order,
// so the receive holds back rank 0's first activation), rank 0 waits for rank 1, which waits for
// that activation: refused, naming both ranks and train_step's instructions.
TEST(PipelineVerifier, RefusesAnOverlappedPlanThatDeadlocks) {
  config::PlanConfig plan;
  std::vector<schema::Program> programs = CompiledPlan::compileAllRanks(
      "tiny-llama", flags(2, 1, 1, 2, {"--virtual-pipeline-model-parallel-size", "2"}), &plan);
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_TRUE(plan.parallel.overlap_p2p_comm);
  EXPECT_EQ(mlir::trainc::verifyPlan(programs), "");
  int r = firstInEntry(programs[0], [](const schema::Instruction &i) {
    return i.has_recv() && i.recv().async();
  });
  ASSERT_GT(r, 0);
  schema::Function &entry = *programs[0].mutable_functions(int(programs[0].entry()));
  for (int i = r; i > 0; --i)
    entry.mutable_body()->SwapElements(i, i - 1);
  std::string e = mlir::trainc::verifyPlan(programs);
  EXPECT_NE(e.find("entry 'train_step' can deadlock: rank 0 waits to receive 144 f32 elements "
                   "from rank 1 (train_step#0)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("while rank 1 waits to receive 144 f32 elements from rank 0 (train_step#"),
            std::string::npos)
      << e;
}

// An async receive whose wait is gone is refused, naming the rank, the receive and its token.
TEST(PipelineVerifier, RefusesAnAsyncReceiveNeverWaited) {
  config::PlanConfig plan;
  std::vector<schema::Program> programs = CompiledPlan::compileAllRanks(
      "tiny-llama", flags(2, 1, 1, 2, {"--virtual-pipeline-model-parallel-size", "2"}), &plan);
  ASSERT_EQ(programs.size(), 2u);
  int r = firstInEntry(programs[1], [](const schema::Instruction &i) {
    return i.has_recv() && i.recv().async();
  });
  ASSERT_GE(r, 0);
  uint32_t token = programs[1].functions(int(programs[1].entry())).body(r).recv().token();
  int w = firstInEntry(programs[1], [&](const schema::Instruction &i) {
    return i.has_wait() && i.wait().token() == token;
  });
  ASSERT_GT(w, r);
  programs[1].mutable_functions(int(programs[1].entry()))->mutable_body()->DeleteSubrange(w, 1);
  std::string e = mlir::trainc::verifyPlan(programs);
  EXPECT_EQ(e, "entry 'train_step': rank 1's async receive of 144 f32 elements from rank 0 "
               "(train_step#" + std::to_string(r) + ") on token " + std::to_string(token) +
               " is never waited")
      << e;
}

// A receive of another size than the send it meets is refused, naming both ranks.
TEST(PipelineVerifier, RefusesMismatchedSizes) {
  config::PlanConfig plan;
  std::vector<schema::Program> programs =
      CompiledPlan::compileAllRanks("tiny-llama", flags(2, 1, 1, 1), &plan);
  ASSERT_EQ(programs.size(), 2u);
  bool changed = false;
  for (schema::Function &fn : *programs[1].mutable_functions())
    for (schema::Instruction &ins : *fn.mutable_body())
      if (ins.has_recv() && !changed) {
        schema::Operand &o = *ins.mutable_recv()->mutable_operand();
        o.set_whole(false);
        o.clear_shape();
        o.add_shape(7);
        changed = true;
      }
  ASSERT_TRUE(changed);
  std::string e = mlir::trainc::verifyPlan(programs);
  EXPECT_NE(e.find("entry 'eval_step': rank 0 sends 144 f32 elements (eval_step#"), std::string::npos)
      << e;
  EXPECT_NE(e.find("rank 1 receives 7 f32 elements ("), std::string::npos) << e;
}

// The NCCL simulation on hand-built orders (1F1B at pp 2, m 2: stage 0 sends a0, a1 and
// receives g0, g1; stage 1 receives a0, sends g0, receives a1, sends g1). Ungrouped, the Gloo
// simulation (eager sends) finishes but under NCCL rank 0's send of a1 waits for rank 1's
// receive, which comes after rank 1's send of g0, which waits for rank 0's receive of g0:
// refused, naming both ranks. Adjacent send + receive (the batched pairs) finish; a cycle of
// receives is refused by the eager simulation already.
TEST(PipelineVerifier, SimulatesNcclSemantics) {
  std::vector<schema::Program> ungrouped = {
      p2pProgram(0, {{"send", 8}, {"send", 8}, {"io", 0}, {"recv", 4}, {"recv", 4}}),
      p2pProgram(1, {{"recv", 8}, {"send", 4}, {"io", 0}, {"recv", 8}, {"send", 4}})};
  EXPECT_EQ(countPairs(ungrouped[0]) + countPairs(ungrouped[1]), 0);
  EXPECT_EQ(mlir::trainc::verifyPlan(ungrouped), "");
  std::string e = mlir::trainc::ncclDeadlock(ungrouped);
  EXPECT_EQ(e, "entry 'train_step' can deadlock under NCCL (a send completes only once its "
               "receive is posted; only a send directly followed by a receive on the same group "
               "is posted with it): rank 0 sends 8 f32 elements to rank 1 (train_step#1), while "
               "rank 1 sends 4 f32 elements to rank 0 (train_step#1)");
  // Stage 0: a0 | (a1, g0) | g1; stage 1: a0 | (g0, a1) | g1.
  std::vector<schema::Program> paired = {
      p2pProgram(0, {{"send", 8}, {"send", 8}, {"recv", 4}, {"recv", 4}}),
      p2pProgram(1, {{"recv", 8}, {"send", 4}, {"recv", 8}, {"send", 4}})};
  EXPECT_EQ(countPairs(paired[0]), 1);
  EXPECT_EQ(countPairs(paired[1]), 1);
  EXPECT_EQ(mlir::trainc::ncclDeadlock(paired), "");
  // Rank 1 receives a1 before sending g0: no pair on rank 1, and rank 0's pair (a1, g0) needs
  // rank 1's receive of a1, which is next: finishes.
  std::vector<schema::Program> oneSided = {
      paired[0], p2pProgram(1, {{"recv", 8}, {"recv", 8}, {"send", 4}, {"send", 4}})};
  EXPECT_EQ(countPairs(oneSided[1]), 0);
  EXPECT_EQ(mlir::trainc::ncclDeadlock(oneSided), "");
  // Both ranks receive first: no send semantics helps (ncclDeadlock reports verifyPlan's error).
  std::vector<schema::Program> cycle = {p2pProgram(0, {{"recv", 4}, {"send", 8}}),
                                        p2pProgram(1, {{"recv", 8}, {"send", 4}})};
  e = mlir::trainc::ncclDeadlock(cycle);
  EXPECT_EQ(e.rfind("entry 'train_step' can deadlock: rank 0 waits to receive 4 f32", 0), 0u) << e;
}

// The compiled 1F1B (pp 2 and 4) and ZB-H1 (pp 2 and 4) plans batch each unit's trailing send
// with the next unit's leading receive and pass the NCCL simulation; with every pair split (the
// same transfers in the same order, ungrouped) they deadlock under NCCL, naming two ranks that
// both send. The interleaved plans (pp 2 and 4, V 2, with and without --overlap-p2p-comm) are
// not NCCL-safe with unit-boundary pairs (a chunk's send is followed by another chunk's
// computation before the next receive): the compile records the deadlock in every rank's
// metadata, for trainrun --backend cuda to refuse.
TEST(PipelineVerifier, CompiledPlansUnderNcclSemantics) {
  struct Case {
    int64_t pp, gbs;
    std::vector<std::string> extra;
    bool ncclSafe;
  };
  const std::vector<Case> cases = {
      {2, 4, {}, true},
      {4, 8, {}, true},
      {2, 3, {"--pipeline-schedule", "zb-h1"}, true},
      {4, 5, {"--pipeline-schedule", "zb-h1"}, true},
      {2, 4, {"--virtual-pipeline-model-parallel-size", "2", "--no-overlap-p2p-communication"},
       false},
      {2, 4, {"--virtual-pipeline-model-parallel-size", "2"}, false},
      {4, 8, {"--virtual-pipeline-model-parallel-size", "2"}, false},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(testing::Message() << "pp " << c.pp << " gbs " << c.gbs << " "
                                    << (c.extra.empty() ? "" : c.extra[0]));
    config::PlanConfig plan;
    std::vector<schema::Program> programs = CompiledPlan::compileAllRanks(
        "tiny-llama", flags(c.pp, 1, 1, c.gbs, c.extra, 8), &plan);
    ASSERT_EQ(programs.size(), size_t(c.pp));
    for (const schema::Program &p : programs) {
      EXPECT_GT(countPairs(p), 0);
      EXPECT_EQ(p.metadata().count(mlir::trainc::kNcclDeadlockMetadata), c.ncclSafe ? 0u : 1u);
    }
    EXPECT_EQ(mlir::trainc::verifyPlan(programs), "");
    std::string e = mlir::trainc::ncclDeadlock(programs);
    if (!c.ncclSafe) {
      EXPECT_EQ(programs[0].metadata().at(mlir::trainc::kNcclDeadlockMetadata), e);
    } else {
      EXPECT_EQ(e, "");
      for (schema::Program &p : programs)
        unpair(p);
      EXPECT_EQ(mlir::trainc::verifyPlan(programs), "");
      e = mlir::trainc::ncclDeadlock(programs);
    }
    EXPECT_NE(e.find("' can deadlock under NCCL (a send completes only once its receive is "
                     "posted"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find(" sends 144 f32 elements to rank "), std::string::npos) << e;
    EXPECT_NE(e.find(", while rank "), std::string::npos) << e;
  }
}

// The run-time check behind the compile-time one: rank 0 of a plan with micro-batch size 1 and
// rank 1 of one with micro-batch size 2 (the trainer's fingerprint check bypassed: executors
// run directly). Rank 1's first receive meets an activation of half its size and is refused at
// once by the header of the Gloo communicator, naming both sizes, well within the 5 s timeout
// (rank 0 then times out waiting for a gradient).
TEST(PipelineRuntime, RefusesATransferOfAnotherPlan) {
  config::PlanConfig planA, planB;
  std::vector<schema::Program> a =
      CompiledPlan::compileAllRanks("tiny-llama", flags(2, 1, 1, 2), &planA);
  std::vector<schema::Program> b =
      CompiledPlan::compileAllRanks("tiny-llama", flags(2, 1, 2, 2), &planB);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  auto store = rt::TcpStoreServer::start("127.0.0.1", 0, kToken);
  ASSERT_TRUE(store.ok()) << store.status();
  std::string errors[2];
  double seconds[2] = {0, 0};
  auto rankMain = [&](int64_t r) {
    rt::GlooOptions o;
    o.rank = r;
    o.worldSize = 2;
    o.storePort = (*store)->port();
    o.token = kToken;
    o.timeout = std::chrono::seconds(5);
    auto comm = rt::createGlooCommunicator(o);
    ASSERT_TRUE(comm.ok()) << comm.status();
    CompiledPlan p(r == 0 ? planA : planB, r == 0 ? a[0] : b[1], std::move(*comm));
    ASSERT_TRUE(p.ok());
    auto t0 = std::chrono::steady_clock::now();
    absl::Status st =
        p.ex().run([](schema::HostIOKind, const std::string &) { return absl::OkStatus(); });
    seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    errors[r] = st.ok() ? "ok" : std::string(st.message());
  };
  std::thread t0(rankMain, 0), t1(rankMain, 1);
  t0.join();
  t1.join();
  const std::string expected = "rank 1: recv from rank 0 (peer 0 of group 'pp' [0,1]), message 0: "
                               "the sender sent 576 bytes (144 x f32), this rank expects 1152 "
                               "bytes (288 x f32); the two ranks' programs disagree";
  EXPECT_NE(errors[1].find(expected), std::string::npos) << errors[1];
  EXPECT_LT(seconds[1], 4.0) << errors[1];
  EXPECT_NE(errors[0], "ok");
}

} // namespace

namespace {

// The bubble of Megatron's 1F1B on the cost model with unit costs is the closed form
// (P - 1) / (m + P - 1); with B = 2 F it is the same (every unit on the critical path scales).
TEST(PipelineTimeline, OneForwardOneBackwardBubbleIsTheClosedForm) {
  for (int64_t P : {1, 2, 3, 4, 8})
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 17}) {
      std::vector<std::vector<mlir::trainc::TimelineUnit>> stages(static_cast<size_t>(P));
      for (int64_t s = 0; s < P; ++s)
        for (auto [fwd, mb] : mlir::trainc::oneForwardOneBackward(P, s, m)) {
          mlir::trainc::TimelineUnit u;
          u.forward = fwd;
          u.microbatch = mb;
          stages[size_t(s)].push_back(u);
        }
      for (double b : {1.0, 2.0}) {
        mlir::trainc::Timeline t;
        ASSERT_EQ(mlir::trainc::playTimeline(stages, 1, b, t), "") << P << " " << m;
        EXPECT_NEAR(t.bubble, double(P - 1) / double(m + P - 1), 1e-12)
            << "P " << P << " m " << m << " B " << b;
        EXPECT_DOUBLE_EQ(t.makespan, (1 + b) * double(m + P - 1)) << P << " " << m;
      }
    }
}

// ZB-H1 on the cost model with F = B = W = 1: for m >= P the idle share is the paper's
// (P - 1) / (3 m + P - 1) (bubble (P - 1)(T_F + T_B - T_W), Qi et al. 2023 section 3.1), below
// 1F1B's (P - 1) / (m + P - 1) with the same total backward (B + W = 2 F); for m < P it is still
// below 1F1B's. Every stage holds at most min(P, m) microbatches between F and W, 1F1B's peak
// (stage 0's); the order has every unit once, B before W, units of a kind in microbatch order.
// Units with costs of their own (the stages' FLOPs in `inspect --schedule`): costs equal to the
// kinds' give the kind-cost timeline; a last stage twice as costly (F 2, B 4 against 1 and 2) at
// P = 2 is the bottleneck from its first forward (t = 1) on, busy 6 m, then stage 0's last B
// (2): makespan 6 m + 3, bubble 1 - 9 m / (2 (6 m + 3)).
TEST(PipelineTimeline, UnitCostsOfTheirOwn) {
  for (int64_t m : {1, 2, 5, 9}) {
    std::vector<std::vector<mlir::trainc::TimelineUnit>> stages(2), own(2), heavy(2);
    for (int64_t s = 0; s < 2; ++s)
      for (auto [fwd, mb] : mlir::trainc::oneForwardOneBackward(2, s, m)) {
        mlir::trainc::TimelineUnit u;
        u.forward = fwd;
        u.microbatch = mb;
        stages[size_t(s)].push_back(u);
        u.cost = fwd ? 1 : 2;
        own[size_t(s)].push_back(u);
        u.cost *= s == 1 ? 2 : 1;
        heavy[size_t(s)].push_back(u);
      }
    mlir::trainc::Timeline kinds, ownT, heavyT;
    ASSERT_EQ(mlir::trainc::playTimeline(stages, 1, 2, kinds), "");
    ASSERT_EQ(mlir::trainc::playTimeline(own, 5, 7, ownT), ""); // the kinds' costs unused
    EXPECT_DOUBLE_EQ(ownT.makespan, kinds.makespan) << m;
    EXPECT_DOUBLE_EQ(ownT.bubble, kinds.bubble) << m;
    ASSERT_EQ(mlir::trainc::playTimeline(heavy, 1, 2, heavyT), "");
    EXPECT_DOUBLE_EQ(heavyT.makespan, double(6 * m + 3)) << m;
    EXPECT_NEAR(heavyT.bubble, 1 - 9.0 * double(m) / (2.0 * double(6 * m + 3)), 1e-12) << m;
  }
}

TEST(PipelineTimeline, ZeroBubbleH1BubbleIsThePapersClosedForm) {
  for (int64_t P : {2, 3, 4, 8})
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 17}) {
      std::vector<std::vector<mlir::trainc::TimelineUnit>> zbStages(static_cast<size_t>(P)),
          oneStages(static_cast<size_t>(P));
      for (int64_t s = 0; s < P; ++s) {
        int64_t live = 0, peak = 0;
        std::map<char, int64_t> next;
        for (mlir::trainc::ZeroBubbleStep st : mlir::trainc::zeroBubbleH1(P, s, m)) {
          EXPECT_EQ(st.microbatch, next[st.kind]++) << "P " << P << " s " << s << " m " << m;
          mlir::trainc::TimelineUnit u;
          u.forward = st.kind == 'F';
          u.weight = st.kind == 'W';
          u.microbatch = st.microbatch;
          zbStages[size_t(s)].push_back(u);
          live += st.kind == 'F' ? 1 : st.kind == 'W' ? -1 : 0;
          peak = std::max(peak, live);
        }
        EXPECT_EQ(next['F'], m);
        EXPECT_EQ(next['B'], m);
        EXPECT_EQ(next['W'], m);
        EXPECT_EQ(peak, std::min(P, m)) << "P " << P << " s " << s << " m " << m;
        for (auto [fwd, mb] : mlir::trainc::oneForwardOneBackward(P, s, m)) {
          mlir::trainc::TimelineUnit u;
          u.forward = fwd;
          u.microbatch = mb;
          oneStages[size_t(s)].push_back(u);
        }
      }
      mlir::trainc::Timeline zbT, oneT;
      ASSERT_EQ(mlir::trainc::playTimeline(zbStages, 1, 1, zbT, 1), "") << P << " " << m;
      ASSERT_EQ(mlir::trainc::playTimeline(oneStages, 1, 2, oneT), "") << P << " " << m;
      if (m >= P) {
        EXPECT_NEAR(zbT.bubble, mlir::trainc::zeroBubbleH1Bubble(P, m), 1e-12)
            << "P " << P << " m " << m;
        EXPECT_DOUBLE_EQ(zbT.makespan, double(3 * m + P - 1)) << P << " " << m;
      }
      EXPECT_LT(zbT.bubble, oneT.bubble) << "P " << P << " m " << m;
      EXPECT_LT(zbT.makespan, oneT.makespan) << "P " << P << " m " << m;
    }
  // The order on 4 stages, 8 microbatches (stage 0 and 3).
  auto str = [](const llvm::SmallVector<mlir::trainc::ZeroBubbleStep> &o) {
    std::string s;
    for (auto st : o)
      s += std::string(1, st.kind) + std::to_string(st.microbatch) + " ";
    return s;
  };
  EXPECT_EQ(str(mlir::trainc::zeroBubbleH1(4, 0, 8)),
            "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7 ");
  EXPECT_EQ(str(mlir::trainc::zeroBubbleH1(4, 3, 8)),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7 ");
}

// Megatron's interleaved 1F1B with V chunks on the cost model (every chunk unit costing the
// same): the idle share is (P - 1) / (V m + P - 1), i.e. bubble time / ideal time =
// (P - 1) / (V m), Narayanan et al. 2021 (arXiv 2104.04473) section 2.2.2: the 1F1B bubble
// divided by V. Checked for m % P == 0 (Megatron's requirement), group sizes P and 2P, and
// with B = 2 F; V = 1 would be 1F1B's closed form.
TEST(PipelineTimeline, InterleavedBubbleIsNarayanansClosedForm) {
  for (int64_t P : {2, 3, 4, 8})
    for (int64_t V : {2, 3, 4})
      for (int64_t m : {P, 2 * P, 3 * P, 4 * P})
        for (int64_t G : {P, 2 * P}) {
          if (!mlir::trainc::checkInterleavedSchedule(P, V, m, G).empty())
            continue;
          std::vector<std::vector<mlir::trainc::TimelineUnit>> stages(static_cast<size_t>(P));
          for (int64_t s = 0; s < P; ++s)
            for (mlir::trainc::ScheduleStep st :
                 mlir::trainc::interleavedOneForwardOneBackward(P, s, V, m, G)) {
              mlir::trainc::TimelineUnit u;
              u.forward = st.forward;
              u.microbatch = st.microbatch;
              u.chunk = st.chunk;
              stages[size_t(s)].push_back(u);
            }
          for (double b : {1.0, 2.0}) {
            mlir::trainc::Timeline t;
            ASSERT_EQ(mlir::trainc::playTimeline(stages, 1, b, t), "")
                << "P " << P << " V " << V << " m " << m << " G " << G;
            if (G != P) // the closed form is for Megatron's default group size
              continue;
            EXPECT_NEAR(t.bubble, double(P - 1) / double(V * m + P - 1), 1e-12)
                << "P " << P << " V " << V << " m " << m << " B " << b;
            EXPECT_DOUBLE_EQ(t.makespan, (1 + b) * double(V * m + P - 1)) << P << " " << m;
          }
        }
}

// Megatron's order: warmup (P - r - 1) * 2 + (V - 1) * P forwards taken from the schedule table
// (microbatch groups of P run chunk by chunk), backwards from chunk V - 1 down.
TEST(PipelineTimeline, InterleavedOrderIsMegatrons) {
  auto str = [](const llvm::SmallVector<mlir::trainc::ScheduleStep> &o) {
    std::string s;
    for (auto st : o)
      s += (st.forward ? "F" : "B") + std::to_string(st.microbatch) + "." +
           std::to_string(st.chunk) + " ";
    return s;
  };
  // pp 2, V 2, m 4: rank 0 warms up with 2 + 2 = 4 forwards, rank 1 with 2.
  EXPECT_EQ(str(mlir::trainc::interleavedOneForwardOneBackward(2, 0, 2, 4, 2)),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0 ");
  EXPECT_EQ(str(mlir::trainc::interleavedOneForwardOneBackward(2, 1, 2, 4, 2)),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0 ");
  // Everything in the warmup when it exceeds V m.
  EXPECT_EQ(str(mlir::trainc::interleavedOneForwardOneBackward(2, 0, 2, 2, 2)),
            "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0 ");
  EXPECT_EQ(mlir::trainc::checkInterleavedSchedule(2, 2, 3, 2),
            "number of microbatches (3) is not divisible by pipeline-model-parallel-size (2) "
            "when using interleaved schedule");
  EXPECT_NE(mlir::trainc::checkInterleavedSchedule(4, 2, 8, 3).find("should range in [PP=4 , M=8]"),
            std::string::npos);
  EXPECT_NE(mlir::trainc::checkInterleavedSchedule(2, 2, 4, 3).find("but it is 1."),
            std::string::npos);
  EXPECT_EQ(mlir::trainc::checkInterleavedSchedule(3, 2, 9, 6), "");
  // Megatron allows groups of 4 at pp 2, m 4; trainc refuses them: activations and gradients
  // between the two ranks would meet the wrong receives (same shapes: silently wrong numbers).
  EXPECT_EQ(mlir::trainc::checkInterleavedMessages(2, 2, 4, 4),
            "pipeline rank 0 receives the activation for chunk 1 of microbatch 3 from rank 1 "
            "where it expects the gradient for chunk 1 of microbatch 0 (activations and "
            "gradients between two ranks are matched in order)");
  EXPECT_NE(mlir::trainc::checkInterleavedSchedule(2, 2, 4, 4).find(
                "--microbatch-group-size-per-vp-stage 4 with 2 pipeline stages"),
            std::string::npos);
  for (int64_t P : {2, 3, 4})
    for (int64_t m : {P, 2 * P, 3 * P})
      EXPECT_EQ(mlir::trainc::checkInterleavedMessages(P, 2, m, P), "") << P << " " << m;
}

// An order whose input never arrives (stage 0 waits for a gradient before sending the
// activation it depends on) is reported, not looped on.
TEST(PipelineTimeline, ReportsAnOrderThatCannotRun) {
  std::vector<std::vector<mlir::trainc::TimelineUnit>> stages(2);
  stages[0] = {{false, 0}, {true, 0}};
  stages[1] = {{true, 0}, {false, 0}};
  mlir::trainc::Timeline t;
  EXPECT_EQ(mlir::trainc::playTimeline(stages, 1, 1, t),
            "stage 0 waits forever for the gradient of microbatch 0");
  // Another microbatch order on the second stage still runs.
  stages[0] = {{true, 0}, {true, 1}, {false, 0}, {false, 1}};
  stages[1] = {{true, 1}, {false, 1}, {true, 0}, {false, 0}};
  EXPECT_EQ(mlir::trainc::playTimeline(stages, 1, 1, t), "");
  stages[1] = {{true, 2}, {false, 2}};
  EXPECT_EQ(mlir::trainc::playTimeline(stages, 1, 1, t),
            "stage 0 waits forever for the gradient of microbatch 0");
  std::vector<std::vector<mlir::trainc::TimelineUnit>> one = {{{false, 0}, {true, 0}}};
  EXPECT_EQ(mlir::trainc::playTimeline(one, 1, 1, t),
            "stage 0 runs the backward of microbatch 0 before its forward");
}

} // namespace
