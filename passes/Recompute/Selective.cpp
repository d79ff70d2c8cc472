//===- Selective.cpp - Selective recompute of core attention --------------===//
//
// Marks the core attention of every layer function for re-materialisation in the backward
// (model.recompute = "selective"); trainc-autodiff honours the mark. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "passes/Recompute/Passes.h"
#include "passes/PlanOption.h"

#include "dialects/Sched/SchedDialect.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "trainc-recompute-selective"

namespace mlir::trainc {
#define GEN_PASS_DEF_RECOMPUTESELECTIVEPASS
#include "passes/Recompute/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

struct RecomputeSelectivePass
    : mlir::trainc::impl::RecomputeSelectivePassBase<RecomputeSelectivePass> {
  using RecomputeSelectivePassBase::RecomputeSelectivePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string recompute;
    if (failed(resolvePlanOption(module, this->recompute, "recompute", recompute)))
      return signalPassFailure();
    int64_t layersPerStage = 0;
    if (sched::PlanAttr plan = sched::getPlan(module))
      layersPerStage = plan.getNumLayers() / plan.getPp();
    FailureOr<sched::RecomputeSpec> spec =
        sched::parseRecompute(recompute, layersPerStage, [&] {
          return module.emitError() << "trainc-recompute-selective: ";
        });
    if (failed(spec))
      return signalPassFailure();
    if (spec->granularity != "selective")
      return;
    Builder b(module.getContext());
    // FLOPs of one replay of each layer function's tagged ops.
    llvm::StringMap<double> replayFlops;
    for (func::FuncOp fn : module.getOps<func::FuncOp>()) {
      if (!fn->hasAttr("model.layer") || fn.isDeclaration())
        continue;
      double flops = 0;
      fn.walk([&](model::AttentionOp op) {
        op->setAttr(model::kRecomputeAttrName, b.getStringAttr("selective"));
        flops += cast<model::CostOpInterface>(op.getOperation()).getFlops();
      });
      replayFlops[fn.getSymName()] = flops;
    }
    double flops = 0;
    if (auto fwd = module.lookupSymbol<func::FuncOp>(function))
      fwd.walk([&](func::CallOp call) { flops += replayFlops.lookup(call.getCallee()); });
    double before = 0;
    if (auto a = module->getAttrOfType<FloatAttr>("trainc.recompute_flops_per_microbatch"))
      before = a.getValueAsDouble();
    module->setAttr("trainc.recompute_flops_per_microbatch", b.getF64FloatAttr(before + flops));
  }
};

} // namespace
