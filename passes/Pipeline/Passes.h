//===- Passes.h - Schedule passes -----------------------------------------===//
#ifndef TRAINC_PASSES_PIPELINE_PASSES_H
#define TRAINC_PASSES_PIPELINE_PASSES_H

#include "dialects/Sched/SchedDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

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
} // namespace mlir::trainc

#endif
