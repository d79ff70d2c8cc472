//===- ScheduleNoPipelining.cpp - The iteration of a single-stage rank ----===//

#include "passes/Pipeline/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "trainc-schedule"

namespace mlir::trainc {
#define GEN_PASS_DEF_SCHEDULENOPIPELININGPASS
#include "passes/Pipeline/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

struct ScheduleNoPipeliningPass
    : mlir::trainc::impl::ScheduleNoPipeliningPassBase<ScheduleNoPipeliningPass> {
  using ScheduleNoPipeliningPassBase::ScheduleNoPipeliningPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // The plan's values, unless an option was given explicitly (which the plan then records).
    Builder ab(module.getContext());
    const std::pair<Option<double> *, const char *> floats[] = {
        {&beta1, "adam_beta1"}, {&beta2, "adam_beta2"}, {&eps, "adam_eps"},
        {&clipGrad, "clip_grad"}};
    for (auto [o, field] : floats)
      if (o->hasValue() &&
          failed(sched::overridePlanField(module, field, ab.getF64FloatAttr(*o))))
        return signalPassFailure();
    if (numMicrobatches.hasValue() &&
        failed(sched::overridePlanField(module, "num_microbatches",
                                        ab.getI64IntegerAttr(numMicrobatches))))
      return signalPassFailure();
    // Resolved values, as locals that shadow the options: the option's value if given
    // explicitly (recorded in the plan above), else the plan's, else the option's default. The
    // options are never assigned, so a pass instance run again on another module reads that
    // module's plan.
    sched::PlanAttr plan = sched::getPlan(module);
    const int64_t numMicrobatches = plan ? plan.getNumMicrobatches() : this->numMicrobatches;
    const double beta1 = plan ? plan.getAdamBeta1().getValueAsDouble() : this->beta1;
    const double beta2 = plan ? plan.getAdamBeta2().getValueAsDouble() : this->beta2;
    const double eps = plan ? plan.getAdamEps().getValueAsDouble() : this->eps;
    const double clipGrad = plan ? plan.getClipGrad().getValueAsDouble() : this->clipGrad;
    auto fn = module.lookupSymbol<func::FuncOp>(stage);
    if (!fn || !fn->hasAttr("sched.stage")) {
      module.emitError() << "trainc-schedule: no stage function @" << stage
                         << " (run trainc-grad-accumulate first)";
      return signalPassFailure();
    }
    if (numMicrobatches <= 0) {
      module.emitError() << "trainc-schedule: num-microbatches " << int64_t(numMicrobatches)
                         << " must be positive";
      return signalPassFailure();
    }
    std::string normalization = "per_token";
    fn.walk([&](sched::AccumulateLossOp op) { normalization = op.getNormalization().str(); });

    OpBuilder b(module.getBodyRegion());
    b.setInsertionPointToEnd(module.getBody());
    Location loc = fn.getLoc();
    auto entryFn = b.create<func::FuncOp>(loc, entry, b.getFunctionType({}, {}));
    entryFn->setAttr("sched.iteration", b.getUnitAttr());
    entryFn->setAttr("sched.num_microbatches", b.getI64IntegerAttr(numMicrobatches));
    b.setInsertionPointToStart(entryFn.addEntryBlock());
    b.create<sched::ZeroGradsOp>(loc);
    b.create<sched::FillInputsOp>(loc, "batch");
    for (int64_t i = 0; i < numMicrobatches; ++i)
      b.create<sched::MicrobatchOp>(loc, FlatSymbolRefAttr::get(b.getContext(), stage),
                                    b.getI64IntegerAttr(i));
    b.create<sched::FinalizeGradsOp>(loc, normalization);
    b.create<sched::OptimizerStepOp>(loc, b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
                                     b.getF64FloatAttr(eps), b.getF64FloatAttr(clipGrad));
    b.create<sched::ReadOutputsOp>(loc, "outputs");
    b.create<func::ReturnOp>(loc);
    if (eval && failed(buildEval(module, loc, numMicrobatches)))
      signalPassFailure();
  }

  /// @forward_only (a stage function that only sums the losses) and @eval_step.
  LogicalResult buildEval(ModuleOp module, Location loc, int64_t numMicrobatches) {
    auto fwd = module.lookupSymbol<func::FuncOp>("forward");
    if (!fwd || fwd.isDeclaration())
      return module.emitError() << "trainc-schedule: eval needs the body of the forward function "
                                   "@forward";
    OpBuilder b(module.getContext());
    b.setInsertionPointAfter(fwd);
    auto fo = cast<func::FuncOp>(b.clone(*fwd));
    fo.setSymName("forward_only");
    auto ret = cast<func::ReturnOp>(fo.getBody().front().getTerminator());
    if (ret.getNumOperands() != 2)
      return fwd.emitOpError() << "must return (loss_sum, num_tokens)";
    b.setInsertionPoint(ret);
    b.create<sched::AccumulateLossOp>(ret.getLoc(), ret.getOperand(0), ret.getOperand(1),
                                      b.getStringAttr("per_token"));
    b.create<func::ReturnOp>(ret.getLoc());
    ret.erase();
    fo.setFunctionType(b.getFunctionType(fo.getArgumentTypes(), {}));
    fo.setAllResultAttrs(ArrayRef<DictionaryAttr>{});
    fo->setAttr("sched.stage", b.getUnitAttr());
    b.setInsertionPointToEnd(module.getBody());
    auto ev = b.create<func::FuncOp>(loc, "eval_step", b.getFunctionType({}, {}));
    ev->setAttr("sched.iteration", b.getUnitAttr());
    ev->setAttr("sched.eval", b.getUnitAttr());
    ev->setAttr("sched.num_microbatches", b.getI64IntegerAttr(numMicrobatches));
    b.setInsertionPointToStart(ev.addEntryBlock());
    b.create<sched::ZeroLossesOp>(loc);
    b.create<sched::FillInputsOp>(loc, "eval_batch");
    for (int64_t i = 0; i < numMicrobatches; ++i)
      b.create<sched::MicrobatchOp>(loc, FlatSymbolRefAttr::get(b.getContext(), "forward_only"),
                                    b.getI64IntegerAttr(i));
    b.create<sched::ReadOutputsOp>(loc, "eval_outputs");
    b.create<func::ReturnOp>(loc);
    return success();
  }
};

} // namespace
