//===- ScheduleNoPipelining.cpp - The iteration of a single-stage rank ----===//

#include "passes/Pipeline/Passes.h"
#include "passes/PlanOption.h"

#include "dialects/Model/ModelDialect.h"

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

/// Whether `fn` or a function it calls (transitively) applies dropout.
bool hasDropout(ModuleOp module, func::FuncOp fn, llvm::SmallPtrSetImpl<Operation *> &seen) {
  if (!seen.insert(fn).second)
    return false;
  bool found = false;
  fn.walk([&](Operation *op) {
    if (isa<model::DropoutOp>(op))
      found = true;
    else if (auto a = dyn_cast<model::AttentionOp>(op); a && a.getDropout().convertToDouble() > 0)
      found = true;
    else if (auto call = dyn_cast<func::CallOp>(op))
      if (auto callee = module.lookupSymbol<func::FuncOp>(call.getCalleeAttr()))
        found |= !callee.isDeclaration() && hasDropout(module, callee, seen);
  });
  return found;
}

/// Megatron evaluates with the model in eval mode, without dropout: folds every dropout of `fn`
/// to the identity (model.dropout -> its input; model.attention's dropout -> 0) and points each
/// call at an eval copy `<callee>.eval` of its callee, made once and treated the same way. The
/// dropout keys left unused are erased.
void withoutDropout(ModuleOp module, func::FuncOp fn, llvm::StringMap<func::FuncOp> &copies) {
  SmallVector<Operation *> dropouts;
  SmallVector<func::CallOp> calls;
  fn.walk([&](Operation *op) {
    if (auto d = dyn_cast<model::DropoutOp>(op)) {
      d.getResult().replaceAllUsesWith(d.getInput());
      dropouts.push_back(op);
    } else if (auto a = dyn_cast<model::AttentionOp>(op)) {
      a.setDropoutAttr(FloatAttr::get(Float64Type::get(op->getContext()), 0.0));
    } else if (auto call = dyn_cast<func::CallOp>(op)) {
      calls.push_back(call);
    }
  });
  for (Operation *op : dropouts)
    op->erase();
  for (func::CallOp call : calls) {
    auto callee = module.lookupSymbol<func::FuncOp>(call.getCalleeAttr());
    if (!callee || callee.isDeclaration())
      continue;
    func::FuncOp &copy = copies[callee.getSymName()];
    if (!copy) {
      OpBuilder b(callee);
      b.setInsertionPointAfter(callee);
      copy = cast<func::FuncOp>(b.clone(*callee));
      copy.setSymName((callee.getSymName() + ".eval").str());
      withoutDropout(module, copy, copies);
    }
    call.setCalleeAttr(FlatSymbolRefAttr::get(copy));
  }
  // Model ops whose results nobody reads any more (the keys of the folded dropouts).
  SmallVector<Operation *> body;
  fn.walk([&](Operation *op) { body.push_back(op); });
  for (Operation *op : llvm::reverse(body))
    if (isa<model::ModelDialect>(op->getDialect()) && op->getNumResults() > 0 && op->use_empty())
      op->erase();
}

struct ScheduleNoPipeliningPass
    : mlir::trainc::impl::ScheduleNoPipeliningPassBase<ScheduleNoPipeliningPass> {
  using ScheduleNoPipeliningPassBase::ScheduleNoPipeliningPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Resolved values, as locals that shadow the options: an explicit option (recorded in the
    // plan), else the plan's field, else the option's default (passes/PlanOption.h).
    int64_t numMicrobatches = 0;
    double beta1 = 0, beta2 = 0, eps = 0, clipGrad = 0;
    if (failed(resolvePlanOption(module, this->numMicrobatches, "num_microbatches",
                                 numMicrobatches)) ||
        failed(resolvePlanOption(module, this->beta1, "adam_beta1", beta1)) ||
        failed(resolvePlanOption(module, this->beta2, "adam_beta2", beta2)) ||
        failed(resolvePlanOption(module, this->eps, "adam_eps", eps)) ||
        failed(resolvePlanOption(module, this->clipGrad, "clip_grad", clipGrad)))
      return signalPassFailure();
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
    sched::Normalization normalization = sched::Normalization::per_token;
    fn.walk([&](sched::AccumulateLossOp op) { normalization = op.getNormalization(); });

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
      b.create<sched::MicrobatchOp>(loc, TypeRange{}, FlatSymbolRefAttr::get(b.getContext(), stage),
                                    b.getI64IntegerAttr(i), ValueRange{});
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
    // Megatron's evaluate() runs the model in eval mode: no dropout.
    llvm::SmallPtrSet<Operation *, 8> seen;
    if (hasDropout(module, fo, seen)) {
      llvm::StringMap<func::FuncOp> copies;
      withoutDropout(module, fo, copies);
    }
    auto ret = cast<func::ReturnOp>(fo.getBody().front().getTerminator());
    if (ret.getNumOperands() != 2)
      return fwd.emitOpError() << "must return (loss_sum, num_tokens)";
    b.setInsertionPoint(ret);
    b.create<sched::AccumulateLossOp>(ret.getLoc(), ret.getOperand(0), ret.getOperand(1),
                                      sched::Normalization::per_token);
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
      b.create<sched::MicrobatchOp>(loc, TypeRange{}, FlatSymbolRefAttr::get(b.getContext(), "forward_only"),
                                    b.getI64IntegerAttr(i), ValueRange{});
    b.create<sched::ReadOutputsOp>(loc, "eval_outputs");
    b.create<func::ReturnOp>(loc);
    return success();
  }
};

} // namespace
