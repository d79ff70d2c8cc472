//===- CheckpointTest.cpp - What a rank holds, on hand-built programs -----===//
//
// The checkpointer derives what a rank holds from the program (parameter table, adamw operands).
// Compiled plans always name their buffers directly; these hand-built programs check that the
// layouts it cannot map yet are refused with the instruction and the buffer named, and that a
// save + load round trip restores parameters and Adam moments of a one-parameter program.
//
//===----------------------------------------------------------------------===//

#include "runtime/control/Checkpoint.h"
#include "runtime/core/Executor.h"
#include "runtime/core/ProgramBuilder.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

using namespace trainc::rt;
using namespace trainc::rt::control;
namespace schema = trainc::schema;

namespace {

enum class Layout { Direct, ThroughArguments, MasterWeights };

/// One parameter "w" [4] updated by one adamw: directly, inside a function that receives the
/// operands as arguments, or on a MASTER_PARAM buffer that the parameter table does not name.
schema::Program adamProgram(Layout layout) {
  ProgramBuilder b;
  int w = b.addBuffer("w", schema::PARAMETER, DType::F32, {4});
  int master = layout == Layout::MasterWeights
                   ? b.addBuffer("master", schema::MASTER_PARAM, DType::F32, {4})
                   : w;
  int g = b.addBuffer("g", schema::MAIN_GRAD, DType::F32, {4});
  int m = b.addBuffer("exp_avg", schema::OPTIMIZER_STATE, DType::F32, {4});
  int v = b.addBuffer("exp_avg_sq", schema::OPTIMIZER_STATE, DType::F32, {4});
  std::vector<int> scalars;
  for (const char *s : {"lr", "weight_decay", "step", "grad_scale", "update"})
    scalars.push_back(b.addBuffer(s, schema::SCALAR, DType::F32, {}));
  schema::Parameter *p = b.proto().add_parameters();
  p->set_name("w");
  p->add_global_shape(4);
  p->add_slice_start(0);
  p->add_slice_size(4);
  p->set_buffer(uint32_t(w));
  int main = b.addFunction("train_step");
  using PB = ProgramBuilder;
  std::vector<schema::Operand> in = {PB::buf(master), PB::buf(g), PB::buf(m), PB::buf(v)};
  for (int s : scalars)
    in.push_back(PB::buf(s));
  if (layout == Layout::ThroughArguments) {
    int opt = b.addFunction("opt", {{"p", DType::F32, {4}},
                                    {"g", DType::F32, {4}},
                                    {"m", DType::F32, {4}},
                                    {"v", DType::F32, {4}}});
    std::vector<schema::Operand> args = {PB::arg(0), PB::arg(1), PB::arg(2), PB::arg(3)};
    for (int s : scalars)
      args.push_back(PB::buf(s));
    b.kernel(opt, "adamw", args, {PB::arg(0), PB::arg(2), PB::arg(3)}, {}, {0, 2, 3});
    b.call(main, opt, {PB::buf(master), PB::buf(g), PB::buf(m), PB::buf(v)});
  } else {
    b.kernel(main, "adamw", in, {PB::buf(master), PB::buf(m), PB::buf(v)}, {}, {0, 2, 3});
  }
  return b.finish();
}

struct Rig {
  schema::Program program;
  std::unique_ptr<Backend> backend = createCpuBackend();
  std::unique_ptr<Communicator> comm = createLocalCommunicator();
  std::unique_ptr<Executor> ex;
  std::ostringstream log;
  explicit Rig(Layout layout) : program(adamProgram(layout)) {
    auto e = Executor::create(program, *backend, *comm);
    EXPECT_TRUE(e.ok()) << e.status();
    if (e.ok())
      ex = std::move(*e);
  }
  absl::StatusOr<std::unique_ptr<Checkpointer>> checkpointer(const CheckpointOptions &o) {
    return Checkpointer::create(program, *ex, *comm, o, {1e-3, 0, 0, 80, "linear"}, 1234, log);
  }
};

} // namespace

// Tests that an adamw reading its operands through function arguments is refused, naming it.
TEST(CheckpointTest, RefusesAdamOperandsThroughArguments) {
  Rig r(Layout::ThroughArguments);
  ASSERT_TRUE(r.ex);
  CheckpointOptions o;
  o.save = ::testing::TempDir() + "/checkpoint_test_refused";
  auto c = r.checkpointer(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("function 'opt' instruction 0 (adamw) input 0 reads a "
                                      "function argument"),
            std::string::npos)
      << c.status();
}

// Tests that an adamw updating a buffer without parameters (separate master weights) is refused.
// Without --save and --load the checkpointer is created (the run trains) and refuses only a save.
TEST(CheckpointTest, RefusesSeparateMasterWeights) {
  Rig r(Layout::MasterWeights);
  ASSERT_TRUE(r.ex);
  const char *want = "function 'train_step' instruction 0 (adamw) updates buffer 'master', which "
                     "holds no parameter";
  CheckpointOptions o;
  o.load = ::testing::TempDir() + "/checkpoint_test_refused";
  auto c = r.checkpointer(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status();
  auto plain = r.checkpointer({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::Status s = (*plain)->save(TrainState{});
  EXPECT_NE(s.message().find(want), std::string::npos) << s;
}

// Tests that save then load restores the parameter and both moments exactly, and the run state.
TEST(CheckpointTest, SaveLoadRoundTrip) {
  std::string dir = ::testing::TempDir() + "/checkpoint_test_ck";
  std::filesystem::remove_all(dir);
  Rig a(Layout::Direct);
  ASSERT_TRUE(a.ex);
  const float w[4] = {1, 2, 3, 4}, m[4] = {5, 6, 7, 8}, v[4] = {9, 10, 11, 12};
  ASSERT_TRUE(a.ex->writeBuffer(a.ex->findBuffer("w"), w, 16).ok());
  ASSERT_TRUE(a.ex->writeBuffer(a.ex->findBuffer("exp_avg"), m, 16).ok());
  ASSERT_TRUE(a.ex->writeBuffer(a.ex->findBuffer("exp_avg_sq"), v, 16).ok());
  CheckpointOptions so;
  so.save = dir;
  auto saver = a.checkpointer(so);
  ASSERT_TRUE(saver.ok()) << saver.status();
  TrainState st{7, 56, 48, 6, 1, 0};
  ASSERT_TRUE((*saver)->save(st).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/iter_0000007/rank0.safetensors"));

  Rig b(Layout::Direct);
  ASSERT_TRUE(b.ex);
  CheckpointOptions lo;
  lo.load = dir;
  auto loader = b.checkpointer(lo);
  ASSERT_TRUE(loader.ok()) << loader.status();
  TrainState got;
  int64_t seed = 0;
  absl::Status s = (*loader)->load(got, seed);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got.iteration, 7);
  EXPECT_EQ(got.consumedSamples, 56);
  EXPECT_EQ(got.scheduledSamples, 48);
  EXPECT_EQ(got.adamSteps, 6);
  EXPECT_EQ(got.skipped, 1);
  EXPECT_EQ(seed, 1234);
  float x[4];
  for (auto [name, want] : {std::pair{"w", w}, {"exp_avg", m}, {"exp_avg_sq", v}}) {
    ASSERT_TRUE(b.ex->readBuffer(b.ex->findBuffer(name), x, 16).ok());
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(x[i], want[i]) << name << "[" << i << "]";
  }
}

// Tests --async-save: each save writes the state staged at its iteration, not what the arena
// holds when the background writer runs, and the second save (reusing the first one's staging
// memory) writes its own iteration's values; finish() finalizes the pending one.
TEST(CheckpointTest, AsyncSaveWritesTheStagedState) {
  std::string dir = ::testing::TempDir() + "/checkpoint_test_async";
  std::filesystem::remove_all(dir);
  Rig a(Layout::Direct);
  ASSERT_TRUE(a.ex);
  const int wb = a.ex->findBuffer("w");
  const float w1[4] = {1, 2, 3, 4}, w2[4] = {-1, -2, -3, -4}, w3[4] = {7, 7, 7, 7};
  CheckpointOptions so;
  so.save = dir;
  so.saveInterval = 1;
  so.asyncSave = true;
  auto saver = a.checkpointer(so);
  ASSERT_TRUE(saver.ok()) << saver.status();
  ASSERT_TRUE(a.ex->writeBuffer(wb, w1, 16).ok());
  auto stop = (*saver)->afterIteration({1, 8, 8, 1, 0, 0});
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_FALSE(*stop);
  // The arena changes while iteration 1's save may still be written.
  ASSERT_TRUE(a.ex->writeBuffer(wb, w2, 16).ok());
  stop = (*saver)->afterIteration({2, 16, 16, 2, 0, 0});
  ASSERT_TRUE(stop.ok()) << stop.status();
  ASSERT_TRUE(a.ex->writeBuffer(wb, w3, 16).ok());
  ASSERT_TRUE((*saver)->finish({2, 16, 16, 2, 0, 0}).ok());
  EXPECT_NE(a.log.str().find("scheduled an async checkpoint save at iteration       2"),
            std::string::npos)
      << a.log.str();
  EXPECT_NE(a.log.str().find("successfully saved checkpoint from iteration       2"),
            std::string::npos)
      << a.log.str();
  for (auto [step, want] : {std::pair{1, w1}, {2, w2}}) {
    Rig b(Layout::Direct);
    ASSERT_TRUE(b.ex);
    CheckpointOptions lo;
    lo.load = dir;
    lo.ckptStep = step;
    auto loader = b.checkpointer(lo);
    ASSERT_TRUE(loader.ok()) << loader.status();
    TrainState got;
    int64_t seed = 0;
    absl::Status s = (*loader)->load(got, seed);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(got.iteration, step);
    float x[4];
    ASSERT_TRUE(b.ex->readBuffer(b.ex->findBuffer("w"), x, 16).ok());
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(x[i], want[i]) << "iteration " << step << " w[" << i << "]";
  }
}

// Tests that --async-save without --save is refused.
TEST(CheckpointTest, AsyncSaveNeedsSave) {
  Rig r(Layout::Direct);
  ASSERT_TRUE(r.ex);
  CheckpointOptions o;
  o.asyncSave = true;
  auto c = r.checkpointer(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--async-save needs --save DIR"), std::string::npos)
      << c.status();
}
