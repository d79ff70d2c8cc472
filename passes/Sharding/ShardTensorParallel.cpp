//===- ShardTensorParallel.cpp - Megatron's tensor-parallel layouts -------===//
//
// trainc-shard rewrites the model-level IR (before autodiff) into the program of one TP rank:
// parameters get their local shapes, the ops between them the shapes their sharding rules give,
// and Megatron's conjugate collectives are inserted where a layout changes:
//   - column-parallel linear (q, k, v, fc1, output layer): model.copy_to_region on its input
//     (Megatron's f; one per input value, so q/k/v share it), weight and bias split by rows;
//   - row-parallel linear (linear_proj, fc2): the partial products are summed by mesh.all_reduce
//     (Megatron's g) and the replicated bias is added after it (model.bias_add); with bf16/fp16
//     activations the partial product is fp32 and a model.cast after the reduction rounds the
//     full sum (unless --tp-reduce-in-bf16);
//   - vocab-parallel embedding: a rank's rows, zero outside its range, then mesh.all_reduce;
//   - vocab-parallel cross entropy: ce_local_max -> all_reduce max -> ce_local_sumexp and
//     ce_target_logit -> all_reduce sum -> ce_combine.
// With --sequence-parallel (Megatron's SP, module attribute model.sequence_parallel) the values
// between the blocks are sequence shards [b, s/tp, h] (layout dim 1, `seq`): the vocab-parallel
// embedding and the row-parallel linears end with mesh.reduce_scatter along the sequence instead
// of an all-reduce, the column-parallel linears start with mesh.all_gather along it (one per
// value) instead of copy_to_region, norms, dropout and residual adds run on the shard (dropout
// keyed by the global position: model.global_seq and a seq_start rank offset), a replicated
// activation meeting a shard is sliced (mesh.all_slice: GPT's position embeddings), and a
// replicated parameter consumed on a shard (norm weights, row-parallel biases) gets
// model.copy_to_region, so that autodiff all-reduces its partial gradient over tp.
// Autodiff then differentiates the collectives by their VJP rules. A rank-dependent attribute
// (a shard's vocab_start) keeps rank 0's value and a model.rank_offsets entry; a sharded
// parameter's declaration records its global shape and split (model.parameter).
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"
#include "passes/PlanOption.h"

#include "mlir/IR/BuiltinOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::trainc {
#define GEN_PASS_DEF_SHARDTENSORPARALLELPASS
#include "passes/Sharding/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

/// How a value is laid out over the tp axis: replicated (dim -1) or split evenly along `dim`;
/// `halves` = 2 for SwiGLU's fc1 output, whose local columns are the rank's gate chunk followed
/// by its up chunk.
struct Layout {
  int64_t dim = -1;
  int64_t halves = 1;
  /// A sequence shard (--sequence-parallel): split along the sequence of the activations.
  bool seq = false;
  bool split() const { return dim >= 0; }
  bool operator==(const Layout &o) const {
    return dim == o.dim && halves == o.halves && seq == o.seq;
  }
  bool operator!=(const Layout &o) const { return !(*this == o); }
};

constexpr int16_t kTpAxis = 0; // Megatron's order: tp is mesh axis 0

bool endsWith(StringRef s, StringRef suffix) { return s.ends_with(suffix); }

/// Megatron's layout of a parameter, from its (global or layer-relative) name.
Layout parameterLayout(StringRef name, bool swiglu) {
  for (StringRef col : {"self_attention.linear_q.", "self_attention.linear_k.",
                        "self_attention.linear_v."})
    if (name.contains(col))
      return {0, 1};
  if (name.contains("mlp.linear_fc1."))
    return {0, swiglu ? 2 : 1};
  if (endsWith(name, "self_attention.linear_proj.weight") || endsWith(name, "mlp.linear_fc2.weight"))
    return {1, 1};
  if (name == "embedding.word_embeddings.weight" || name == "output_layer.weight")
    return {0, 1};
  return {};
}

RankedTensorType localType(RankedTensorType t, Layout l, int64_t tp) {
  if (!l.split())
    return t;
  SmallVector<int64_t> s(t.getShape());
  s[size_t(l.dim)] /= tp;
  return RankedTensorType::get(s, t.getElementType());
}

/// The parameter name of argument `i` of `fn`: its model.param symbol or model.layer_param.
std::string paramName(func::FuncOp fn, unsigned i) {
  if (FlatSymbolRefAttr p = model::paramOf(fn, i))
    return p.getValue().str();
  if (auto s = fn.getArgAttrOfType<StringAttr>(i, "model.layer_param"))
    return s.str();
  return "";
}

class Sharder {
public:
  Sharder(ModuleOp module, int64_t tp, bool sp)
      : module(module), tp(tp), sp(sp),
        bf16Reduce(module->hasAttr("trainc.tp_reduce_in_bf16")), b(module.getContext()) {}
  LogicalResult run();

private:
  LogicalResult shardDeclarations();
  LogicalResult shardFunction(func::FuncOp fn);
  LogicalResult shardOp(Operation *op);
  LogicalResult shardLinear(model::LinearOp op);
  LogicalResult shardEmbedding(model::EmbeddingOp op);
  LogicalResult shardCrossEntropy(model::CrossEntropyOp op);
  LogicalResult shardReshape(model::ReshapeOp op);
  LogicalResult shardByRule(Operation *op);
  LogicalResult shardCall(func::CallOp call);

  /// The sequence dim of the activations [b, s, h].
  static constexpr int64_t kSeqDim = 1;
  static constexpr Layout kSeqShard = {kSeqDim, 1, true};
  /// `v` ([b, s/tp, ...]) gathered along the sequence: one mesh.all_gather per value (Megatron's
  /// one all-gather before the fused qkv).
  Value gatherSequence(Location loc, Value v);
  /// `v` (a replicated [b, s, ...]) sliced to this rank's sequence shard (mesh.all_slice).
  Value sliceSequence(Location loc, Value v, int64_t dim);
  /// Megatron's f on a replicated parameter consumed on a sequence shard: identity forward,
  /// all-reduce of the (partial) gradient backward. One per parameter value.
  Value parameterOnShard(Value param);
  /// Whether `v` is a parameter argument (model.param or model.layer_param).
  bool isParameter(Value v) const;

  Layout of(Value v) const { return layouts.lookup(v); }
  /// Sets `v`'s layout and its type (global shape -> local).
  void setSplit(Value v, Layout l) {
    v.setType(localType(cast<RankedTensorType>(v.getType()), l, tp));
    layouts[v] = l;
  }
  /// A sum reduce-scatter of `v` [b, s, h] along the sequence; the result is a sequence shard.
  Value reduceScatter(Location loc, Value v) {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(t.getShape());
    shape[kSeqDim] /= tp;
    Value r = b.create<mesh::ReduceScatterOp>(
        loc, RankedTensorType::get(shape, t.getElementType()),
        FlatSymbolRefAttr::get(b.getContext(), model::kMeshName),
        b.getDenseI16ArrayAttr({kTpAxis}), v,
        mesh::ReductionKindAttr::get(b.getContext(), mesh::ReductionKind::Sum),
        b.getIndexAttr(kSeqDim));
    layouts[r] = kSeqShard;
    return r;
  }
  /// Checks that `t` is an activation [b, s, h] whose sequence tp divides.
  LogicalResult scatterable(Operation *op, Type type) {
    auto t = cast<RankedTensorType>(type);
    if (t.getRank() == 3 && t.getShape()[kSeqDim] % tp == 0)
      return success();
    return op->emitOpError() << "sequence parallelism: result " << t
                             << " is not a [b, s, h] activation with s divisible by the "
                                "tensor-parallel size "
                             << tp;
  }
  Value allReduce(Location loc, Value v, mesh::ReductionKind kind) {
    return b.create<mesh::AllReduceOp>(loc, v, model::kMeshName,
                                       ArrayRef<mesh::MeshAxis>{kTpAxis}, kind);
  }
  /// `vocab_start` of a shard of `localVocab` rows: rank 0's value plus a per-rank offset.
  void setVocabOffsets(Operation *op, int64_t localVocab) {
    op->setAttr(model::kRankOffsetsAttr,
                b.getDictionaryAttr(b.getNamedAttr(
                    "vocab_start", b.getDenseI64ArrayAttr({kTpAxis, localVocab}))));
  }
  bool usesSwiglu(func::FuncOp fn, unsigned arg);

  ModuleOp module;
  int64_t tp;
  bool sp;
  /// --tp-reduce-in-bf16 (module attribute trainc.tp_reduce_in_bf16): bf16 partial sums.
  bool bf16Reduce = false;
  OpBuilder b;
  /// Per sharded function: the layouts of its results (calls give them to their results).
  llvm::DenseMap<Operation *, SmallVector<Layout>> resultLayouts;
  llvm::DenseMap<Value, Value> gathers, paramCopies;
  llvm::DenseMap<Value, Layout> layouts;
  /// One model.copy_to_region per replicated value that feeds column-parallel linears.
  llvm::DenseMap<Value, Value> copies;
  /// Whether fc1 feeds SwiGLU (its rows are gate and up halves).
  bool swigluFc1 = false;
};

bool Sharder::usesSwiglu(func::FuncOp fn, unsigned arg) {
  for (Operation *user : fn.getArgument(arg).getUsers())
    if (auto lin = dyn_cast<model::LinearOp>(user))
      for (Operation *u : lin.getResult().getUsers())
        if (isa<model::SwigluOp>(u))
          return true;
  return false;
}

LogicalResult Sharder::shardDeclarations() {
  // SwiGLU's fc1: seen through the layer function's use.
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (StringRef(paramName(fn, i)).contains("mlp.linear_fc1.") && usesSwiglu(fn, i))
        swigluFc1 = true;
  for (auto decl : llvm::make_early_inc_range(module.getOps<model::ParameterOp>())) {
    StringRef name = decl.getSymName();
    Layout l = parameterLayout(name, swigluFc1);
    if (!l.split())
      continue;
    auto t = cast<RankedTensorType>(decl.getType());
    SmallVector<int64_t> global(t.getShape());
    int64_t dim = l.dim;
    if (l.halves == 2) {
      // [2F, ...] as [2, F, ...]: a rank's gate and up chunks are one box.
      if (global[0] % 2)
        return decl.emitOpError() << "SwiGLU's fc1 has " << global[0]
                                  << " rows, expected an even number (gate and up halves)";
      global[0] /= 2;
      global.insert(global.begin(), 2);
      dim = 1;
    }
    if (global[size_t(dim)] % tp)
      return decl.emitOpError() << "parameter '" << name << "': dim " << l.dim << " of extent "
                                << global[size_t(dim)]
                                << " is not divisible by the tensor-parallel size " << tp;
    decl.setTypeAttr(TypeAttr::get(localType(t, {l.dim, 1}, tp)));
    decl.setGlobalShapeAttr(b.getDenseI64ArrayAttr(global));
    decl.setSplitDimAttr(b.getI64IntegerAttr(dim));
    decl.setSplitAxisAttr(b.getI64IntegerAttr(kTpAxis));
  }
  return success();
}

LogicalResult Sharder::run() {
  if (failed(shardDeclarations()))
    return failure();
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    if (!fn.isDeclaration() && failed(shardFunction(fn)))
      return failure();
  return success();
}

LogicalResult Sharder::shardFunction(func::FuncOp fn) {
  SmallVector<Type> argTypes;
  for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
    BlockArgument a = fn.getArgument(i);
    std::string name = paramName(fn, i);
    Layout l = name.empty() ? Layout() : parameterLayout(name, swigluFc1);
    // Sequence parallelism: a layer function's hidden-state argument is a sequence shard.
    if (sp && i == 0 && fn->hasAttr("model.layer")) {
      auto t = cast<RankedTensorType>(a.getType());
      if (t.getRank() != 3 || t.getShape()[kSeqDim] % tp)
        return fn.emitOpError() << "sequence parallelism: the layer's hidden state " << t
                                << " is not a [b, s, h] tensor with s divisible by the "
                                   "tensor-parallel size "
                                << tp;
      setSplit(a, kSeqShard);
    } else if (l.split()) {
      auto t = cast<RankedTensorType>(a.getType());
      if (t.getShape()[size_t(l.dim)] % tp)
        return fn.emitOpError() << "parameter '" << name << "': dim " << l.dim << " of extent "
                                << t.getShape()[size_t(l.dim)]
                                << " is not divisible by the tensor-parallel size " << tp;
      setSplit(a, l);
    }
    argTypes.push_back(a.getType());
  }
  fn.setType(b.getFunctionType(argTypes, fn.getResultTypes()));
  SmallVector<Operation *> ops;
  for (Operation &op : fn.getBody().front())
    ops.push_back(&op);
  for (Operation *op : ops)
    if (failed(shardOp(op)))
      return failure();
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  SmallVector<Layout> results;
  for (Value v : ret.getOperands())
    results.push_back(of(v));
  resultLayouts[fn] = results;
  fn.setType(b.getFunctionType(argTypes, ret.getOperandTypes()));
  return success();
}

bool Sharder::isParameter(Value v) const {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg)
    return false;
  auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  return fn && !paramName(fn, arg.getArgNumber()).empty();
}

Value Sharder::gatherSequence(Location loc, Value v) {
  Value &g = gathers[v];
  if (g)
    return g;
  OpBuilder::InsertionGuard guard(b);
  if (auto arg = dyn_cast<BlockArgument>(v))
    b.setInsertionPointToStart(arg.getOwner());
  else
    b.setInsertionPointAfter(v.getDefiningOp());
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(t.getShape());
  shape[kSeqDim] *= tp;
  g = b.create<mesh::AllGatherOp>(loc, RankedTensorType::get(shape, t.getElementType()),
                                  model::kMeshName, ArrayRef<mesh::MeshAxis>{kTpAxis}, v,
                                  APInt(64, kSeqDim));
  return g;
}

Value Sharder::sliceSequence(Location loc, Value v, int64_t dim) {
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(t.getShape());
  shape[size_t(dim)] /= tp;
  Value s = b.create<mesh::AllSliceOp>(loc, RankedTensorType::get(shape, t.getElementType()), v,
                                       model::kMeshName, ArrayRef<mesh::MeshAxis>{kTpAxis}, dim);
  layouts[s] = {dim, 1, true};
  return s;
}

Value Sharder::parameterOnShard(Value param) {
  Value &c = paramCopies[param];
  if (c)
    return c;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(cast<BlockArgument>(param).getOwner());
  c = b.create<model::CopyToRegionOp>(param.getLoc(), param.getType(), param,
                                      FlatSymbolRefAttr::get(b.getContext(), model::kMeshName),
                                      b.getDenseI16ArrayAttr({kTpAxis}));
  return c;
}

LogicalResult Sharder::shardCall(func::CallOp call) {
  // A call's parameters have the callee's layouts by construction (the same Megatron names);
  // its hidden state is a sequence shard under sequence parallelism, as the callee's argument.
  auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
  for (auto [i, v] : llvm::enumerate(call.getOperands())) {
    Layout l = of(v);
    if (l.split() && !l.seq && !isa<BlockArgument>(v))
      return call.emitOpError() << "operand " << i
                                << " is split over the tensor-parallel axis; trainc-shard keeps "
                                   "values crossing a call replicated (or sequence shards)";
    if (callee && v.getType() != callee.getArgumentTypes()[i])
      return call.emitOpError() << "operand " << i << " has type " << v.getType()
                                << ", but the sharded callee @" << callee.getSymName()
                                << " takes " << callee.getArgumentTypes()[i];
  }
  if (!callee)
    return success();
  auto it = resultLayouts.find(callee);
  for (auto [r, res] : llvm::enumerate(call.getResults())) {
    res.setType(callee.getResultTypes()[r]);
    if (it != resultLayouts.end())
      layouts[res] = it->second[r];
  }
  return success();
}

LogicalResult Sharder::shardOp(Operation *op) {
  if (auto call = dyn_cast<func::CallOp>(op))
    return shardCall(call);
  // Pipeline stages (trainc-pipeline-split ran first): a send passes its value's layout on; a
  // recv of a layer's hidden state is a sequence shard under SP (its fill template too).
  if (auto send = dyn_cast<mesh::SendOp>(op)) {
    send.getResult().setType(cast<RankedTensorType>(send.getInput().getType()));
    layouts[send.getResult()] = of(send.getInput());
    return success();
  }
  if (auto recv = dyn_cast<mesh::RecvOp>(op)) {
    bool hidden = llvm::any_of(recv->getUses(), [&](OpOperand &u) {
      auto call = dyn_cast<func::CallOp>(u.getOwner());
      auto callee = call ? module.lookupSymbol<func::FuncOp>(call.getCallee()) : func::FuncOp();
      return callee && callee->hasAttr("model.layer") && u.getOperandNumber() == 0;
    });
    if (!sp || !hidden)
      return shardByRule(op);
    if (failed(scatterable(op, recv.getResult().getType())))
      return failure();
    if (Operation *tmpl = recv.getInput().getDefiningOp(); tmpl && isa<model::FillOp>(tmpl))
      setSplit(recv.getInput(), kSeqShard);
    setSplit(recv.getResult(), kSeqShard);
    return success();
  }
  if (isa<func::ReturnOp>(op)) {
    // Results are replicated, or sequence shards (a layer's hidden state under SP).
    for (Value v : op->getOperands())
      if (of(v).split() && !of(v).seq && !isa<BlockArgument>(v))
        return op->emitOpError() << "operand is split over the tensor-parallel axis; trainc-shard "
                                    "keeps values crossing a call or return replicated";
    return success();
  }
  if (auto lin = dyn_cast<model::LinearOp>(op))
    return shardLinear(lin);
  if (auto emb = dyn_cast<model::EmbeddingOp>(op))
    return shardEmbedding(emb);
  if (auto ce = dyn_cast<model::CrossEntropyOp>(op))
    return shardCrossEntropy(ce);
  if (auto r = dyn_cast<model::ReshapeOp>(op))
    return shardReshape(r);
  return shardByRule(op);
}

LogicalResult Sharder::shardLinear(model::LinearOp op) {
  Layout w = of(op.getWeight()), x = of(op.getInput());
  if (!w.split()) {
    if (x.split())
      return op.emitOpError() << "input is split over the tensor-parallel axis but the weight is "
                                 "replicated";
    return success();
  }
  if (w.dim == 0) {
    // Column-parallel: replicated input through Megatron's f (a sequence shard through the
    // all-gather along the sequence), output split by columns.
    if (x.seq) {
      op.getInputMutable().assign(gatherSequence(op.getLoc(), op.getInput()));
      int64_t last = cast<RankedTensorType>(op.getType()).getRank() - 1;
      setSplit(op.getResult(), {last, w.halves});
      return success();
    }
    if (x.split())
      return op.emitOpError() << "column-parallel linear (weight split by rows) needs a replicated "
                                 "input";
    Value &copy = copies[op.getInput()];
    if (!copy) {
      OpBuilder::InsertionGuard g(b);
      if (auto arg = dyn_cast<BlockArgument>(op.getInput()))
        b.setInsertionPointToStart(arg.getOwner());
      else
        b.setInsertionPointAfter(op.getInput().getDefiningOp());
      copy = b.create<model::CopyToRegionOp>(op.getLoc(), op.getInput().getType(), op.getInput(),
                                             FlatSymbolRefAttr::get(b.getContext(), model::kMeshName),
                                             b.getDenseI16ArrayAttr({kTpAxis}));
    }
    op.getInputMutable().assign(copy);
    int64_t last = cast<RankedTensorType>(op.getType()).getRank() - 1;
    setSplit(op.getResult(), {last, w.halves});
    return success();
  }
  // Row-parallel: input split by columns, partial products summed, bias after the sum.
  int64_t last = cast<RankedTensorType>(op.getInput().getType()).getRank() - 1;
  if (x != Layout{last, 1})
    return op.emitOpError() << "row-parallel linear (weight split by columns) needs an input "
                               "split along its last dim";
  b.setInsertionPoint(op);
  Value bias = op.getBias();
  // Mixed precision: the partial product keeps the GEMM's fp32 accumulator, the reduction runs
  // in fp32 and the sum is rounded to bf16/fp16 once, as on a single rank (--tp-reduce-in-bf16:
  // Megatron's bf16 partial sums and reduction).
  auto outType = cast<RankedTensorType>(op.getType());
  Type acc = model::statsElementType(outType.getElementType());
  bool widen = acc != outType.getElementType() && !bf16Reduce;
  auto partial = b.create<model::LinearOp>(
      op.getLoc(), widen ? RankedTensorType::get(outType.getShape(), acc) : outType,
      op.getInput(), op.getWeight(), Value());
  Value y;
  if (sp) {
    // The partial sums reduce-scattered along the sequence; the bias added on the shard.
    if (failed(scatterable(op, partial.getType())))
      return failure();
    y = reduceScatter(op.getLoc(), partial);
    if (bias)
      bias = parameterOnShard(bias);
  } else {
    y = allReduce(op.getLoc(), partial, mesh::ReductionKind::Sum);
  }
  if (widen) {
    auto t = cast<RankedTensorType>(y.getType());
    y = b.create<model::CastOp>(
        op.getLoc(), RankedTensorType::get(t.getShape(), outType.getElementType()), y);
    if (sp)
      layouts[y] = kSeqShard;
  }
  if (bias) {
    y = b.create<model::BiasAddOp>(op.getLoc(), y.getType(), y, bias);
    if (sp)
      layouts[y] = kSeqShard;
  }
  op.getResult().replaceAllUsesWith(y);
  op.erase();
  return success();
}

LogicalResult Sharder::shardEmbedding(model::EmbeddingOp op) {
  Layout t = of(op.getTable());
  if (!t.split())
    return success();
  if (t.dim != 0)
    return op.emitOpError() << "embedding table split along dim " << t.dim
                            << "; vocab-parallel splits the rows";
  setVocabOffsets(op, cast<RankedTensorType>(op.getTable().getType()).getShape()[0]);
  b.setInsertionPointAfter(op);
  Value sum;
  if (sp) {
    // Sequence parallelism: reduce-scattered along the sequence (Megatron's
    // reduce_scatter_embeddings).
    if (failed(scatterable(op, op.getType())))
      return failure();
    sum = reduceScatter(op.getLoc(), op.getResult());
  } else {
    sum = b.create<mesh::AllReduceOp>(op.getLoc(), op.getResult(), model::kMeshName,
                                      ArrayRef<mesh::MeshAxis>{kTpAxis},
                                      mesh::ReductionKind::Sum);
  }
  op.getResult().replaceAllUsesExcept(sum, sum.getDefiningOp());
  return success();
}

LogicalResult Sharder::shardCrossEntropy(model::CrossEntropyOp op) {
  Layout l = of(op.getLogits());
  if (!l.split())
    return success();
  if (l != Layout{1, 1})
    return op.emitOpError() << "logits split along dim " << l.dim
                            << "; vocab-parallel cross entropy splits the vocabulary (dim 1)";
  auto logits = cast<RankedTensorType>(op.getLogits().getType());
  int64_t localV = logits.getShape()[1];
  Location loc = op.getLoc();
  b.setInsertionPoint(op);
  auto rows = op.getLse().getType();
  auto start = op.getVocabStartAttr(), valid = op.getValidVocabAttr();
  auto localMax =
      b.create<model::CeLocalMaxOp>(loc, rows, op.getLogits(), start, valid);
  setVocabOffsets(localMax, localV);
  Value max = allReduce(loc, localMax, mesh::ReductionKind::Max);
  auto sumexp =
      b.create<model::CeLocalSumExpOp>(loc, rows, op.getLogits(), max, start, valid);
  setVocabOffsets(sumexp, localV);
  auto target =
      b.create<model::CeTargetLogitOp>(loc, rows, op.getLogits(), op.getLabels(), start, valid);
  setVocabOffsets(target, localV);
  Value s = allReduce(loc, sumexp, mesh::ReductionKind::Sum);
  Value t = allReduce(loc, target, mesh::ReductionKind::Sum);
  auto combine = b.create<model::CeCombineOp>(loc, op->getResultTypes(), op.getLogits(),
                                              op.getLabels(), op.getLossMask(), max, s, t, start,
                                              valid);
  setVocabOffsets(combine, localV);
  op->replaceAllUsesWith(combine->getResults());
  op.erase();
  return success();
}

LogicalResult Sharder::shardReshape(model::ReshapeOp op) {
  Layout in = of(op.getInput());
  if (!in.split())
    return success();
  // The split dim of the input must start a dim of the result with the same inner extent.
  ArrayRef<int64_t> src = cast<RankedTensorType>(op.getInput().getType()).getShape();
  ArrayRef<int64_t> dst = cast<RankedTensorType>(op.getType()).getShape();
  int64_t outer = 1, inner = 1; // local shapes: elements before / inside-and-after the split dim
  for (int64_t d = 0; d < in.dim; ++d)
    outer *= src[size_t(d)];
  for (size_t d = size_t(in.dim); d < src.size(); ++d)
    inner *= src[d];
  int64_t prefix = 1;
  for (int64_t j = 0; j < int64_t(dst.size()); ++j) {
    int64_t rest = 1;
    for (size_t d = size_t(j); d < dst.size(); ++d)
      rest *= dst[d];
    // Local result dims: dst with dim j divided by tp.
    if (prefix == outer && dst[size_t(j)] % tp == 0 && rest / tp == inner &&
        (in.halves == 1 || (j == int64_t(dst.size()) - 1 && src.back() * tp == dst.back()))) {
      setSplit(op.getResult(), {j, in.halves});
      return success();
    }
    prefix *= dst[size_t(j)];
  }
  return op.emitOpError() << "reshape does not keep the tensor-parallel split of input dim "
                          << in.dim << " on one result dim";
}

LogicalResult Sharder::shardByRule(Operation *op) {
  bool anySplit = llvm::any_of(op->getOperands(), [&](Value v) { return of(v).split(); });
  if (!anySplit)
    return success();
  auto ruled = dyn_cast<model::ShardingRuleOpInterface>(op);
  if (!ruled)
    return op->emitOpError() << "has an operand split over the tensor-parallel axis but no "
                                "sharding rule";
  if (auto attn = dyn_cast<model::AttentionOp>(op)) {
    // The dropout mask is keyed by the global head: this shard's first head and the head count.
    // (The query operand already has its local type.)
    int64_t local = cast<RankedTensorType>(attn.getQuery().getType()).getShape()[2];
    op->setAttr("model.global_heads", b.getI64IntegerAttr(local * tp));
    op->setAttr(model::kRankOffsetsAttr,
                b.getDictionaryAttr(b.getNamedAttr(
                    "head_start", b.getDenseI64ArrayAttr({kTpAxis, local}))));
  }
  const bool onSeq = llvm::any_of(op->getOperands(), [&](Value v) { return of(v).seq; });
  if (isa<model::DropoutOp>(op)) {
    if (!onSeq || of(op->getOperand(0)) != kSeqShard)
      return op->emitOpError() << "dropout on a tensor-parallel shard other than a sequence "
                                  "shard is not supported yet (its mask is keyed by the global "
                                  "element index of [b, s, ...])";
    // The mask is keyed by the global position: this shard's first position and the length.
    int64_t local = cast<RankedTensorType>(op->getOperand(0).getType()).getShape()[kSeqDim];
    op->setAttr(model::kGlobalSeqAttr, b.getI64IntegerAttr(local * tp));
    op->setAttr(model::kRankOffsetsAttr,
                b.getDictionaryAttr(
                    b.getNamedAttr("seq_start", b.getDenseI64ArrayAttr({kTpAxis, local}))));
  }
  model::ShardingRule rule = ruled.getShardingRule();
  // The loop every split operand is split by.
  int64_t loop = -1, halves = 1;
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    Layout l = of(v);
    if (!l.split())
      continue;
    AffineExpr e = rule.operands[i].getResult(unsigned(l.dim));
    int64_t here = -1;
    if (auto d = dyn_cast<AffineDimExpr>(e))
      here = d.getPosition();
    else if (auto bin = dyn_cast<AffineBinaryOpExpr>(e))
      // attention's kv groups (heads floordiv c) and SwiGLU's halves (half * F + f)
      for (AffineExpr side : {bin.getLHS(), bin.getRHS()})
        if (auto d = dyn_cast<AffineDimExpr>(side);
            d && rule.loops[d.getPosition()].split != model::LoopSplit::Whole)
          here = d.getPosition();
    if (here < 0 || (loop >= 0 && here != loop))
      return op->emitOpError() << "operand " << i << " is split along dim " << l.dim
                               << ", which its sharding rule does not map to one loop shared with "
                                  "the other split operands";
    loop = here;
    if (l.halves != 1) {
      if (!isa<model::SwigluOp>(op) && !op->hasTrait<OpTrait::Elementwise>() &&
          !isa<model::GeluOp, model::AddOp>(op))
        return op->emitOpError() << "operand " << i << " holds gate/up halves per rank";
      halves = isa<model::SwigluOp>(op) ? 1 : l.halves;
    }
  }
  const model::ShardingRule::Loop &L = rule.loops[size_t(loop)];
  if (L.split == model::LoopSplit::Whole)
    return op->emitOpError() << "loop '" << L.name << "' may not be split (sharding rule)";
  auto indexes = [&](AffineMap m) -> int64_t {
    for (unsigned r = 0; r < m.getNumResults(); ++r)
      if (m.getResult(r).isFunctionOfDim(unsigned(loop)))
        return r;
    return -1;
  };
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    if (of(v).split() || !isa<FloatType>(cast<ShapedType>(v.getType()).getElementType()))
      continue;
    int64_t dim = indexes(rule.operands[i]);
    if (onSeq && dim < 0 && isParameter(v)) {
      // A replicated parameter used on a sequence shard (a norm's weight and bias): its
      // gradient here is partial, summed over tp by the VJP of Megatron's f.
      op->setOperand(unsigned(i), parameterOnShard(v));
      continue;
    }
    if (onSeq && dim >= 0 && !isParameter(v)) {
      // A replicated activation meeting a sequence shard (GPT's position embeddings added to
      // the reduce-scattered word embeddings): this rank's chunk of it.
      b.setInsertionPoint(op);
      op->setOperand(unsigned(i), sliceSequence(op->getLoc(), v, dim));
      continue;
    }
    if (dim >= 0)
      return op->emitOpError() << "operand " << i << " is replicated but loop '" << L.name
                               << "' of the split indexes it";
  }
  for (auto [r, res] : llvm::enumerate(op->getResults())) {
    int64_t dim = indexes(rule.results[r]);
    if (dim < 0)
      return op->emitOpError() << "result " << r << " would be a partial sum over loop '"
                               << L.name << "'; trainc-shard inserts no reduction here";
    setSplit(res, {dim, halves, onSeq});
  }
  return success();
}

struct ShardTensorParallelPass
    : mlir::trainc::impl::ShardTensorParallelPassBase<ShardTensorParallelPass> {
  using ShardTensorParallelPassBase::ShardTensorParallelPassBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t size = 1;
    if (failed(resolvePlanOption(module, tp, "tp", size)))
      return signalPassFailure();
    if (size < 1) {
      module.emitError() << "tensor-parallel size " << size << ", expected >= 1";
      return signalPassFailure();
    }
    if (size == 1)
      return;
    auto mesh = module.lookupSymbol<mesh::MeshOp>(model::kMeshName);
    if (!mesh || mesh.getRank() < 1 || mesh.getShape()[0] != size) {
      module.emitError() << "trainc-shard: tp = " << size
                         << " needs a mesh.mesh @mesh whose axis 0 (tp) has size " << size;
      return signalPassFailure();
    }
    bool seqParallel = sequenceParallel.hasValue()
                           ? bool(sequenceParallel)
                           : module->hasAttr(model::kSequenceParallelAttr);
    if (failed(Sharder(module, size, seqParallel).run()))
      signalPassFailure();
  }
};

} // namespace
