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

/// The layer-relative parameter name of `v` if it is an argument of `fn` (model.layer_param).
StringRef layerParamOf(func::FuncOp fn, Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || arg.getOwner()->getParentOp() != fn.getOperation())
    return {};
  auto a = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "model.layer_param");
  return a ? a.getValue() : StringRef();
}

/// Megatron's "mlp" module without its output projection: the linear_fc1 op and the ops that
/// lead from it to linear_fc2's input (bias, activation), each the single user of the previous.
/// Empty if `fn` has no such chain.
SmallVector<Operation *> mlpOps(func::FuncOp fn) {
  SmallVector<Operation *> chain;
  fn.walk([&](model::LinearOp op) {
    if (chain.empty() && layerParamOf(fn, op->getOperand(1)) == "mlp.linear_fc1.weight")
      chain.push_back(op);
  });
  while (!chain.empty()) {
    Operation *cur = chain.back();
    if (cur->getNumResults() != 1 || !cur->getResult(0).hasOneUse())
      return {};
    Operation *user = *cur->getResult(0).getUsers().begin();
    if (isa<model::LinearOp>(user) &&
        layerParamOf(fn, user->getOperand(1)) == "mlp.linear_fc2.weight")
      return chain;
    chain.push_back(user);
  }
  return chain;
}

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
      SmallVector<Operation *> ops;
      if (llvm::is_contained(spec->modules, "core_attn"))
        fn.walk([&](model::AttentionOp op) { ops.push_back(op); });
      if (llvm::is_contained(spec->modules, "mlp")) {
        SmallVector<Operation *> mlp = mlpOps(fn);
        if (mlp.empty()) {
          fn.emitOpError() << "trainc-recompute-selective: recompute = \"" << recompute
                           << "\": @" << fn.getSymName()
                           << " has no mlp.linear_fc1 -> ... -> mlp.linear_fc2 chain";
          return signalPassFailure();
        }
        llvm::append_range(ops, mlp);
      }
      double flops = 0;
      for (Operation *op : ops) {
        op->setAttr(model::kRecomputeAttrName, b.getStringAttr("selective"));
        if (auto cost = dyn_cast<model::CostOpInterface>(op))
          flops += cost.getFlops();
      }
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
