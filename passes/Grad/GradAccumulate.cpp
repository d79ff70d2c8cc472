//===- GradAccumulate.cpp - Stage functions accumulate grads and losses ---===//

#include "passes/Grad/Passes.h"
#include "passes/PlanOption.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "trainc-grad-accumulate"

namespace mlir::trainc {
#define GEN_PASS_DEF_GRADACCUMULATEPASS
#include "passes/Grad/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

struct GradAccumulatePass : mlir::trainc::impl::GradAccumulatePassBase<GradAccumulatePass> {
  using GradAccumulatePassBase::GradAccumulatePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Resolved values, as locals that shadow the options: an explicit option (recorded in the
    // plan), else the plan's field, else the option's default (passes/PlanOption.h).
    std::string normalization;
    int64_t numMicrobatches = 0;
    if (failed(resolvePlanOption(module, this->normalization, "loss_mode", normalization)) ||
        failed(resolvePlanOption(module, this->numMicrobatches, "num_microbatches",
                                 numMicrobatches)))
      return signalPassFailure();
    auto fn = module.lookupSymbol<func::FuncOp>(function);
    if (!fn) {
      module.emitError() << "trainc-grad-accumulate: no function @" << function
                         << " (run trainc-autodiff first)";
      return signalPassFailure();
    }
    if (normalization != "per_token" && normalization != "per_microbatch") {
      module.emitError() << "trainc-grad-accumulate: normalization '" << normalization
                         << "' is not per_token or per_microbatch";
      return signalPassFailure();
    }
    if (numMicrobatches <= 0) {
      module.emitError() << "trainc-grad-accumulate: num-microbatches " << int64_t(numMicrobatches)
                         << " must be positive";
      return signalPassFailure();
    }
    if (fn.isDeclaration()) {
      fn.emitOpError() << "@" << fn.getSymName() << " is a declaration; trainc-grad-accumulate needs its body";
      return signalPassFailure();
    }
    auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
    if (ret.getNumOperands() < 2) {
      fn.emitOpError() << "must return (loss_sum, num_tokens, grads...)";
      return signalPassFailure();
    }
    OpBuilder b(ret);
    Value numTokens = ret.getOperand(1);
    if (normalization == "per_microbatch") {
      model::FillOp seed;
      fn.walk([&](model::FillOp f) {
        if (f->hasAttr("model.loss_seed"))
          seed = f;
      });
      if (!seed) {
        fn.emitOpError() << "has no model.loss_seed (run trainc-autodiff first)";
        return signalPassFailure();
      }
      // The seed must see num_tokens: place the legacy seed right after its producer.
      OpBuilder sb(seed);
      if (Operation *def = numTokens.getDefiningOp())
        sb.setInsertionPointAfter(def);
      Value legacy = sb.create<sched::LossSeedOp>(seed.getLoc(), seed.getType(), numTokens,
                                                  sb.getI64IntegerAttr(numMicrobatches));
      seed.getResult().replaceAllUsesWith(legacy);
      seed.erase();
    }
    b.create<sched::AccumulateLossOp>(ret.getLoc(), ret.getOperand(0), numTokens,
                                      *sched::symbolizeNormalization(normalization));
    for (unsigned i = 2; i < ret.getNumOperands(); ++i) {
      auto name = fn.getResultAttrOfType<FlatSymbolRefAttr>(i, "model.grad_of");
      if (!name) {
        fn.emitOpError() << "result " << i << " has no model.grad_of attribute";
        return signalPassFailure();
      }
      b.create<sched::AccumulateGradOp>(ret.getLoc(), ret.getOperand(i), name);
    }
    b.create<func::ReturnOp>(ret.getLoc());
    ret.erase();
    fn.setFunctionType(b.getFunctionType(fn.getArgumentTypes(), {}));
    fn.setAllResultAttrs(ArrayRef<DictionaryAttr>{});
    fn->setAttr("sched.stage", b.getUnitAttr());
  }
};

} // namespace
