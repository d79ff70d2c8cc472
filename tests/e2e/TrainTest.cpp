//===- TrainTest.cpp - trainc compile + the training loop on real text ----===//
//
// Compiles the byte-level tiny Llama (preset llama-tiny-text) and trains it with the runtime's
// training loop on the English text of /usr/share/common-licenses:
// - after 200 iterations the validation loss is below 2.5 nats per byte (uniform bytes: 5.55);
// - two runs with the same seed give bitwise identical losses.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver.h"
#include "frontends/MegatronFlags.h"
#include "runtime/control/Trainer.h"
#include "runtime/core/Program.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <sstream>

using namespace trainc;

namespace {

const char *kCorpus = "/usr/share/common-licenses";

/// Compiles the plan into `dir` with the given Megatron flags on top of the preset.
void compile(const std::string &dir, std::vector<std::string> flags) {
  std::optional<config::ModelConfig> base = config::findPreset("llama-tiny-text");
  ASSERT_TRUE(base);
  config::FlagParseOptions po;
  po.base_model = &*base;
  llvm::Expected<config::PlanConfig> cfg = config::parseMegatronFlags(flags, po);
  ASSERT_TRUE(bool(cfg)) << llvm::toString(cfg.takeError());
  mlir::MLIRContext ctx;
  mlir::trainc::CompileOptions o;
  o.outputDir = dir;
  ASSERT_TRUE(mlir::succeeded(mlir::trainc::compilePlan(ctx, *cfg, o)));
}

std::unique_ptr<rt::control::Trainer> trainer(const std::string &dir,
                                              std::vector<std::string> args, std::ostream &log) {
  absl::StatusOr<schema::Program> p = rt::readProgramFile(dir + "/rank0.pb");
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok())
    return nullptr;
  absl::StatusOr<rt::control::RunOptions> o = rt::control::parseRunOptions(*p, args);
  EXPECT_TRUE(o.ok()) << o.status();
  if (!o.ok())
    return nullptr;
  auto t = rt::control::Trainer::create(dir, *o, log);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<std::string> planFlags(int64_t iters) {
  return {"--micro-batch-size", "4",          "--global-batch-size", "16",
          "--lr",               "3e-3",       "--min-lr",            "3e-4",
          "--lr-decay-style",   "cosine",     "--lr-warmup-iters",   "20",
          "--weight-decay",     "0.1",        "--adam-beta2",        "0.95",
          "--train-iters",      std::to_string(iters), "--eval-interval", "1000",
          "--eval-iters",       "5",          "--split",             "95,5,0",
          "--log-interval",     "50"};
}

TEST(Train, ValidationLossFallsBelow2p5NatsPerByteIn200Iterations) {
  if (!std::filesystem::exists(kCorpus))
    GTEST_SKIP() << kCorpus << " is missing";
  std::string dir = ::testing::TempDir() + "/trainc-train-200";
  std::filesystem::remove_all(dir);
  compile(dir, planFlags(200));
  std::ostringstream log;
  auto t = trainer(dir, {"--data-path", kCorpus}, log);
  ASSERT_TRUE(t);
  absl::Status s = t->train();
  ASSERT_TRUE(s.ok()) << s << "\n" << log.str();
  ASSERT_FALSE(t->evaluations().empty()) << log.str();
  double valid = t->evaluations().back().loss;
  std::printf("%s", log.str().c_str());
  EXPECT_LT(valid, 2.5) << log.str();
  EXPECT_LT(t->losses().back(), t->losses().front() - 2.0);
}

TEST(Train, TwoRunsWithTheSameSeedAreBitwiseIdentical) {
  if (!std::filesystem::exists(kCorpus))
    GTEST_SKIP() << kCorpus << " is missing";
  std::string dir = ::testing::TempDir() + "/trainc-train-det";
  std::filesystem::remove_all(dir);
  compile(dir, planFlags(25));
  std::vector<double> runs[2];
  std::vector<double> valid[2];
  for (int r = 0; r < 2; ++r) {
    std::ostringstream log;
    auto t = trainer(dir, {"--data-path", kCorpus, "--eval-interval", "10"}, log);
    ASSERT_TRUE(t);
    ASSERT_TRUE(t->train().ok()) << log.str();
    runs[r] = t->losses();
    for (const auto &e : t->evaluations())
      valid[r].push_back(e.loss);
  }
  ASSERT_EQ(runs[0].size(), 25u);
  ASSERT_EQ(runs[1].size(), 25u);
  for (size_t i = 0; i < runs[0].size(); ++i)
    EXPECT_EQ(std::memcmp(&runs[0][i], &runs[1][i], sizeof(double)), 0) << "iteration " << i + 1;
  ASSERT_EQ(valid[0].size(), valid[1].size());
  for (size_t i = 0; i < valid[0].size(); ++i)
    EXPECT_EQ(std::memcmp(&valid[0][i], &valid[1][i], sizeof(double)), 0);
  // A different seed changes the initialisation and the data order.
  std::ostringstream log;
  auto other = trainer(dir, {"--data-path", kCorpus, "--seed", "7", "--train-iters", "2",
                             "--lr-warmup-iters", "0"},
                       log);
  ASSERT_TRUE(other);
  ASSERT_TRUE(other->train().ok());
  EXPECT_NE(other->losses()[0], runs[0][0]);
}

} // namespace
