//===- LowerCollectives.cpp - buckets, tokens, reductions --------------===//

#include "passes/Export/Lowering.h"

using namespace mlir;
using namespace mlir::trainc;

namespace mlir::trainc::lower_to_rt {

LogicalResult Lowering::lowerDataParallelOp(OpBuilder &ob, Location loc, Operation &op) {
  if (!layout.op)
    return op.emitOpError() << "needs a sched.grad_buffer (run trainc-grad-buckets)";
  auto bucketOf = [&](int64_t k) -> FailureOr<int64_t> {
    if (k < 0 || k >= layout.numBuckets())
      return op.emitOpError() << "bucket " << k << " is not one of the " << layout.numBuckets()
                              << " buckets";
    return k;
  };
  if (auto start = dyn_cast<sched::GradSyncStartOp>(op)) {
    FailureOr<int64_t> k = bucketOf(int64_t(start.getBucket()));
    if (failed(k))
      return failure();
    Value bucket = range(ob, loc, layout.mainGrad, layout.bound(*k), layout.bound(*k + 1));
    if (layout.reduceGrad) {
      // --grad-reduce-in-bf16: round the bucket to bf16 and reduce that (Megatron's bf16 grad
      // buffer); the wait casts the reduced shard back into main_grad.
      Value half = range(ob, loc, layout.reduceGrad, layout.bound(*k), layout.bound(*k + 1));
      kernel(ob, loc, "cast", {bucket}, {half});
      if (layout.distributed())
        collective(ob, loc, "reduce_scatter", half, shardOf(ob, loc, layout.reduceGrad, *k), *k);
      else
        collective(ob, loc, "all_reduce", half, half, *k);
      return success();
    }
    if (layout.distributed())
      collective(ob, loc, "reduce_scatter", bucket, shardOf(ob, loc, layout.mainGrad, *k), *k);
    else
      collective(ob, loc, "all_reduce", bucket, bucket, *k);
    return success();
  }
  if (isa<sched::GradSyncWaitOp, sched::ParamGatherWaitOp>(op)) {
    FailureOr<int64_t> token = tokenId(op.getOperand(0), &op);
    if (failed(token))
      return failure();
    ob.create<rt::WaitOp>(loc, ob.getI64IntegerAttr(*token));
    if (layout.reduceGrad && isa<sched::GradSyncWaitOp>(op) && *token < layout.numBuckets()) {
      const int64_t k = *token;
      if (layout.distributed())
        kernel(ob, loc, "cast", {shardOf(ob, loc, layout.reduceGrad, k)},
               {shardOf(ob, loc, layout.mainGrad, k)});
      else
        kernel(ob, loc, "cast", {range(ob, loc, layout.reduceGrad, layout.bound(k), layout.bound(k + 1))},
               {range(ob, loc, layout.mainGrad, layout.bound(k), layout.bound(k + 1))});
    }
    return success();
  }
  if (auto start = dyn_cast<sched::ParamGatherStartOp>(op)) {
    if (!layout.distributed())
      return op.emitOpError() << "needs the distributed optimizer (sched.grad_buffer "
                                 "distributed_optimizer)";
    FailureOr<int64_t> k = bucketOf(int64_t(start.getBucket()));
    if (failed(k))
      return failure();
    int64_t token = layout.numBuckets() + *k;
    collective(ob, loc, "all_gather", shardOf(ob, loc, layout.params, *k),
               range(ob, loc, layout.params, layout.bound(*k), layout.bound(*k + 1)), token);
    return success();
  }
  if (isa<sched::ReduceLossesOp>(op)) {
    reduceLosses(ob, loc);
    return success();
  }
  return op.emitOpError() << "is not a data-parallel op";
}

FailureOr<int64_t> Lowering::tokenId(Value token, Operation *user) {
  // Each step moves one call or function boundary back; a start is at most a few away.
  for (int hop = 0; hop < 16; ++hop) {
    if (auto s = token.getDefiningOp<sched::GradSyncStartOp>())
      return int64_t(s.getBucket());
    if (auto s = token.getDefiningOp<sched::ParamGatherStartOp>())
      return layout.numBuckets() + int64_t(s.getBucket());
    if (auto r = dyn_cast<OpResult>(token)) {
      // A unit's token result: the token its stage function returns there.
      auto callee = r.getOwner()->getAttrOfType<FlatSymbolRefAttr>("callee");
      func::FuncOp fn = callee ? stages.lookup(callee.getValue()) : func::FuncOp();
      if (!fn)
        break;
      Operation *ret = fn.getBody().front().getTerminator();
      token = ret->getOperand(fn.getNumResults() - r.getOwner()->getNumResults() +
                              r.getResultNumber());
      continue;
    }
    auto arg = cast<BlockArgument>(token);
    auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    if (!fn)
      break;
    unsigned pos = 0; // among the function's token arguments
    for (unsigned i = 0; i < arg.getArgNumber(); ++i)
      pos += isa<sched::TokenType>(fn.getArgument(i).getType());
    if (fn->hasAttr("sched.iteration")) {
      // Carried: the training iteration's token result `pos` of the previous iteration.
      func::FuncOp step;
      for (func::FuncOp f : module.getOps<func::FuncOp>())
        if (f->hasAttr("sched.iteration") && !f->hasAttr("sched.eval"))
          step = f;
      Operation *ret = step.getBody().front().getTerminator();
      if (pos >= ret->getNumOperands())
        break;
      token = ret->getOperand(pos);
      continue;
    }
    // A stage function's token argument: what its calls pass (the same start for every call).
    Value passed;
    module.walk([&](Operation *call) {
      auto callee = call->getAttrOfType<FlatSymbolRefAttr>("callee");
      if (!passed && callee && callee.getValue() == fn.getSymName() &&
          isa<sched::ForwardOp, sched::MicrobatchOp>(call))
        passed = isa<sched::ForwardOp>(call) ? cast<sched::ForwardOp>(call).getWaits()[pos]
                                             : cast<sched::MicrobatchOp>(call).getWaits()[pos];
    });
    if (!passed)
      break;
    token = passed;
  }
  return user->emitOpError() << "waits on a token that comes from no sched.grad_sync_start or "
                                "sched.param_gather_start";
}

void Lowering::reduceLosses(OpBuilder &ob, Location loc) {
  for (StringRef n : {"loss_sum", "num_tokens"}) {
    Value v = ref(ob, loc, scalar(n, "output"));
    if (layout.dp() > 1)
      collective(ob, loc, "all_reduce", v, v, -1);
    // Only the last pipeline stage has losses (the others add zeros): the sum over pp gives
    // every stage the logged loss and the token count of the per-token scaling.
    if (pipelineSize() > 1)
      createCollective(ob, loc, "all_reduce", "pp", v, v, -1);
  }
}

void Lowering::allReduceSharedGrads(OpBuilder &ob, Location loc) {
  for (ParamInfo &p : params)
    if (isSharedAcrossStages(p.name)) {
      Value g = gradRef(ob, loc, p);
      if (layout.op && layout.distributed())
        g = shardOf(ob, loc, layout.mainGrad, sharedBucket(p));
      createCollective(ob, loc, "all_reduce", "embd", g, g, -1);
    }
}

bool Lowering::isSharedCopyBucket(int64_t k) {
  if (pipelineStage() == 0)
    return false;
  for (ParamInfo &p : params)
    if (isSharedAcrossStages(p.name) && sharedBucket(p) == k)
      return true;
  return false;
}

} // namespace mlir::trainc::lower_to_rt
