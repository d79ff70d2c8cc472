//===- SchedOps.cpp - sched dialect ---------------------------------------===//

#include "dialects/Sched/SchedDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::trainc::sched;

#include "dialects/Sched/SchedDialect.cpp.inc"

void SchedDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Sched/SchedOps.cpp.inc"
      >();
}

static LogicalResult verifyNormalization(Operation *op, StringRef n) {
  if (n != "per_token" && n != "per_microbatch")
    return op->emitOpError() << "normalization '" << n
                             << "' is not one of 'per_token', 'per_microbatch'";
  return success();
}

LogicalResult MicrobatchOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto fn = symbolTable.lookupNearestSymbolFrom<func::FuncOp>(*this, getCalleeAttr());
  if (!fn)
    return emitOpError() << "callee @" << getCallee() << " is not a function in this module";
  if (fn.getNumResults() != 0)
    return emitOpError() << "callee @" << getCallee() << " returns " << fn.getNumResults()
                         << " values; a stage function accumulates its gradients and losses and "
                            "returns nothing (run trainc-grad-accumulate first)";
  if (int64_t(getIndex()) < 0)
    return emitOpError() << "microbatch index " << int64_t(getIndex()) << " is negative";
  return success();
}

LogicalResult AccumulateLossOp::verify() {
  if (cast<ShapedType>(getLossSum().getType()).getRank() != 0 ||
      cast<ShapedType>(getNumTokens().getType()).getRank() != 0)
    return emitOpError() << "loss_sum and num_tokens must be scalars (rank-0 tensors)";
  return verifyNormalization(*this, getNormalization());
}

LogicalResult LossSeedOp::verify() {
  if (int64_t(getNumMicrobatches()) <= 0)
    return emitOpError() << "num_microbatches " << int64_t(getNumMicrobatches())
                         << " must be positive";
  if (getNumTokens().getType() != getType())
    return emitOpError() << "result type " << getType() << " differs from num_tokens type "
                         << getNumTokens().getType();
  return success();
}

LogicalResult FinalizeGradsOp::verify() { return verifyNormalization(*this, getNormalization()); }

LogicalResult OptimizerStepOp::verify() {
  double b1 = getBeta1().convertToDouble(), b2 = getBeta2().convertToDouble();
  if (!(b1 >= 0 && b1 < 1))
    return emitOpError() << "beta1 = " << b1 << ", expected 0 <= beta1 < 1";
  if (!(b2 >= 0 && b2 < 1))
    return emitOpError() << "beta2 = " << b2 << ", expected 0 <= beta2 < 1";
  if (!(getEps().convertToDouble() > 0))
    return emitOpError() << "eps = " << getEps().convertToDouble() << ", expected > 0";
  if (!(getClipGrad().convertToDouble() >= 0))
    return emitOpError() << "clip_grad = " << getClipGrad().convertToDouble()
                         << ", expected >= 0 (0 disables clipping)";
  return success();
}

#define GET_OP_CLASSES
#include "dialects/Sched/SchedOps.cpp.inc"
