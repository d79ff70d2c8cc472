//===- trainrun.cpp - The launcher: run a compiled plan -------------------===//
//
//   trainrun [--nproc N] PLAN_DIR [-- RUNTIME_FLAGS...]
//
// Runs the plan's rank programs with Megatron-style run-time flags (data, iterations, learning-rate
// values, intervals, seed); their defaults come from the `trainc compile` command line recorded in
// the plan. One rank for now; the CLI is already shaped for N ranks.
//
//===----------------------------------------------------------------------===//

#include "runtime/control/Trainer.h"
#include "runtime/core/Program.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

using namespace trainc;

namespace {

int usage(const std::string &msg = "") {
  if (!msg.empty())
    std::cerr << "trainrun: " << msg << "\n";
  std::cerr << "usage: trainrun [--nproc N] PLAN_DIR [-- RUNTIME_FLAGS...]\n"
               "  runtime flags (Megatron names): --data-path FILE|DIR... | --mock-data, --split,\n"
               "  --train-iters | --train-samples, --lr, --min-lr, --lr-decay-style,\n"
               "  --lr-warmup-iters | --lr-warmup-samples, --lr-decay-iters | --lr-decay-samples,\n"
               "  --weight-decay, --log-interval, --eval-interval, --eval-iters, --seed,\n"
               "  --seq-length (must equal the compiled one), --dump-dir DIR\n";
  return 2;
}

int fail(const std::string &msg) {
  std::cerr << "trainrun: error: " << msg << "\n";
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  int64_t nproc = 1;
  std::string planDir;
  std::vector<std::string> runtimeArgs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      runtimeArgs.assign(argv + i + 1, argv + argc);
      break;
    }
    if (a == "--nproc") {
      char *end = nullptr;
      if (i + 1 >= argc || (nproc = std::strtoll(argv[i + 1], &end, 10), *end) || nproc <= 0)
        return fail(std::string("--nproc expects a positive integer, got '") +
                    (i + 1 < argc ? argv[i + 1] : "") + "'");
      ++i;
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (a.rfind("-", 0) == 0) {
      return usage("unknown option '" + a + "' (runtime flags go after --)");
    } else if (planDir.empty()) {
      planDir = a;
    } else {
      return usage("more than one plan directory ('" + planDir + "', '" + a + "')");
    }
  }
  if (planDir.empty())
    return usage("missing PLAN_DIR");
  if (nproc != 1)
    return fail("not supported yet: --nproc " + std::to_string(nproc) +
                " (multi-rank plans land with data parallelism)");
  absl::StatusOr<schema::Program> program = rt::readProgramFile(planDir + "/rank0.pb");
  if (!program.ok())
    return fail(std::string(program.status().message()));
  if (program->mesh().world_size() != nproc)
    return fail("the plan has " + std::to_string(program->mesh().world_size()) +
                " ranks but --nproc is " + std::to_string(nproc));
  absl::StatusOr<rt::control::RunOptions> opts = rt::control::parseRunOptions(*program, runtimeArgs);
  if (!opts.ok())
    return fail(std::string(opts.status().message()));
  absl::StatusOr<std::unique_ptr<rt::control::Trainer>> trainer =
      rt::control::Trainer::create(planDir, *opts, std::cout);
  if (!trainer.ok()) {
    std::cout << "\n";
    return fail(std::string(trainer.status().message()));
  }
  if (absl::Status s = (*trainer)->train(); !s.ok())
    return fail(std::string(s.message()));
  return 0;
}
