//===- Timers.cpp - Megatron's timers from instruction timings ------------===//

#include "runtime/control/Timers.h"

#include "absl/strings/str_format.h"

#include <algorithm>
#include <limits>

namespace trainc::rt::control {

struct IterationTimers::Def {
  const char *name;
  int level;
  bool span;        // wall span over the ops; else a sum of host-blocking durations
  bool anyFunction; // match in callees too (else the entry function only)
  std::vector<std::string> ops;
};

namespace {
/// Megatron's timers_to_log order (training.py), the ones trainc's IR can produce.
const std::vector<IterationTimers::Def> &timerDefs() {
  static const std::vector<IterationTimers::Def> defs = {
      {"forward-backward", 1, true, false,
       {"sched.fill_inputs", "sched.microbatch", "sched.forward", "sched.backward",
        "sched.grad_sync_start", "sched.grad_sync_wait", "sched.finalize_grads",
        "sched.reduce_losses", "sched.zero_losses", "sched.accumulate_loss",
        "sched.accumulate_grad", "sched.loss_seed"}},
      {"forward-compute", 2, false, false, {"sched.forward"}},
      {"backward-compute", 2, false, false, {"sched.backward"}},
      {"batch-generator", 2, false, false, {"sched.fill_inputs"}},
      {"all-grads-sync", 1, false, false,
       {"sched.grad_sync_start", "sched.grad_sync_wait", "sched.finalize_grads"}},
      {"params-all-gather", 1, false, true, {"sched.param_gather_start", "sched.param_gather_wait"}},
      {"optimizer-clip-main-grad", 1, false, false, {"sched.clip_grad_norm"}},
      {"optimizer-inner-step", 1, false, false, {"sched.adamw", "sched.optimizer_step"}},
      {"optimizer", 1, true, false,
       {"sched.clip_grad_norm", "sched.adamw", "sched.optimizer_step", "sched.param_gather_start",
        "sched.param_gather_wait"}},
  };
  return defs;
}
} // namespace

IterationTimers::IterationTimers(const schema::Program &program, int64_t level)
    : program_(program) {
  const auto &defs = timerDefs();
  const int nf = program.functions_size();
  sumMask_.assign(size_t(nf), {});
  spanMask_.assign(size_t(nf), {});
  blocking_.assign(size_t(nf), {});
  for (int f = 0; f < nf; ++f) {
    const schema::Function &fn = program.functions(f);
    sumMask_[size_t(f)].assign(size_t(fn.body_size()), 0);
    spanMask_[size_t(f)].assign(size_t(fn.body_size()), 0);
    blocking_[size_t(f)].assign(size_t(fn.body_size()), true);
    for (int i = 0; i < fn.body_size(); ++i) {
      const schema::Instruction &ins = fn.body(i);
      bool async = (ins.has_collective() && ins.collective().async()) ||
                   (ins.has_send() && ins.send().async()) || (ins.has_recv() && ins.recv().async());
      blocking_[size_t(f)][size_t(i)] = !async && !(ins.has_kernel() && ins.stream() != 0);
    }
  }
  for (size_t d = 0; d < defs.size(); ++d) {
    if (defs[d].level > level)
      continue;
    const int bit = int(defs_.size());
    bool present = false;
    for (int f = 0; f < nf; ++f) {
      if (!defs[d].anyFunction && f != int(program.entry()))
        continue;
      const schema::Function &fn = program.functions(f);
      for (int i = 0; i < fn.body_size(); ++i) {
        uint32_t loc = fn.body(i).loc();
        if (loc >= uint32_t(program.locations_size()))
          continue;
        const std::string &op = program.locations(int(loc)).op();
        if (std::find(defs[d].ops.begin(), defs[d].ops.end(), op) == defs[d].ops.end())
          continue;
        present = true;
        (defs[d].span ? spanMask_ : sumMask_)[size_t(f)][size_t(i)] |= 1u << bit;
      }
    }
    if (!present)
      continue;
    defs_.push_back(int(d));
    names_.push_back(defs[d].name);
  }
  totalNs_.assign(names_.size(), 0);
}

void IterationTimers::addIteration(const std::vector<InstrTiming> &timings) {
  if (names_.empty())
    return;
  std::vector<int64_t> first(names_.size(), std::numeric_limits<int64_t>::max()),
      last(names_.size(), std::numeric_limits<int64_t>::min());
  for (const InstrTiming &t : timings) {
    if (t.function < 0 || t.function >= int(sumMask_.size()) || t.index < 0 ||
        t.index >= int(sumMask_[size_t(t.function)].size()))
      continue;
    uint32_t sum = sumMask_[size_t(t.function)][size_t(t.index)];
    uint32_t span = spanMask_[size_t(t.function)][size_t(t.index)];
    bool blocking = blocking_[size_t(t.function)][size_t(t.index)];
    for (size_t k = 0; k < names_.size(); ++k) {
      if ((sum >> k & 1) && blocking)
        totalNs_[k] += double(t.endNs - t.startNs);
      if (span >> k & 1) {
        first[k] = std::min(first[k], t.startNs);
        last[k] = std::max(last[k], t.endNs);
      }
    }
  }
  for (size_t k = 0; k < names_.size(); ++k)
    if (last[k] >= first[k])
      totalNs_[k] += double(last[k] - first[k]);
  ++iterations_;
}

std::vector<double> IterationTimers::intervalMs() const {
  std::vector<double> out(names_.size(), 0);
  if (iterations_ > 0)
    for (size_t k = 0; k < names_.size(); ++k)
      out[k] = totalNs_[k] / 1e6 / double(iterations_);
  return out;
}

void IterationTimers::reset() {
  std::fill(totalNs_.begin(), totalNs_.end(), 0);
  iterations_ = 0;
}

std::string formatTimers(const std::vector<std::string> &names,
                         const std::vector<std::vector<double>> &perRankMs,
                         const std::string &option) {
  auto label = [](const std::string &name) {
    std::string s = name + " ";
    if (s.size() < 48)
      s.resize(48, '.');
    return s;
  };
  std::string out;
  bool any = false;
  if (option == "all") {
    out = "times across ranks (ms):";
    for (size_t i = 0; i < names.size(); ++i) {
      bool header = false;
      for (size_t r = 0; r < perRankMs.size(); ++r) {
        double v = i < perRankMs[r].size() ? perRankMs[r][i] : 0;
        if (!(v > 0))
          continue;
        any = true;
        if (!header) {
          out += "\n  " + names[i] + ":";
          header = true;
        }
        out += absl::StrFormat("\n     rank %2d: %.2f", int(r), v);
      }
    }
    return any ? out : "";
  }
  const bool maxOnly = option == "max";
  out = maxOnly ? "max time across ranks (ms):" : "(min, max) time across ranks (ms):";
  for (size_t i = 0; i < names.size(); ++i) {
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    for (const std::vector<double> &rank : perRankMs) {
      double v = i < rank.size() ? rank[i] : 0;
      if (v > 0) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
    if (!(hi > 0))
      continue;
    any = true;
    out += maxOnly ? absl::StrFormat("\n    %s: %.2f", label(names[i]), hi)
                   : absl::StrFormat("\n    %s: (%.2f, %.2f)", label(names[i]), lo, hi);
  }
  return any ? out : "";
}

} // namespace trainc::rt::control
