//===- VerifyPhase.cpp - Invariants at phase boundaries -------------------===//

#include "passes/Export/Passes.h"
#include "passes/Memory/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"

#define DEBUG_TYPE "trainc-verify"

namespace mlir::trainc {
#define GEN_PASS_DEF_VERIFYPHASEPASS
#include "passes/Export/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

bool isModelBackward(Operation *op) {
  return isa<model::ModelDialect>(op->getDialect()) && !isa<model::VJPOpInterface>(op) &&
         !isa<model::FillOp>(op);
}

LogicalResult verifyModel(ModuleOp m) {
  auto fwd = m.lookupSymbol<func::FuncOp>("forward");
  if (!fwd)
    return m.emitError() << "phase model: no @forward function";
  if (fwd.getNumResults() != 2)
    return fwd.emitOpError() << "phase model: must return (loss_sum, num_tokens), returns "
                             << fwd.getNumResults() << " values";
  for (unsigned i = 0; i < fwd.getNumArguments(); ++i)
    if (!fwd.getArgAttr(i, "model.param") && !fwd.getArgAttr(i, "model.input"))
      return fwd.emitOpError() << "phase model: argument " << i
                               << " is neither a model.param nor a model.input";
  // The forward function and every function it calls (layers) hold forward ops only.
  SymbolTable table(m);
  SmallVector<func::FuncOp> work = {fwd};
  llvm::StringSet<> seen = {fwd.getSymName()};
  while (!work.empty()) {
    func::FuncOp fn = work.pop_back_val();
    WalkResult r = fn.walk([&](Operation *op) {
      if (isModelBackward(op) || isa<sched::SchedDialect>(op->getDialect())) {
        op->emitOpError() << "phase model: backward or schedule op in the forward function";
        return WalkResult::interrupt();
      }
      if (auto call = dyn_cast<func::CallOp>(op)) {
        auto callee = table.lookup<func::FuncOp>(call.getCallee());
        if (!callee || callee.isDeclaration()) {
          call.emitOpError() << "phase model: calls @" << call.getCallee()
                             << ", not a function with a body in the module";
          return WalkResult::interrupt();
        }
        if (seen.insert(callee.getSymName()).second)
          work.push_back(callee);
      }
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      return failure();
  }
  return success();
}

LogicalResult verifyAutodiff(ModuleOp m) {
  auto fb = m.lookupSymbol<func::FuncOp>("forward_backward");
  if (!fb)
    return m.emitError() << "phase autodiff: no @forward_backward function";
  llvm::StringSet<> grads;
  for (unsigned i = 2; i < fb.getNumResults(); ++i)
    if (auto g = fb.getResultAttrOfType<FlatSymbolRefAttr>(i, "model.grad_of"))
      grads.insert(g.getValue());
  for (unsigned i = 0; i < fb.getNumArguments(); ++i)
    if (FlatSymbolRefAttr p = model::paramOf(fb, i))
      if (!grads.count(p.getValue()))
        return fb.emitOpError() << "phase autodiff: parameter '" << p.getValue()
                                << "' has no gradient result";
  return success();
}

LogicalResult verifySched(ModuleOp m) {
  SmallVector<func::FuncOp> entries;
  for (func::FuncOp fn : m.getOps<func::FuncOp>())
    if (fn->hasAttr("sched.iteration"))
      entries.push_back(fn);
  if (entries.empty())
    return m.emitError() << "phase sched: no iteration function (sched.iteration)";
  for (func::FuncOp entry : entries) {
  WalkResult r = entry.walk([&](Operation *op) {
    if (isa<model::ModelDialect>(op->getDialect())) {
      op->emitOpError() << "phase sched: model op in the iteration function";
      return WalkResult::interrupt();
    }
    std::optional<StringRef> callee;
    if (auto mb = dyn_cast<sched::MicrobatchOp>(op))
      callee = mb.getCallee();
    else if (auto f = dyn_cast<sched::ForwardOp>(op))
      callee = f.getCallee();
    else if (auto bw = dyn_cast<sched::BackwardOp>(op))
      callee = bw.getCallee();
    else if (auto bi = dyn_cast<sched::BackwardInputOp>(op))
      callee = bi.getCallee();
    else if (auto bw = dyn_cast<sched::BackwardWeightOp>(op))
      callee = bw.getCallee();
    if (callee) {
      auto fn = m.lookupSymbol<func::FuncOp>(*callee);
      if (!fn || !fn->hasAttr("sched.stage")) {
        op->emitOpError() << "phase sched: calls @" << *callee << ", not a stage function";
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  if (r.wasInterrupted())
    return failure();
  }
  return success();
}

LogicalResult verifyRt(ModuleOp m) {
  int entries = 0;
  WalkResult r = m.walk([&](Operation *op) {
    if (isa<model::ModelDialect, sched::SchedDialect>(op->getDialect())) {
      op->emitOpError() << "phase rt: op above the rt level remains";
      return WalkResult::interrupt();
    }
    for (Type t : op->getResultTypes())
      if (isa<TensorType>(t)) {
        op->emitOpError() << "phase rt: tensor value remains";
        return WalkResult::interrupt();
      }
    if (auto fn = dyn_cast<func::FuncOp>(op))
      entries += fn->hasAttr("rt.entry");
    return WalkResult::advance();
  });
  if (r.wasInterrupted())
    return failure();
  if (entries != 1)
    return m.emitError() << "phase rt: expected one entry function (rt.entry), found " << entries;
  return success();
}

struct VerifyPhasePass : mlir::trainc::impl::VerifyPhasePassBase<VerifyPhasePass> {
  using VerifyPhasePassBase::VerifyPhasePassBase;
  void runOnOperation() override {
    ModuleOp m = getOperation();
    LogicalResult ok = failure();
    if (phase == "model")
      ok = verifyModel(m);
    else if (phase == "autodiff")
      ok = verifyAutodiff(m);
    else if (phase == "sched")
      ok = verifySched(m);
    else if (phase == "rt")
      ok = verifyRt(m);
    else if (phase == "memory")
      ok = succeeded(verifyRt(m)) ? verifyMemoryPlan(m) : failure();
    else
      m.emitError() << "trainc-verify: unknown phase '" << phase
                    << "' (expected model, autodiff, sched, rt or memory)";
    if (failed(ok))
      signalPassFailure();
  }
};

} // namespace
