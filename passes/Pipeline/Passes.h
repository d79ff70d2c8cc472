//===- Passes.h - Schedule passes -----------------------------------------===//
#ifndef TRAINC_PASSES_PIPELINE_PASSES_H
#define TRAINC_PASSES_PIPELINE_PASSES_H

#include "dialects/Sched/SchedDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <string>
#include <utility>

namespace mlir::trainc {
#define GEN_PASS_DECL
#include "passes/Pipeline/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/Pipeline/Passes.h.inc"

/// The first layer of each of `numStages` pipeline stages of `numLayers` layers, then the end
/// (numStages + 1 bounds): the first and last stage get `firstStageLayers` /
/// `lastStageLayers` when > 0 (Megatron's --decoder-first/last-pipeline-num-layers), the other
/// stages an equal share of the rest (rounded down: the caller checks that bounds.back() ==
/// numLayers and that no stage is empty).
SmallVector<int64_t> pipelineStageBounds(int64_t numLayers, int64_t numStages,
                                         int64_t firstStageLayers = 0,
                                         int64_t lastStageLayers = 0);

/// Megatron's 1F1B unit order of pipeline stage `stage` of `numStages` with `m` microbatches:
/// (is forward, microbatch) pairs; warmup = min(numStages - stage - 1, m) forwards, then
/// alternating forward/backward, then the remaining backwards.
SmallVector<std::pair<bool, int64_t>> oneForwardOneBackward(int64_t numStages, int64_t stage,
                                                            int64_t m);

/// One unit of a pipeline rank's order: the forward or backward of `microbatch` on model chunk
/// `chunk` (0 .. V - 1; chunk v of rank r holds layer block v * P + r).
struct ScheduleStep {
  bool forward = true;
  int64_t chunk = 0, microbatch = 0;
};

/// "" when Megatron's interleaved 1F1B runs `m` microbatches on `numStages` stages of
/// `numChunks` model chunks with microbatch groups of `groupSize` (--microbatch-group-size-per-
/// vp-stage; 0 = numStages); else Megatron's message (schedules.py at commit e03878b5f:
/// m % P == 0, P <= groupSize <= m, m % groupSize == 0 or >= P), or checkInterleavedMessages'.
std::string checkInterleavedSchedule(int64_t numStages, int64_t numChunks, int64_t m,
                                     int64_t groupSize);

/// "" when the interleaved orders of all `numStages` ranks pass every activation and gradient
/// to the unit that expects it and finish, with the runtime's p2p semantics (eager sends,
/// blocking receives, the k-th message from rank a to rank b meeting b's k-th receive from a);
/// else the first mismatch or wait. (With 2 stages activations and gradients share one pair of
/// ranks: group sizes other than 2 mismatch.) Part of checkInterleavedSchedule.
std::string checkInterleavedMessages(int64_t numStages, int64_t numChunks, int64_t m,
                                     int64_t groupSize);

/// Megatron's forward_backward_pipelining_with_interleaving order on pipeline rank `stage`
/// (2 x numChunks x m steps): the schedule table of microbatch groups (get_schedule_table),
/// warmup = min((P - stage - 1) * 2 + (V - 1) * groupSize, V m) forwards, then one forward and
/// one backward per step, then the cooldown backwards; the k-th backward runs the k-th table
/// entry's microbatch on chunk V - 1 - chunk (get_model_chunk_id). Call only when
/// checkInterleavedSchedule passed.
SmallVector<ScheduleStep> interleavedOneForwardOneBackward(int64_t numStages, int64_t stage,
                                                           int64_t numChunks, int64_t m,
                                                           int64_t groupSize);
/// One unit of a ZB-H1 order: 'F' (forward), 'B' (input gradients) or 'W' (weight gradients) of
/// `microbatch`.
struct ZeroBubbleStep {
  char kind = 'F';
  int64_t microbatch = 0;
};

/// The ZB-H1 unit order of pipeline stage `stage` of `numStages` with `m` microbatches (Qi et
/// al. 2023, arXiv 2401.10241, figure 3 top; the order of PyTorch's zero-bubble 1F1B): warmup
/// = min(P - stage - 1, m) forwards as in 1F1B, then per step a forward and a B, with a W from
/// step `stage` on, then cooldown B (W), then the remaining Ws; every unit of a kind in
/// microbatch order. Stage s holds min(P, m) microbatches between F and W (1F1B's peak, on
/// every stage); with unit costs and m >= P the idle share is (P - 1) / (3 m + P - 1).
SmallVector<ZeroBubbleStep> zeroBubbleH1(int64_t numStages, int64_t stage, int64_t m);

/// Splits `backward`, a backward unit function built by trainc-schedule-units (arguments: the
/// stage's, then the forward's stash tagged sched.stash; results: tokens), by dataflow into
/// `<name>.input` (B: everything the input gradients and their sends need; returns the values
/// W reads) and `<name>.weight` (W: the gradient accumulations, the gradient syncs and what
/// only they read; takes `backward`'s arguments then B's values, tagged sched.stash after the
/// forward's). A layer backward call (@f.bwd) some of whose results only W reads is split the
/// same way into @f.bwd.input.<mask> / @f.bwd.weight.<mask> (mask: i/w per result), the values
/// the weight part reads of the input part returned by it. `backward` is left in place (the
/// caller erases it). Errors: a callee without a body, a token computed by B.
FailureOr<std::pair<func::FuncOp, func::FuncOp>> splitWeightGradients(ModuleOp module,
                                                                      func::FuncOp backward);
} // namespace mlir::trainc

#endif
