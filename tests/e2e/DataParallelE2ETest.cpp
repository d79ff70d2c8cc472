//===- DataParallelE2ETest.cpp - Data-parallel plans vs the single-rank plan ===//
//
// Every data-parallel plan (plain DP and the distributed optimizer, one bucket and many small odd
// buckets) is run with one thread per rank over Gloo (loopback, a TcpStore) and compared with the
// single-rank plan of the same global batch: losses, grad norms and the gathered parameters.
//
//===----------------------------------------------------------------------===//

#include "MultiRank.h"

#include "runtime/comm/GlooCommunicator.h"
#include "runtime/comm/TcpStore.h"
#include "runtime/control/Trainer.h"
#include "runtime/core/Program.h"
#include "passes/Grad/GradLayout.h"

#include "llvm/ADT/SmallString.h"

#include <google/protobuf/util/message_differencer.h>

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <atomic>
#include <functional>
#include <sstream>
#include <thread>

using namespace trainc;
using namespace trainc::test;

namespace {

struct History {
  std::vector<double> losses, norms;
  std::map<std::string, std::vector<double>> paramsAt3, paramsAtEnd;
};

std::map<std::string, std::vector<double>> allParams(CompiledPlan &p) {
  std::map<std::string, std::vector<double>> w;
  for (const schema::Parameter &q : p.program.parameters())
    w[q.name()] = p.readParam(q.name());
  return w;
}

double normOf(CompiledPlan &p) { return p.read("grad_norm")[0]; }

/// Trains `iters` iterations of a plan over the given global batches: the single-rank plan when
/// dp == 1 and no extra flag asks for buckets, else every rank in its own thread over Gloo.
/// Returns rank 0's history (every rank's losses and gathered parameters must agree: checked).
History train(const std::vector<std::string> &f, int64_t dp, int64_t mbs,
              const std::vector<Samples> &batches, int64_t iters,
              const std::string &unitSchedule = "no-pipelining") {
  config::PlanConfig plan;
  std::vector<schema::Program> programs =
      CompiledPlan::compileAllRanks("tiny-llama", f, &plan, "fp32", unitSchedule);
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
    std::unique_ptr<rt::Communicator> comm;
    if (dp == 1) {
      comm = rt::createLocalCommunicator();
    } else if (!(comm = glooRank(r, dp, store->port()))) {
      return;
    }
    CompiledPlan p(plan, programs[size_t(r)], std::move(comm));
    if (!p.ok())
      return;
    EXPECT_TRUE(rt::initializeParameters(p.ex(), 17).ok());
    History &h = hist[size_t(r)];
    for (int64_t it = 0; it < iters; ++it) {
      Samples s = rankSamples(batches[size_t(it)], dp, r, mbs);
      h.losses.push_back(p.step(s, 3e-3, double(it + 1), 0.1));
      h.norms.push_back(normOf(p));
      if (it == 2)
        h.paramsAt3 = allParams(p);
    }
    h.paramsAtEnd = allParams(p);
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < dp; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  for (int64_t r = 1; r < dp; ++r) {
    EXPECT_EQ(hist[size_t(r)].losses, hist[0].losses) << "rank " << r;
    for (auto &[name, w] : hist[0].paramsAtEnd)
      EXPECT_EQ(hist[size_t(r)].paramsAtEnd[name], w) << "rank " << r << " " << name;
  }
  return hist[0];
}

void expectClose(const History &h, const History &ref, const std::string &what) {
  ASSERT_EQ(h.losses.size(), ref.losses.size()) << what;
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_LT(rel(h.losses[i], ref.losses[i]), 1e-5) << what << " loss at iteration " << i + 1;
    EXPECT_LT(rel(h.norms[i], ref.norms[i]), 1e-5) << what << " grad norm at iteration " << i + 1;
  }
  ASSERT_EQ(h.paramsAt3.size(), ref.paramsAt3.size()) << what;
  for (auto &[name, w] : ref.paramsAt3) {
    EXPECT_LT(relDiff(h.paramsAt3.at(name), w), 1e-5) << what << " " << name << " after 3";
    EXPECT_LT(relDiff(h.paramsAtEnd.at(name), ref.paramsAtEnd.at(name)), 1e-5)
        << what << " " << name << " at the end";
  }
}

struct Variant {
  int64_t dp;
  bool distributed;
  int64_t bucket; // 0 = one bucket (the default size is far above the tiny model)
  bool overlapParamGather = false;
};

void PrintTo(const Variant &v, std::ostream *os) {
  *os << "dp " << v.dp << (v.distributed ? " zero-1" : " plain") << " bucket " << v.bucket
      << (v.overlapParamGather ? " overlap-param-gather" : "");
}

class DataParallelEquivalence : public ::testing::TestWithParam<Variant> {};

TEST_P(DataParallelEquivalence, MatchesTheSingleRankPlan) {
  const Variant v = GetParam();
  const int64_t gbs = 8, mbs = 1, iters = 10;
  std::vector<Samples> batches = makeBatches(iters, gbs, 101);
  // The reference: one rank, the whole global batch as gbs / mbs microbatches.
  static History ref = train(multiRankFlags(1, mbs, gbs), 1, mbs, batches, iters);
  ASSERT_EQ(ref.losses.size(), size_t(iters));
  std::vector<std::string> extra;
  if (v.distributed)
    extra.push_back("--use-distributed-optimizer");
  if (v.overlapParamGather) {
    extra.push_back("--overlap-grad-reduce");
    extra.push_back("--overlap-param-gather");
  }
  if (v.bucket > 0) {
    extra.push_back("--ddp-bucket-size");
    extra.push_back(std::to_string(v.bucket));
  }
  History h = train(multiRankFlags(v.dp, mbs, gbs, extra), v.dp, mbs, batches, iters);
  expectClose(h, ref,
              "dp " + std::to_string(v.dp) + (v.distributed ? " zero-1" : "") + " bucket " +
                  std::to_string(v.bucket));
}

std::string variantName(const ::testing::TestParamInfo<Variant> &i) {
  return "dp" + std::to_string(i.param.dp) + (i.param.distributed ? "_zero1" : "_plain") +
         (i.param.bucket ? "_bucket" + std::to_string(i.param.bucket) : "_onebucket") +
         (i.param.overlapParamGather ? "_overlapgather" : "");
}

// 301 and 97 are odd, so buckets end at odd offsets, shards cut parameters, and padding appears.
INSTANTIATE_TEST_SUITE_P(
    Plans, DataParallelEquivalence,
    ::testing::Values(Variant{1, false, 0}, Variant{1, false, 97}, Variant{1, true, 301},
                      Variant{2, false, 0}, Variant{2, false, 301}, Variant{2, true, 0},
                      Variant{2, true, 301}, Variant{4, false, 0}, Variant{4, false, 97},
                      Variant{4, true, 0}, Variant{4, true, 97},
                      // The all-gathers stay in flight into the next iteration.
                      Variant{2, true, 301, true}, Variant{4, true, 97, true}),
    variantName);

// Megatron's unit order and all forwards first under dp 2 with the distributed optimizer, small
// buckets and overlapped parameter gathers (4 microbatches: the first-microbatch clone with the
// gather waits, the stage itself and the last-microbatch clone with the bucket reductions all
// run): the same computation, so losses, grad norms and parameters are bitwise equal.
TEST(DataParallelUnitSchedule, AllForwardFirstIsBitwiseEqualWithZeroAndOverlap) {
  const int64_t gbs = 8, mbs = 1, iters = 3;
  std::vector<Samples> batches = makeBatches(iters, gbs, 103);
  std::vector<std::string> f = multiRankFlags(2, mbs, gbs,
                                     {"--use-distributed-optimizer", "--ddp-bucket-size", "301",
                                      "--overlap-grad-reduce", "--overlap-param-gather"});
  History a = train(f, 2, mbs, batches, iters, "no-pipelining");
  History b = train(f, 2, mbs, batches, iters, "all-forward-first");
  ASSERT_EQ(a.losses.size(), size_t(iters));
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.norms, b.norms);
  for (auto &[name, w] : a.paramsAtEnd)
    EXPECT_EQ(w, b.paramsAtEnd[name]) << name;
}

// Full activation recompute (uniform, one layer per group) under dp 2 with the distributed
// optimizer: close to the single-rank plan without recompute (as every dp plan is), and bitwise
// equal to the same dp 2 plan without recompute (the replay recomputes the same values).
TEST(DataParallelRecompute, FullRecomputeMatchesTheSingleRankPlan) {
  const int64_t gbs = 8, mbs = 1, iters = 4;
  std::vector<Samples> batches = makeBatches(iters, gbs, 107);
  History ref = train(multiRankFlags(1, mbs, gbs), 1, mbs, batches, iters);
  const std::vector<std::string> zero = {"--use-distributed-optimizer", "--ddp-bucket-size", "301"};
  std::vector<std::string> recompute = zero;
  for (const char *f : {"--recompute-granularity", "full", "--recompute-method", "uniform",
                        "--recompute-num-layers", "1"})
    recompute.push_back(f);
  History plain = train(multiRankFlags(2, mbs, gbs, zero), 2, mbs, batches, iters);
  History h = train(multiRankFlags(2, mbs, gbs, recompute), 2, mbs, batches, iters);
  expectClose(h, ref, "dp 2 zero-1 full recompute");
  EXPECT_EQ(h.losses, plain.losses);
  EXPECT_EQ(h.norms, plain.norms);
  for (auto &[name, w] : plain.paramsAtEnd)
    EXPECT_EQ(h.paramsAtEnd[name], w) << name;
}

// Without the distributed optimizer the ranks of a data-parallel plan run the same program: their
// files differ only in the rank-specific data (mesh rank and coordinates, the members of each
// group), not in instructions, buffers, parameters or reports.
TEST(DataParallelRankFiles, DifferOnlyInRankSpecificData) {
  config::PlanConfig plan;
  std::vector<schema::Program> programs =
      CompiledPlan::compileAllRanks("tiny-llama", multiRankFlags(64, 1, 64), &plan);
  ASSERT_EQ(programs.size(), 64u);
  auto withoutRankData = [](schema::Program p) {
    p.mutable_mesh()->clear_rank();
    p.mutable_mesh()->clear_coords();
    for (schema::CommGroup &g : *p.mutable_groups())
      g.clear_ranks();
    return p;
  };
  // Field-by-field comparison (serialized bytes would depend on the metadata map's order).
  using google::protobuf::util::MessageDifferencer;
  const schema::Program first = withoutRankData(programs[0]);
  for (size_t r = 1; r < programs.size(); ++r) {
    EXPECT_FALSE(MessageDifferencer::Equals(programs[r], programs[0])) << r;
    std::string diff;
    MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    EXPECT_TRUE(d.Compare(withoutRankData(programs[r]), first)) << "rank " << r << ":\n" << diff;
  }
}

TEST(DataParallelRankFiles, DistributedOptimizerRanksDifferOnlyInShardOffsetsAndSegments) {
  // dp 12 with the distributed optimizer and one parameter per bucket: small parameters (norm
  // weights) are padded to a multiple of 12, so the last shards of their buckets hold only padding. The plan is lowered once; rank files differ in the mesh and groups, the
  // offsets of shard views and each shard update's `segments`. Those segments are checked
  // against GradLayout::shardPieces, the layout's own (independent) list of each rank's pieces.
  const int64_t dp = 12;
  config::PlanConfig plan;
  std::vector<schema::Program> programs = CompiledPlan::compileAllRanks(
      "tiny-llama", multiRankFlags(dp, 1, dp, {"--use-distributed-optimizer", "--ddp-bucket-size", "1"}),
      &plan);
  ASSERT_EQ(programs.size(), size_t(dp));
  // The layout from rank 0's parameter table and bucket bounds.
  grad::GradLayout layout;
  layout.dp = dp;
  layout.distributed = true;
  std::vector<std::pair<int64_t, int64_t>> params; // (offset, size) in the params buffer
  for (const schema::Parameter &q : programs[0].parameters()) {
    int64_t n = 1;
    for (int64_t d : q.global_shape())
      n *= d;
    params.push_back({int64_t(q.buffer_offset()), n});
  }
  std::sort(params.begin(), params.end());
  for (auto [offset, size] : params) {
    layout.offsets.push_back(offset);
    layout.sizes.push_back(size);
  }
  layout.bounds.clear();
  {
    std::stringstream bounds(programs[0].metadata().at("plan.grad_bucket_bounds"));
    for (std::string b; std::getline(bounds, b, ',');)
      layout.bounds.push_back(std::stoll(b));
  }
  ASSERT_GT(layout.numBuckets(), 3);
  auto stripped = [](schema::Program p) {
    p.mutable_mesh()->clear_rank();
    p.mutable_mesh()->clear_coords();
    for (schema::CommGroup &g : *p.mutable_groups())
      g.clear_ranks();
    for (schema::Function &f : *p.mutable_functions())
      for (schema::Instruction &ins : *f.mutable_body()) {
        auto clear = [](google::protobuf::RepeatedPtrField<schema::Operand> &ops) {
          for (schema::Operand &o : ops)
            o.clear_offset();
        };
        if (ins.has_kernel()) {
          clear(*ins.mutable_kernel()->mutable_inputs());
          clear(*ins.mutable_kernel()->mutable_outputs());
          for (schema::Attr &a : *ins.mutable_kernel()->mutable_attrs())
            if (a.name() == "segments")
              a.clear_value();
        } else if (ins.has_call()) {
          clear(*ins.mutable_call()->mutable_args());
        } else if (ins.has_collective()) {
          ins.mutable_collective()->mutable_input()->clear_offset();
          ins.mutable_collective()->mutable_output()->clear_offset();
        }
      }
    return p;
  };
  using google::protobuf::util::MessageDifferencer;
  const schema::Program first = stripped(programs[0]);
  int64_t paddingOnly = 0;
  for (int64_t r = 0; r < dp; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    std::string diff;
    MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    EXPECT_TRUE(d.Compare(stripped(programs[size_t(r)]), first)) << diff;
    // Every adamw over a shard of the params buffer: its segments, as buffer ranges.
    std::vector<std::array<int64_t, 2>> updated, expected;
    const schema::Program &p = programs[size_t(r)];
    for (const schema::Function &f : p.functions())
      for (const schema::Instruction &ins : f.body()) {
        if (!ins.has_kernel() || ins.kernel().kernel() != "adamw")
          continue;
        const int64_t begin = int64_t(ins.kernel().inputs(0).offset());
        for (const schema::Attr &a : ins.kernel().attrs())
          if (a.name() == "segments") {
            const auto &v = a.value().ints().values();
            ASSERT_EQ(v.size() % 3, 0);
            for (int i = 0; i + 2 < v.size(); i += 3)
              if (v[i] < v[i + 1])
                updated.push_back({begin + v[i], begin + v[i + 1]});
              else
                ++paddingOnly;
          }
      }
    for (const grad::GradLayout::Piece &piece : layout.shardPieces(r))
      expected.push_back({piece.begin, piece.end});
    EXPECT_EQ(updated, expected);
  }
  EXPECT_GT(paddingOnly, 0) << "no shard of padding only: the case is not covered";
}

TEST(DataParallelRaggedMasks, DefaultModeGivesTheExactGlobalPerTokenGradient) {
  // dp = 2, mbs = 2, 2 microbatches. Rank 1's first microbatch holds a single valid token and
  // rank 0's second microbatch none.
  const int64_t gbs = 8, mbs = 2, dp = 2;
  std::vector<Samples> batches = makeBatches(3, gbs, 303);
  for (Samples &s : batches) {
    auto clear = [&](int64_t sample) {
      for (int64_t t = 0; t < s.seq; ++t)
        s.mask[size_t(sample * s.seq + t)] = 0;
    };
    // Block j = samples [j*4, j*4+4): rank 0 reads [j*4, j*4+2), rank 1 [j*4+2, j*4+4).
    clear(2);
    clear(3);
    s.mask[size_t(2 * s.seq + 5)] = 1;
    clear(4);
    clear(5);
  }
  // The exact global per-token mean: one microbatch holding the whole batch on one rank.
  History exact = train(multiRankFlags(1, gbs, gbs), 1, gbs, batches, 3);
  for (bool zero : {false, true}) {
    std::vector<std::string> extra = {"--ddp-bucket-size", "301"};
    if (zero)
      extra.push_back("--use-distributed-optimizer");
    History h = train(multiRankFlags(dp, mbs, gbs, extra), dp, mbs, batches, 3);
    expectClose(h, exact, zero ? "ragged zero-1" : "ragged plain");
  }
}

/// Collectives one rank issues in one iteration of `fn` (calls expanded).
std::map<std::string, int> countCollectives(const schema::Program &p, int fn) {
  std::map<std::string, int> n;
  std::function<void(int)> walk = [&](int f) {
    for (const schema::Instruction &ins : p.functions(f).body()) {
      if (ins.has_call())
        walk(int(ins.call().function()));
      if (ins.has_collective())
        ++n[schema::CollectiveKind_Name(ins.collective().kind()) +
            (ins.collective().async() ? "" : "(sync)")];
    }
  };
  walk(fn);
  return n;
}

TEST(DataParallelCollectives, ExactlyOnePerBucketPlusGathersAndReductions) {
  for (int64_t m : {1, 3})
    for (bool zero : {false, true}) {
      std::vector<std::string> extra = {"--ddp-bucket-size", "301"};
      if (zero)
        extra.push_back("--use-distributed-optimizer");
      config::PlanConfig plan;
      std::vector<schema::Program> programs =
          CompiledPlan::compileAllRanks("tiny-llama", multiRankFlags(2, 1, 2 * m, extra), &plan);
      ASSERT_EQ(programs.size(), 2u);
      for (const schema::Program &p : programs) {
        // Every grad bucket is one async reduction.
        std::map<std::string, int> n = countCollectives(p, int(p.entry()));
        int buckets = zero ? n["REDUCE_SCATTER"] : n["ALL_REDUCE"];
        EXPECT_GE(buckets, 5) << "the tiny model with 301-element buckets has many buckets";
        std::map<std::string, int> want;
        if (zero) {
          want = {{"REDUCE_SCATTER", buckets},
                  {"ALL_GATHER", buckets},
                  {"ALL_REDUCE(sync)", 3}}; // loss_sum, num_tokens, grad sum of squares
        } else {
          want = {{"ALL_REDUCE", buckets}, {"ALL_REDUCE(sync)", 2}};
        }
        EXPECT_EQ(n, want) << "m = " << m << (zero ? " zero-1" : " plain");
        // Independent count of the buckets: the layout the compiler recorded in the parameter
        // table's grad offsets cannot tell bucket bounds, so check against trainc's own rule
        // instead: with 301-element buckets, a bucket closes after the parameter that reaches
        // 301 elements.
        std::vector<std::pair<uint64_t, int64_t>> byOffset;
        for (const schema::Parameter &q : p.parameters()) {
          int64_t numel = 1;
          for (int64_t d : q.global_shape())
            numel *= d;
          byOffset.push_back({q.grad_offset(), numel});
        }
        std::sort(byOffset.begin(), byOffset.end());
        int expected = 0;
        int64_t run = 0;
        for (size_t i = 0; i < byOffset.size(); ++i) {
          run += byOffset[i].second;
          if (run >= 301 || i + 1 == byOffset.size()) {
            ++expected;
            run = 0;
          }
        }
        EXPECT_EQ(buckets, expected);
      }
      // Only the last microbatch communicates: the stage function of earlier microbatches has
      // no collective.
      const schema::Program &p = programs[0];
      int numBuckets = countCollectives(p, int(p.entry()))[zero ? "REDUCE_SCATTER" : "ALL_REDUCE"];
      int seen = 0;
      for (const schema::Function &f : p.functions()) {
        int c = 0;
        for (const schema::Instruction &ins : f.body())
          c += ins.has_collective();
        // With one microbatch the stage function is the last microbatch's; forward units
        // never communicate.
        if (f.name() == "forward_backward.backward") {
          EXPECT_EQ(c, m == 1 ? numBuckets : 0);
          ++seen;
        }
        if (f.name() == "forward_backward_last.backward") {
          EXPECT_EQ(c, numBuckets);
          ++seen;
        }
        if (f.name() == "forward_backward.forward")
          EXPECT_EQ(c, 0);
      }
      EXPECT_EQ(seen, m == 1 ? 1 : 2) << "backward unit functions found";
    }
}

} // namespace

namespace {

TEST(DataParallelTrace, ABucketReductionOverlapsBackwardCompute) {
  // A dp = 2 plan with many buckets, trained for 3 iterations by two Trainers over Gloo with
  // --trace; the test reads rank 0's Chrome trace.
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("trainc-dp-trace", dir));
  std::string planDir = std::string(dir) + "/plan", traceDir = std::string(dir) + "/trace";
  {
    std::optional<config::ModelConfig> base = config::findPreset("tiny-llama");
    config::FlagParseOptions po;
    po.base_model = &*base;
    llvm::Expected<config::PlanConfig> cfg =
        // A longer sequence than the preset's gives each backward kernel enough work that the
        // overlap window is wide even on a loaded machine.
        config::parseMegatronFlags(multiRankFlags(2, 2, 8,
                                         {"--ddp-bucket-size", "301", "--lr", "1e-3",
                                          "--seq-length", "128", "--max-position-embeddings",
                                          "128"}),
                                   po);
    ASSERT_TRUE(bool(cfg)) << llvm::toString(cfg.takeError());
    mlir::MLIRContext ctx;
    mlir::trainc::CompileOptions o;
    o.outputDir = planDir;
    ASSERT_TRUE(mlir::succeeded(mlir::trainc::compilePlan(ctx, *cfg, o)));
  }
  auto store = rt::TcpStoreServer::start("127.0.0.1", 0, kToken);
  ASSERT_TRUE(store.ok()) << store.status();
  auto rankMain = [&](int64_t r) {
    std::unique_ptr<rt::Communicator> comm = glooRank(r, 2, (*store)->port());
    ASSERT_TRUE(comm);
    auto program = rt::readProgramFile(planDir + "/rank" + std::to_string(r) + ".pb");
    ASSERT_TRUE(program.ok()) << program.status();
    auto opts = rt::control::parseRunOptions(
        *program, {"--mock-data", "--train-iters", "4", "--eval-iters", "0", "--trace", traceDir});
    ASSERT_TRUE(opts.ok()) << opts.status();
    std::ostringstream log;
    auto trainer = rt::control::Trainer::create(planDir, *opts, log, comm.get());
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    absl::Status s = (*trainer)->train();
    EXPECT_TRUE(s.ok()) << s;
  };
  std::thread t0(rankMain, 0), t1(rankMain, 1);
  t0.join();
  t1.join();

  auto text = llvm::MemoryBuffer::getFile(traceDir + "/rank0.trace.json");
  ASSERT_TRUE(bool(text));
  llvm::Expected<llvm::json::Value> trace = llvm::json::parse((*text)->getBuffer());
  ASSERT_TRUE(bool(trace)) << llvm::toString(trace.takeError());
  struct Event {
    std::string name, function;
    int64_t tid, index;
    double ts, dur;
  };
  std::vector<Event> comm, compute;
  for (const llvm::json::Value &v : *trace->getAsObject()->getArray("traceEvents")) {
    const llvm::json::Object &e = *v.getAsObject();
    if (e.getString("ph") != "X")
      continue;
    const llvm::json::Object &args = *e.getObject("args");
    Event ev{e.getString("name")->str(), args.getString("function")->str(), *e.getInteger("tid"),
             *args.getInteger("index"), *e.getNumber("ts"), *e.getNumber("dur")};
    if (ev.function != "forward_backward_last.backward")
      continue;
    (ev.tid == 1 ? comm : compute).push_back(ev);
  }
  ASSERT_FALSE(comm.empty()) << "no collective in the last microbatch's stage function";
  // A bucket's all-reduce overlaps a compute kernel that comes after its start in the stage
  // function, i.e. backward compute of earlier layers.
  int overlapping = 0;
  for (const Event &c : comm)
    for (const Event &k : compute)
      if (k.index > c.index && k.ts < c.ts + c.dur && k.ts + k.dur > c.ts) {
        ++overlapping;
        break;
      }
  EXPECT_GE(overlapping, 1) << comm.size() << " collectives, none overlapping later compute";
  llvm::sys::fs::remove_directories(dir);
}

} // namespace

namespace {

TEST(DataParallelFailure, APeerThatLeavesMakesRunReturnAnError) {
  // Rank 1 runs one iteration and leaves the job (its communicator is destroyed); rank 0's second
  // iteration must come back as a Status naming the failed collective, not abort the process or
  // hang.
  config::PlanConfig plan;
  std::vector<schema::Program> programs = CompiledPlan::compileAllRanks(
      "tiny-llama", multiRankFlags(2, 1, 2, {"--ddp-bucket-size", "301"}), &plan);
  ASSERT_EQ(programs.size(), 2u);
  auto store = rt::TcpStoreServer::start("127.0.0.1", 0, kToken);
  ASSERT_TRUE(store.ok()) << store.status();
  Samples batch = randomSamples(2, 9, 37, 5);
  absl::Status second;
  auto rankMain = [&](int64_t r) {
    std::unique_ptr<rt::Communicator> comm = glooRank(r, 2, (*store)->port());
    ASSERT_TRUE(comm);
    CompiledPlan p(plan, programs[size_t(r)], std::move(comm));
    ASSERT_TRUE(p.ok());
    Samples s = rankSamples(batch, 2, r, 1);
    p.step(s, 1e-3);
    if (r == 1)
      return; // leaves: the executor, then the communicator are destroyed
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    second = p.ex().run([&](schema::HostIOKind, const std::string &) { return absl::OkStatus(); });
  };
  auto t0 = std::chrono::steady_clock::now();
  std::thread a(rankMain, 0), b(rankMain, 1);
  a.join();
  b.join();
  EXPECT_FALSE(second.ok());
  EXPECT_NE(std::string(second.message()).find("communication failed: ALL_REDUCE"),
            std::string::npos)
      << second;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

} // namespace

#include "compiler/VerifyPlan.h"

namespace {

TEST(PlanVerification, MismatchedCollectivesAcrossRanksAreNamed) {
  config::PlanConfig plan;
  std::vector<schema::Program> programs = CompiledPlan::compileAllRanks(
      "tiny-llama",
      multiRankFlags(2, 1, 4, {"--ddp-bucket-size", "301", "--use-distributed-optimizer"}), &plan);
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_EQ(mlir::trainc::verifyPlan(programs), ""); // what the compiler wrote agrees

  // Rank 1 reduces a different element count in its first all-gather.
  std::vector<schema::Program> bad = programs;
  for (schema::Instruction &ins : *bad[1].mutable_functions(int(bad[1].entry()))->mutable_body())
    if (ins.has_collective() && ins.collective().kind() == schema::ALL_GATHER) {
      ins.mutable_collective()->mutable_output()->set_shape(0, 4);
      break;
    }
  std::string e = mlir::trainc::verifyPlan(bad);
  EXPECT_NE(e.find("group 'dp' [0,1], entry 'train_step', collective #"), std::string::npos) << e;
  EXPECT_NE(e.find(": rank 0 issues ALL_GATHER of 2048 f32 elements (train_step#"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("rank 1 issues ALL_GATHER of 4 f32 elements (train_step#"), std::string::npos)
      << e;

  // Rank 0 skips its loss reduction in eval.
  bad = programs;
  auto &evalBody = *bad[0].mutable_functions(int(bad[0].entry_points().at("eval_step")))
                        ->mutable_body();
  for (int i = 0; i < evalBody.size(); ++i)
    if (evalBody[i].has_collective()) {
      evalBody.DeleteSubrange(i, 1);
      break;
    }
  e = mlir::trainc::verifyPlan(bad);
  EXPECT_NE(e.find("group 'dp' [0,1], entry 'eval_step'"), std::string::npos) << e;
  EXPECT_NE(e.find("ALL_REDUCE sum of 1 f32 elements"), std::string::npos) << e;
}

} // namespace
