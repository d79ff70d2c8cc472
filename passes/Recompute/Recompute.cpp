//===- Recompute.cpp - Activation recompute (Megatron's full recompute) ---===//
//
// Rewrites a differentiated function so that the layers of each recompute group keep no
// residuals across the iteration: the forward calls the plain layer, and the backward replays
// the group's @f.fwd calls from the group's input right before the first backward use. See
// Passes.td.
//
//===----------------------------------------------------------------------===//

#include "passes/Recompute/Passes.h"
#include "passes/PlanOption.h"

#include "dialects/Sched/SchedDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"

#define DEBUG_TYPE "trainc-recompute"

namespace mlir::trainc {
#define GEN_PASS_DEF_RECOMPUTEPASS
#include "passes/Recompute/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

/// One layer call of a differentiated function: the call of @f.fwd and the plain @f.
struct LayerCall {
  func::CallOp call;
  func::FuncOp plain;
  unsigned numResults = 0; // results of @f; the rest of the call's results are residuals
};

/// FLOPs of one execution of `f` (CostOpInterface, calls counted through their callees).
double functionFlops(func::FuncOp f, SymbolTableCollection &symbols) {
  double flops = 0;
  f.walk([&](Operation *op) {
    if (auto cost = dyn_cast<model::CostOpInterface>(op))
      flops += cost.getFlops();
    else if (auto call = dyn_cast<func::CallOp>(op))
      if (auto callee = symbols.lookupNearestSymbolFrom<func::FuncOp>(call, call.getCalleeAttr()))
        flops += functionFlops(callee, symbols);
  });
  return flops;
}

/// The groups of `n` layer calls (positions into the stage's layer list) that `spec` recomputes.
SmallVector<SmallVector<size_t>> groupsOf(const sched::RecomputeSpec &spec, size_t n) {
  SmallVector<SmallVector<size_t>> groups;
  const size_t k = size_t(spec.numLayers);
  if (spec.method == "uniform") {
    for (size_t first = 0; first < n; first += k) {
      groups.emplace_back();
      for (size_t i = first; i < std::min(n, first + k); ++i)
        groups.back().push_back(i);
    }
  } else { // block: each of the first k layers alone
    for (size_t i = 0; i < std::min(n, k); ++i)
      groups.push_back({i});
  }
  return groups;
}

class Rewriter {
public:
  Rewriter(ModuleOp module, SymbolTableCollection &symbols) : module(module), symbols(symbols) {}

  /// The calls of @f.fwd in `fn`'s body in order (empty if it has none). Errors name the call.
  FailureOr<SmallVector<LayerCall>> layerCalls(func::FuncOp fn);
  /// Checkpoints `group` of `calls` as group number `g`; adds the replay's FLOPs to `flops`.
  LogicalResult rewrite(MutableArrayRef<LayerCall> group, int64_t g, double &flops);

private:
  ModuleOp module;
  SymbolTableCollection &symbols;
};

FailureOr<SmallVector<LayerCall>> Rewriter::layerCalls(func::FuncOp fn) {
  SmallVector<LayerCall> calls;
  if (fn.isDeclaration())
    return calls;
  for (auto call : fn.getBody().front().getOps<func::CallOp>()) {
    auto callee = symbols.lookupSymbolIn<func::FuncOp>(module, call.getCalleeAttr());
    auto kind = callee ? callee->getAttrOfType<StringAttr>("model.derivative") : StringAttr();
    if (!kind || kind.getValue() != "forward")
      continue;
    StringRef name = callee.getSymName();
    if (!name.consume_back(".fwd"))
      return call.emitOpError() << "calls @" << callee.getSymName()
                                << " (model.derivative = \"forward\"), whose name does not end "
                                   "in .fwd; trainc-recompute needs autodiff's @f.fwd";
    auto plain = symbols.lookupSymbolIn<func::FuncOp>(module, StringAttr::get(fn.getContext(), name));
    if (!plain || plain.isDeclaration() ||
        plain.getArgumentTypes() != callee.getArgumentTypes() ||
        plain.getResultTypes() != callee.getResultTypes().take_front(plain.getNumResults()))
      return call.emitOpError() << "calls @" << callee.getSymName() << ", but @" << name
                                << " (the layer to run without residuals) is missing or has "
                                   "another signature";
    calls.push_back({call, plain, plain.getNumResults()});
  }
  return calls;
}

LogicalResult Rewriter::rewrite(MutableArrayRef<LayerCall> group, int64_t g, double &flops) {
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  auto tag = [&](Operation *op, StringRef role) {
    op->setAttr(model::kRecomputeAttrName, b.getStringAttr(role));
    op->setAttr("model.recompute_group", b.getI64IntegerAttr(g));
  };
  // The first backward use: the earliest reader of a residual of the group.
  Operation *first = nullptr;
  for (LayerCall &l : group)
    for (Value r : l.call.getResults().drop_front(l.numResults))
      for (Operation *user : r.getUsers()) {
        Operation *u = l.call->getBlock()->findAncestorOpInBlock(*user);
        if (!u)
          return user->emitOpError() << "reads a residual of layer call " << l.call
                                     << " from outside its block";
        if (!first || u->isBeforeInBlock(first))
          first = u;
      }
  if (first) {
    // The replay, in forward order, reading the replayed values of the earlier layers.
    b.setInsertionPoint(first);
    IRMapping map;
    llvm::DenseSet<Operation *> replay;
    for (LayerCall &l : group) {
      SmallVector<Value> args;
      for (Value v : l.call.getOperands())
        args.push_back(map.lookupOrDefault(v));
      auto c = b.create<func::CallOp>(l.call.getLoc(), l.call.getCalleeAttr(),
                                      l.call.getResultTypes(), args);
      c->setDiscardableAttrs(l.call->getDiscardableAttrDictionary());
      tag(c, "replay");
      map.map(l.call.getResults(), c.getResults());
      replay.insert(c);
      flops += functionFlops(symbols.lookupSymbolIn<func::FuncOp>(module, c.getCalleeAttr()),
                             symbols);
    }
    // Every use at or after the replay reads the replayed values.
    for (LayerCall &l : group)
      for (Value r : l.call.getResults())
        for (OpOperand &use : llvm::make_early_inc_range(r.getUses())) {
          Operation *u = l.call->getBlock()->findAncestorOpInBlock(*use.getOwner());
          if (u && !replay.contains(u) && (u == first || first->isBeforeInBlock(u)))
            use.set(map.lookup(r));
        }
  }
  // The forward: the plain layers, so nothing but the group's input outlives it.
  for (LayerCall &l : group) {
    for (Value r : l.call.getResults().drop_front(l.numResults))
      if (!r.use_empty())
        return l.call.emitOpError() << "has a residual read before the group's first backward "
                                       "use; trainc-recompute cannot checkpoint it";
    b.setInsertionPoint(l.call);
    auto c = b.create<func::CallOp>(l.call.getLoc(), l.plain, l.call.getOperands());
    c->setDiscardableAttrs(l.call->getDiscardableAttrDictionary());
    tag(c, "checkpoint");
    l.call.getResults().take_front(l.numResults).replaceAllUsesWith(c.getResults());
    l.call.erase();
  }
  return success();
}

struct RecomputePass : mlir::trainc::impl::RecomputePassBase<RecomputePass> {
  using RecomputePassBase::RecomputePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // The resolved value, as a local that shadows the option (passes/PlanOption.h).
    std::string recompute;
    if (failed(resolvePlanOption(module, this->recompute, "recompute", recompute)))
      return signalPassFailure();
    int64_t layersPerStage = 0;
    if (sched::PlanAttr plan = sched::getPlan(module))
      layersPerStage = plan.getNumLayers() / plan.getPp();
    FailureOr<sched::RecomputeSpec> spec = sched::parseRecompute(
        recompute, layersPerStage, [&] { return module.emitError() << "trainc-recompute: "; });
    if (failed(spec))
      return signalPassFailure();
    if (spec->granularity != "full")
      return;
    SymbolTableCollection symbols;
    Rewriter rewriter(module, symbols);
    double flops = 0;
    SmallVector<func::FuncOp> fns(module.getOps<func::FuncOp>());
    for (func::FuncOp fn : fns) {
      FailureOr<SmallVector<LayerCall>> calls = rewriter.layerCalls(fn);
      if (failed(calls))
        return signalPassFailure();
      if (calls->empty())
        continue;
      if (size_t(spec->numLayers) > calls->size()) {
        fn.emitOpError() << "trainc-recompute: recompute = \"" << recompute << "\": num_layers "
                         << spec->numLayers << " exceeds the " << calls->size()
                         << " layer calls of @" << fn.getSymName();
        return signalPassFailure();
      }
      int64_t g = 0;
      for (const SmallVector<size_t> &group : groupsOf(*spec, calls->size())) {
        SmallVector<LayerCall> members;
        for (size_t i : group)
          members.push_back((*calls)[i]);
        if (failed(rewriter.rewrite(members, g++, flops)))
          return signalPassFailure();
      }
    }
    // Per execution of the differentiated function, i.e. per microbatch.
    if (auto a = module->getAttrOfType<FloatAttr>("trainc.recompute_flops_per_microbatch"))
      flops += a.getValueAsDouble(); // selective recompute's, counted before autodiff
    module->setAttr("trainc.recompute_flops_per_microbatch",
                    Builder(module.getContext()).getF64FloatAttr(flops));
  }
};

} // namespace
