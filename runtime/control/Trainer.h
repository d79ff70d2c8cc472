//===- Trainer.h - The training loop of one rank (Megatron's train()) -----===//
//
// Loads a plan's rank program, initialises the parameters, and runs Megatron's training loop on
// it: per iteration the host fills the static input buffers of every microbatch and the device
// scalars (lr, weight decay, Adam step), runs the program, reads (loss_sum, num_tokens, grad_norm,
// update_successful); consumed samples advance by the global batch; the learning rate follows
// LrSchedule on the samples axis and only advances on successful steps; evaluation runs the
// program's eval_step entry over held-out batches. Log lines have Megatron's shape.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CONTROL_TRAINER_H
#define TRAINC_RUNTIME_CONTROL_TRAINER_H

#include "runtime/comm/Communicator.h"
#include "runtime/control/Checkpoint.h"
#include "runtime/control/Rerun.h"
#include "runtime/control/Safetensors.h"
#include "runtime/core/Backend.h"
#include "runtime/schema/program.pb.h"

#include "absl/status/statusor.h"

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace trainc::rt::control {

/// Run-time values (Megatron flag names). Defaults come from the plan (the compile command's
/// flags); flags given to trainrun override them.
struct RunOptions {
  std::vector<std::string> dataPath;
  /// Megatron's --train-data-path / --valid-data-path / --test-data-path (.bin/.idx blends per
  /// split; they replace --data-path) and --data-cache-path (runtime/control/Dataset.h).
  std::array<std::vector<std::string>, 3> splitDataPath;
  std::string dataCachePath;
  bool mockData = false;
  std::string split = "969, 30, 1";
  int64_t seqLength = 0; // 0 = the compiled one; anything else must equal it
  int64_t trainIters = 0, trainSamples = 0;
  double lr = 0, minLr = 0;
  bool lrGiven = false;
  std::string lrDecayStyle = "linear";
  int64_t lrWarmupIters = 0, lrWarmupSamples = 0, lrDecayIters = 0, lrDecaySamples = 0;
  double weightDecay = 0.01;
  int64_t logInterval = 100, evalInterval = 1000, evalIters = 100;
  int64_t seed = 1234;
  /// trainc: write initial/final weights (safetensors), the token batches and the losses here.
  std::string dumpDir;
  /// trainc: write a Chrome trace (chrome://tracing, Perfetto) of every iteration per rank here,
  /// as <traceDir>/rank<r>.trace.json, one track per stream.
  std::string traceDir;
  /// Megatron's --profile-step-start / --profile-step-end: with --trace, record iterations
  /// [start, end) only (1-based; 0 = from the first / to the last), which bounds the trace's
  /// memory on long runs.
  int64_t profileStepStart = 0, profileStepEnd = 0;
  /// Megatron's --check-for-nan-in-loss-and-grad (default on): a NaN or Inf loss or grad norm is
  /// an error naming the iteration and the rank. Off: the iteration is skipped (the program's
  /// update predicate already refuses a non-finite grad norm) and counted in the log.
  bool checkForNanInLossAndGrad = true;
  /// Megatron's --tokenizer-type, --vocab-file, --merge-file (runtime/data/Tokenizer.h). Text data
  /// is tokenized with it (empty: the byte tokenizer); with .bin/.idx data it gives the EOD id.
  /// Its vocabulary padded as Megatron pads must equal the plan's. NullTokenizer takes the plan's
  /// vocabulary as ids [0, V - 1) plus EOD V - 1 (Megatron's --vocab-size V - 1).
  std::string tokenizerType, vocabFile, mergeFile;
  /// Megatron's --tokenizer-model: the SentencePiece .model, or HuggingFaceTokenizer's
  /// tokenizer.json (or its directory).
  std::string tokenizerModel;
  /// Megatron's --eod-mask-loss (loss_mask 0 where the input token is EOD) and
  /// --reset-position-ids (position ids restart at 0 after each EOD in a sample).
  bool eodMaskLoss = false, resetPositionIds = false;
  /// Megatron's --reset-attention-mask: compile-time in trainc (the plan's doc_start input,
  /// docs/design.md "Document attention masks"); given at run time it must agree with the plan.
  bool resetAttentionMask = false;
  /// Checkpoints and exits: --save, --save-interval, --load, --exit-signal-handler, ...
  /// (Checkpoint.h).
  CheckpointOptions ckpt;
  /// Megatron's rerun state machine: --rerun-mode, --check-for-spiky-loss,
  /// --check-for-large-grads, --error-injection-rate/-type, --result-rejected-tracker-filename.
  RerunOptions rerun;
  /// TensorBoard (Megatron's flags; the plan's defaults, overridable at run time): event files
  /// in tensorboardDir from the last rank every tensorboardLogInterval iterations.
  std::string tensorboardDir;
  int64_t tensorboardLogInterval = 1;
  bool logTimersToTensorboard = false, logValidationPplToTensorboard = false,
       logMemoryToTensorboard = false, logWorldSizeToTensorboard = false,
       logBatchSizeToTensorboard = false, logLearningRateToTensorboard = true,
       logLossScaleToTensorboard = true, logThroughput = false;
  /// Megatron's --log-params-norm (L2 norm of every parameter, each counted once) and
  /// --log-num-zeros-in-grad (zero elements of the clipped main gradients) in the log line and
  /// TensorBoard ("params-norm", "num-zeros").
  bool logParamsNorm = false, logNumZerosInGrad = false;
  /// Megatron's timers: --timing-log-level 0 (none), 1 (forward-backward, optimizer, ...), 2
  /// (also forward-compute, backward-compute, batch-generator, ...) and --timing-log-option
  /// max | minmax | all over the ranks (docs/design.md "Timers").
  int64_t timingLogLevel = 0;
  std::string timingLogOption = "minmax";
  /// Megatron's weight-decay schedule (OptimizerParamScheduler.get_wd): from startWeightDecay
  /// to endWeightDecay over the training samples, "constant" | "linear" | "cosine"; with
  /// "constant" both are --weight-decay (Megatron refuses them then).
  std::optional<double> startWeightDecay, endWeightDecay;
  std::string weightDecayIncrStyle = "constant";
};

/// One run-time flag as trainrun --help shows it; the table parseRunOptions accepts (a flag not
/// in it is refused as unknown, with the nearest accepted one suggested).
struct RunFlag {
  std::string group;   // "data", "logging", ...
  std::string name;    // "--train-iters"
  std::string value;   // placeholder: "N", "X", "{a,b}", "DIR"; "" for a switch
  std::string example; // a valid value, for the test that runs every flag through the parser
  /// The default: trainrun's own (the plan's compile command records most of them, which then
  /// win), or a phrase ("plan's", "the compiled one").
  std::function<std::string(const RunOptions &)> show;
};
std::vector<RunFlag> runFlags();
/// The table as help text: one block per group, "  --name VALUE   default: D" per flag.
std::string runFlagHelp();
/// The candidate nearest to `name` by edit distance when it is within max(2, |name| / 5) edits
/// (a likely typo), else "".
std::string nearestFlag(const std::string &name, const std::vector<std::string> &candidates);

/// Fills RunOptions from the plan's recorded defaults (metadata "runtime.*", "training.*"), then
/// applies `args` (e.g. {"--train-iters", "100", "--data-path", "a.txt"}). The accepted flags are
/// runFlags()'s. Errors name the flag and the value: an unknown flag ("unknown flag --train-iter
/// (did you mean --train-iters?)"), a compile-time flag ("--global-batch-size is fixed at compile
/// time (this plan has 16): give it to trainc compile"), a missing or malformed value, an
/// inconsistent weight-decay schedule, or a flag whose feature is not implemented yet ("not
/// supported yet: --use-dist-ckpt (see docs/checkpoint.md)").
absl::StatusOr<RunOptions> parseRunOptions(const schema::Program &program,
                                           const std::vector<std::string> &args);

/// One logged evaluation: iteration and Sigma loss / Sigma tokens over the held-out batches.
struct EvalResult {
  int64_t iteration;
  double loss;
};

class Trainer {
public:
  /// `backend` null = the CPU backend; otherwise it must outlive the trainer, and `comm` must
  /// serve its device memory (the NCCL communicator for the CUDA backend).
  /// Reads `planDir`/rank<r>.pb (r = comm->rank(); `comm` null = one rank, rank 0), validates it, allocates the arena, initialises the parameters from
  /// the seed and builds the datasets. A plan with --rampup-batch-size also has
  /// `planDir`/rampup/m<m>/rank<r>.pb per smaller num_microbatches; the trainer switches to the
  /// one Megatron's calculator gives for the consumed samples (docs/design.md "Batch-size
  /// ramp-up"). Errors: a missing or invalid plan (naming the file and the
  /// field), a plan whose sequence length differs from --seq-length, data errors (missing file,
  /// empty corpus), an LR schedule that does not make sense.
  static absl::StatusOr<std::unique_ptr<Trainer>> create(const std::string &planDir,
                                                         const RunOptions &options,
                                                         std::ostream &log,
                                                         Communicator *comm = nullptr,
                                                         Backend *backend = nullptr);
  ~Trainer();

  /// Runs the training loop (and evaluations) to the end; returns the first runtime error.
  absl::Status train();

  /// Per-iteration lm loss (loss_sum / num_tokens), grad norm and update flag, for tests.
  const std::vector<double> &losses() const;
  const std::vector<double> &gradNorms() const;
  /// The weight decay each iteration ran with (Megatron's get_wd), for tests.
  const std::vector<double> &weightDecays() const;
  const std::vector<EvalResult> &evaluations() const;

  struct Impl;

private:
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};


} // namespace trainc::rt::control

#endif
