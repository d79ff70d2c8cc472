//===- Checkpoint.h - Save, load and exit controls (Megatron's checkpointing) -===//
//
// A checkpoint is a directory per save, SAVE/iter_0000100/, plus Megatron's tracker file
// SAVE/latest_checkpointed_iteration.txt naming the newest complete one. In the iteration
// directory each rank writes rank<r>.safetensors with the pieces it holds and no other rank
// writes (parameter values once per data-parallel group, the fp32 Adam moments once, or this
// rank's shard of them under the distributed optimizer), named by global tensor names; rank 0
// then writes metadata.json (schema/checkpoint.proto): the global index mapping every global
// tensor to the stored pieces (box + flat range) that hold it, and the run state. The format is
// documented in docs/checkpoint.md.
//
// Semantics follow Megatron-LM's checkpointing.py and training.py (save_checkpoint,
// load_checkpoint, checkpoint_and_decide_exit).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CONTROL_CHECKPOINT_H
#define TRAINC_RUNTIME_CONTROL_CHECKPOINT_H

#include "runtime/comm/Communicator.h"
#include "runtime/schema/program.pb.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

namespace trainc::rt {
class Executor;
}

namespace trainc::rt::control {

/// Checkpoint and exit flags (Megatron's names).
struct CheckpointOptions {
  std::string save;         // --save DIR
  int64_t saveInterval = 0; // --save-interval N (iterations; 0 = only at the end and on exit)
  std::string load;         // --load DIR
  bool noSaveOptim = false, noLoadOptim = false, noLoadRng = false;
  bool finetune = false;    // load the weights only; iteration, counters and optimizer start fresh
  int64_t ckptStep = -1;    // --ckpt-step N: load iteration N (-1 = the tracker's)
  bool overrideOptParamScheduler = false; // --override-opt_param-scheduler
  bool exitSignalHandler = false;         // SIGTERM/SIGINT: finish the iteration, save, exit 0
  int64_t exitInterval = 0;               // --exit-interval N (iterations)
  double exitDurationInMins = 0;          // --exit-duration-in-mins X (minutes)
  bool asyncSave = false; // --async-save: stage on the training thread, write in the background
};

/// Fills the defaults `trainc compile` recorded (metadata runtime.save, runtime.load,
/// runtime.save_interval).
void checkpointDefaults(const schema::Program &program, CheckpointOptions &options);

/// If `flag` is a checkpoint or exit flag, parses it (taking its value through `value`, which
/// reports a missing one) into `options` and returns true; returns false for any other flag.
/// Errors name the flag and the value: "--save-interval expects a positive integer, got 'x'";
/// "--exit-duration-in-mins expects a positive number of minutes, got '0'"; "not supported yet:
/// --ckpt-format".
absl::StatusOr<bool> parseCheckpointFlag(const std::string &flag,
                                         const std::function<absl::Status(std::string &)> &value,
                                         CheckpointOptions &options);

/// What the training loop carries from one iteration to the next (all counts from the start of
/// the run that the checkpoint continues).
struct TrainState {
  int64_t iteration = 0;        // iterations completed
  int64_t consumedSamples = 0;  // Megatron's consumed_train_samples: the data iterator's position
  int64_t scheduledSamples = 0; // the LR schedule's position: samples of successful iterations
  int64_t adamSteps = 0;        // successful Adam updates since the moments were fresh
  int64_t skipped = 0, nans = 0;
};

/// The LR schedule's configuration on the samples axis (Megatron's OptimizerParamScheduler).
struct LrSchedulerConfig {
  double maxLr = 0, minLr = 0;
  int64_t warmupSamples = 0, decaySamples = 0;
  std::string decayStyle;
};

/// Saves and loads one rank's part of checkpoints and decides Megatron's exits.
class Checkpointer {
public:
  /// Derives what this rank holds from `program` (the parameter table and every adamw call's
  /// operands: parameter range <-> exp_avg / exp_avg_sq range, padding excluded) and installs
  /// the SIGTERM/SIGINT handler when options.exitSignalHandler. `ex`, `comm` and `log` must
  /// outlive it. Errors: an adamw whose operands are function arguments (Unimplemented), a
  /// parameter buffer that is not F32 or F64.
  static absl::StatusOr<std::unique_ptr<Checkpointer>>
  create(const schema::Program &program, Executor &ex, Communicator &comm,
         const CheckpointOptions &options, const LrSchedulerConfig &schedule, int64_t seed,
         std::ostream &log);
  ~Checkpointer();

  /// With --load: finds the iteration (--ckpt-step or the tracker), verifies the checkpoint
  /// against this plan and writes this rank's parameters (and, unless --no-load-optim or
  /// --finetune, Adam moments) into the arena; sets `state` and the dropout seed `rngSeed`
  /// (unless --no-load-rng or --finetune). A --load directory without a tracker is not an error:
  /// training starts from the beginning (Megatron). Every error names the file and the field:
  /// a tracker naming a missing iteration, a missing or truncated rank file, a tensor of another
  /// shape or dtype (a checkpoint of a different model), a checksum mismatch, an LR schedule
  /// that differs from this run's (unless --override-opt_param-scheduler).
  absl::Status load(TrainState &state, int64_t &rngSeed);

  /// After iteration state.iteration: saves at --save-interval, and decides Megatron's exits in
  /// checkpoint_and_decide_exit's order (signal, save interval, duration reduced with MAX over
  /// the ranks, exit interval), saving first when --save is set. Returns true when the loop must
  /// stop. Collective: every rank calls it after every iteration. With --async-save the saves
  /// here are asynchronous: the state is staged into host memory (blocking), a background thread
  /// writes this rank's file, and the cross-rank completion (barriers, index, rename, tracker)
  /// runs on this thread once every rank's writer is done (tested here every iteration while a
  /// save is pending), before the next save, and before an exit.
  absl::StatusOr<bool> afterIteration(const TrainState &state);

  /// At the end of training: finalizes a pending async save, then saves unless the last
  /// iteration was just saved (Megatron), finalized before it returns.
  absl::Status finish(const TrainState &state);

  /// Saves `state` and this rank's tensors to --save (collective over all ranks): rank files
  /// durably into iter_N.partial/, then rank 0 checks that every rank's file is complete, writes
  /// metadata.json, renames the directory to iter_N/ and updates the tracker last. Logs bytes,
  /// seconds and throughput. Always synchronous (a pending async save is finalized first): the
  /// rerun state machine saves here just before it stops the run.
  absl::Status save(const TrainState &state);

  /// Batch-size ramp-up: the trainer moved the training state into `ex`, whose program holds it
  /// in the same buffers as the one this checkpointer was created for (ProgramSwitch.h);
  /// saves and loads use `ex` from now on. `ex` must outlive the checkpointer.
  void setExecutor(Executor &ex);
  /// Whether the last save (or load) was of iteration `iteration`.
  bool savedAt(int64_t iteration) const;

  struct Impl;

private:
  explicit Checkpointer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The iteration directory name Megatron uses: "iter_0000100".
std::string iterationDirName(int64_t iteration);

} // namespace trainc::rt::control

#endif
