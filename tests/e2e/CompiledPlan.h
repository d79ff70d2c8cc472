//===- CompiledPlan.h - Compile a config and run it on the runtime (tests) ===//
#ifndef TRAINC_TESTS_E2E_COMPILEDPLAN_H
#define TRAINC_TESTS_E2E_COMPILEDPLAN_H

#include "compiler/Driver.h"
#include "frontends/MegatronFlags.h"
#include "runtime/comm/Communicator.h"
#include "runtime/core/Executor.h"
#include "runtime/core/Init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace trainc::test {

/// A batch of samples: tokens and labels [n, seq] (i32), loss mask [n, seq].
struct Samples {
  int64_t n = 0, seq = 0;
  std::vector<int32_t> tokens, labels;
  std::vector<double> mask;
};

inline Samples randomSamples(int64_t n, int64_t seq, int64_t vocab, uint32_t seed) {
  Samples s;
  s.n = n;
  s.seq = seq;
  std::mt19937 g(seed);
  std::uniform_int_distribution<int32_t> u(0, int32_t(vocab - 1));
  for (int64_t i = 0; i < n * seq; ++i) {
    s.tokens.push_back(u(g));
    s.labels.push_back(u(g));
    s.mask.push_back(1.0);
  }
  return s;
}

/// A compiled single-rank plan and its executor.
class CompiledPlan {
public:
  /// Compiles a preset with Megatron flags (dtype fp32 or fp64). Fails the test on error.
  CompiledPlan(const std::string &preset, std::vector<std::string> flags,
               const std::string &dtype = "fp32",
               const std::string &unitSchedule = "no-pipelining") {
    std::vector<schema::Program> all =
        compileAllRanks(preset, std::move(flags), &plan, dtype, unitSchedule);
    if (all.empty())
      return;
    program = all.front();
    start(dtype);
  }

  /// Runs an already compiled rank program (e.g. one rank of a data-parallel plan) over `comm`.
  CompiledPlan(config::PlanConfig plan_, schema::Program program_,
               std::unique_ptr<rt::Communicator> comm_, const std::string &dtype = "fp32")
      : plan(std::move(plan_)), program(std::move(program_)), comm(std::move(comm_)) {
    start(dtype);
  }

  /// Compiles a preset with Megatron flags into every rank's program. Empty on error (the test
  /// has failed).
  static std::vector<schema::Program> compileAllRanks(const std::string &preset,
                                                      std::vector<std::string> flags,
                                                      config::PlanConfig *planOut,
                                                      const std::string &dtype = "fp32",
                                                      const std::string &unitSchedule =
                                                          "no-pipelining") {
    std::optional<config::ModelConfig> base = config::findPreset(preset);
    EXPECT_TRUE(base.has_value()) << preset;
    config::FlagParseOptions po;
    po.base_model = &*base;
    llvm::Expected<config::PlanConfig> cfg = config::parseMegatronFlags(flags, po);
    if (!cfg) {
      ADD_FAILURE() << llvm::toString(cfg.takeError());
      return {};
    }
    *planOut = *cfg;
    mlir::MLIRContext ctx;
    mlir::trainc::CompileOptions o;
    o.dtype = dtype;
    o.unitSchedule = unitSchedule;
    std::vector<schema::Program> all;
    o.allRanks = &all;
    if (mlir::failed(mlir::trainc::compilePlan(ctx, *cfg, o))) {
      ADD_FAILURE() << "compilation failed";
      return {};
    }
    return all;
  }

  bool ok() const { return executor != nullptr; }
  rt::Executor &ex() { return *executor; }

  int buffer(const std::string &name) {
    int b = executor->findBuffer(name);
    EXPECT_GE(b, 0) << "no buffer " << name;
    return b;
  }
  std::vector<double> read(const std::string &name) { return readIndex(buffer(name)); }
  /// A float buffer's elements (f64, f32, bf16 or f16, as the buffer's dtype says) as doubles.
  std::vector<double> readIndex(int b) {
    const schema::Buffer &buf = program.buffers(b);
    std::vector<char> bytes = readBytes(b);
    size_t esz = buf.dtype() == schema::F64                                   ? 8
                 : buf.dtype() == schema::BF16 || buf.dtype() == schema::F16 ? 2
                                                                             : 4;
    std::vector<double> v(bytes.size() / esz);
    for (size_t i = 0; i < v.size(); ++i) {
      if (esz == 8) {
        std::memcpy(&v[i], bytes.data() + 8 * i, 8);
      } else if (esz == 2 && buf.dtype() == schema::F16) {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        v[i] = rt::f16::toFloat(h);
      } else if (esz == 2) {
        rt::bf16 h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        v[i] = float(h);
      } else {
        float x;
        std::memcpy(&x, bytes.data() + 4 * i, 4);
        v[i] = x;
      }
    }
    return v;
  }
  std::vector<char> readBytes(int b) {
    std::vector<char> bytes(program.buffers(b).byte_size());
    EXPECT_TRUE(executor->readBuffer(b, bytes.data(), bytes.size()).ok());
    return bytes;
  }
  /// A parameter's value / main_grad by its global name (through the program's parameter table,
  /// so that it works whether the parameter is its own buffer or a range of a larger one).
  std::vector<double> readParam(const std::string &name) { return readParamRange(name, false); }
  std::vector<double> readGrad(const std::string &name) { return readParamRange(name, true); }
  std::vector<double> readParamRange(const std::string &name, bool grad) {
    for (const schema::Parameter &q : program.parameters())
      if (q.name() == name) {
        int64_t n = 1;
        for (int64_t d : q.slice_size())
          n *= d;
        EXPECT_TRUE(!grad || q.has_grad_buffer()) << name << " has no main_grad";
        std::vector<double> all = readIndex(int(grad ? q.grad_buffer() : q.buffer()));
        uint64_t off = grad ? q.grad_offset() : q.buffer_offset();
        return std::vector<double>(all.begin() + int64_t(off), all.begin() + int64_t(off) + n);
      }
    ADD_FAILURE() << "no parameter " << name;
    return {};
  }
  void write(const std::string &name, const std::vector<double> &v) { writeIndex(buffer(name), v); }
  void writeIndex(int b, const std::vector<double> &v) {
    std::vector<char> bytes(v.size() * (f64 ? 8 : 4));
    for (size_t i = 0; i < v.size(); ++i) {
      if (f64)
        std::memcpy(bytes.data() + 8 * i, &v[i], 8);
      else {
        float x = float(v[i]);
        std::memcpy(bytes.data() + 4 * i, &x, 4);
      }
    }
    EXPECT_TRUE(executor->writeBuffer(b, bytes.data(), bytes.size()).ok());
  }
  void writeInts(const std::string &name, const int32_t *data, size_t n) {
    EXPECT_TRUE(executor->writeBuffer(buffer(name), data, n * 4).ok());
  }

  /// Runs one iteration on `samples` (microbatch i takes samples [i*mbs, (i+1)*mbs)) with the
  /// given lr; returns loss_sum / num_tokens.
  double step(const Samples &s, double lr, double step = 1, double wd = 0) {
    int64_t mbs = plan.training.micro_batch_size, m = plan.training.num_microbatches;
    EXPECT_EQ(s.n, mbs * m);
    double loss = 0;
    absl::Status st = executor->run([&](schema::HostIOKind k, const std::string &) {
      if (k == schema::FILL_INPUTS) {
        for (int64_t i = 0; i < m; ++i) {
          size_t off = size_t(i * mbs * s.seq), n = size_t(mbs * s.seq);
          std::string sfx = "." + std::to_string(i);
          writeInts("tokens" + sfx, s.tokens.data() + off, n);
          writeInts("labels" + sfx, s.labels.data() + off, n);
          write("loss_mask" + sfx, std::vector<double>(s.mask.begin() + off, s.mask.begin() + off + n));
          std::vector<int32_t> pos(n);
          for (size_t j = 0; j < n; ++j)
            pos[j] = int32_t(j % size_t(s.seq));
          writeInts("position_ids" + sfx, pos.data(), n);
          if (int b = executor->findBuffer("rng" + sfx); b >= 0 && rngSeed >= 0) {
            // As the Trainer: seed, iteration, the microbatch's first sample in the batch.
            int64_t rng[3] = {rngSeed, int64_t(step), i * mbs};
            EXPECT_TRUE(executor->writeBuffer(b, rng, sizeof(rng)).ok());
          }
        }
        write("lr", {lr});
        write("weight_decay", {wd});
        write("step", {step});
      } else {
        double ls = read("loss_sum")[0], nt = read("num_tokens")[0];
        loss = ls / nt;
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(st.ok()) << st;
    return loss;
  }

  config::PlanConfig plan;
  schema::Program program;
  bool f64 = false;
  /// When >= 0, step() writes dropout's rng inputs as the Trainer does (else they stay zero).
  int64_t rngSeed = -1;

private:
  /// Creates the executor for `program` (fails the test on error).
  void start(const std::string &dtype) {
    f64 = dtype == "fp64";
    auto ex = rt::Executor::create(program, *backend, *comm);
    if (!ex.ok()) {
      ADD_FAILURE() << ex.status();
      return;
    }
    executor = std::move(*ex);
  }

  std::unique_ptr<rt::Backend> backend = rt::createCpuBackend();
  std::unique_ptr<rt::Communicator> comm = rt::createLocalCommunicator();
  std::unique_ptr<rt::Executor> executor;
};

/// Norm-wise relative difference.
inline double relDiff(const std::vector<double> &a, const std::vector<double> &b) {
  double d = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return std::sqrt(d) / std::max({std::sqrt(na), std::sqrt(nb), 1e-300});
}

} // namespace trainc::test

#endif
