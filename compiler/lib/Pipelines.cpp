//===- Pipelines.cpp - Phase pipelines ------------------------------------===//

#include "compiler/Pipelines.h"

#include "passes/InitAllPasses.h"

#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/ErrorHandling.h"

#include <cstdio>

using namespace mlir;
using namespace mlir::trainc;

namespace {
std::unique_ptr<Pass> verify(const char *phase) {
  VerifyPhasePassOptions o;
  o.phase = phase;
  return createVerifyPhasePass(o);
}
} // namespace

namespace {
// Defined below, with the schedule phase's option plumbing.
std::string opt(const char *name, const std::optional<std::string> &v);
std::unique_ptr<Pass> withOptions(std::unique_ptr<Pass> pass, const std::string &text);
} // namespace

void mlir::trainc::buildAutodiffPhase(OpPassManager &pm, const PlanOptions &o) {
  pm.addPass(verify("model"));
  pm.addPass(createShardTensorParallelPass()); // the plan's tp (nothing to do at tp 1)
  // Selective recompute marks attention before autodiff splits the layers.
  pm.addPass(withOptions(createRecomputeSelectivePass(), opt("recompute", o.recompute)));
  pm.addPass(createAutodiffPass());
  pm.addPass(verify("autodiff"));
}

namespace {
/// " name=value" for a set override (doubles with round-trip precision).
std::string opt(const char *name, const std::optional<int64_t> &v) {
  return v ? " " + std::string(name) + "=" + std::to_string(*v) : "";
}
std::string opt(const char *name, const std::optional<double> &v) {
  if (!v)
    return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", *v);
  return " " + std::string(name) + "=" + buf;
}
std::string opt(const char *name, const std::optional<bool> &v) {
  return v ? " " + std::string(name) + "=" + (*v ? "true" : "false") : "";
}
std::string opt(const char *name, const std::optional<std::string> &v) {
  return v ? " " + std::string(name) + "=" + *v : "";
}
/// `pass` with only the options in `text` set, so that the others are read from the plan.
std::unique_ptr<Pass> withOptions(std::unique_ptr<Pass> pass, const std::string &text) {
  if (!text.empty() &&
      failed(pass->initializeOptions(text, [](const Twine &) { return failure(); })))
    llvm::report_fatal_error(llvm::Twine("internal error: bad pass options '") + text + "'");
  return pass;
}
} // namespace

void mlir::trainc::buildSchedulePhase(OpPassManager &pm, const PlanOptions &o) {
  // Activation recompute first: it rewrites the differentiated function's layer calls.
  pm.addPass(withOptions(createRecomputePass(), opt("recompute", o.recompute)));
  pm.addPass(withOptions(createGradAccumulatePass(), opt("normalization", o.normalization) +
                                                         opt("num-microbatches",
                                                             o.numMicrobatches)));
  pm.addPass(withOptions(createScheduleNoPipeliningPass(),
                         opt("num-microbatches", o.numMicrobatches) +
                             opt("adam-beta1", o.adamBeta1) + opt("adam-beta2", o.adamBeta2) +
                             opt("adam-eps", o.adamEps) + opt("clip-grad", o.clipGrad)));
  pm.addPass(createOptimizerExpandPass());
  pm.addPass(withOptions(createGradBucketsPass(),
                         opt("dp", o.dataParallelSize) + opt("bucket-size", o.bucketSize) +
                             opt("distributed-optimizer", o.distributedOptimizer) +
                             opt("overlap-param-gather", o.overlapParamGather)));
  pm.addPass(withOptions(createScheduleUnitsPass(), opt("schedule", o.unitSchedule)));
  // Last: it orders the final unit and layer bodies around their tensor collectives.
  pm.addPass(createTensorParallelCommOverlapPass());
  pm.addPass(verify("sched"));
}

void mlir::trainc::buildLowerPhase(OpPassManager &pm, const PlanOptions &o) {
  pm.addPass(createLowerToRtPass());
  // --cuda-graph-impl (the module's trainc.cuda_graph_impl unless overridden).
  pm.addPass(withOptions(createCudaGraphPass(), opt("impl", o.cudaGraphImpl)));
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
  Option<int64_t> bucketSize{*this, "bucket-size", llvm::cl::init(0),
                             llvm::cl::desc("Gradient bucket size in elements (0 = default)")};
  Option<bool> distributedOptimizer{*this, "distributed-optimizer", llvm::cl::init(false),
                                    llvm::cl::desc("ZeRO-1 distributed optimizer")};
  Option<bool> overlapParamGather{*this, "overlap-param-gather", llvm::cl::init(false),
                                  llvm::cl::desc("Wait for parameter all-gathers in the next "
                                                 "iteration's forward")};
  Option<std::string> schedule{*this, "schedule", llvm::cl::init("no-pipelining"),
                               llvm::cl::desc("Unit order: no-pipelining or all-forward-first")};
  Option<std::string> recompute{*this, "recompute", llvm::cl::init("none"),
                                llvm::cl::desc("none, full:uniform:N or full:block:N")};
  Option<std::string> cudaGraphImpl{*this, "cuda-graph-impl", llvm::cl::init("none"),
                                    llvm::cl::desc("none or full_iteration")};
  PlanOptions plan() const {
    PlanOptions p;
    auto set = [](auto &field, const auto &option) {
      if (option.hasValue())
        field = option.getValue();
    };
    set(p.numMicrobatches, numMicrobatches);
    set(p.normalization, normalization);
    set(p.clipGrad, clipGrad);
    set(p.dataParallelSize, dp);
    set(p.bucketSize, bucketSize);
    set(p.distributedOptimizer, distributedOptimizer);
    set(p.overlapParamGather, overlapParamGather);
    set(p.unitSchedule, schedule);
    set(p.recompute, recompute);
    set(p.cudaGraphImpl, cudaGraphImpl);
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
                                    "verify(model), shard, recompute-selective, autodiff, "
                                    "verify(autodiff)");
  registerPhase<buildSchedulePhase>(
      "trainc-phase-schedule",
      "recompute, grad-accumulate, schedule, optimizer-expand, grad-buckets, schedule-units, "
      "tp-comm-overlap, verify(sched)");
  registerPhase<buildLowerPhase>("trainc-phase-lower", "lower-to-rt, cuda-graph, verify(rt)");
  registerPhase<buildMemoryPhase>("trainc-phase-memory", "memory-plan, verify(memory)");
  registerPhase<buildCompilePipeline>("trainc-compile", "every phase, model IR to planned rt IR");
}
