//===- Autodiff.cpp - Reverse-mode autodiff by VJP rules ------------------===//
//
// The forward function is cloned into `output` and a reverse sweep appended to it: each op's
// VJPOpInterface gives the gradients of its operands. A func.call is differentiated through its
// callee, which is split once into
//   @f.fwd(args)                          -> (results, residuals)
//   @f.bwd(used args, residuals, d results) -> (d float args)
// so that a function called per layer stays one function: the forward part of `output` calls
// @f.fwd, its backward part @f.bwd with the residuals of the same call.
//
//===----------------------------------------------------------------------===//

#include "passes/Autodiff/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#define DEBUG_TYPE "trainc-autodiff"

namespace mlir::trainc {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "passes/Autodiff/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

bool isFloatTensor(Type t) {
  auto rt = dyn_cast<RankedTensorType>(t);
  return rt && isa<FloatType>(rt.getElementType());
}

/// Moves each op of `block` marked for selective recompute, and the views of its results,
/// right before its first user, so that what it re-materialises is live only from its first
/// backward use on.
void sinkSelectiveRecompute(Block &block) {
  SmallVector<Operation *> marked;
  llvm::DenseSet<Operation *> seen;
  for (Operation &op : block) {
    bool fromMarked = model::isCheaperToRecompute(&op) &&
                      llvm::any_of(op.getOperands(), [&](Value v) {
                        return seen.contains(v.getDefiningOp());
                      });
    if (model::isSelectiveRecompute(&op) || fromMarked) {
      marked.push_back(&op);
      seen.insert(&op);
    }
  }
  for (Operation *op : llvm::reverse(marked)) {
    Operation *first = nullptr;
    for (Operation *user : op->getUsers())
      if (Operation *u = block.findAncestorOpInBlock(*user);
          u && (!first || u->isBeforeInBlock(first)))
        first = u;
    if (first && op->getNextNode() != first)
      op->moveBefore(first);
  }
}

/// Whether `v` is a 16-bit (bf16/fp16) tensor built only from linear_grad_input results summed by
/// model.add, each node used once inside the tree; counts the GEMM leaves in `leaves`.
bool isInputGradSum(Value v, unsigned &leaves) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || model::statsElementType(t.getElementType()) == t.getElementType())
    return false;
  Operation *def = v.getDefiningOp();
  if (isa_and_nonnull<model::LinearGradInputOp>(def)) {
    ++leaves;
    return true;
  }
  auto add = dyn_cast_or_null<model::AddOp>(def);
  if (!add || add.getLhs() == add.getRhs())
    return false;
  for (Value x : {add.getLhs(), add.getRhs()})
    if (!x.hasOneUse() || !isInputGradSum(x, leaves))
      return false;
  return true;
}

void widenTree(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  v.setType(RankedTensorType::get(t.getShape(), model::statsElementType(t.getElementType())));
  if (auto add = dyn_cast<model::AddOp>(v.getDefiningOp()))
    for (Value x : {add.getLhs(), add.getRhs()})
      widenTree(x);
}

/// Mixed precision: the input gradient of linears is summed in fp32 and rounded once.
///   - Several linears reading one bf16 value (q, k and v of a layer, Megatron's fused
///     linear_qkv): their input-gradient GEMMs write fp32, the adds run in fp32 and one
///     model.cast rounds the sum (Megatron's one GEMM rounds once).
///   - The input gradient of column-parallel linears summed over tp (the VJP of
///     model.copy_to_region, a mesh.all_reduce; of the sequence all-gather, a
///     mesh.reduce_scatter): the partial sums stay fp32 through the reduction and are rounded
///     after it, as a single rank rounds its full sum (unless `bf16Reduce`,
///     --tp-reduce-in-bf16: rounded before the reduction, as Megatron).
///   - The row-parallel backward's cast(copy_to_region / all_gather(cast(x))) with x bf16 (the
///     widened gradient of an fp32 partial sum narrowed for the GEMMs) becomes the collective on
///     x: the same values, no casts, half the gathered bytes.
void sumInputGradsInFp32(ModuleOp module, bool bf16Reduce) {
  SmallVector<Value> roots;
  module.walk([&](Operation *op) {
    if (!isa<model::LinearGradInputOp, model::AddOp>(op))
      return;
    Value v = op->getResult(0);
    unsigned leaves = 0;
    if (!isInputGradSum(v, leaves))
      return;
    if (v.hasOneUse()) {
      Operation *u = *v.getUsers().begin();
      unsigned up = 0;
      if (isa<model::AddOp>(u) && isInputGradSum(u->getResult(0), up))
        return; // inside a larger tree
    }
    bool reduced = v.hasOneUse() && isa<mesh::AllReduceOp, mesh::ReduceScatterOp>(
                                        *v.getUsers().begin());
    if (leaves >= 2 || (reduced && !bf16Reduce))
      roots.push_back(v);
  });
  OpBuilder b(module.getContext());
  for (Value v : roots) {
    Type narrow = v.getType();
    Operation *user = v.hasOneUse() ? *v.getUsers().begin() : nullptr;
    widenTree(v);
    if (user && !bf16Reduce && isa<mesh::AllReduceOp, mesh::ReduceScatterOp>(user)) {
      b.setInsertionPoint(user);
      Value r;
      if (auto ar = dyn_cast<mesh::AllReduceOp>(user)) {
        r = b.create<mesh::AllReduceOp>(ar.getLoc(), v.getType(), ar.getMeshAttr(),
                                        ar.getMeshAxesAttr(), v, ar.getReductionAttr());
      } else {
        auto rs = cast<mesh::ReduceScatterOp>(user);
        auto rt = cast<RankedTensorType>(rs.getType());
        r = b.create<mesh::ReduceScatterOp>(
            rs.getLoc(),
            RankedTensorType::get(rt.getShape(), cast<RankedTensorType>(v.getType()).getElementType()),
            rs.getMeshAttr(), rs.getMeshAxesAttr(), v, rs.getReductionAttr(),
            rs.getScatterAxisAttr());
      }
      r.getDefiningOp()->setDiscardableAttrs(user->getDiscardableAttrDictionary());
      Value c = b.create<model::CastOp>(user->getLoc(), user->getResult(0).getType(), r);
      user->getResult(0).replaceAllUsesWith(c);
      user->erase();
      continue;
    }
    b.setInsertionPointAfter(v.getDefiningOp());
    auto c = b.create<model::CastOp>(v.getLoc(), narrow, v);
    v.replaceAllUsesExcept(c, c);
  }
  // cast(collective(cast(x))) -> collective(x) for a data-moving collective.
  SmallVector<model::CastOp> casts;
  module.walk([&](model::CastOp c) { casts.push_back(c); });
  for (model::CastOp c : casts) {
    Operation *coll = c.getInput().getDefiningOp();
    if (!isa_and_nonnull<model::CopyToRegionOp, mesh::AllGatherOp>(coll) ||
        !c.getInput().hasOneUse())
      continue;
    auto inner = coll->getOperand(0).getDefiningOp<model::CastOp>();
    // x -> f32 -> x's type: exact only when the inner cast widens.
    if (!inner ||
        cast<RankedTensorType>(inner.getInput().getType()).getElementType() !=
            cast<RankedTensorType>(c.getType()).getElementType() ||
        cast<RankedTensorType>(inner.getType()).getElementType() !=
            model::statsElementType(cast<RankedTensorType>(c.getType()).getElementType()))
      continue;
    Value x = inner.getInput();
    coll->setOperand(0, x);
    coll->getResult(0).setType(c.getType());
    c.getResult().replaceAllUsesWith(coll->getResult(0));
    c.erase();
    if (inner->use_empty())
      inner.erase();
  }
}

/// The split derivative of one called function.
struct Derivative {
  func::FuncOp fwd, bwd;
  unsigned numResults = 0;          // results of the original function
  SmallVector<unsigned> usedArgs;   // original arguments @f.bwd takes again, in order
  SmallVector<unsigned> gradArgs;   // float arguments whose gradients @f.bwd returns, in order
};

class Differentiator {
public:
  explicit Differentiator(ModuleOp module) : module(module), b(module.getContext()) {}

  /// Replaces every func.call before `boundary` in `body` by a call of its callee's @f.fwd
  /// (differentiating the callee first) and inserts the reverse sweep of the ops before
  /// `boundary` at `ip`, seeded by `grads`. On return `grads` holds the gradient of every value
  /// that received one.
  LogicalResult sweep(Block &body, Operation *boundary, Operation *ip,
                      llvm::DenseMap<Value, Value> &grads);

private:
  /// The first half of sweep: the calls before `boundary` become calls of @f.fwd.
  LogicalResult replaceCalls(Block &body, Operation *boundary);
  /// The second half of sweep: the reverse sweep.
  LogicalResult reverse(Block &body, Operation *boundary, Operation *ip,
                        llvm::DenseMap<Value, Value> &grads);
  FailureOr<const Derivative *> derive(func::FuncOp f);
  /// Sums `g` into the gradient of `v`.
  void addGrad(llvm::DenseMap<Value, Value> &grads, Value v, Value g);

  ModuleOp module;
  OpBuilder b;
  SymbolTableCollection symbols; // the callees (looked up once per call, not by a module scan)
  llvm::StringMap<Derivative> derivatives; // by the original function's name
  llvm::StringMap<const Derivative *> byForward; // by the name of @f.fwd
  llvm::StringSet<> inProgress;
};

void Differentiator::addGrad(llvm::DenseMap<Value, Value> &grads, Value v, Value g) {
  if (!g)
    return;
  auto it = grads.find(v);
  if (it == grads.end()) {
    grads[v] = g;
    return;
  }
  // Mixed precision: a bf16 contribution meets an fp32 one (a tied embedding's bf16 table
  // gradient and the output layer's fp32 weight gradient): the sum is taken in fp32.
  Value acc = it->second;
  if (acc.getType() != g.getType()) {
    auto widen = [&](Value x) -> Value {
      auto t = cast<RankedTensorType>(x.getType());
      Type s = model::statsElementType(t.getElementType());
      return t.getElementType() == s
                 ? x
                 : b.create<model::CastOp>(x.getLoc(), RankedTensorType::get(t.getShape(), s), x);
    };
    acc = widen(acc);
    g = widen(g);
  }
  it->second = b.create<model::AddOp>(g.getLoc(), g.getType(), acc, g);
}

LogicalResult Differentiator::sweep(Block &body, Operation *boundary, Operation *ip,
                                    llvm::DenseMap<Value, Value> &grads) {
  if (failed(replaceCalls(body, boundary)))
    return failure();
  return reverse(body, boundary, ip, grads);
}

LogicalResult Differentiator::replaceCalls(Block &body, Operation *boundary) {
  SmallVector<func::CallOp> calls;
  for (Operation &op : body)
    if (auto c = dyn_cast<func::CallOp>(op); c && op.isBeforeInBlock(boundary))
      calls.push_back(c);
  for (func::CallOp c : calls) {
    auto callee = symbols.lookupSymbolIn<func::FuncOp>(module, c.getCalleeAttr());
    if (!callee || callee.isDeclaration())
      return c.emitOpError() << "calls @" << c.getCallee()
                             << ", which has no body to differentiate";
    FailureOr<const Derivative *> d = derive(callee);
    if (failed(d))
      return failure();
    b.setInsertionPoint(c);
    auto nc = b.create<func::CallOp>(c.getLoc(), (*d)->fwd, c.getOperands());
    nc->setDiscardableAttrs(c->getDiscardableAttrDictionary());
    c.replaceAllUsesWith(nc.getResults().take_front(c.getNumResults()));
    c.erase();
  }
  return success();
}

LogicalResult Differentiator::reverse(Block &body, Operation *boundary, Operation *ip,
                                      llvm::DenseMap<Value, Value> &grads) {
  SmallVector<Operation *> forwardOps;
  for (Operation &op : body) {
    if (&op == boundary)
      break;
    forwardOps.push_back(&op);
  }
  b.setInsertionPoint(ip);
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
    if (auto c = dyn_cast<func::CallOp>(op)) {
      const Derivative *d = byForward.lookup(c.getCallee());
      SmallVector<Value> args;
      for (unsigned i : d->usedArgs)
        args.push_back(c.getOperand(i));
      llvm::append_range(args, c.getResults().drop_front(d->numResults));
      for (unsigned i = 0; i < d->numResults; ++i)
        args.push_back(resultGrads[i] ? resultGrads[i]
                                      : Value(b.create<model::FillOp>(
                                            c.getLoc(), c.getResult(i).getType(),
                                            b.getF64FloatAttr(0.0))));
      auto bc = b.create<func::CallOp>(c.getLoc(), d->bwd, args);
      bc->setDiscardableAttrs(c->getDiscardableAttrDictionary());
      for (auto [i, g] : llvm::zip(d->gradArgs, bc.getResults()))
        addGrad(grads, c.getOperand(i), g);
      continue;
    }
    auto vjp = dyn_cast<model::VJPOpInterface>(op);
    if (!vjp && op->getNumOperands() == 0)
      continue; // a constant: the gradient stops here
    if (!vjp)
      return op->emitOpError() << "has no VJP rule (VJPOpInterface) but a gradient flows into it";
    SmallVector<Value> operandGrads = vjp.buildVJP(b, resultGrads);
    if (operandGrads.size() != op->getNumOperands())
      return op->emitOpError() << "VJP rule returned " << operandGrads.size()
                               << " gradients for " << op->getNumOperands() << " operands";
    for (auto [v, g] : llvm::zip(op->getOperands(), operandGrads))
      addGrad(grads, v, g);
  }
  return success();
}

FailureOr<const Derivative *> Differentiator::derive(func::FuncOp f) {
  StringRef name = f.getSymName();
  if (auto it = derivatives.find(name); it != derivatives.end())
    return &it->second;
  if (!inProgress.insert(name).second)
    return f.emitOpError() << "@" << name
                           << " calls itself; autodiff needs an acyclic call graph";
  OpBuilder::InsertionGuard guard(b);

  // The joint function: a clone of f whose extra arguments are the results' gradients.
  b.setInsertionPoint(f);
  auto joint = cast<func::FuncOp>(b.clone(*f));
  joint.setSymName((name + ".joint").str());
  Block &body = joint.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  const unsigned numArgs = body.getNumArguments();
  llvm::DenseMap<Value, Value> grads;
  SmallVector<Value> dys;
  for (Value r : ret.getOperands()) {
    Value dy = body.addArgument(r.getType(), r.getLoc());
    dys.push_back(dy);
    if (isFloatTensor(r.getType()))
      addGrad(grads, r, dy);
  }
  {
    if (failed(replaceCalls(body, ret)))
      return failure();
    llvm::DenseSet<Operation *> inForward;
    for (Operation &op : body.without_terminator())
      inForward.insert(&op);
    if (failed(reverse(body, ret, ret, grads)))
      return failure();
    b.setInsertionPoint(ret);
    Derivative d;
    d.numResults = ret.getNumOperands();
    SmallVector<std::pair<unsigned, Value>> argGrads;
    for (unsigned i = 0; i < numArgs; ++i) {
      if (!isFloatTensor(body.getArgument(i).getType()))
        continue;
      Value g = grads.lookup(body.getArgument(i));
      if (!g)
        g = b.create<model::FillOp>(ret.getLoc(), body.getArgument(i).getType(),
                                    b.getF64FloatAttr(0.0));
      argGrads.push_back({i, g});
    }
    SmallVector<Value> dargs;
    for (auto &[i, g] : argGrads) {
      d.gradArgs.push_back(i);
      dargs.push_back(g);
    }

    // Split: forward ops, backward ops (the reverse sweep's), residuals between them.
    SmallVector<Operation *> fwdOps, bwdOps;
    for (Operation &op : body.without_terminator())
      (inForward.contains(&op) ? fwdOps : bwdOps).push_back(&op);
    llvm::SetVector<Value> residuals;
    llvm::SetVector<Operation *> remat;
    llvm::SmallSetVector<unsigned, 8> used;
    SmallVector<Value> work(dargs.begin(), dargs.end());
    for (Operation *op : bwdOps)
      llvm::append_range(work, op->getOperands());
    while (!work.empty()) {
      Value v = work.pop_back_val();
      if (auto arg = dyn_cast<BlockArgument>(v)) {
        if (arg.getArgNumber() < numArgs)
          used.insert(arg.getArgNumber());
        continue;
      }
      Operation *def = v.getDefiningOp();
      if (!inForward.contains(def))
        continue;
      // Views, constants and ops marked for selective recompute are re-run in @f.bwd.
      if (model::isCheaperToRecompute(def) || model::isSelectiveRecompute(def)) {
        if (remat.insert(def))
          llvm::append_range(work, def->getOperands());
        continue;
      }
      residuals.insert(v);
    }
    d.usedArgs.assign(used.begin(), used.end());
    llvm::sort(d.usedArgs);
    SmallVector<Value> res(residuals.begin(), residuals.end());
    llvm::sort(res, [](Value x, Value y) {
      Operation *a = x.getDefiningOp(), *c = y.getDefiningOp();
      if (a != c)
        return a->isBeforeInBlock(c);
      return cast<OpResult>(x).getResultNumber() < cast<OpResult>(y).getResultNumber();
    });

    // @f.fwd(args) -> (results, residuals)
    b.setInsertionPoint(f);
    SmallVector<Type> fwdTypes(f.getResultTypes());
    for (Value v : res)
      fwdTypes.push_back(v.getType());
    d.fwd = b.create<func::FuncOp>(f.getLoc(), (name + ".fwd").str(),
                                   b.getFunctionType(f.getArgumentTypes(), fwdTypes));
    d.fwd.setPrivate();
    for (NamedAttribute a : f->getDiscardableAttrs())
      d.fwd->setAttr(a.getName(), a.getValue());
    d.fwd->setAttr("model.derivative", b.getStringAttr("forward"));
    d.fwd.setAllArgAttrs(f.getAllArgAttrs());
    {
      Block *entry = d.fwd.addEntryBlock();
      IRMapping map;
      for (unsigned i = 0; i < numArgs; ++i)
        map.map(body.getArgument(i), entry->getArgument(i));
      OpBuilder fb = OpBuilder::atBlockEnd(entry);
      for (Operation *op : fwdOps)
        fb.clone(*op, map);
      SmallVector<Value> out;
      for (Value v : ret.getOperands())
        out.push_back(map.lookupOrDefault(v));
      for (Value v : res)
        out.push_back(map.lookup(v));
      fb.create<func::ReturnOp>(ret.getLoc(), out);
    }

    // @f.bwd(used args, residuals, d results) -> (d float args)
    SmallVector<Type> bwdArgs, bwdResults;
    SmallVector<DictionaryAttr> bwdArgAttrs;
    for (unsigned i : d.usedArgs) {
      bwdArgs.push_back(body.getArgument(i).getType());
      bwdArgAttrs.push_back(f.getArgAttrDict(i) ? f.getArgAttrDict(i) : b.getDictionaryAttr({}));
    }
    for (Value v : res) {
      bwdArgs.push_back(v.getType());
      bwdArgAttrs.push_back(b.getDictionaryAttr({}));
    }
    for (Value dy : dys) {
      bwdArgs.push_back(dy.getType());
      bwdArgAttrs.push_back(b.getDictionaryAttr({}));
    }
    for (Value g : dargs)
      bwdResults.push_back(g.getType());
    d.bwd = b.create<func::FuncOp>(f.getLoc(), (name + ".bwd").str(),
                                   b.getFunctionType(bwdArgs, bwdResults));
    d.bwd.setPrivate();
    for (NamedAttribute a : f->getDiscardableAttrs())
      d.bwd->setAttr(a.getName(), a.getValue());
    d.bwd->setAttr("model.derivative", b.getStringAttr("backward"));
    d.bwd.setAllArgAttrs(bwdArgAttrs);
    {
      Block *entry = d.bwd.addEntryBlock();
      IRMapping map;
      unsigned k = 0;
      for (unsigned i : d.usedArgs)
        map.map(body.getArgument(i), entry->getArgument(k++));
      for (Value v : res)
        map.map(v, entry->getArgument(k++));
      for (Value dy : dys)
        map.map(dy, entry->getArgument(k++));
      OpBuilder bb = OpBuilder::atBlockEnd(entry);
      SmallVector<Operation *> ops(remat.begin(), remat.end());
      llvm::sort(ops, [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
      llvm::append_range(ops, bwdOps);
      for (Operation *op : ops)
        bb.clone(*op, map);
      SmallVector<Value> out;
      for (Value g : dargs)
        out.push_back(map.lookup(g));
      bb.create<func::ReturnOp>(ret.getLoc(), out);
      sinkSelectiveRecompute(*entry);
    }
    joint.erase();
    inProgress.erase(name);
    auto [it, fresh] = derivatives.try_emplace(name, std::move(d));
    byForward[it->second.fwd.getSymName()] = &it->second;
    return &it->second;
  }
}

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
    // Hand-written IR may give the parameters' attributes on the arguments: declare them once.
    if (failed(model::declareParameters(module)))
      return signalPassFailure();
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

    b.setInsertionPoint(ret);
    auto seed = b.create<model::FillOp>(ret.getLoc(), lossSum.getType(), b.getF64FloatAttr(1.0));
    seed->setAttr("model.loss_seed", b.getUnitAttr());
    llvm::DenseMap<Value, Value> grads;
    grads[lossSum] = seed;
    // A pipeline stage's sent activation (mesh.send, trainc-pipeline-split): its gradient is
    // the next stage's input gradient, received from the destination after the seed.
    for (auto send : llvm::to_vector(body.getOps<mesh::SendOp>())) {
      Value tmpl = b.create<model::FillOp>(ret.getLoc(), send.getType(), b.getF64FloatAttr(0.0));
      grads[send.getResult()] = b.create<mesh::RecvOp>(
          ret.getLoc(), send.getType(), send.getMeshAttr(), send.getMeshAxesAttr(), tmpl,
          send.getDestinationAttr(), ValueRange{});
    }
    Differentiator diff(module);
    if (failed(diff.sweep(body, seed, ret, grads)))
      return signalPassFailure();
    // Return (loss_sum, num_tokens, grads of parameters in argument order).
    b.setInsertionPoint(ret);
    SmallVector<Value> results(ret.getOperands());
    SmallVector<Type> types(fb.getResultTypes());
    SmallVector<Attribute> resultAttrs = {b.getDictionaryAttr({}), b.getDictionaryAttr({})};
    for (BlockArgument arg : body.getArguments()) {
      FlatSymbolRefAttr name = model::paramOf(fb, arg.getArgNumber());
      if (!name)
        continue;
      Value g = grads.lookup(arg);
      if (!g) // unused parameter: zero gradient
        g = b.create<model::FillOp>(ret.getLoc(), arg.getType(), b.getF64FloatAttr(0.0));
      results.push_back(g);
      types.push_back(g.getType()); // f32 for a bf16 weight's GEMM gradient (mixed precision)
      resultAttrs.push_back(b.getDictionaryAttr({b.getNamedAttr("model.grad_of", name)}));
    }
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    fb.setFunctionType(b.getFunctionType(fb.getArgumentTypes(), types));
    fb.setAllResultAttrs(resultAttrs);
    sumInputGradsInFp32(module, module->hasAttr("trainc.tp_reduce_in_bf16"));
  }
};

} // namespace
