//===- ZeroBubble.cpp - ZB-H1: split backwards and their unit order -------===//
//
// The zero-bubble schedule ZB-H1 (Qi, Wan, Huang, Lin: "Zero Bubble Pipeline Parallelism",
// arXiv 2401.10241, section 3.1 and figure 3): each backward unit is split by dataflow into B
// (the input gradients, sent to the previous stage at once) and W (the parameter gradients), and
// the W units are deferred into what is 1F1B's cooldown bubble. See Passes.h.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/Passes.h"

#include "dialects/Model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <map>
#include <vector>

using namespace mlir;
using namespace mlir::trainc;

SmallVector<ZeroBubbleStep> mlir::trainc::zeroBubbleH1(int64_t numStages, int64_t stage,
                                                       int64_t m) {
  // Warmup as 1F1B; then F B per step, with a W from step `stage` on (the first `stage` steps
  // defer theirs: the later the stage, the more Ws it keeps for the end, where the earlier
  // stages are still receiving gradients); cooldown B W; then the remaining Ws.
  const int64_t warmup = std::min(numStages - stage - 1, m);
  SmallVector<ZeroBubbleStep> order;
  int64_t f = 0, b = 0, w = 0, step = 0;
  for (; f < warmup; ++f)
    order.push_back({'F', f});
  for (; f < m; ++step) {
    order.push_back({'F', f++});
    order.push_back({'B', b++});
    if (step >= stage)
      order.push_back({'W', w++});
  }
  for (; b < m; ++step) {
    order.push_back({'B', b++});
    if (step >= stage)
      order.push_back({'W', w++});
  }
  for (; w < m; ++w)
    order.push_back({'W', w});
  return order;
}

namespace {

/// The values defined by `ops` that the ops of `readers` read, in program order.
SmallVector<Value> crossing(ArrayRef<Operation *> ops, ArrayRef<Operation *> readers) {
  llvm::DenseSet<Operation *> in(ops.begin(), ops.end());
  llvm::SetVector<Value> vals;
  for (Operation *op : readers)
    op->walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        if (Operation *def = v.getDefiningOp(); def && in.contains(def))
          vals.insert(v);
    });
  SmallVector<Value> out(vals.begin(), vals.end());
  llvm::sort(out, [](Value a, Value b) {
    Operation *x = a.getDefiningOp(), *y = b.getDefiningOp();
    if (x != y)
      return x->isBeforeInBlock(y);
    return cast<OpResult>(a).getResultNumber() < cast<OpResult>(b).getResultNumber();
  });
  return out;
}

/// The ops of `body` the values `roots` depend on (within the block), in program order.
llvm::DenseSet<Operation *> sliceOf(Block &body, ArrayRef<Value> roots) {
  llvm::DenseSet<Operation *> slice;
  SmallVector<Value> work(roots.begin(), roots.end());
  while (!work.empty()) {
    Value v = work.pop_back_val();
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != &body || !slice.insert(def).second)
      continue;
    def->walk([&](Operation *inner) { llvm::append_range(work, inner->getOperands()); });
  }
  return slice;
}

/// Fills the new function `f` (no body yet) with clones of `ops`: its leading arguments stand for
/// `args`, the ones after them for `extra` (in order), and it returns the clones of `results` (a
/// result that `ops` do not compute is returned as the argument it maps to).
void cloneInto(func::FuncOp f, ValueRange args, ArrayRef<Value> extra, ArrayRef<Operation *> ops,
               ArrayRef<Value> results, Location retLoc) {
  Block *entry = f.addEntryBlock();
  IRMapping map;
  map.map(args, entry->getArguments().take_front(args.size()));
  for (auto [k, v] : llvm::enumerate(extra))
    map.map(v, entry->getArgument(args.size() + unsigned(k)));
  OpBuilder bb = OpBuilder::atBlockEnd(entry);
  for (Operation *op : ops)
    bb.clone(*op, map);
  SmallVector<Value> out;
  for (Value v : results)
    out.push_back(map.lookupOrDefault(v));
  bb.create<func::ReturnOp>(retLoc, out);
}

/// Splits layer backward functions (@f.bwd) into the part their input-gradient results need and
/// the rest, once per (callee, weight results).
class CallSplitter {
public:
  explicit CallSplitter(ModuleOp module) : module(module) {}

  /// @g.input(args) -> (results not in `weight`, intermediates) and
  /// @g.weight(the args it reads, intermediates) -> (results in `weight`); which of g's
  /// arguments @g.weight takes is its attribute `trainc.weight_args` (argument numbers of g).
  /// Errors name the callee.
  FailureOr<std::pair<func::FuncOp, func::FuncOp>> split(func::FuncOp g,
                                                         ArrayRef<bool> weight);

private:
  ModuleOp module;
  std::map<std::pair<std::string, std::vector<bool>>, std::pair<func::FuncOp, func::FuncOp>>
      done;
};

FailureOr<std::pair<func::FuncOp, func::FuncOp>> CallSplitter::split(func::FuncOp g,
                                                                     ArrayRef<bool> weight) {
  auto key = std::make_pair(g.getSymName().str(), std::vector<bool>(weight.begin(), weight.end()));
  if (auto it = done.find(key); it != done.end())
    return it->second;
  std::string suffix;
  for (bool w : weight)
    suffix += w ? "w" : "i";
  // (Split already for another backward unit of this module: the split is deterministic.)
  auto oldIn = module.lookupSymbol<func::FuncOp>((g.getSymName() + ".input." + suffix).str());
  auto oldW = module.lookupSymbol<func::FuncOp>((g.getSymName() + ".weight." + suffix).str());
  if (oldIn && oldW)
    return done[key] = {oldIn, oldW};
  if (g.isDeclaration())
    return g.emitOpError() << "@" << g.getSymName()
                           << " has no body; zb-h1 splits a backward call by its dataflow";
  Block &body = g.getBody().front();
  Operation *ret = body.getTerminator();
  SmallVector<Value> inRoots, wRoots;
  for (auto [i, v] : llvm::enumerate(ret->getOperands()))
    (weight[i] ? wRoots : inRoots).push_back(v);
  llvm::DenseSet<Operation *> bSet = sliceOf(body, inRoots), wSlice = sliceOf(body, wRoots);
  SmallVector<Operation *> bOps, wOps;
  for (Operation &op : body.without_terminator()) {
    if (bSet.contains(&op))
      bOps.push_back(&op);
    else if (wSlice.contains(&op))
      wOps.push_back(&op);
  }
  // What W reads of B's values (the returned weight gradients included when B computes them).
  SmallVector<Operation *> wReaders(wOps);
  wReaders.push_back(ret);
  SmallVector<Value> inter = crossing(bOps, wReaders);
  // The return also reads the input gradients: keep what W's ops read or W returns.
  llvm::DenseSet<Value> readByW;
  for (Operation *op : wOps)
    op->walk([&](Operation *in) { readByW.insert(in->operand_begin(), in->operand_end()); });
  llvm::erase_if(inter, [&](Value v) {
    return !readByW.contains(v) && !llvm::is_contained(wRoots, v);
  });

  OpBuilder b(g);
  auto copyAttrs = [&](func::FuncOp f) {
    for (NamedAttribute a : g->getDiscardableAttrs())
      f->setAttr(a.getName(), a.getValue());
    f.setPrivate();
  };
  // @g.input
  SmallVector<Type> inTypes;
  for (Value v : inRoots)
    inTypes.push_back(v.getType());
  for (Value v : inter)
    inTypes.push_back(v.getType());
  auto fi = b.create<func::FuncOp>(g.getLoc(), (g.getSymName() + ".input." + suffix).str(),
                                   b.getFunctionType(g.getArgumentTypes(), inTypes));
  copyAttrs(fi);
  fi.setAllArgAttrs(g.getAllArgAttrs());
  cloneInto(fi, g.getArguments(), {}, bOps, llvm::to_vector(llvm::concat<Value>(inRoots, inter)),
            ret->getLoc());
  // @g.weight
  SmallVector<Type> wArgs(g.getArgumentTypes()), wTypes;
  for (Value v : inter)
    wArgs.push_back(v.getType());
  for (Value v : wRoots)
    wTypes.push_back(v.getType());
  auto fw = b.create<func::FuncOp>(g.getLoc(), (g.getSymName() + ".weight." + suffix).str(),
                                   b.getFunctionType(wArgs, wTypes));
  copyAttrs(fw);
  for (unsigned i = 0; i < g.getNumArguments(); ++i)
    if (DictionaryAttr d = g.getArgAttrDict(i))
      fw.setArgAttrs(i, d);
  cloneInto(fw, g.getArguments(), inter, wOps, wRoots, ret->getLoc());
  // W takes only the arguments it reads, so that a stash tensor only B reads can be freed at B.
  llvm::BitVector unused(fw.getNumArguments());
  SmallVector<int64_t> taken;
  for (unsigned i = 0; i < g.getNumArguments(); ++i)
    if (fw.getArgument(i).use_empty())
      unused.set(i);
    else
      taken.push_back(int64_t(i));
  fw.eraseArguments(unused);
  fw->setAttr("trainc.weight_args", b.getDenseI64ArrayAttr(taken));
  return done[key] = {fi, fw};
}

/// True for an op that belongs to W whatever reads it: a gradient accumulation or a gradient
/// sync (a sched op returning only tokens).
bool isWeightSink(Operation *op) {
  if (isa<sched::AccumulateGradOp>(op))
    return true;
  return isa<sched::SchedDialect>(op->getDialect()) && !isa<sched::LossSeedOp>(op) &&
         llvm::all_of(op->getResultTypes(), llvm::IsaPred<sched::TokenType>);
}

} // namespace

FailureOr<std::pair<func::FuncOp, func::FuncOp>>
mlir::trainc::splitWeightGradients(ModuleOp module, func::FuncOp backward) {
  CallSplitter calls(module);
  Block &body = backward.getBody().front();
  Operation *ret = body.getTerminator();
  // W: the sinks, and every op whose results only W (or the return of tokens) reads. Mesh ops
  // (the p2p of the input gradient) and ops without results stay in B.
  llvm::DenseSet<Operation *> inW;
  auto onlyW = [&](Value v) {
    return !v.use_empty() && llvm::all_of(v.getUsers(), [&](Operation *u) {
      return inW.contains(u) || (u == ret && isa<sched::TokenType>(v.getType()));
    });
  };
  auto isParamGrad = [](Value v) {
    return !v.use_empty() && llvm::all_of(v.getUsers(), llvm::IsaPred<sched::AccumulateGradOp>);
  };
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  SmallVector<func::CallOp> mixed;
  for (Operation *op : llvm::reverse(ops)) {
    if (isWeightSink(op)) {
      inW.insert(op);
      continue;
    }
    if (op->getNumResults() == 0 || isa<mesh::MeshDialect>(op->getDialect()) ||
        (isa<model::FillOp>(op) && op->hasAttr("model.loss_seed")))
      continue;
    // A layer backward call: its parameter gradients (results accumulated straight into main
    // grads) are W's, its input gradient B's even where only W reads it (stage 0's layer 0 dx
    // feeding the embedding's weight gradient), as in the paper's B.
    if (auto c = dyn_cast<func::CallOp>(op)) {
      if (llvm::all_of(c.getResults(), isParamGrad))
        inW.insert(op);
      else if (llvm::any_of(c.getResults(), isParamGrad))
        mixed.push_back(c);
      continue;
    }
    if (llvm::all_of(op->getResults(), onlyW))
      inW.insert(op);
  }
  // A layer backward whose parameter gradients only W reads: split it by its dataflow.
  for (func::CallOp c : mixed) {
    auto g = module.lookupSymbol<func::FuncOp>(c.getCalleeAttr());
    if (!g)
      return c.emitOpError() << "calls @" << c.getCallee() << ", not a function in this module";
    SmallVector<bool> weight;
    for (Value r : c.getResults())
      weight.push_back(isParamGrad(r));
    FailureOr<std::pair<func::FuncOp, func::FuncOp>> parts = calls.split(g, weight);
    if (failed(parts))
      return failure();
    OpBuilder b(c);
    auto ci = b.create<func::CallOp>(c.getLoc(), parts->first, c.getOperands());
    ci->setDiscardableAttrs(c->getDiscardableAttrDictionary());
    SmallVector<Value> wArgs;
    for (int64_t i : parts->second->getAttrOfType<DenseI64ArrayAttr>("trainc.weight_args")
                         .asArrayRef())
      wArgs.push_back(c.getOperand(unsigned(i)));
    const unsigned numIn = unsigned(llvm::count(weight, false));
    llvm::append_range(wArgs, ci.getResults().drop_front(numIn));
    auto cw = b.create<func::CallOp>(c.getLoc(), parts->second, wArgs);
    cw->setDiscardableAttrs(c->getDiscardableAttrDictionary());
    unsigned ki = 0, kw = 0;
    for (auto [i, r] : llvm::enumerate(c.getResults()))
      r.replaceAllUsesWith(weight[i] ? cw.getResult(kw++) : ci.getResult(ki++));
    inW.insert(cw);
    c.erase();
  }
  SmallVector<Operation *> bOps, wOps;
  for (Operation &op : body.without_terminator())
    (inW.contains(&op) ? wOps : bOps).push_back(&op);
  for (Value v : ret->getOperands())
    if (Operation *def = v.getDefiningOp(); def && !inW.contains(def))
      return backward.emitOpError()
             << "@" << backward.getSymName()
             << " returns a token its input-gradient part computes; zb-h1 returns the gradient "
                "syncs' tokens from the weight-gradient unit";
  SmallVector<Value> stash = crossing(bOps, wOps);

  OpBuilder b(backward);
  int64_t numStash = 0;
  for (unsigned i = 0; i < backward.getNumArguments(); ++i)
    numStash += backward.getArgAttr(i, "sched.stash") ? 1 : 0;
  // B: the backward's arguments -> the values W reads.
  SmallVector<Type> stashTypes;
  for (Value v : stash)
    stashTypes.push_back(v.getType());
  auto fb = b.create<func::FuncOp>(backward.getLoc(), (backward.getSymName() + ".input").str(),
                                   b.getFunctionType(backward.getArgumentTypes(), stashTypes));
  for (NamedAttribute a : backward->getDiscardableAttrs())
    fb->setAttr(a.getName(), a.getValue());
  fb->setAttr("sched.unit", b.getStringAttr("backward_input"));
  fb->removeAttr("sched.last_microbatch");
  fb.setAllArgAttrs(backward.getAllArgAttrs());
  cloneInto(fb, backward.getArguments(), {}, bOps, stash, ret->getLoc());
  // W: the backward's arguments and B's values (tagged as stash after the forward's) -> tokens.
  SmallVector<Type> wArgs(backward.getArgumentTypes());
  llvm::append_range(wArgs, stashTypes);
  auto fw = b.create<func::FuncOp>(backward.getLoc(), (backward.getSymName() + ".weight").str(),
                                   b.getFunctionType(wArgs, backward.getResultTypes()));
  for (NamedAttribute a : backward->getDiscardableAttrs())
    fw->setAttr(a.getName(), a.getValue());
  fw->setAttr("sched.unit", b.getStringAttr("backward_weight"));
  SmallVector<DictionaryAttr> wAttrs;
  for (unsigned i = 0; i < backward.getNumArguments(); ++i)
    wAttrs.push_back(backward.getArgAttrDict(i) ? backward.getArgAttrDict(i)
                                                : b.getDictionaryAttr({}));
  for (size_t k = 0; k < stash.size(); ++k)
    wAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("sched.stash", b.getI64IntegerAttr(numStash + int64_t(k)))}));
  fw.setAllArgAttrs(wAttrs);
  cloneInto(fw, backward.getArguments(), stash, wOps, llvm::to_vector(ret->getOperands()),
            ret->getLoc());
  return std::make_pair(fb, fw);
}
