//===- Pipelines.cpp - Phase pipelines ------------------------------------===//

#include "compiler/Pipelines.h"

#include "passes/InitAllPasses.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::trainc;

namespace {
std::unique_ptr<Pass> verify(const char *phase) {
  VerifyPhasePassOptions o;
  o.phase = phase;
  return createVerifyPhasePass(o);
}
} // namespace

void mlir::trainc::buildAutodiffPhase(OpPassManager &pm, const PlanOptions &) {
  pm.addPass(verify("model"));
  pm.addPass(createAutodiffPass());
  pm.addPass(verify("autodiff"));
}

void mlir::trainc::buildSchedulePhase(OpPassManager &pm, const PlanOptions &o) {
  GradAccumulatePassOptions g;
  g.normalization = o.normalization;
  g.numMicrobatches = o.numMicrobatches;
  pm.addPass(createGradAccumulatePass(g));
  ScheduleNoPipeliningPassOptions s;
  s.numMicrobatches = o.numMicrobatches;
  s.beta1 = o.adamBeta1;
  s.beta2 = o.adamBeta2;
  s.eps = o.adamEps;
  s.clipGrad = o.clipGrad;
  pm.addPass(createScheduleNoPipeliningPass(s));
  pm.addPass(createOptimizerExpandPass());
  GradBucketsPassOptions gb;
  gb.dp = o.dataParallelSize;
  gb.bucketSize = o.bucketSize;
  gb.distributedOptimizer = o.distributedOptimizer;
  gb.overlapParamGather = o.overlapParamGather;
  pm.addPass(createGradBucketsPass(gb));
  ScheduleUnitsPassOptions su;
  su.schedule = o.unitSchedule;
  pm.addPass(createScheduleUnitsPass(su));
  pm.addPass(verify("sched"));
}

void mlir::trainc::buildLowerPhase(OpPassManager &pm, const PlanOptions &o) {
  LowerToRtPassOptions l;
  l.dpRank = o.dpRank;
  pm.addPass(createLowerToRtPass(l));
  pm.addPass(verify("rt"));
}

void mlir::trainc::buildMemoryPhase(OpPassManager &pm, const PlanOptions &) {
  pm.addPass(createMemoryPlanPass());
  pm.addPass(verify("memory"));
}

void mlir::trainc::buildCompilePipeline(OpPassManager &pm, const PlanOptions &o) {
  buildAutodiffPhase(pm, o);
  buildSchedulePhase(pm, o);
  buildLowerPhase(pm, o);
  buildMemoryPhase(pm, o);
}

namespace {
struct PlanPipelineOptions : public PassPipelineOptions<PlanPipelineOptions> {
  Option<int64_t> numMicrobatches{*this, "num-microbatches", llvm::cl::init(1),
                                  llvm::cl::desc("Microbatches per iteration")};
  Option<std::string> normalization{*this, "normalization", llvm::cl::init("per_token"),
                                    llvm::cl::desc("per_token or per_microbatch")};
  Option<double> clipGrad{*this, "clip-grad", llvm::cl::init(1.0),
                          llvm::cl::desc("Global grad-norm clip (0 disables)")};
  Option<int64_t> dp{*this, "dp", llvm::cl::init(1), llvm::cl::desc("Data-parallel size")};
  Option<int64_t> dpRank{*this, "dp-rank", llvm::cl::init(0),
                         llvm::cl::desc("The DP rank whose program is lowered")};
  Option<int64_t> bucketSize{*this, "bucket-size", llvm::cl::init(0),
                             llvm::cl::desc("Gradient bucket size in elements (0 = default)")};
  Option<bool> distributedOptimizer{*this, "distributed-optimizer", llvm::cl::init(false),
                                    llvm::cl::desc("ZeRO-1 distributed optimizer")};
  Option<bool> overlapParamGather{*this, "overlap-param-gather", llvm::cl::init(false),
                                  llvm::cl::desc("Wait for parameter all-gathers in the next "
                                                 "iteration's forward")};
  Option<std::string> schedule{*this, "schedule", llvm::cl::init("no-pipelining"),
                               llvm::cl::desc("Unit order: no-pipelining or all-forward-first")};
  PlanOptions plan() const {
    PlanOptions p;
    p.numMicrobatches = numMicrobatches;
    p.normalization = normalization;
    p.clipGrad = clipGrad;
    p.dataParallelSize = dp;
    p.dpRank = dpRank;
    p.bucketSize = bucketSize;
    p.distributedOptimizer = distributedOptimizer;
    p.overlapParamGather = overlapParamGather;
    p.unitSchedule = schedule;
    return p;
  }
};

template <void (*Build)(OpPassManager &, const PlanOptions &)>
void registerPhase(const char *name, const char *desc) {
  PassPipelineRegistration<PlanPipelineOptions>(
      name, desc, [](OpPassManager &pm, const PlanPipelineOptions &o) { Build(pm, o.plan()); });
}
} // namespace

void mlir::trainc::registerPipelines() {
  registerPhase<buildAutodiffPhase>("trainc-phase-autodiff",
                                    "verify(model), autodiff, verify(autodiff)");
  registerPhase<buildSchedulePhase>(
      "trainc-phase-schedule",
      "grad-accumulate, schedule, optimizer-expand, grad-buckets, schedule-units, verify(sched)");
  registerPhase<buildLowerPhase>("trainc-phase-lower", "lower-to-rt, verify(rt)");
  registerPhase<buildMemoryPhase>("trainc-phase-memory", "memory-plan, verify(memory)");
  registerPhase<buildCompilePipeline>("trainc-compile", "every phase, model IR to planned rt IR");
}
