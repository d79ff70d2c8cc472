//===- SchedOps.cpp - sched dialect ---------------------------------------===//

#include "dialects/Sched/SchedDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::trainc::sched;

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include "dialects/Sched/SchedDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/Sched/SchedTypes.cpp.inc"

void SchedDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/Sched/SchedTypes.cpp.inc"
      >();
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

/// The function `callee` names, or an error on `op` naming it.
static FailureOr<func::FuncOp> unitCallee(Operation *op, FlatSymbolRefAttr callee,
                                          SymbolTableCollection &symbolTable) {
  auto fn = symbolTable.lookupNearestSymbolFrom<func::FuncOp>(op, callee);
  if (!fn)
    return op->emitOpError() << "callee " << callee << " is not a function in this module";
  return fn;
}

static LogicalResult verifyUnitIndices(Operation *op, int64_t microbatch, int64_t chunk) {
  if (microbatch < 0)
    return op->emitOpError() << "microbatch " << microbatch << " is negative";
  if (chunk < 0)
    return op->emitOpError() << "chunk " << chunk << " is negative";
  return success();
}

LogicalResult ForwardOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<func::FuncOp> fn = unitCallee(*this, getCalleeAttr(), symbolTable);
  if (failed(fn))
    return failure();
  for (Type t : fn->getResultTypes())
    if (!isa<RankedTensorType>(t))
      return emitOpError() << "callee @" << getCallee() << " returns " << t
                           << "; a forward unit returns its stash as ranked tensors";
  return verifyUnitIndices(*this, getMicrobatch(), getChunk());
}

LogicalResult BackwardOp::verify() {
  auto fwd = getStash().getDefiningOp<ForwardOp>();
  if (!fwd)
    return emitOpError() << "stash operand is not the result of a sched.forward";
  if (fwd.getMicrobatch() != getMicrobatch() || fwd.getChunk() != getChunk())
    return emitOpError() << "consumes the stash of microbatch " << fwd.getMicrobatch()
                         << " chunk " << fwd.getChunk() << " as microbatch " << getMicrobatch()
                         << " chunk " << getChunk();
  if (!getStash().hasOneUse())
    return emitOpError() << "stash of microbatch " << getMicrobatch()
                         << " is consumed more than once";
  return success();
}

LogicalResult BackwardOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<func::FuncOp> fn = unitCallee(*this, getCalleeAttr(), symbolTable);
  if (failed(fn))
    return failure();
  if (fn->getNumResults() != 0)
    return emitOpError() << "callee @" << getCallee() << " returns " << fn->getNumResults()
                         << " values; a backward unit accumulates its gradients and returns "
                            "nothing";
  auto fwd = getStash().getDefiningOp<ForwardOp>();
  if (!fwd)
    return success(); // reported by verify()
  FailureOr<func::FuncOp> f = unitCallee(fwd, fwd.getCalleeAttr(), symbolTable);
  if (failed(f))
    return failure();
  // The stash arguments are the trailing ones, tagged sched.stash, in the forward's result order.
  SmallVector<Type> stashArgs;
  for (unsigned i = 0; i < fn->getNumArguments(); ++i)
    if (fn->getArgAttr(i, "sched.stash"))
      stashArgs.push_back(fn->getArgument(i).getType());
  if (TypeRange(stashArgs) != f->getResultTypes())
    return emitOpError() << "callee @" << getCallee() << " takes " << stashArgs.size()
                         << " stash arguments that do not match the " << f->getNumResults()
                         << " results of the forward unit @" << fwd.getCallee();
  return verifyUnitIndices(*this, getMicrobatch(), getChunk());
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

LogicalResult GradBufferOp::verify() {
  ArrayRef<int64_t> offsets = getOffsets(), sizes = getSizes(), bounds = getBucketBounds();
  int64_t dp = getDp(), numel = getNumel();
  if (dp <= 0)
    return emitOpError() << "dp = " << dp << ", expected a positive data-parallel size";
  if (offsets.size() != getParams().size() || sizes.size() != getParams().size())
    return emitOpError() << "has " << getParams().size() << " params but " << offsets.size()
                         << " offsets and " << sizes.size() << " sizes";
  if (bounds.size() < 2 || bounds.front() != 0 || bounds.back() != numel)
    return emitOpError() << "bucket_bounds must start at 0 and end at numel = " << numel;
  for (size_t b = 0; b + 1 < bounds.size(); ++b) {
    if (bounds[b + 1] <= bounds[b])
      return emitOpError() << "bucket " << b << " [" << bounds[b] << ", " << bounds[b + 1]
                           << ") is empty or reversed";
    if (getDistributedOptimizer() && (bounds[b + 1] - bounds[b]) % dp != 0)
      return emitOpError() << "bucket " << b << " has " << bounds[b + 1] - bounds[b]
                           << " elements, not a multiple of dp = " << dp
                           << " (the distributed optimizer shards every bucket evenly)";
  }
  int64_t end = 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (sizes[i] <= 0 || offsets[i] < end)
      return emitOpError() << "param '" << cast<StringAttr>(getParams()[i]).getValue()
                           << "' at offset " << offsets[i] << " with " << sizes[i]
                           << " elements overlaps the previous one or is empty";
    end = offsets[i] + sizes[i];
    // A parameter lives in one bucket (Megatron never splits a parameter across buckets).
    auto it = llvm::upper_bound(bounds, offsets[i]);
    if (it == bounds.end() || end > *it)
      return emitOpError() << "param '" << cast<StringAttr>(getParams()[i]).getValue()
                           << "' [" << offsets[i] << ", " << end << ") crosses a bucket boundary";
  }
  if (end > numel)
    return emitOpError() << "params end at " << end << ", beyond numel = " << numel;
  return success();
}
