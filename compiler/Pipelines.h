//===- Pipelines.h - The phases of trainc compile as pass pipelines -------===//
//
// Each phase is a function that adds passes to a pass manager, with a verify pass at its boundary,
// and is registered on its own so that trainc-opt can run it alone:
//   trainc-phase-autodiff   verify(model) -> autodiff -> verify(autodiff)
//   trainc-phase-schedule   grad-accumulate -> schedule -> optimizer-expand -> grad-buckets
//                           -> schedule-units -> verify(sched)
//   trainc-phase-lower      lower-to-rt -> verify(rt)
//   trainc-phase-memory     memory-plan -> verify(memory)
//   trainc-compile          all of them
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_COMPILER_PIPELINES_H
#define TRAINC_COMPILER_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <string>

namespace mlir::trainc {

/// Compile-time decisions of a plan.
struct PlanOptions {
  int64_t numMicrobatches = 1;
  std::string normalization = "per_token"; // or "per_microbatch"
  double adamBeta1 = 0.9, adamBeta2 = 0.999, adamEps = 1e-8, clipGrad = 1.0;
  /// Data parallelism: size, gradient bucket size in elements (0 = Megatron's default),
  /// distributed optimizer (ZeRO-1), and the DP rank whose program the lower phase builds.
  int64_t dataParallelSize = 1, bucketSize = 0, dpRank = 0;
  bool distributedOptimizer = false, overlapParamGather = false;
  /// Order of the forward/backward units (trainc-schedule-units): "no-pipelining" (Megatron's)
  /// or "all-forward-first" (tests).
  std::string unitSchedule = "no-pipelining";
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
