//===- Timers.h - Megatron's timers from the executor's instruction timings -===//
//
// Megatron-LM's iteration timers (megatron/core/timers.py; the names training_log prints) computed
// after the fact from the executor's per-instruction timings (Executor::timings, steady-clock
// nanoseconds recorded without any device or host synchronisation), grouped by the IR op that
// produced each instruction (Program.locations[Instruction.loc].op, e.g. "sched.forward"):
//
//   timer (Megatron level)       IR ops of the entry function          how
//   forward-backward (1)         fill_inputs .. finalize_grads,        wall span, first start to
//                                reduce_losses (the microbatch loop,   last end
//                                the gradient sync and scaling)
//   forward-compute (2)          sched.forward                         sum of the calls
//   backward-compute (2)         sched.backward                        sum of the calls
//   batch-generator (2)          sched.fill_inputs                     sum
//   all-grads-sync (1)           sched.grad_sync_start/_wait,          sum
//                                sched.finalize_grads
//   params-all-gather (1)        sched.param_gather_start/_wait        sum (any function: with
//                                                                      overlap the wait sits in
//                                                                      the next forward)
//   optimizer-clip-main-grad (1) sched.clip_grad_norm                  sum
//   optimizer-inner-step (1)     sched.adamw, sched.optimizer_step     sum
//   optimizer (1)                clip_grad_norm .. param_gather_*      wall span
//
// "sum" counts host-blocking time only: compute-stream instructions (kernels, calls, waits, host
// I/O) and synchronous collectives; an async collective's own duration is not counted (it
// overlaps compute; the wait that blocks on it is). Timers whose IR ops a program lacks (pipeline
// send/recv without pipeline parallelism, the fp16/bf16 optimizer copies) are absent, as Megatron
// prints only the timers that ran. Values are milliseconds per iteration over the logging
// interval (Megatron's normalizer).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CONTROL_TIMERS_H
#define TRAINC_RUNTIME_CONTROL_TIMERS_H

#include "runtime/core/Executor.h"
#include "runtime/schema/program.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace trainc::rt::control {

class IterationTimers {
public:
  /// The timers of `program` up to Megatron level `level` (1 or 2; 0 = none), in Megatron's
  /// training_log order. The program must outlive this object.
  IterationTimers(const schema::Program &program, int64_t level);

  /// Names of the timers this program can report (its IR has their ops), in order.
  const std::vector<std::string> &names() const { return names_; }
  /// Adds the timings of one run of the entry function (those of other entries are ignored).
  void addIteration(const std::vector<InstrTiming> &timings);
  /// Milliseconds per iteration of each timer of names() over the iterations added since the
  /// last reset (0 when none was added).
  std::vector<double> intervalMs() const;
  void reset();

  struct Def; // one row of the table above

private:
  const schema::Program &program_;
  std::vector<int> defs_;              // indices into the static table, for names_
  std::vector<std::string> names_;
  /// Per function, per instruction: a bit per entry of defs_ for "sum" membership and for
  /// "span" membership.
  std::vector<std::vector<uint32_t>> sumMask_, spanMask_;
  std::vector<std::vector<bool>> blocking_; // counts toward sums (not an async collective)
  std::vector<double> totalNs_;
  int64_t iterations_ = 0;
};

/// Megatron's Timers.log text for timers `names` with `perRankMs[r][i]` the value of timer i on
/// rank r (ranks in order), option "max" | "minmax" | "all" (--timing-log-option):
///   max:    "max time across ranks (ms):" then "\n    NAME ....: 12.34" per timer
///   minmax: "(min, max) time across ranks (ms):" then "\n    NAME ....: (1.23, 4.56)"
///   all:    "times across ranks (ms):" then "\n  NAME:" and "\n     rank  r: 1.23" per rank
/// with NAME + ' ' left-justified to 48 columns with dots, and a timer listed only when some rank
/// has a positive value (min over the positive ones). Empty when no timer has a value.
std::string formatTimers(const std::vector<std::string> &names,
                         const std::vector<std::vector<double>> &perRankMs,
                         const std::string &option);

} // namespace trainc::rt::control

#endif
