//===- trainc-rt.cpp - Runtime command line: validate, run, demo ---------===//
//
//   trainc-rt validate PROGRAM          load and validate a program file; print a summary
//   trainc-rt run PROGRAM [--iters N]   run N iterations with zero-filled inputs; print timing
//   trainc-rt demo [--steps N] [--seed S] [--lr X] [--save-program FILE]
//                                       build, validate and train the one-block transformer program
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Communicator.h"
#include "runtime/core/Executor.h"
#include "runtime/core/Program.h"
#include "runtime/testing/BlockProgram.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <algorithm>
#include <map>
#include <vector>

using namespace trainc;
using namespace trainc::rt;

namespace {

int usage(const char *msg = nullptr) {
  if (msg)
    std::fprintf(stderr, "trainc-rt: %s\n", msg);
  std::fprintf(stderr,
               "usage: trainc-rt validate PROGRAM\n"
               "       trainc-rt run PROGRAM [--iters N]\n"
               "       trainc-rt demo [--steps N] [--seed S] [--lr X] [--save-program FILE]\n");
  return 2;
}

/// Parses a positive integer flag value; prints an error naming the flag on failure.
bool parseInt(const char *flag, const char *v, int64_t &out) {
  char *end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (!*v || *end || x <= 0) {
    std::fprintf(stderr, "trainc-rt: %s expects a positive integer, got '%s'\n", flag, v);
    return false;
  }
  out = x;
  return true;
}

bool parseDouble(const char *flag, const char *v, double &out) {
  char *end = nullptr;
  out = std::strtod(v, &end);
  if (!*v || *end || !(out >= 0)) {
    std::fprintf(stderr, "trainc-rt: %s expects a non-negative number, got '%s'\n", flag, v);
    return false;
  }
  return true;
}

void printSummary(const schema::Program &p) {
  size_t instrs = 0;
  for (const auto &f : p.functions())
    instrs += f.body_size();
  std::printf("program: format %u, producer '%s', rank %lld of %lld, %d buffers, %d functions, "
              "%zu instructions, arena %llu bytes\n",
              p.format_version(), p.producer().c_str(), (long long)p.mesh().rank(),
              (long long)p.mesh().world_size(), p.buffers_size(), p.functions_size(), instrs,
              (unsigned long long)p.arena_bytes());
  if (p.has_plan()) {
    int inputs = 0;
    for (const auto &b : p.buffers())
      inputs += b.has_host_input();
    std::printf("plan: micro batch %u, %u microbatches, global batch %llu, seq %u, vocab %u, "
                "%d host inputs\n",
                p.plan().micro_batch_size(), p.plan().num_microbatches(),
                (unsigned long long)p.plan().global_batch_size(), p.plan().seq_length(),
                p.plan().vocab_size(), inputs);
  }
}

int cmdValidate(int argc, char **argv) {
  if (argc != 1)
    return usage("validate takes one program file");
  auto p = readProgramFile(argv[0]);
  if (!p.ok()) {
    std::fprintf(stderr, "trainc-rt: %s\n", std::string(p.status().message()).c_str());
    return 1;
  }
  auto backend = createCpuBackend();
  if (absl::Status s = validateProgram(*p, backend.get()); !s.ok()) {
    std::fprintf(stderr, "trainc-rt: %s: invalid program: %s\n", argv[0],
                 std::string(s.message()).c_str());
    return 1;
  }
  printSummary(*p);
  std::printf("valid\n");
  return 0;
}

int cmdRun(int argc, char **argv) {
  if (argc < 1)
    return usage("run takes a program file");
  int64_t iters = 1;
  bool profile = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      if (!parseInt("--iters", argv[++i], iters))
        return 2;
    } else if (!std::strcmp(argv[i], "--profile")) {
      profile = true;
    } else {
      return usage((std::string("unknown argument '") + argv[i] + "'").c_str());
    }
  }
  auto p = readProgramFile(argv[0]);
  if (!p.ok()) {
    std::fprintf(stderr, "trainc-rt: %s\n", std::string(p.status().message()).c_str());
    return 1;
  }
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  ExecutorOptions eo;
  eo.timing = profile;
  auto ex = Executor::create(*p, *backend, *comm, eo);
  if (!ex.ok()) {
    std::fprintf(stderr, "trainc-rt: %s: %s\n", argv[0], std::string(ex.status().message()).c_str());
    return 1;
  }
  for (int64_t i = 0; i < iters; ++i) {
    if (profile && i + 1 == iters)
      (*ex)->clearTimings();
    auto t0 = std::chrono::steady_clock::now();
    if (absl::Status s = (*ex)->run(); !s.ok()) {
      std::fprintf(stderr, "trainc-rt: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("iteration %lld: %llu instructions, %.3f ms, arena high-water mark %llu bytes\n",
                (long long)i + 1, (unsigned long long)(*ex)->lastInstructionCount(), ms,
                (unsigned long long)(*ex)->highWaterMark());
  }
  if (profile) {
    // Time per kernel name in the last iteration, largest first.
    std::map<std::string, std::pair<double, int>> byKernel;
    double total = 0;
    for (const InstrTiming &t : (*ex)->timings()) {
      const auto &ins = p->functions(t.function).body(t.index);
      std::string name = ins.has_kernel() ? ins.kernel().kernel()
                         : ins.has_call()  ? std::string("(call)")
                                           : std::string("(other)");
      if (ins.has_call())
        continue; // calls include their body's instructions
      double ms = double(t.endNs - t.startNs) * 1e-6;
      byKernel[name].first += ms;
      byKernel[name].second += 1;
      total += ms;
    }
    std::vector<std::pair<std::string, std::pair<double, int>>> rows(byKernel.begin(), byKernel.end());
    std::sort(rows.begin(), rows.end(), [](auto &a, auto &b) { return a.second.first > b.second.first; });
    std::printf("profile of the last iteration (%.3f ms in instructions):\n", total);
    for (auto &[name, v] : rows)
      std::printf("  %-24s %9.3f ms %5.1f%% %6d calls\n", name.c_str(), v.first,
                  100.0 * v.first / total, v.second);
  }
  return 0;
}

int cmdDemo(int argc, char **argv) {
  int64_t steps = 30, seed = 1234;
  double lr = 1e-2;
  std::string save;
  for (int i = 0; i < argc; ++i) {
    const char *a = argv[i];
    bool hasValue = i + 1 < argc;
    if (!std::strcmp(a, "--steps") && hasValue) {
      if (!parseInt(a, argv[++i], steps))
        return 2;
    } else if (!std::strcmp(a, "--seed") && hasValue) {
      if (!parseInt(a, argv[++i], seed))
        return 2;
    } else if (!std::strcmp(a, "--lr") && hasValue) {
      if (!parseDouble(a, argv[++i], lr))
        return 2;
    } else if (!std::strcmp(a, "--save-program") && hasValue) {
      save = argv[++i];
    } else {
      return usage((std::string("unknown or incomplete argument '") + a + "'").c_str());
    }
  }
  testing::BlockConfig cfg;
  schema::Program program = testing::buildBlockProgram(cfg);
  if (!save.empty()) {
    if (absl::Status s = writeProgramFile(program, save); !s.ok()) {
      std::fprintf(stderr, "trainc-rt: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  auto ex = Executor::create(program, *backend, *comm);
  if (!ex.ok()) {
    std::fprintf(stderr, "trainc-rt: %s\n", std::string(ex.status().message()).c_str());
    return 1;
  }
  printSummary(program);
  std::printf("model: 1 transformer block (Llama-style: RMSNorm, RoPE, GQA %lld heads / %lld "
              "groups, SwiGLU), hidden %lld, vocab %lld, seq %lld, micro batch %lld x %lld "
              "microbatches, AdamW lr %g\n",
              (long long)cfg.heads, (long long)cfg.groups, (long long)cfg.hidden,
              (long long)cfg.vocab, (long long)cfg.seq, (long long)cfg.microBatch,
              (long long)cfg.numMicrobatches, lr);
  testing::initBlockParameters(**ex, cfg, uint64_t(seed));
  for (int64_t it = 0; it < steps; ++it) {
    auto t0 = std::chrono::steady_clock::now();
    double loss = testing::runBlockIteration(**ex, cfg, it, lr);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf(" iteration %4lld/%4lld | elapsed time per iteration (ms): %.2f | lm loss: %.6E\n",
                (long long)it + 1, (long long)steps, ms, loss);
  }
  std::printf("arena: %llu bytes planned, %llu bytes touched\n",
              (unsigned long long)program.arena_bytes(),
              (unsigned long long)(*ex)->highWaterMark());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  std::string cmd = argv[1];
  if (cmd == "validate")
    return cmdValidate(argc - 2, argv + 2);
  if (cmd == "run")
    return cmdRun(argc - 2, argv + 2);
  if (cmd == "demo")
    return cmdDemo(argc - 2, argv + 2);
  return usage(("unknown command '" + cmd + "'").c_str());
}
