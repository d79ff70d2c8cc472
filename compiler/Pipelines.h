//===- Pipelines.h - The phases of trainc compile as pass pipelines -------===//
//
// Each phase is a function that adds passes to a pass manager, with a verify pass at its boundary,
// and is registered on its own so that trainc-opt can run it alone:
//   trainc-phase-autodiff   verify(model) -> autodiff -> verify(autodiff)
//   trainc-phase-schedule   grad-accumulate -> schedule -> optimizer-expand -> grad-buckets
//                           -> schedule-units -> verify(sched)
//   trainc-phase-lower      lower-to-rt -> cuda-graph -> verify(rt)
//   trainc-phase-memory     memory-plan -> verify(memory)
//   trainc-compile          all of them
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_COMPILER_PIPELINES_H
#define TRAINC_COMPILER_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <optional>
#include <string>

namespace mlir::trainc {

/// Overrides of the module's plan (`sched.plan`, set by the frontends) for the passes that read
/// it; an unset field leaves the plan's value (or, without a plan, the pass's default). The
/// driver sets none of them: `trainc compile` runs on the plan alone. trainc-opt's phase
/// pipelines set the ones given on their command line.
struct PlanOptions {
  std::optional<int64_t> numMicrobatches;
  std::optional<std::string> normalization; // "per_token" or "per_microbatch"
  std::optional<double> adamBeta1, adamBeta2, adamEps, clipGrad;
  /// Data parallelism: size, gradient bucket size in elements (0 = Megatron's default),
  /// distributed optimizer (ZeRO-1), overlap of the parameter all-gather.
  std::optional<int64_t> dataParallelSize, bucketSize;
  std::optional<bool> distributedOptimizer, overlapParamGather;
  /// Order of the forward/backward units (trainc-schedule-units): "no-pipelining" (Megatron's)
  /// or "all-forward-first" (tests).
  std::optional<std::string> unitSchedule;
  /// Activation recompute (trainc-recompute): "none", "full:uniform:N" or "full:block:N".
  std::optional<std::string> recompute;
  /// CUDA graphs (trainc-cuda-graph): "none" or "full_iteration" (Megatron's --cuda-graph-impl).
  std::optional<std::string> cudaGraphImpl;
};

void buildAutodiffPhase(OpPassManager &pm, const PlanOptions &o);
void buildSchedulePhase(OpPassManager &pm, const PlanOptions &o);
void buildLowerPhase(OpPassManager &pm, const PlanOptions &o);
void buildMemoryPhase(OpPassManager &pm, const PlanOptions &o);
/// All phases in order.
void buildCompilePipeline(OpPassManager &pm, const PlanOptions &o);

/// Registers trainc-phase-* and trainc-compile with trainc-opt.
void registerPipelines();

} // namespace mlir::trainc

#endif
