//===- OptimizerExpand.cpp - optimizer_step -> clip + AdamW per parameter -===//

#include "passes/Optimizer/Passes.h"

#include "dialects/Model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

#define DEBUG_TYPE "trainc-optimizer-expand"

namespace mlir::trainc {
#define GEN_PASS_DEF_OPTIMIZEREXPANDPASS
#include "passes/Optimizer/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

struct OptimizerExpandPass : mlir::trainc::impl::OptimizerExpandPassBase<OptimizerExpandPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Parameters (name, no_weight_decay) from the stage functions' arguments, in order, once each.
    SmallVector<std::pair<FlatSymbolRefAttr, bool>> params;
    llvm::DenseSet<StringRef> seen;
    SymbolTableCollection symbols;
    module.walk([&](func::FuncOp fn) {
      if (!fn->hasAttr("sched.stage"))
        return;
      for (unsigned i = 0; i < fn.getNumArguments(); ++i)
        if (FlatSymbolRefAttr name = model::paramOf(fn, i))
          if (seen.insert(name.getValue()).second)
            params.push_back(
                {name, bool(model::parameterAttrs(symbols, module, fn, i).get("no_weight_decay"))});
    });
    WalkResult r = module.walk([&](sched::OptimizerStepOp op) {
      if (params.empty()) {
        op.emitOpError() << "found no parameters (model.param arguments of sched.stage functions)";
        return WalkResult::interrupt();
      }
      OpBuilder b(op);
      b.create<sched::ClipGradNormOp>(op.getLoc(), op.getClipGradAttr());
      for (auto [name, noWd] : params)
        b.create<sched::AdamWOp>(op.getLoc(), name, b.getBoolAttr(!noWd), op.getBeta1Attr(),
                                 op.getBeta2Attr(), op.getEpsAttr());
      op.erase();
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
