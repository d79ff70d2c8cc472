//===- LowerToRt.cpp - Stage and iteration functions to rt ----------------===//

// Parameters, stage and callee bodies, and the pass; the iteration, the collectives and the
// optimizer are lowered in LowerIteration.cpp, LowerCollectives.cpp and LowerOptimizer.cpp
// (the class is in Lowering.h).

#include "passes/Export/Lowering.h"

#define DEBUG_TYPE "trainc-lower-to-rt"

namespace mlir::trainc {
#define GEN_PASS_DEF_LOWERTORTPASS
#include "passes/Export/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace mlir::trainc::lower_to_rt {

LogicalResult Lowering::collectParams() {
  auto layouts = llvm::to_vector(module.getOps<sched::GradBufferOp>());
  if (layouts.size() > 1)
    return layouts[1].emitOpError() << "is the second sched.grad_buffer; one is supported";
  if (!layouts.empty()) {
    DpLayout &l = layout;
    l.op = layouts.front();
    l.geo.dp = l.op.getDp();
    l.geo.distributed = l.op.getDistributedOptimizer();
    l.geo.offsets.assign(l.op.getOffsets().begin(), l.op.getOffsets().end());
    l.geo.sizes.assign(l.op.getSizes().begin(), l.op.getSizes().end());
    l.geo.bounds.assign(l.op.getBucketBounds().begin(), l.op.getBucketBounds().end());
    for (auto [i, n] : llvm::enumerate(l.op.getParams()))
      layoutIndex[cast<FlatSymbolRefAttr>(n).getValue()] = i;
  }
  for (func::FuncOp fn : module.getOps<func::FuncOp>()) {
    if (!fn->hasAttr("sched.stage"))
      continue;
    if (fn.isDeclaration())
      return fn.emitOpError() << "@" << fn.getSymName() << " is a stage function without a body";
    stages[fn.getSymName()] = fn;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      Type t = fn.getArgument(i).getType();
      if (FlatSymbolRefAttr ref = model::paramOf(fn, i)) {
        StringAttr name = ref.getAttr();
        if (!statsType)
          statsType = model::statsElementType(cast<ShapedType>(t).getElementType());
        if (paramIndex.count(name.getValue()))
          continue;
        ParamInfo p;
        p.name = name.str();
        p.type = memrefOf(t);
        p.gradType = MemRefType::get(cast<ShapedType>(t).getShape(),
                                     model::statsElementType(cast<ShapedType>(t).getElementType()));
        SmallVector<NamedAttribute> info{b.getNamedAttr("name", name)};
        if (DictionaryAttr declared = model::parameterAttrs(symbols, module, fn, i)) {
          info.append(declared.begin(), declared.end());
          p.tpSplit = bool(declared.get("split_dim"));
        }
        auto it = layoutIndex.find(p.name);
        if (layout.op && it == layoutIndex.end())
          return fn.emitOpError() << "parameter '" << p.name
                                  << "' is not in the sched.grad_buffer layout";
        if (layout.distributed()) {
          // A range of the contiguous parameter buffer (same layout as the grads).
          if (!layout.params)
            layout.params = addBuffer("params", MemRefType::get({int64_t(layout.op.getNumel())},
                                                                p.type.getElementType()),
                                      "parameter");
          else if (layout.params.getType().getElementType() != p.type.getElementType())
            return fn.emitOpError() << "parameters of several dtypes are not supported with the "
                                       "distributed optimizer yet";
          p.value = layout.params;
          p.valueOffset = layout.op.getOffsets()[it->second];
          info.push_back(b.getNamedAttr("offset", b.getI64IntegerAttr(p.valueOffset)));
          info.push_back(b.getNamedAttr("shape", b.getDenseI64ArrayAttr(p.type.getShape())));
          paramInfos.push_back(b.getDictionaryAttr(info));
        } else {
          p.value = addBuffer(p.name, p.type, "parameter");
          for (NamedAttribute a : info)
            p.value->setAttr(a.getName() == "name" ? b.getStringAttr("param_name") : a.getName(),
                             a.getValue());
        }
        if (layout.op) {
          if (!layout.mainGrad)
            layout.mainGrad = addBuffer("main_grad", MemRefType::get({int64_t(layout.op.getNumel())},
                                                                     p.gradType.getElementType()),
                                        "main_grad");
          p.grad = layout.mainGrad;
          p.gradOffset = layout.op.getOffsets()[it->second];
          gradInfos.push_back(b.getDictionaryAttr(
              {b.getNamedAttr("name", name),
               b.getNamedAttr("offset", b.getI64IntegerAttr(p.gradOffset))}));
        } else {
          p.grad = addBuffer(p.name + ".main_grad", p.gradType, "main_grad");
          p.grad->setAttr("grad_of", name);
        }
        if (!layout.distributed()) {
          p.expAvg = addBuffer(p.name + ".exp_avg", p.gradType, "optimizer_state");
          p.expAvgSq = addBuffer(p.name + ".exp_avg_sq", p.gradType, "optimizer_state");
          if (p.type.getElementType() != p.gradType.getElementType())
            p.master = addBuffer(p.name + ".master", p.gradType, "master_param");
        }
        paramIndex[p.name] = params.size();
        params.push_back(p);
      } else if (fn.getArgAttrOfType<StringAttr>(i, "model.input")) {
        stageInputs[fn.getSymName()].push_back(i);
      } else if (fn.getArgAttrOfType<IntegerAttr>(i, "sched.stash")) {
        stageStash[fn.getSymName()].push_back(i);
      } else if (isa<sched::TokenType>(t)) {
        continue; // a token the stage waits on: no buffer
      } else {
        return fn.emitOpError() << "argument " << i
                                << " is neither a model.param, a model.input nor a sched.stash";
      }
    }
  }
  if (stages.empty())
    return module.emitError() << "trainc-lower-to-rt: no stage function (sched.stage)";
  if (layout.params)
    layout.params->setAttr("param_info", b.getArrayAttr(paramInfos));
  if (layout.mainGrad)
    layout.mainGrad->setAttr("grad_info", b.getArrayAttr(gradInfos));
  if (layout.distributed()) {
    auto t = MemRefType::get({int64_t(layout.op.getNumel()) / layout.dp()},
                             layout.mainGrad.getType().getElementType());
    layout.expAvg = addBuffer("exp_avg", t, "optimizer_state");
    layout.expAvgSq = addBuffer("exp_avg_sq", t, "optimizer_state");
    if (layout.params.getType().getElementType() != t.getElementType())
      layout.master = addBuffer("master_params", t, "master_param");
  }
  if (!statsType)
    statsType = Float32Type::get(module.getContext());
  return success();
}

/// The lowering of one function body: the value map, where returned values go (a forward unit's
/// stash slot views, a callee's result arguments), the instruction counter and the FLOPs.
struct BodyState {
  BodyState(func::FuncOp fn, OpBuilder &ob) : fn(fn), ob(ob) {}
  func::FuncOp fn;
  OpBuilder &ob;
  IRMapping map;
  /// Returned value -> its (first) result index; the buffer that result is written to.
  llvm::DenseMap<Value, size_t> outIndex;
  std::function<Value(size_t)> outTarget;
  SmallVector<Value> outView;
  int counter = 0;
  double flops = 0, bytes = 0;
  /// sched.accumulate_grads whose gradient a weight-gradient GEMM already added into main_grad
  /// (Lowering::fuseGradAccumulation); they lower to nothing.
  llvm::DenseSet<Operation *> fusedAccumulates;
  /// model.adds of a tied embedding's two gradients, both accumulated into main_grad by their
  /// producers (Lowering::fuseGradAccumulation); they lower to nothing.
  llvm::DenseSet<Operation *> fusedAdds;

  /// Indexes the operands of `fn`'s return.
  void indexResults() {
    outView.assign(numBufferResults(), Value());
    if (outView.empty())
      return;
    auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
    for (auto [k, v] : llvm::enumerate(ret.getOperands().take_front(outView.size())))
      outIndex.try_emplace(v, k);
  }
  /// The results held in buffers: all but the trailing tokens (sched.token) of a stage.
  size_t numBufferResults() {
    return size_t(llvm::count_if(fn.getResultTypes(),
                                 [](Type t) { return !isa<sched::TokenType>(t); }));
  }
  /// The buffer of result `r` of an op: the result buffer when `r` is returned, else null.
  Value outputFor(Value r) {
    auto it = outIndex.find(r);
    if (it == outIndex.end())
      return {};
    return outView[it->second] = outTarget(it->second);
  }
};

/// Lowers model ops through KernelOpInterface into rt ops of one function.
class Emitter : public model::KernelEmitter {
public:
  Emitter(OpBuilder &b, Operation *op, IRMapping &map,
          std::function<Value(unsigned)> allocResult)
      : b(b), op(op), map(map), allocResult(std::move(allocResult)) {}
  MLIRContext *getContext() override { return b.getContext(); }
  Value operand(unsigned i) override { return map.lookup(op->getOperand(i)); }
  Value result(unsigned i) override {
    Value r = op->getResult(i);
    if (Value v = map.lookupOrNull(r))
      return v;
    Value v = allocResult(i);
    map.map(r, v);
    return v;
  }
  Value reshape(Value buffer, ArrayRef<int64_t> shape) override {
    auto src = cast<MemRefType>(buffer.getType());
    if (src.getShape() == shape)
      return buffer;
    return b.create<rt::ViewOp>(op->getLoc(), MemRefType::get(shape, src.getElementType()),
                                buffer, b.getI64IntegerAttr(0));
  }
  Value view(Value buffer, int64_t offset, ArrayRef<int64_t> shape, StringRef axis,
             int64_t axisStride) override {
    auto src = cast<MemRefType>(buffer.getType());
    auto t = MemRefType::get(shape, src.getElementType());
    if (axis.empty())
      return b.create<rt::ViewOp>(op->getLoc(), t, buffer, b.getI64IntegerAttr(offset));
    return b.create<rt::ViewOp>(op->getLoc(), t, buffer, b.getI64IntegerAttr(offset),
                                b.getStringAttr(axis), b.getI64IntegerAttr(axisStride));
  }
  void aliasResult(unsigned i, Value buffer) override { map.map(op->getResult(i), buffer); }
  void kernel(StringRef name, ValueRange inputs, ValueRange outputs,
              ArrayRef<NamedAttribute> attrs, ArrayRef<int32_t> inPlace) override {
    auto k = b.create<rt::KernelOp>(op->getLoc(), name, inputs, outputs, b.getDictionaryAttr(attrs),
                           inPlace.empty() ? DenseI32ArrayAttr() : b.getDenseI32ArrayAttr(inPlace));
    // Rank-dependent attributes travel to the kernel; the export records them per rank.
    model::copyRankOffsets(op, k);
  }
  void collective(StringRef kind, StringRef axis, Value input, Value output, bool max) override {
    // Synchronous (the tensor value is complete when the op returns), or started async for a
    // collective marked sched.async: a fresh token each, waited by its sched.collective_wait.
    int64_t token = -1;
    if (op->hasAttr(sched::kAsyncAttrName) && newToken)
      asyncTokens[op].push_back(token = newToken());
    createCollective(b, op->getLoc(), kind, axis, input, output, token,
                     max ? rt::ReduceOp::max : rt::ReduceOp::sum);
  }
  /// Async collectives: a fresh runtime token, and the tokens each op started.
  std::function<int64_t()> newToken;
  llvm::DenseMap<Operation *, SmallVector<int64_t>> asyncTokens;
  void pointToPoint(bool send, StringRef axis, int64_t peer, Value buffer) override {
    if (send)
      b.create<rt::SendOp>(op->getLoc(), axis, peer, buffer);
    else
      b.create<rt::RecvOp>(op->getLoc(), axis, peer, buffer);
  }
  void fail(const Twine &message) override {
    if (error.empty())
      error = message.str();
  }
  /// The first message of fail(), or "".
  std::string error;

private:
  OpBuilder &b;
  Operation *op;
  IRMapping &map;
  std::function<Value(unsigned)> allocResult;
};

LogicalResult Lowering::lowerStage(func::FuncOp fn) {
  StringRef fname = fn.getSymName();
  // Arguments: the microbatch inputs, then the stash (read by a backward unit, written by a
  // forward unit's results).
  SmallVector<Type> argTypes;
  for (unsigned i : stageInputs[fname])
    argTypes.push_back(memrefOf(fn.getArgument(i).getType()));
  SmallVector<Type> stashTypes;
  SmallVector<bool> freed; // per stash tensor: in the part freed at B (ZB-H1)
  for (Type t : fn.getResultTypes())
    if (!isa<sched::TokenType>(t))
      stashTypes.push_back(t);
  for (unsigned i : stageStash[fname])
    stashTypes.push_back(fn.getArgument(i).getType());
  // ZB-H1's units share one slot layout (sched.stash_layout: the forward's stash, then what its
  // input-gradient unit returns for the weight-gradient unit): stash arguments first, then the
  // results. Without it a unit has results (forward) or stash arguments (backward), not both.
  size_t resultBase = 0, argBase = stashTypes.size() - stageStash[fname].size();
  if (auto zb = fn->getAttrOfType<ArrayAttr>("sched.stash_layout")) {
    SmallVector<Type> all;
    for (Attribute a : zb)
      all.push_back(cast<TypeAttr>(a).getValue());
    SmallVector<Type> used;
    for (unsigned i : stageStash[fname])
      used.push_back(fn.getArgument(i).getType());
    resultBase = used.size();
    argBase = 0;
    for (Type t : fn.getResultTypes())
      if (!isa<sched::TokenType>(t))
        used.push_back(t);
    if (used.size() > all.size() || !llvm::equal(used, ArrayRef<Type>(all).take_front(used.size())))
      return fn.emitOpError() << "@" << fname
                              << " has stash arguments and results that are not a prefix of its "
                                 "sched.stash_layout";
    stashTypes = all;
    // The tensors only B reads are a second part of the slot, freed at B; W does not take it.
    llvm::append_range(freed, freedAtB(zb));
  }
  freed.resize(stashTypes.size(), false);
  // Slot part 0 (held until the stash's last unit) and part 1 (ZB-H1: freed at B), each one
  // buffer per element type; tensor k is at (part, buffer, offset).
  SmallVector<Type> partTypes[2];
  SmallVector<std::pair<unsigned, unsigned>> partOf; // per tensor: (part, index in the part)
  for (auto [k, t] : llvm::enumerate(stashTypes)) {
    partOf.push_back({freed[k] ? 1u : 0u, unsigned(partTypes[freed[k] ? 1 : 0].size())});
    partTypes[freed[k] ? 1 : 0].push_back(t);
  }
  StashLayout parts[2] = {StashLayout::of(partTypes[0]), StashLayout::of(partTypes[1])};
  const bool isWeightUnit = fn->getAttrOfType<StringAttr>("sched.unit") &&
                            fn->getAttrOfType<StringAttr>("sched.unit").getValue() ==
                                "backward_weight";
  const unsigned firstStash = unsigned(argTypes.size());
  unsigned partBase[2] = {firstStash, firstStash + unsigned(parts[0].dtypes.size())};
  for (unsigned q = 0; q < (isWeightUnit ? 1u : 2u); ++q)
    for (unsigned d = 0; d < parts[q].dtypes.size(); ++d)
      argTypes.push_back(parts[q].bufferType(d));
  OpBuilder mb(module.getContext());
  mb.setInsertionPoint(fn);
  auto nf = mb.create<func::FuncOp>(fn.getLoc(), (fname + ".rt").str(),
                                    mb.getFunctionType(argTypes, {}));
  nf->setAttr("rt.stage", mb.getUnitAttr());
  Block *entry = nf.addEntryBlock();
  OpBuilder ob(module.getContext());
  ob.setInsertionPointToStart(entry);
  BodyState st(fn, ob);
  IRMapping &map = st.map;
  for (auto [k, i] : llvm::enumerate(stageInputs[fname])) {
    map.map(fn.getArgument(i), entry->getArgument(k));
    nf.setArgAttr(k, "rt.input", fn.getArgAttr(i, "model.input"));
  }
  for (unsigned a = firstStash; a < nf.getNumArguments(); ++a)
    nf.setArgAttr(a, "rt.stash", mb.getI64IntegerAttr(int64_t(a - firstStash)));
  // Stash tensor k as a view of its slot buffer.
  auto stashView = [&](size_t k) -> Value {
    auto [q, j] = partOf[k];
    auto [d, offset] = parts[q].place[j];
    return ob.create<rt::ViewOp>(fn.getLoc(), memrefOf(stashTypes[k]),
                                 entry->getArgument(partBase[q] + d),
                                 ob.getI64IntegerAttr(offset));
  };
  for (auto [k, i] : llvm::enumerate(stageStash[fname])) {
    if (isWeightUnit && partOf[argBase + k].first == 1) {
      if (!fn.getArgument(i).use_empty()) // freedAtB says no W of this layout reads it
        return fn.emitOpError() << "@" << fname << " reads stash tensor " << argBase + k
                                << ", which its slot layout frees at B";
      continue;
    }
    map.map(fn.getArgument(i), stashView(argBase + k));
  }
  // A forward unit's stash results are written straight into the caller's slot buffers.
  st.outTarget = [stashView, resultBase](size_t k) { return stashView(resultBase + k); };
  st.indexResults();
  for (unsigned i = 0; i < fn.getNumArguments(); ++i)
    if (FlatSymbolRefAttr name = model::paramOf(fn, i))
      map.map(fn.getArgument(i), valueRef(ob, fn.getLoc(), params[paramIndex[name.getValue()]]));

  const int &counter = st.counter;
  for (Operation &op : fn.getBody().front()) {
    Location loc = sourceLoc(op);
    ++st.counter;
    // Gradient-accumulation fusion (Megatron's gradient_accumulation_fusion, its default).
    if (isAccumulatingProducer(&op))
      if (sched::AccumulateGradOp acc = fuseGradAccumulation(&op, loc, st)) {
        st.fusedAccumulates.insert(acc);
        continue;
      }
    if (st.fusedAdds.contains(&op))
      continue; // both operands' producers already added into main_grad
    FailureOr<bool> common = lowerCommonOp(op, loc, st);
    if (failed(common))
      return failure();
    if (*common) {
      if (isa<model::FillOp>(op) && op.hasAttr("model.loss_seed"))
        scaleLossSeed(ob, loc, map.lookup(op.getResult(0)));
      continue;
    }
    if (auto acc = dyn_cast<sched::AccumulateGradOp>(&op)) {
      if (st.fusedAccumulates.contains(acc))
        continue; // its GEMM already added into main_grad
      auto it = paramIndex.find(acc.getParam());
      if (it == paramIndex.end())
        return acc.emitOpError() << "names unknown parameter '" << acc.getParam() << "'";
      Value mg = gradRef(ob, loc, params[it->second]);
      Value g = map.lookup(acc.getGrad());
      if (cast<MemRefType>(g.getType()).getElementType() !=
          cast<MemRefType>(mg.getType()).getElementType()) {
        Value tmp = ref(ob, loc, addBuffer((fname + ".grad_cast." + Twine(counter)).str(),
                                           cast<MemRefType>(mg.getType()), "activation"));
        kernel(ob, loc, "cast", {g}, {tmp});
        g = tmp;
      }
      kernel(ob, loc, "add", {mg, g}, {mg}, {}, {0});
      continue;
    }
    if (auto acc = dyn_cast<sched::AccumulateLossOp>(&op)) {
      Value ls = ref(ob, loc, scalar("loss_sum", "output"));
      Value nt = ref(ob, loc, scalar("num_tokens", "output"));
      Value l = map.lookup(acc.getLossSum()), n = map.lookup(acc.getNumTokens());
      // Both normalizations report Megatron's logged loss, Sigma loss / Sigma tokens over the
      // global batch (train_step sums loss_func's (loss, num_tokens) pairs in either mode); the
      // legacy mode's mean of per-microbatch means shapes only the gradient (sched.loss_seed).
      kernel(ob, loc, "add", {ls, l}, {ls}, {}, {0});
      kernel(ob, loc, "add", {nt, n}, {nt}, {}, {0});
      continue;
    }
    if (auto seed = dyn_cast<sched::LossSeedOp>(&op)) {
      Value inv = ref(ob, loc, scalar("mb_inv_num_tokens", "workspace"));
      kernel(ob, loc, "reciprocal", {map.lookup(seed.getNumTokens())}, {inv});
      Value out = ref(ob, loc, addBuffer((fname + ".loss_seed").str(),
                                         memrefOf(seed.getType()), "activation"));
      kernel(ob, loc, "scale", {inv}, {out},
             {f64("alpha", 1.0 / double(seed.getNumMicrobatches()))});
      scaleLossSeed(ob, loc, out);
      map.map(seed.getResult(), out);
      continue;
    }
    if (isa<func::ReturnOp>(op)) {
      lowerReturn(op, loc, st);
      continue;
    }
    if (isa<sched::GradSyncStartOp, sched::ParamGatherWaitOp>(op)) {
      if (failed(lowerDataParallelOp(ob, loc, op)))
        return failure();
      continue;
    }
    return op.emitOpError() << "cannot be lowered to rt (no KernelOpInterface)";
  }
  if (overlapUnits.contains(fname))
    hoistPointToPoint(nf);
  stageFlops[fname] = st.flops;
  stageBytes[fname] = st.bytes;
  return success();
}

const ParamInfo *Lowering::fusableMainGrad(Value g) {
  if (!g.hasOneUse())
    return nullptr;
  auto acc = dyn_cast<sched::AccumulateGradOp>(*g.getUsers().begin());
  if (!acc)
    return nullptr;
  auto it = paramIndex.find(acc.getParam());
  if (it == paramIndex.end())
    return nullptr; // the accumulate_grad's own lowering reports it
  const ParamInfo &p = params[it->second];
  auto t = cast<RankedTensorType>(g.getType());
  if (t.getElementType() != p.gradType.getElementType() || t.getShape() != p.gradType.getShape())
    return nullptr; // a bf16 gradient (cast by accumulate_grad) or a reshaped one
  return &p;
}

void Lowering::emitWgradAccumulate(model::LinearGradWeightOp gw, Value out, Location loc,
                                   BodyState &st) {
  if (auto cost = dyn_cast<model::CostOpInterface>(gw.getOperation())) {
    st.flops += cost.getFlops();
    st.bytes += cost.getBytesMoved();
  }
  // The GEMM of LinearGradWeightOp::emitKernels, c = dy^T @ x over the rows, with beta = 1.
  auto dy = cast<RankedTensorType>(gw.getGrad().getType());
  auto x = cast<RankedTensorType>(gw.getInput().getType());
  const int64_t n = dy.getShape().back(), k = x.getShape().back();
  const int64_t rows = dy.getNumElements() / n;
  auto flat = [&](Value buffer, int64_t cols) -> Value {
    auto src = cast<MemRefType>(buffer.getType());
    if (src.getShape() == ArrayRef<int64_t>{rows, cols})
      return buffer;
    return st.ob.create<rt::ViewOp>(loc, MemRefType::get({rows, cols}, src.getElementType()),
                                    buffer, st.ob.getI64IntegerAttr(0));
  };
  kernel(st.ob, loc, "matmul",
         {flat(st.map.lookup(gw.getGrad()), n), flat(st.map.lookup(gw.getInput()), k)}, {out},
         {i64("trans_a", 1), f64("beta", 1.0)});
  st.map.map(gw.getResult(), out);
}

bool Lowering::isAccumulatingProducer(Operation *op) {
  return isa<model::LinearGradWeightOp, model::EmbeddingGradOp>(op) && op->getNumResults() == 1;
}

model::AddOp Lowering::tiedGradAdd(Value g) {
  if (!g.hasOneUse())
    return {};
  auto add = dyn_cast<model::AddOp>(*g.getUsers().begin());
  if (!add || add.getLhs() == add.getRhs() || !fusableMainGrad(add.getResult()))
    return {};
  for (Value v : {add.getLhs(), add.getRhs()}) {
    Operation *def = v.getDefiningOp();
    if (!def || !isAccumulatingProducer(def) || !v.hasOneUse() ||
        def->getBlock() != add->getBlock())
      return {};
  }
  return add;
}

void Lowering::emitEmbeddingGradAccumulate(model::EmbeddingGradOp eg, Value out, Location loc,
                                           BodyState &st) {
  if (auto cost = dyn_cast<model::CostOpInterface>(eg.getOperation())) {
    st.flops += cost.getFlops();
    st.bytes += cost.getBytesMoved();
  }
  // EmbeddingGradOp::emitKernels with beta = 1: only the tokens' rows of main_grad change.
  // A vocab-parallel shard's vocab_start is a rank offset (model.rank_offsets, from
  // trainc-shard): it travels to the kernel as in Emitter::kernel.
  rt::KernelOp k = kernel(st.ob, loc, "embedding_backward",
                          {st.map.lookup(eg.getIds()), st.map.lookup(eg.getGrad())}, {out},
                          {i64("vocab_start", int64_t(eg.getVocabStart())), f64("beta", 1.0)});
  model::copyRankOffsets(eg, k);
  st.map.map(eg.getResult(), out);
}

sched::AccumulateGradOp Lowering::fuseGradAccumulation(Operation *producer, Location loc,
                                                       BodyState &st) {
  Value r = producer->getResult(0);
  sched::AccumulateGradOp acc;
  const ParamInfo *p = fusableMainGrad(r);
  if (p) {
    acc = cast<sched::AccumulateGradOp>(*r.getUsers().begin());
  } else if (model::AddOp add = tiedGradAdd(r)) {
    p = fusableMainGrad(add.getResult());
    acc = cast<sched::AccumulateGradOp>(*add.getResult().getUsers().begin());
    st.fusedAdds.insert(add);
  } else {
    return {};
  }
  Value out = gradRef(st.ob, loc, *p);
  if (auto gw = dyn_cast<model::LinearGradWeightOp>(producer))
    emitWgradAccumulate(gw, out, loc, st);
  else
    emitEmbeddingGradAccumulate(cast<model::EmbeddingGradOp>(producer), out, loc, st);
  return acc;
}

ArrayRef<bool> Lowering::accumulatingResults(func::FuncOp fn) {
  auto [it, inserted] = calleeAccumulates.try_emplace(fn.getSymName());
  if (!inserted)
    return it->second;
  SmallVector<bool> acc(fn.getNumResults(), false);
  // In the callee: result k is a weight-gradient GEMM used only by the return, once.
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  for (auto [k, v] : llvm::enumerate(ret.getOperands()))
    acc[k] = v.getDefiningOp<model::LinearGradWeightOp>() && v.hasOneUse() &&
             llvm::count(ret.getOperands(), v) == 1;
  // At every call site: result k is accumulated into a main_grad of its type.
  module.walk([&](func::CallOp call) {
    if (call.getCallee() != fn.getSymName())
      return;
    for (unsigned k = 0; k < acc.size(); ++k)
      acc[k] = acc[k] && fusableMainGrad(call.getResult(k));
  });
  it->second.assign(acc.begin(), acc.end());
  return it->second;
}

FailureOr<bool> Lowering::lowerCommonOp(Operation &op, Location loc, BodyState &st) {
  OpBuilder &ob = st.ob;
  StringRef fname = st.fn.getSymName();
  if (auto cost = dyn_cast<model::CostOpInterface>(&op)) {
    st.flops += cost.getFlops();
    st.bytes += cost.getBytesMoved();
  }
  auto newBuffer = [&](Value r, const std::string &name) -> Value {
    if (Value out = st.outputFor(r))
      return out;
    return ref(ob, loc, addBuffer(name, memrefOf(r.getType()), "activation"));
  };
  if (auto w = dyn_cast<sched::CollectiveWaitOp>(&op)) {
    // The collective's result buffer is complete after its tokens' waits.
    auto it = asyncTokens.find(w.getInput().getDefiningOp());
    if (it == asyncTokens.end())
      return w.emitOpError() << "waits for a collective that started no async collective";
    for (int64_t t : it->second)
      ob.create<rt::WaitOp>(loc, ob.getI64IntegerAttr(t));
    st.map.map(w.getResult(), st.map.lookup(w.getInput()));
    return true;
  }
  if (auto k = dyn_cast<model::KernelOpInterface>(&op)) {
    std::string base =
        (fname + "." + op.getName().stripDialect() + "." + Twine(st.counter)).str();
    Emitter e(ob, &op, st.map, [&](unsigned i) -> Value {
      return newBuffer(op.getResult(i),
                       op.getNumResults() == 1 ? base : base + "." + std::to_string(i));
    });
    // Tensor collectives' tokens follow the DP buckets' (k and numBuckets + k).
    e.newToken = [&] {
      return std::max<int64_t>(0, 2 * layout.numBuckets()) + nextAsyncToken++;
    };
    OpBuilder::InsertionGuard g(ob);
    Location saved = op.getLoc();
    op.setLoc(loc);
    k.emitKernels(e);
    op.setLoc(saved);
    for (auto &[o, tokens] : e.asyncTokens)
      asyncTokens[o] = tokens;
    if (!e.error.empty())
      return op.emitOpError() << "cannot be lowered to rt: " << e.error;
    return true;
  }
  if (auto call = dyn_cast<func::CallOp>(&op)) {
    FailureOr<func::FuncOp> callee = lowerCallee(call);
    if (failed(callee))
      return failure();
    // Destination passing: the caller owns the result buffers.
    SmallVector<Value> args;
    for (Value v : call.getOperands())
      args.push_back(st.map.lookup(v));
    std::string base = (fname + ".call." + Twine(st.counter)).str();
    // The cache first: a symbol lookup per layer call scans the module (quadratic in layers).
    auto cached = calleeAccumulates.find(call.getCallee());
    ArrayRef<bool> accumulates =
        cached != calleeAccumulates.end()
            ? ArrayRef<bool>(cached->second)
            : accumulatingResults(module.lookupSymbol<func::FuncOp>(call.getCallee()));
    for (Value r : call.getResults()) {
      if (accumulates[cast<OpResult>(r).getResultNumber()]) {
        // Gradient-accumulation fusion: the callee's GEMM adds into main_grad.
        Value out = gradRef(ob, loc, *fusableMainGrad(r));
        st.fusedAccumulates.insert(*r.getUsers().begin());
        st.map.map(r, out);
        args.push_back(out);
        continue;
      }
      Value out = newBuffer(r, call.getNumResults() == 1
                                   ? base
                                   : base + "." + std::to_string(cast<OpResult>(r).getResultNumber()));
      st.map.map(r, out);
      args.push_back(out);
    }
    auto c = ob.create<func::CallOp>(loc, callee->getSymName(), TypeRange{}, args);
    if (auto l = call->getAttrOfType<IntegerAttr>("model.layer_index"))
      c->setAttr("rt.layer_index", l);
    st.flops += calleeFlops[call.getCallee()];
    st.bytes += calleeBytes[call.getCallee()];
    return true;
  }
  return false;
}

void Lowering::lowerReturn(Operation &ret, Location loc, BodyState &st) {
  // Returned values that were not written in place (arguments, views of other buffers, a value
  // returned twice) are copied into their result buffers.
  for (auto [k, v] : llvm::enumerate(ret.getOperands().take_front(st.outView.size())))
    if (!st.outView[k] || st.map.lookup(v) != st.outView[k])
      kernel(st.ob, loc, "copy", {st.map.lookup(v)}, {st.outTarget(k)});
  st.ob.create<func::ReturnOp>(ret.getLoc());
}

FailureOr<func::FuncOp> Lowering::lowerCallee(func::CallOp call) {
  StringRef name = call.getCallee();
  if (auto it = callees.find(name); it != callees.end())
    return it->second;
  auto fn = module.lookupSymbol<func::FuncOp>(name);
  if (!fn || fn.isDeclaration())
    return call.emitOpError() << "calls @" << name << ", not a function with a body";
  if (fn->hasAttr("sched.stage"))
    return call.emitOpError() << "calls the stage function @" << name
                              << "; stages are called by sched units only";
  if (!lowering.insert(name).second)
    return call.emitOpError() << "calls @" << name
                              << " recursively; a program's call graph is acyclic";
  SmallVector<Type> argTypes;
  for (Type t : fn.getArgumentTypes())
    argTypes.push_back(memrefOf(t));
  for (Type t : fn.getResultTypes())
    argTypes.push_back(memrefOf(t));
  OpBuilder mb(module.getContext());
  mb.setInsertionPoint(fn);
  auto nf = mb.create<func::FuncOp>(fn.getLoc(), (name + ".rt").str(),
                                    mb.getFunctionType(argTypes, {}));
  nf->setAttr("rt.function", mb.getUnitAttr());
  if (auto kind = fn->getAttrOfType<StringAttr>("model.layer"))
    nf->setAttr("rt.layer", kind);
  const unsigned firstOut = fn.getNumArguments();
  for (unsigned k = 0; k < fn.getNumResults(); ++k)
    nf.setArgAttr(firstOut + k, "rt.result", mb.getI64IntegerAttr(k));
  Block *entry = nf.addEntryBlock();
  OpBuilder ob(module.getContext());
  ob.setInsertionPointToStart(entry);
  BodyState st(fn, ob);
  st.map.map(fn.getArguments(), entry->getArguments().take_front(firstOut));
  st.outTarget = [&](size_t k) -> Value { return entry->getArgument(firstOut + unsigned(k)); };
  st.indexResults();
  ArrayRef<bool> accumulates = accumulatingResults(fn);
  for (unsigned k = 0; k < fn.getNumResults(); ++k)
    if (accumulates[k])
      nf.setArgAttr(firstOut + k, "rt.accumulate", mb.getUnitAttr());
  for (Operation &op : fn.getBody().front()) {
    Location loc = sourceLoc(op);
    ++st.counter;
    // Gradient-accumulation fusion: a returned weight gradient that every caller accumulates
    // into main_grad is added into the caller's main_grad view (beta = 1).
    if (auto gw = dyn_cast<model::LinearGradWeightOp>(&op))
      if (auto it = st.outIndex.find(gw.getResult());
          it != st.outIndex.end() && accumulates[it->second]) {
        Value out = st.outTarget(it->second);
        st.outView[it->second] = out;
        emitWgradAccumulate(gw, out, loc, st);
        continue;
      }
    FailureOr<bool> common = lowerCommonOp(op, loc, st);
    if (failed(common))
      return failure();
    if (*common)
      continue;
    if (isa<func::ReturnOp>(op)) {
      lowerReturn(op, loc, st);
      continue;
    }
    return op.emitOpError() << "cannot be lowered to rt in a called function (only model ops "
                               "and calls are)";
  }
  lowering.erase(name);
  callees[name] = nf;
  calleeFlops[name] = st.flops;
  calleeBytes[name] = st.bytes;
  return nf;
}

LogicalResult Lowering::run() {
  if (module.getBody()->empty())
    return module.emitError() << "trainc-lower-to-rt: empty module";
  insertBefore = &module.getBody()->front();
  // Parameter declarations are erased at the end: their names are free for the buffers.
  for (Operation &op : *module.getBody())
    if (auto name = op.getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName()))
      if (!isa<model::ParameterOp>(op))
        created.insert(name.getValue());
  if (failed(collectParams()))
    return failure();
  if (module->hasAttr("trainc.grad_reduce_in_bf16") && layout.mainGrad && layout.dp() > 1) {
    // Persistent, like main_grad: a bucket's collective is in flight until its wait.
    layout.reduceGrad = addBuffer(
        "main_grad.bf16",
        MemRefType::get(layout.mainGrad.getType().getShape(), BFloat16Type::get(module.getContext())),
        "main_grad");
  }
  if (Attribute a = module->getAttr("trainc.loss_scaler")) {
    auto d = dyn_cast<DictionaryAttr>(a);
    if (!d || !isa_and_nonnull<BoolAttr>(d.get("dynamic")) ||
        !isa_and_nonnull<IntegerAttr>(d.get("loss_scale_window")) ||
        !isa_and_nonnull<IntegerAttr>(d.get("hysteresis")) ||
        !isa_and_nonnull<FloatAttr>(d.get("min_loss_scale")))
      return module.emitError() << "trainc-lower-to-rt: trainc.loss_scaler must be a dictionary "
                                   "{dynamic: bool, loss_scale_window: i64, hysteresis: i64, "
                                   "min_loss_scale: f64, ...}, got "
                                << a;
    lossScaler = d;
  } else if (llvm::any_of(params, [](const ParamInfo &p) {
               return p.type.getElementType().isF16();
             })) {
    return module.emitError() << "trainc-lower-to-rt: f16 parameters need loss scaling: the "
                                 "module has no trainc.loss_scaler attribute (the compile sets "
                                 "it for --fp16)";
  }
  SmallVector<func::FuncOp> iterations;
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    if (fn->hasAttr("sched.iteration"))
      iterations.push_back(fn);
  if (llvm::count_if(iterations, [](func::FuncOp f) { return !f->hasAttr("sched.eval"); }) != 1)
    return module.emitError() << "trainc-lower-to-rt: expected one training iteration function "
                                 "(sched.iteration without sched.eval), found "
                              << llvm::count_if(iterations, [](func::FuncOp f) {
                                   return !f->hasAttr("sched.eval");
                                 });
  // Pipeline stages: the training units' boundary receives and sends move into the iteration,
  // async with --overlap-p2p-comm, else synchronous, where a unit's trailing send and the next
  // unit's leading receive are adjacent: one batched pair (Megatron's batch_p2p_comm, on
  // whenever overlap_p2p_comm is off; runsAsSendRecvPair).
  auto pp = module->getAttrOfType<IntegerAttr>("trainc.pipeline_size");
  overlapP2P = module->hasAttr("trainc.overlap_p2p_comm");
  if (overlapP2P || (pp && pp.getInt() > 1))
    for (func::FuncOp it : iterations)
      if (!it->hasAttr("sched.eval"))
        for (Operation &op : it.getBody().front()) {
          if (auto f = dyn_cast<sched::ForwardOp>(op))
            overlapUnits.insert(f.getCallee());
          else if (auto bw = dyn_cast<sched::BackwardOp>(op))
            overlapUnits.insert(bw.getCallee());
          else if (auto bi = dyn_cast<sched::BackwardInputOp>(op))
            overlapUnits.insert(bi.getCallee());
        }
  for (auto &[name, fn] : stages)
    if (failed(lowerStage(fn)))
      return failure();
  for (func::FuncOp it : iterations)
    if (failed(lowerIteration(it)))
      return failure();
  // Drop everything above rt: the lowered functions replace the originals.
  SmallVector<Operation *> dead;
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    if (!fn->hasAttr("rt.stage") && !fn->hasAttr("rt.function") && !fn->hasAttr("rt.entry") &&
        !fn->hasAttr("rt.entry_point"))
      dead.push_back(fn);
  for (model::ParameterOp p : module.getOps<model::ParameterOp>())
    dead.push_back(p); // the rt.buffer param_info carries what they declared
  for (Operation *op : dead)
    op->erase();
  if (layout.op) {
    // The layout stays readable in the rt IR (and `trainc inspect`) as module attributes.
    module->setAttr("trainc.grad_bucket_bounds", layout.op.getBucketBoundsAttr());
    module->setAttr("trainc.data_parallel_size", b.getI64IntegerAttr(layout.dp()));
    if (!carriedTokens.empty()) // the parameter all-gathers left in flight by each iteration
      module->setAttr("rt.carried_tokens", b.getDenseI64ArrayAttr(carriedTokens));
    layout.op.erase();
  }
  // Lowered functions take their original names back (calls were emitted with ".rt" names).
  for (func::FuncOp fn : module.getOps<func::FuncOp>()) {
    StringRef n = fn.getSymName();
    if (n.ends_with(".rt"))
      fn.setSymName(n.drop_back(3));
  }
  module.walk([&](func::CallOp call) {
    StringRef n = call.getCallee();
    if (n.ends_with(".rt"))
      call.setCallee(n.drop_back(3));
  });
  return success();
}

} // namespace mlir::trainc::lower_to_rt

namespace {

using mlir::trainc::lower_to_rt::Lowering;

struct LowerToRtPass : mlir::trainc::impl::LowerToRtPassBase<LowerToRtPass> {
  using LowerToRtPassBase::LowerToRtPassBase;
  void runOnOperation() override {
    if (failed(Lowering(getOperation()).run()))
      signalPassFailure();
  }
};

} // namespace
