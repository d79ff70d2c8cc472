//===- ProgramSwitch.h - Moving the training state between programs ------===//
//
// Batch-size ramp-up (runtime/control/BatchRampup.h) runs one compiled program per
// num_microbatches. The programs of one plan differ in their microbatch inputs, stashes and
// schedule, not in the training state: the PARAMETER, MAIN_GRAD, MASTER_PARAM and
// OPTIMIZER_STATE buffers have the same index (checkpoints address them by index), name,
// kind, dtype and size, the SCALAR buffers (lr, weight decay, step, a loss scale) the same
// names, dtypes and sizes (their indices may move: they follow the microbatch inputs), and the
// parameter tables are equal. The compiler checks this when it
// writes the programs and the trainer again before it moves the state from one executor to
// the next (docs/design.md "Batch-size ramp-up").
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CONTROL_PROGRAMSWITCH_H
#define TRAINC_RUNTIME_CONTROL_PROGRAMSWITCH_H

#include "runtime/control/BatchRampup.h"
#include "runtime/control/Trainer.h"
#include "runtime/core/Executor.h"
#include "runtime/schema/program.pb.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <optional>
#include <string>

namespace trainc::rt::control {

/// Whether buffer kind `k` holds training state that outlives an iteration.
bool isTrainingState(schema::BufferKind k);

/// "" when programs `a` and `b` hold the training state alike (see the file comment: arrays
/// by index, device scalars by name), with equal parameter tables (name, buffer, offsets,
/// shapes) and the same mesh coordinates; otherwise the first difference, naming the buffer
/// or parameter and both values.
std::string trainingStateMismatch(const schema::Program &a, const schema::Program &b);

/// Copies every training-state buffer of `from` into `to` (byte for byte, device scalars to
/// the buffer of the same name; both executors' programs must pass trainingStateMismatch). Drains `from`'s communication stream first.
/// Errors: the executors' (a read or write of the wrong size).
absl::Status copyTrainingState(const Executor &from, Executor &to);

/// Where a ramp-up plan keeps rank `rank`'s program of `m` microbatches: the plan's own
/// rank<r>.pb for the final `finalM`, else rampup/m<m>/rank<r>.pb (compiler/lib/Rampup.cpp).
std::string rampupProgramPath(const std::string &planDir, int64_t rank, int64_t m,
                              int64_t finalM);

/// Reads the program of `m` microbatches at `path` and checks that it can take over the
/// training state of `current` (read from `currentPath`): its plan has m microbatches of the
/// same micro batch size and sequence length, and trainingStateMismatch is empty. Errors name
/// the file, m and the difference.
absl::StatusOr<schema::Program> readRampupProgram(const std::string &path, int64_t m,
                                                  const schema::Program &current,
                                                  const std::string &currentPath);

/// The ramp-up of a plan's final program (metadata "training.rampup_batch_size" = "START INCR
/// SAMPLES" and "training.decrease_batch_size_if_needed"; the global and micro batch sizes
/// from Program.plan, the data-parallel size from the mesh); nullopt for a constant-batch
/// plan. Errors: malformed metadata, values Megatron's calculator refuses.
absl::StatusOr<std::optional<BatchRampup>> rampupOf(const schema::Program &program);

/// Megatron's arguments.py rules for a ramp-up plan's run: --train-samples, not --train-iters
/// ("expected no batch-size rampup for iteration-based training"), and the sample-based LR
/// flags (--lr-warmup-samples, --lr-decay-samples) rather than the iteration ones. --trace is
/// refused (not supported yet: a trace names the instructions of one program). OK for a
/// constant-batch plan.
absl::Status checkRampupRunOptions(const schema::Program &program, const RunOptions &o);

} // namespace trainc::rt::control

#endif
