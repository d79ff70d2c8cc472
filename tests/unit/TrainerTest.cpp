//===- TrainerTest.cpp - The training loop on hand-built programs ---------===//
//
// Programs assembled with ProgramBuilder stand in for compiled plans, so the loop's own rules are
// checked independently of the compiler: a skipped step (update_successful = 0) does not advance the
// learning-rate schedule, and a plan whose program fails validation is refused with the field named.
//
//===----------------------------------------------------------------------===//

#include "runtime/control/Trainer.h"
#include "runtime/core/Program.h"
#include "runtime/core/ProgramBuilder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

using namespace trainc::rt;
namespace schema = trainc::schema;

namespace {

/// A program whose "loss" is the learning rate it was given (loss_sum = lr, num_tokens = 1) and
/// whose update flag is the constant `update`.
schema::Program lrEchoProgram(double update, bool echoWeightDecay = false) {
  ProgramBuilder b;
  int lr = b.addBuffer("lr", schema::SCALAR, DType::F32, {});
  int wd = b.addBuffer("weight_decay", schema::SCALAR, DType::F32, {});
  if (echoWeightDecay)
    lr = wd;
  b.addBuffer("step", schema::SCALAR, DType::F32, {});
  int ls = b.addBuffer("loss_sum", schema::OUTPUT, DType::F32, {});
  int nt = b.addBuffer("num_tokens", schema::OUTPUT, DType::F32, {});
  b.addBuffer("grad_norm", schema::OUTPUT, DType::F32, {});
  int up = b.addBuffer("update_successful", schema::OUTPUT, DType::F32, {});
  int main = b.addFunction("train_step");
  b.hostIO(main, schema::FILL_INPUTS, "batch");
  b.kernel(main, "copy", {ProgramBuilder::buf(lr)}, {ProgramBuilder::buf(ls)});
  b.kernel(main, "fill", {}, {ProgramBuilder::buf(nt)}, {AttrArg("value", 1.0)});
  b.kernel(main, "fill", {}, {ProgramBuilder::buf(up)}, {AttrArg("value", update)});
  b.hostIO(main, schema::READ_OUTPUTS, "outputs");
  b.setPlan(/*microBatchSize=*/2, /*numMicrobatches=*/1, /*seqLength=*/8, /*vocabSize=*/256);
  schema::Program p = b.finish();
  // What trainc compile records of its flags (provenance; trainrun quotes it when a compile-time
  // flag is given to it). The trainer reads the plan, not these.
  auto &m = *p.mutable_metadata();
  m["training.micro_batch_size"] = "2";
  m["training.global_batch_size"] = "2";
  m["model.seq_length"] = "8";
  return p;
}

std::string writePlan(const std::string &name, const schema::Program &p) {
  std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(writeProgramFile(p, dir + "/rank0.pb").ok());
  return dir;
}

std::vector<double> run(const std::string &dir, const schema::Program &p) {
  auto opts = control::parseRunOptions(
      p, {"--mock-data", "--train-iters", "6", "--lr", "0.5", "--min-lr", "0.1",
          "--lr-decay-style", "linear", "--eval-iters", "0", "--log-interval", "100"});
  EXPECT_TRUE(opts.ok()) << opts.status();
  std::ostringstream log;
  auto t = control::Trainer::create(dir, *opts, log);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok())
    return {};
  EXPECT_TRUE((*t)->train().ok()) << log.str();
  return (*t)->losses();
}

TEST(Trainer, SkippedStepsDoNotAdvanceTheLearningRate) {
  // Linear decay from 0.5 to 0.1 over 6 iterations x 2 samples.
  schema::Program ok = lrEchoProgram(1.0);
  std::vector<double> lrs = run(writePlan("trainer-ok", ok), ok);
  ASSERT_EQ(lrs.size(), 6u);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(lrs[i], 0.1 + (1.0 - double(i) / 6.0) * 0.4, 1e-6) << "iteration " << i + 1;
  // Every step skipped: the schedule stays at its start.
  schema::Program skip = lrEchoProgram(0.0);
  std::vector<double> frozen = run(writePlan("trainer-skip", skip), skip);
  ASSERT_EQ(frozen.size(), 6u);
  for (double lr : frozen)
    EXPECT_NEAR(lr, 0.5, 1e-7);
}

TEST(Trainer, RefusesAProgramThatFailsValidation) {
  schema::Program p = lrEchoProgram(1.0);
  p.mutable_buffers(0)->set_offset(p.arena_bytes() + 64);
  std::string dir = writePlan("trainer-invalid", p);
  auto opts = control::parseRunOptions(p, {"--mock-data", "--train-iters", "1", "--lr", "1e-3"});
  ASSERT_TRUE(opts.ok());
  std::ostringstream log;
  auto t = control::Trainer::create(dir, *opts, log);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("rank0.pb: buffer 0 'lr': offset"), std::string::npos)
      << t.status();
  EXPECT_NE(t.status().message().find("is outside the arena"), std::string::npos) << t.status();
}

TEST(Trainer, RefusesAProgramWithoutAPlan) {
  schema::Program p = lrEchoProgram(1.0);
  p.clear_plan();
  std::string dir = writePlan("trainer-noplan", p);
  auto opts = control::parseRunOptions(p, {"--mock-data", "--train-iters", "1", "--lr", "1e-3"});
  ASSERT_TRUE(opts.ok());
  std::ostringstream log;
  auto t = control::Trainer::create(dir, *opts, log);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("rank0.pb: the program has no plan (Program.plan: micro "
                                      "batch size, number of microbatches, sequence length), "
                                      "which trainrun needs (was it written by trainc compile?)"),
            std::string::npos)
      << t.status();
  // A format version 1 file (written before the plan and the payload checksum existed) is told to
  // recompile, by the loader.
  p.set_format_version(1);
  dir = writePlan("trainer-v1", p);
  t = control::Trainer::create(dir, *opts, log);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("rank0.pb: program format version 1 is not supported: this "
                                      "runtime reads version 3, and files before version 3 have "
                                      "no payload checksum (recompile the plan with trainc "
                                      "compile)"),
            std::string::npos)
      << t.status();
}

TEST(Trainer, FillsInputBuffersByRoleAndMicrobatchNotByName) {
  // loss_sum = sum of both microbatches' loss masks (all ones: 2 x 2 x 8), whatever the buffers
  // are called.
  ProgramBuilder b;
  b.addBuffer("lr", schema::SCALAR, DType::F32, {});
  int ls = b.addBuffer("loss_sum", schema::OUTPUT, DType::F32, {});
  int nt = b.addBuffer("num_tokens", schema::OUTPUT, DType::F32, {});
  int up = b.addBuffer("update_successful", schema::OUTPUT, DType::F32, {});
  int gn = b.addBuffer("grad_norm", schema::OUTPUT, DType::F32, {}); // finite: the NaN check passes
  int m1 = b.addBuffer("second", schema::INPUT, DType::F32, {2, 8});
  int m0 = b.addBuffer("first", schema::INPUT, DType::F32, {2, 8});
  b.setHostInput(m0, schema::LOSS_MASK, 0);
  b.setHostInput(m1, schema::LOSS_MASK, 1);
  b.setPlan(2, 2, 8, 256);
  int main = b.addFunction("train_step");
  b.hostIO(main, schema::FILL_INPUTS, "batch");
  b.kernel(main, "sum_squares", {ProgramBuilder::buf(m0)}, {ProgramBuilder::buf(ls)});
  b.kernel(main, "sum_squares", {ProgramBuilder::buf(m1)}, {ProgramBuilder::buf(ls)},
           {AttrArg("beta", 1.0)});
  b.kernel(main, "fill", {}, {ProgramBuilder::buf(nt)}, {AttrArg("value", 1.0)});
  b.kernel(main, "fill", {}, {ProgramBuilder::buf(up)}, {AttrArg("value", 1.0)});
  b.kernel(main, "fill", {}, {ProgramBuilder::buf(gn)}, {AttrArg("value", 1.0)});
  b.hostIO(main, schema::READ_OUTPUTS, "outputs");
  schema::Program p = b.finish();
  std::vector<double> losses = run(writePlan("trainer-roles", p), p);
  ASSERT_EQ(losses.size(), 6u);
  for (double l : losses)
    EXPECT_EQ(l, 32.0);
}

TEST(Trainer, TraceRecordsTheProfileWindowOnly) {
  schema::Program p = lrEchoProgram(1.0);
  std::string dir = writePlan("trainer-trace", p);
  std::string trace = ::testing::TempDir() + "/trainer-trace-out";
  std::filesystem::remove_all(trace);
  auto countEvents = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--mock-data", "--train-iters", "6", "--lr", "1e-3",
                                     "--eval-iters", "0", "--trace", trace};
    args.insert(args.end(), extra.begin(), extra.end());
    auto opts = control::parseRunOptions(p, args);
    EXPECT_TRUE(opts.ok()) << opts.status();
    std::ostringstream log;
    auto t = control::Trainer::create(dir, *opts, log);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok())
      return -1;
    EXPECT_TRUE((*t)->train().ok());
    std::ifstream f(trace + "/rank0.trace.json");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    int n = 0;
    for (size_t at = 0; (at = text.find("\"ph\":\"X\"", at)) != std::string::npos; ++at)
      ++n;
    return n;
  };
  int all = countEvents({});
  int two = countEvents({"--profile-step-start", "3", "--profile-step-end", "5"});
  ASSERT_GT(all, 0);
  EXPECT_EQ(all % 6, 0);       // the same instructions every iteration
  EXPECT_EQ(two, all / 6 * 2); // iterations 3 and 4
  // With the timers on, timing stays on all along; the trace keeps the window all the same.
  EXPECT_EQ(countEvents({"--timing-log-level", "2", "--profile-step-start", "3",
                         "--profile-step-end", "5"}),
            two);
  EXPECT_EQ(countEvents({"--timing-log-level", "1"}), all);
}

TEST(Trainer, TraceErrorsComeBeforeTraining) {
  schema::Program p = lrEchoProgram(1.0);
  std::string dir = writePlan("trainer-trace-bad", p);
  // A path under a regular file cannot become a directory.
  std::string file = ::testing::TempDir() + "/trainer-trace-file";
  std::ofstream(file) << "x";
  auto opts = control::parseRunOptions(
      p, {"--mock-data", "--train-iters", "1", "--lr", "1e-3", "--trace", file + "/sub"});
  ASSERT_TRUE(opts.ok());
  std::ostringstream log;
  auto t = control::Trainer::create(dir, *opts, log);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("cannot write the trace into --trace '" + file + "/sub'"),
            std::string::npos)
      << t.status();
  auto window = control::parseRunOptions(p, {"--mock-data", "--train-iters", "1", "--lr", "1e-3",
                                             "--profile-step-start", "4", "--profile-step-end",
                                             "4"});
  ASSERT_TRUE(window.ok());
  auto w = control::Trainer::create(dir, *window, log);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().message(),
            "--profile-step-end 4 must be greater than --profile-step-start 4");
}

TEST(Trainer, WeightDecayScheduleIsMegatrons) {
  // The program's loss is the weight-decay scalar the trainer wrote. Megatron's get_wd over
  // wd_incr_steps = the training samples (8 iterations x 2), counted before each step, closed
  // form: linear start + r (end - start), cosine start + (cos(pi (1 - r)) + 1) / 2 (end - start)
  // with r = 2 (i - 1) / 16.
  schema::Program p = lrEchoProgram(1.0, /*echoWeightDecay=*/true);
  std::string dir = writePlan("trainer-wd", p);
  for (const char *style : {"linear", "cosine"}) {
    auto opts = control::parseRunOptions(
        p, {"--mock-data", "--train-iters", "8", "--lr", "0.5", "--eval-iters", "0",
            "--start-weight-decay", "0.02", "--end-weight-decay", "0.1",
            "--weight-decay-incr-style", style});
    ASSERT_TRUE(opts.ok()) << opts.status();
    std::ostringstream log;
    auto t = control::Trainer::create(dir, *opts, log);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE((*t)->train().ok()) << log.str();
    const std::vector<double> &wd = (*t)->losses();
    ASSERT_EQ(wd.size(), 8u);
    for (int i = 1; i <= 8; ++i) {
      double r = 2.0 * (i - 1) / 16.0;
      double coeff = std::string(style) == "linear" ? r : 0.5 * (std::cos(M_PI * (1 - r)) + 1);
      EXPECT_NEAR(wd[size_t(i - 1)], 0.02 + coeff * 0.08, 1e-7) << style << " iteration " << i;
      EXPECT_NEAR((*t)->weightDecays()[size_t(i - 1)], 0.02 + coeff * 0.08, 1e-12);
    }
  }
  // Constant (the default): --weight-decay throughout.
  auto opts = control::parseRunOptions(
      p, {"--mock-data", "--train-iters", "3", "--lr", "0.5", "--eval-iters", "0",
          "--weight-decay", "0.25"});
  ASSERT_TRUE(opts.ok()) << opts.status();
  std::ostringstream log;
  auto t = control::Trainer::create(dir, *opts, log);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->train().ok()) << log.str();
  for (double v : (*t)->losses())
    EXPECT_NEAR(v, 0.25, 1e-7);
}

TEST(RunOptions, WeightDecayScheduleErrors) {
  schema::Program p = lrEchoProgram(1.0);
  auto base = std::vector<std::string>{"--lr", "1e-3", "--train-iters", "3"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return control::parseRunOptions(p, a);
  };
  auto constant = with({"--start-weight-decay", "0.1"});
  ASSERT_FALSE(constant.ok());
  EXPECT_EQ(constant.status().message(),
            "--start-weight-decay and --end-weight-decay need --weight-decay-incr-style linear or "
            "cosine (with constant, --weight-decay applies throughout)");
  auto half = with({"--weight-decay-incr-style", "cosine", "--end-weight-decay", "0.1"});
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.status().message(),
            "--weight-decay-incr-style cosine needs both --start-weight-decay and "
            "--end-weight-decay");
  auto style = with({"--weight-decay-incr-style", "exp"});
  ASSERT_FALSE(style.ok());
  EXPECT_EQ(style.status().message(),
            "--weight-decay-incr-style expects one of constant, linear, cosine, got 'exp'");
  auto negative = with({"--weight-decay-incr-style", "linear", "--start-weight-decay", "-1",
                        "--end-weight-decay", "0.1"});
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().message(),
            "--start-weight-decay expects a non-negative number, got '-1'");
}

TEST(RunOptions, EveryFlagOfTheTableIsParsedAndInTheHelp) {
  // The table is the parser's gate: each entry, with its example value, must reach a handler
  // (not "unknown flag", not the missing-handler internal error), and the help text must list
  // exactly the table's flags.
  schema::Program p = lrEchoProgram(1.0);
  std::set<std::string> names;
  for (const control::RunFlag &f : control::runFlags()) {
    EXPECT_TRUE(names.insert(f.name).second) << "duplicate " << f.name;
    std::vector<std::string> args = {"--lr", "1e-3", "--train-iters", "3", f.name};
    if (!f.value.empty()) {
      EXPECT_FALSE(f.example.empty()) << f.name;
      args.push_back(f.example);
    }
    if (f.name == "--start-weight-decay" || f.name == "--end-weight-decay" ||
        f.name == "--weight-decay-incr-style")
      args.insert(args.end(), {"--weight-decay-incr-style", "linear", "--start-weight-decay",
                               "0.1", "--end-weight-decay", "0.2"});
    auto o = control::parseRunOptions(p, args);
    if (!o.ok()) {
      std::string m(o.status().message());
      EXPECT_EQ(m.find("unknown flag"), std::string::npos) << f.name << ": " << m;
      EXPECT_NE(o.status().code(), absl::StatusCode::kInternal) << f.name << ": " << m;
      // Only the refusals the parser documents.
      EXPECT_TRUE(m.rfind("not supported yet", 0) == 0 ||
                  m == "--train-iters and --train-samples are mutually exclusive")
          << f.name << ": " << m;
    }
  }
  std::set<std::string> inHelp;
  std::istringstream help(control::runFlagHelp());
  for (std::string line; std::getline(help, line);)
    if (line.rfind("  --", 0) == 0) {
      std::string name = line.substr(2, line.find(' ', 2) - 2);
      inHelp.insert(name);
      EXPECT_NE(line.find("default: "), std::string::npos) << line;
    }
  EXPECT_EQ(inHelp, names);
}

TEST(RunOptions, UnknownFlagSuggestsTheNearest) {
  schema::Program p = lrEchoProgram(1.0);
  auto typo = control::parseRunOptions(p, {"--lr", "1e-3", "--train-iter", "3"});
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().message(), "unknown flag --train-iter (did you mean --train-iters?)");
  EXPECT_EQ(control::nearestFlag("--log-intervl", {"--log-interval", "--eval-interval"}),
            "--log-interval");
  EXPECT_EQ(control::nearestFlag("--completely-different", {"--lr"}), "");
}

TEST(RunOptions, MissingLearningRateAndIterations) {
  schema::Program p = lrEchoProgram(1.0);
  auto noLr = control::parseRunOptions(p, {"--train-iters", "3"});
  ASSERT_FALSE(noLr.ok());
  EXPECT_EQ(noLr.status().message(), "missing --lr (give it to trainc compile or to trainrun)");
  auto noIters = control::parseRunOptions(p, {"--lr", "1e-3"});
  ASSERT_FALSE(noIters.ok());
  EXPECT_EQ(noIters.status().message(),
            "missing --train-iters or --train-samples (give one to trainc compile or to trainrun)");
  auto fixed = control::parseRunOptions(p, {"--lr", "1e-3", "--global-batch-size", "16"});
  ASSERT_FALSE(fixed.ok());
  EXPECT_EQ(fixed.status().message(),
            "--global-batch-size is fixed at compile time (this plan has 2): give it to trainc "
            "compile");
  auto unknown = control::parseRunOptions(p, {"--lr", "1e-3", "--no-such-flag"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "unknown flag --no-such-flag");
  auto noValue = control::parseRunOptions(p, {"--lr"});
  ASSERT_FALSE(noValue.ok());
  EXPECT_EQ(noValue.status().message(), "--lr expects a value");
}

} // namespace
