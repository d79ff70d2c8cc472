//===- Autodiff.cpp - Reverse-mode autodiff by VJP rules ------------------===//

#include "passes/Autodiff/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"

#define DEBUG_TYPE "trainc-autodiff"

namespace mlir::trainc {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "passes/Autodiff/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

struct AutodiffPass : mlir::trainc::impl::AutodiffPassBase<AutodiffPass> {
  using AutodiffPassBase::AutodiffPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fwd = module.lookupSymbol<func::FuncOp>(function);
    if (!fwd) {
      module.emitError() << "trainc-autodiff: no function @" << function << " to differentiate";
      return signalPassFailure();
    }
    if (module.lookupSymbol(output)) {
      module.emitError() << "trainc-autodiff: @" << output << " already exists";
      return signalPassFailure();
    }
    if (fwd.isDeclaration()) {
      fwd.emitOpError() << "@" << fwd.getSymName() << " is a declaration; trainc-autodiff needs its body";
      return signalPassFailure();
    }
    if (fwd.getNumResults() != 2) {
      fwd.emitOpError() << "must return (loss_sum, num_tokens), returns " << fwd.getNumResults()
                        << " values";
      return signalPassFailure();
    }
    OpBuilder b(module.getContext());
    b.setInsertionPointAfter(fwd);
    auto fb = cast<func::FuncOp>(b.clone(*fwd));
    fb.setSymName(output);
    fb->removeAttr("sym_visibility");
    Block &body = fb.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    Value lossSum = ret.getOperand(0);

    // Reverse sweep. Gradients of values with several uses are summed with model.add.
    llvm::DenseMap<Value, Value> grads;
    auto addGrad = [&](Value v, Value g) {
      if (!g)
        return;
      auto it = grads.find(v);
      if (it == grads.end()) {
        grads[v] = g;
        return;
      }
      it->second = b.create<model::AddOp>(g.getLoc(), g.getType(), it->second, g);
    };
    b.setInsertionPoint(ret);
    auto seed = b.create<model::FillOp>(ret.getLoc(), lossSum.getType(), b.getF64FloatAttr(1.0));
    seed->setAttr("model.loss_seed", b.getUnitAttr());
    grads[lossSum] = seed;

    SmallVector<Operation *> forwardOps;
    for (Operation &op : body.without_terminator())
      if (&op != seed.getOperation())
        forwardOps.push_back(&op);
    for (Operation *op : llvm::reverse(forwardOps)) {
      SmallVector<Value> resultGrads;
      bool any = false;
      for (Value r : op->getResults()) {
        auto it = grads.find(r);
        resultGrads.push_back(it == grads.end() ? Value() : it->second);
        any |= it != grads.end();
      }
      if (!any)
        continue;
      auto vjp = dyn_cast<model::VJPOpInterface>(op);
      if (!vjp && op->getNumOperands() == 0)
        continue; // a constant: the gradient stops here
      if (!vjp) {
        op->emitOpError() << "has no VJP rule (VJPOpInterface) but a gradient flows into it";
        return signalPassFailure();
      }
      SmallVector<Value> operandGrads = vjp.buildVJP(b, resultGrads);
      if (operandGrads.size() != op->getNumOperands()) {
        op->emitOpError() << "VJP rule returned " << operandGrads.size() << " gradients for "
                          << op->getNumOperands() << " operands";
        return signalPassFailure();
      }
      for (auto [v, g] : llvm::zip(op->getOperands(), operandGrads))
        addGrad(v, g);
    }

    // Return (loss_sum, num_tokens, grads of parameters in argument order).
    SmallVector<Value> results(ret.getOperands());
    SmallVector<Type> types(fb.getResultTypes());
    SmallVector<Attribute> resultAttrs = {b.getDictionaryAttr({}), b.getDictionaryAttr({})};
    for (BlockArgument arg : body.getArguments()) {
      auto name = fb.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "model.param");
      if (!name)
        continue;
      Value g = grads.lookup(arg);
      if (!g) // unused parameter: zero gradient
        g = b.create<model::FillOp>(ret.getLoc(), arg.getType(), b.getF64FloatAttr(0.0));
      results.push_back(g);
      types.push_back(arg.getType());
      resultAttrs.push_back(b.getDictionaryAttr({b.getNamedAttr("model.grad_of", name)}));
    }
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    fb.setFunctionType(b.getFunctionType(fb.getArgumentTypes(), types));
    fb.setAllResultAttrs(resultAttrs);
  }
};

} // namespace
