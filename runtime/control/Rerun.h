//===- Rerun.h - Megatron's rerun state machine, for a compiled iteration -----===//
//
// Megatron's rerun_state_machine.py (../shared/seeds/ 003 section 1.1) validates each
// iteration's results and, on a suspicious one, reruns the iteration in place with the same data
// and the same RNG, then attributes the fault by whether the rerun reproduces it. A trainc
// iteration is one program run, a pure function of the arena's persistent state, the batch and
// the (seed, iteration, microbatch) RNG key, so a rerun is a re-execution from a saved copy of
// the pre-step state (RerunSnapshot), with the same inputs.
//
// Verdicts (validate_results):
//  - the rerun gives a different result: a transient fault; logged, and training continues with
//    the rerun's result (the rule; Megatron exits and resumes from the last checkpoint);
//  - the rerun reproduces it: a persistent fault (or a true divergence); the pre-step state is
//    restored, saved as a checkpoint when --save is set, and the run stops with a message naming
//    the iteration, the rank and the values.
// report_determinism_stats reruns every iteration and reports the relative differences.
// Every decision depends only on values reduced over the data-parallel ranks (loss, grad norm)
// and on the iteration, so every rank decides the same.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CONTROL_RERUN_H
#define TRAINC_RUNTIME_CONTROL_RERUN_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace trainc::rt {
class Executor;
} // namespace trainc::rt

namespace trainc::rt::control {

enum class RerunMode { Disabled, ValidateResults, ReportDeterminismStats };
enum class ErrorInjection { CorrectResult, TransientError, PersistentError };

/// Megatron's resilience flags.
struct RerunOptions {
  RerunMode mode = RerunMode::ValidateResults; // --rerun-mode (Megatron's default)
  bool checkSpikyLoss = false;                 // --check-for-spiky-loss
  bool checkLargeGrads = false;                // --check-for-large-grads
  int64_t errorInjectionRate = 0;              // --error-injection-rate N (0 = never)
  ErrorInjection errorInjectionType = ErrorInjection::TransientError; // --error-injection-type
  std::string rejectedTrackerFile;             // --result-rejected-tracker-filename
};

/// If `flag` is one of the rerun flags, parses it (taking its value through `value`, which
/// reports a missing one) into `options` and returns true; false for any other flag. Errors name
/// the flag, the value and the choices: "--rerun-mode expects disabled, validate_results or
/// report_determinism_stats, got 'x'".
absl::StatusOr<bool> parseRerunFlag(const std::string &flag,
                                    const std::function<absl::Status(std::string &)> &value,
                                    RerunOptions &options);

/// One run's results as the training loop sees them (both reduced over data parallelism).
struct IterationResult {
  double loss = 0;     // lm loss of the global batch
  double gradNorm = 0; // global grad norm before clipping
};

/// A copy of every PARAMETER, MAIN_GRAD, MASTER_PARAM and OPTIMIZER_STATE buffer of the arena,
/// and fp16's grad-scaler scalars (LOSS_SCALE*).
class RerunSnapshot {
public:
  /// Copies the buffers out of `ex` (draining in-flight communication first).
  absl::Status take(const Executor &ex);
  /// Writes them back. Errors: the executor's (a buffer whose size changed cannot happen).
  absl::Status restore(Executor &ex) const;
  bool taken() const { return !buffers_.empty(); }
  /// Bytes held.
  uint64_t bytes() const;

private:
  std::vector<std::pair<int, std::vector<char>>> buffers_;
};

/// The decisions of one run (rank) of training; see the file comment.
class RerunStateMachine {
public:
  /// `checkNan`: --check-for-nan-in-loss-and-grad (a NaN/Inf result is suspicious).
  RerunStateMachine(RerunOptions options, bool checkNan, int rank);

  const RerunOptions &options() const { return opts_; }
  /// Whether iteration `it` must be preceded by a snapshot: some check can flag a finite result
  /// (whose optimizer step was applied) or the mode reruns every iteration. A NaN/Inf result
  /// needs none: the program skipped its update.
  bool needsSnapshot(int64_t it) const;
  /// The result the checks see for attempt 0 (first run) or 1 (rerun) of iteration `it`:
  /// `computed`, or NaN where --error-injection-rate injects a fault (iterations N, 2N, ...;
  /// transient: the first run only; persistent: both runs; correct_result: none, but the
  /// iteration is flagged).
  IterationResult observed(int64_t it, int attempt, const IterationResult &computed) const;
  /// Why a first-run result is suspicious ("NaN in the grad norm", "spiky loss 12.1, more than
  /// 10x the recent maximum 1.2", ...), or "" when it is not. Disabled mode: always "".
  std::string suspicion(int64_t it, const IterationResult &r) const;
  /// Whether two runs' results agree exactly (NaN equals NaN; the loss tolerance is 0 as in
  /// Megatron, whose forward is deterministic, and so is trainc's whole iteration).
  static bool reproduced(const IterationResult &a, const IterationResult &b);
  /// Records an accepted result (the recent maxima the spiky-loss and large-grad checks use).
  void accept(const IterationResult &r);
  /// Appends "iteration N rank R: <verdict>: <why>; first run ..., rerun ..." to
  /// --result-rejected-tracker-filename (if set). Errors: the file cannot be written.
  absl::Status recordRejected(int64_t it, const std::string &verdict, const std::string &why,
                              const IterationResult &first, const IterationResult &rerun) const;
  /// report_determinism_stats: adds a pair of runs; `report` gives the line to log
  /// ("rerun determinism over N iterations: max relative difference lm loss X, grad norm Y").
  void addDeterminismSample(const IterationResult &first, const IterationResult &rerun);
  std::string determinismReport() const;

private:
  bool injects(int64_t it) const;

  RerunOptions opts_;
  bool checkNan_;
  int rank_;
  std::deque<double> recentLoss_, recentNorm_; // last accepted values (window)
  int64_t samples_ = 0;
  double maxLossDiff_ = 0, maxNormDiff_ = 0;
};

} // namespace trainc::rt::control

#endif
