//===- GradBuckets.cpp - Main-grad buffer, buckets and DP collectives -----===//
//
// Megatron's DistributedDataParallel (_ParamAndGradBuffer, bucketing, overlap of the gradient
// reduction with backward) and the placement of the distributed optimizer's parameter all-gather,
// decided at compile time and written into the sched IR. See Passes.td for the contract.
//
//===----------------------------------------------------------------------===//

#include "passes/Grad/GradLayout.h"
#include "passes/Grad/Passes.h"
#include "passes/PlanOption.h"

#include "dialects/Model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>

#define DEBUG_TYPE "trainc-grad-buckets"

namespace mlir::trainc {
#define GEN_PASS_DEF_GRADBUCKETSPASS
#include "passes/Grad/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

/// sched.reduce_losses before `fin` and before each eval entry's read_outputs.
void insertLossReductions(ModuleOp module, sched::FinalizeGradsOp fin) {
  OpBuilder b(fin);
  b.create<sched::ReduceLossesOp>(fin.getLoc());
  for (func::FuncOp f : module.getOps<func::FuncOp>())
    if (f->hasAttr("sched.eval"))
      for (sched::ReadOutputsOp r : llvm::make_early_inc_range(f.getOps<sched::ReadOutputsOp>())) {
        b.setInsertionPoint(r);
        b.create<sched::ReduceLossesOp>(r.getLoc());
      }
}

struct GradBucketsPass : mlir::trainc::impl::GradBucketsPassBase<GradBucketsPass> {
  using GradBucketsPassBase::GradBucketsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Resolved values, as locals that shadow the options: an explicit option (recorded in the
    // plan), else the plan's field, else the option's default (passes/PlanOption.h).
    int64_t dp = 0, bucketSize = 0;
    bool distributedOptimizer = false, overlapParamGather = false;
    if (failed(resolvePlanOption(module, this->dp, "dp", dp)) ||
        failed(resolvePlanOption(module, this->bucketSize, "bucket_size", bucketSize)) ||
        failed(resolvePlanOption(module, this->distributedOptimizer, "distributed_optimizer",
                                 distributedOptimizer)) ||
        failed(resolvePlanOption(module, this->overlapParamGather, "overlap_param_gather",
                                 overlapParamGather)))
      return signalPassFailure();
    if (dp <= 0) {
      module.emitError() << "trainc-grad-buckets: dp " << int64_t(dp) << " must be positive";
      return signalPassFailure();
    }
    if (bucketSize < 0) {
      module.emitError() << "trainc-grad-buckets: bucket-size " << int64_t(bucketSize)
                         << " must be >= 0 (0 = Megatron's default)";
      return signalPassFailure();
    }
    if (!module.getOps<sched::GradBufferOp>().empty()) {
      module.emitError() << "trainc-grad-buckets: the module already has a sched.grad_buffer";
      return signalPassFailure();
    }
    auto fn = module.lookupSymbol<func::FuncOp>(stage);
    if (!fn || !fn->hasAttr("sched.stage") || fn.isDeclaration()) {
      module.emitError() << "trainc-grad-buckets: no stage function @" << stage
                         << " with a body (run trainc-grad-accumulate first)";
      return signalPassFailure();
    }
    func::FuncOp step;
    for (func::FuncOp f : module.getOps<func::FuncOp>())
      if (f->hasAttr("sched.iteration") && !f->hasAttr("sched.eval"))
        step = f;
    if (!step) {
      module.emitError() << "trainc-grad-buckets: no training iteration function (run "
                            "trainc-schedule first)";
      return signalPassFailure();
    }

    // Preconditions, checked before the IR changes.
    auto fins = llvm::to_vector(step.getOps<sched::FinalizeGradsOp>());
    if (dp > 1 && fins.size() != 1) {
      step.emitOpError() << "has " << fins.size()
                         << " sched.finalize_grads; data parallelism needs exactly one";
      return signalPassFailure();
    }
    if (dp > 1 && llvm::none_of(step.getOps<sched::MicrobatchOp>(), [&](sched::MicrobatchOp mb) {
          return mb.getCallee() == stage;
        })) {
      step.emitOpError() << "calls no microbatch of @" << stage;
      return signalPassFailure();
    }
    if (distributedOptimizer && dp > 1 && step.getOps<sched::AdamWOp>().empty()) {
      step.emitOpError() << "has no sched.adamw (run trainc-optimizer-expand first)";
      return signalPassFailure();
    }
    if (overlapParamGather && !(distributedOptimizer && dp > 1)) {
      module.emitError() << "trainc-grad-buckets: overlap-param-gather needs the distributed "
                            "optimizer and dp > 1";
      return signalPassFailure();
    }

    // 1. Each accumulate_grad right after the op computing its gradient.
    SmallVector<sched::AccumulateGradOp> accs(fn.getOps<sched::AccumulateGradOp>());
    for (sched::AccumulateGradOp acc : accs)
      if (Operation *def = acc.getGrad().getDefiningOp())
        if (def->getBlock() == acc->getBlock())
          acc->moveAfter(def);

    // 2. Layout in ready order, then buckets.
    SmallVector<StringRef> order;
    SmallVector<int64_t> sizes;
    llvm::StringMap<size_t> index;
    for (sched::AccumulateGradOp acc : fn.getOps<sched::AccumulateGradOp>()) {
      if (index.count(acc.getParam()))
        continue;
      index[acc.getParam()] = order.size();
      order.push_back(acc.getParam());
      sizes.push_back(cast<ShapedType>(acc.getGrad().getType()).getNumElements());
    }
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (FlatSymbolRefAttr name = model::paramOf(fn, i))
        if (!index.count(name.getValue())) {
          index[name.getValue()] = order.size();
          order.push_back(name.getValue());
          sizes.push_back(cast<ShapedType>(fn.getArgument(i).getType()).getNumElements());
        }
    if (order.empty()) {
      fn.emitOpError() << "has no parameters to bucket";
      return signalPassFailure();
    }
    // A parameter held by two pipeline stages (trainc.pipeline_shared: the tied word embedding)
    // gets its own bucket under the distributed optimizer (Megatron's
    // _does_param_require_new_bucket), so its shards line up on both stages.
    std::vector<bool> ownBucket(order.size(), false);
    if (auto shared = module->getAttrOfType<ArrayAttr>("trainc.pipeline_shared"))
      for (Attribute a : shared)
        if (auto it = index.find(cast<FlatSymbolRefAttr>(a).getValue()); it != index.end())
          ownBucket[it->second] = true;
    ::trainc::grad::GradLayout geo = ::trainc::grad::GradLayout::compute(
        std::vector<int64_t>(sizes.begin(), sizes.end()), dp, bucketSize, distributedOptimizer,
        ownBucket);
    ArrayRef<size_t> lastParamOfBucket = geo.lastParam;
    OpBuilder b(module.getContext());
    b.setInsertionPointToStart(module.getBody());
    SmallVector<Attribute> names;
    for (StringRef n : order)
      names.push_back(FlatSymbolRefAttr::get(b.getContext(), n));
    auto layout = b.create<sched::GradBufferOp>(
        fn.getLoc(), b.getStringAttr(sched::kGradBufferName), b.getArrayAttr(names), b.getDenseI64ArrayAttr(geo.offsets),
        b.getDenseI64ArrayAttr(sizes), b.getI64IntegerAttr(geo.numel()),
        b.getDenseI64ArrayAttr(geo.bounds), b.getI64IntegerAttr(dp),
        distributedOptimizer ? b.getUnitAttr() : UnitAttr(), UnitAttr());
    if (failed(layout.verify()))
      return signalPassFailure();
    const size_t numBuckets = lastParamOfBucket.size();

    // 3. Collectives (only when there is somebody to talk to).
    sched::MicrobatchOp firstCall;
    int64_t calls = 0;
    if (dp > 1) {
      sched::MicrobatchOp lastCall;
      for (sched::MicrobatchOp mb : step.getOps<sched::MicrobatchOp>())
        if (mb.getCallee() == stage) {
          ++calls;
          if (!lastCall || mb.getIndex() > lastCall.getIndex())
            lastCall = mb;
          if (!firstCall || mb.getIndex() < firstCall.getIndex())
            firstCall = mb;
        }
      // With one microbatch the stage function itself is the last one; otherwise a clone.
      func::FuncOp last = fn;
      if (calls > 1) {
        b.setInsertionPointAfter(fn);
        last = cast<func::FuncOp>(b.clone(*fn));
        last.setSymName(stage + "_last");
        lastCall.setCalleeAttr(FlatSymbolRefAttr::get(b.getContext(), last.getSymName()));
      }
      last->setAttr("sched.last_microbatch", b.getUnitAttr());
      llvm::StringMap<sched::AccumulateGradOp> lastAcc;
      for (sched::AccumulateGradOp acc : last.getOps<sched::AccumulateGradOp>())
        lastAcc[acc.getParam()] = acc;
      // Each start's token leaves the last microbatch as a result; the waits consume them.
      SmallVector<Value> started;
      for (size_t k = 0; k < numBuckets; ++k) {
        sched::AccumulateGradOp acc = lastAcc.lookup(order[lastParamOfBucket[k]]);
        if (acc)
          b.setInsertionPointAfter(acc);
        else
          b.setInsertionPoint(last.getBody().front().getTerminator());
        started.push_back(b.create<sched::GradSyncStartOp>(
            acc ? acc.getLoc() : last.getLoc(), sched::TokenType::get(b.getContext()), bufferRef(b),
            b.getI64IntegerAttr(int64_t(k))));
      }
      returnTokens(last, started);
      sched::MicrobatchOp call = withTokens(lastCall, lastCall.getWaits(), started.size());
      sched::FinalizeGradsOp fin = fins.front();
      b.setInsertionPoint(fin);
      for (Value t : call.getTokens())
        b.create<sched::GradSyncWaitOp>(fin.getLoc(), t);
      insertLossReductions(module, fin);
    }
    // Pipeline stages without data parallelism still reduce their losses (over pp).
    if (dp == 1 && module->hasAttr("trainc.pipeline_size") && !fins.empty())
      insertLossReductions(module, fins.front());

    // 4. Distributed optimizer: updates in layout order, each bucket's all-gather after its
    // last update.
    if (distributedOptimizer && dp > 1) {
      SmallVector<Value> gathers;
      firstCall = {};
      SmallVector<sched::AdamWOp> adams(step.getOps<sched::AdamWOp>());
      Operation *after = adams.back()->getNextNode();
      llvm::stable_sort(adams, [&](sched::AdamWOp a, sched::AdamWOp c) {
        return index.lookup(a.getParam()) < index.lookup(c.getParam());
      });
      for (sched::AdamWOp a : adams) {
        if (!index.count(a.getParam())) {
          a.emitOpError() << "updates '" << a.getParam() << "', which has no main_grad";
          return signalPassFailure();
        }
        a->moveBefore(after);
      }
      llvm::StringMap<sched::AdamWOp> byName;
      for (sched::AdamWOp a : adams)
        byName[a.getParam()] = a;
      for (size_t k = 0; k < numBuckets; ++k) {
        // The bucket's last update (the params of a bucket are consecutive in the layout).
        size_t first = k == 0 ? 0 : lastParamOfBucket[k - 1] + 1;
        sched::AdamWOp lastUpdate;
        for (size_t i = first; i <= lastParamOfBucket[k]; ++i)
          if (sched::AdamWOp a = byName.lookup(order[i]))
            lastUpdate = a;
        if (lastUpdate)
          b.setInsertionPointAfter(lastUpdate);
        else
          b.setInsertionPoint(after);
        gathers.push_back(
            b.create<sched::ParamGatherStartOp>(step.getLoc(), sched::TokenType::get(b.getContext()),
                                               bufferRef(b), b.getI64IntegerAttr(int64_t(k))));
      }
      if (!overlapParamGather) {
        b.setInsertionPoint(after);
        for (Value t : gathers)
          b.create<sched::ParamGatherWaitOp>(step.getLoc(), t);
      } else {
        // The all-gathers stay in flight across the step boundary: the iteration returns their
        // tokens and takes them back as arguments in the next one (sched.token).
        returnTokens(step, gathers);
        for (sched::MicrobatchOp mb : step.getOps<sched::MicrobatchOp>())
          if (!firstCall || mb.getIndex() < firstCall.getIndex())
            firstCall = mb;
        if (failed(placeGatherWaits(module, fn, step, firstCall, calls, index, lastParamOfBucket)))
          return signalPassFailure();
        layout.setOverlapParamGather(true);
      }
    }
  }

  /// --overlap-param-gather: bucket b's all-gather, started at the end of the previous step, is
  /// waited right before the first op of the first microbatch that reads a parameter of b, and
  /// at the start of every eval iteration.
  LogicalResult placeGatherWaits(ModuleOp module, func::FuncOp fn, func::FuncOp step,
                                 sched::MicrobatchOp firstCall, int64_t calls,
                                 const llvm::StringMap<size_t> &index,
                                 ArrayRef<size_t> lastParamOfBucket) {
    OpBuilder b(module.getContext());
    // The stage function itself serves the first microbatch unless other (middle) microbatches
    // call it too.
    func::FuncOp first = fn;
    if (calls > 2) {
      b.setInsertionPoint(fn);
      first = cast<func::FuncOp>(b.clone(*fn));
      first.setSymName(stage + "_first");
      first->setAttr("sched.first_microbatch", b.getUnitAttr());
      firstCall.setCalleeAttr(FlatSymbolRefAttr::get(b.getContext(), first.getSymName()));
    }
    auto bucketOf = [&](size_t param) {
      return size_t(llvm::lower_bound(lastParamOfBucket, param) - lastParamOfBucket.begin());
    };
    SmallVector<Operation *> firstUse(lastParamOfBucket.size(), nullptr);
    Block &body = first.getBody().front();
    // The previous step's tokens: arguments of the iteration functions, passed to the first
    // microbatch's stage function as its trailing arguments.
    const size_t numBuckets = lastParamOfBucket.size();
    SmallVector<Value> carried = takeTokens(step, numBuckets);
    SmallVector<Value> waits = takeTokens(first, numBuckets);
    withTokens(firstCall, carried, firstCall.getTokens().size());
    for (unsigned i = 0; i < first.getNumArguments(); ++i) {
      FlatSymbolRefAttr name = model::paramOf(first, i);
      if (!name || !index.count(name.getValue()))
        continue;
      size_t k = bucketOf(index.lookup(name.getValue()));
      for (Operation *user : first.getArgument(i).getUsers()) {
        Operation *top = body.findAncestorOpInBlock(*user);
        if (top && (!firstUse[k] || top->isBeforeInBlock(firstUse[k])))
          firstUse[k] = top;
      }
    }
    for (size_t k = 0; k < firstUse.size(); ++k) {
      b.setInsertionPoint(firstUse[k] ? firstUse[k] : body.getTerminator());
      b.create<sched::ParamGatherWaitOp>(first.getLoc(), waits[k]);
    }
    for (func::FuncOp f : module.getOps<func::FuncOp>())
      if (f->hasAttr("sched.eval")) {
        SmallVector<Value> pending = takeTokens(f, numBuckets);
        b.setInsertionPointToStart(&f.getBody().front());
        for (Value t : pending)
          b.create<sched::ParamGatherWaitOp>(f.getLoc(), t);
      }
    return success();
  }

  /// The grad buffer's symbol.
  static FlatSymbolRefAttr bufferRef(OpBuilder &b) {
    return FlatSymbolRefAttr::get(b.getContext(), sched::kGradBufferName);
  }

  /// Appends `tokens` to what `fn` returns.
  static void returnTokens(func::FuncOp fn, ValueRange tokens) {
    Operation *ret = fn.getBody().front().getTerminator();
    for (Value t : tokens) {
      fn.insertResult(fn.getNumResults(), t.getType(), {});
      ret->insertOperands(ret->getNumOperands(), t);
    }
  }

  /// Appends `n` token arguments to `fn` and returns them.
  static SmallVector<Value> takeTokens(func::FuncOp fn, size_t n) {
    SmallVector<Value> args;
    auto token = sched::TokenType::get(fn.getContext());
    for (size_t i = 0; i < n; ++i) {
      fn.insertArgument(fn.getNumArguments(), token, {}, fn.getLoc());
      args.push_back(fn.getArgument(fn.getNumArguments() - 1));
    }
    return args;
  }

  /// `call` rebuilt with operands `waits` and `numTokens` token results (its callee's new
  /// signature); the old results' uses move to the new ones.
  static sched::MicrobatchOp withTokens(sched::MicrobatchOp call, ValueRange waits,
                                        size_t numTokens) {
    OpBuilder b(call);
    SmallVector<Type> types(numTokens, sched::TokenType::get(call.getContext()));
    SmallVector<Value> operands(waits);
    auto n = b.create<sched::MicrobatchOp>(call.getLoc(), types, call.getCalleeAttr(),
                                           call.getIndexAttr(), operands);
    for (auto [o, r] : llvm::zip(call.getTokens(), n.getTokens()))
      o.replaceAllUsesWith(r);
    call.erase();
    return n;
  }
};

} // namespace
