//===- LowerToRt.cpp - Stage and iteration functions to rt ----------------===//

#include "passes/Export/Passes.h"
#include "passes/Grad/GradLayout.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringMap.h"

#include <map>

#define DEBUG_TYPE "trainc-lower-to-rt"

namespace mlir::trainc {
#define GEN_PASS_DEF_LOWERTORTPASS
#include "passes/Export/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

MemRefType memrefOf(Type t) {
  auto s = cast<ShapedType>(t);
  return MemRefType::get(s.getShape(), s.getElementType());
}

/// Where the stash tensors of a forward/backward unit pair live inside one stash slot: one 1-D
/// buffer per element type (in order of first appearance), each tensor at a 64-byte-aligned
/// element offset. A call then passes one argument per element type, not one per tensor, so
/// programs stay O(layers + microbatches).
struct StashLayout {
  SmallVector<Type> dtypes;
  SmallVector<int64_t> numel; // elements of each slot buffer
  SmallVector<std::pair<unsigned, int64_t>> place; // per tensor: (slot buffer, element offset)

  static StashLayout of(TypeRange tensors) {
    StashLayout l;
    for (Type t : tensors) {
      auto s = cast<ShapedType>(t);
      Type e = s.getElementType();
      unsigned d = unsigned(llvm::find(l.dtypes, e) - l.dtypes.begin());
      if (d == l.dtypes.size()) {
        l.dtypes.push_back(e);
        l.numel.push_back(0);
      }
      int64_t align = std::max<int64_t>(1, 64 / int64_t((e.getIntOrFloatBitWidth() + 7) / 8));
      int64_t at = (l.numel[d] + align - 1) / align * align;
      l.place.push_back({d, at});
      l.numel[d] = at + s.getNumElements();
    }
    return l;
  }
  MemRefType bufferType(unsigned d) const { return MemRefType::get({numel[d]}, dtypes[d]); }
  std::string key() const {
    std::string k;
    llvm::raw_string_ostream os(k);
    for (unsigned d = 0; d < dtypes.size(); ++d)
      os << dtypes[d] << "x" << numel[d] << ";";
    return os.str();
  }
};

/// A sum collective of `kind` on the communicator group `group` (a mesh axis name); async with
/// `token` >= 0, synchronous with -1.
void createCollective(OpBuilder &b, Location loc, StringRef kind, StringRef group, Value in,
                      Value out, int64_t token, rt::ReduceOp reduce = rt::ReduceOp::sum) {
  MLIRContext *ctx = b.getContext();
  b.create<rt::CollectiveOp>(loc, rt::CollectiveKindAttr::get(ctx, *rt::symbolizeCollectiveKind(kind)),
                             b.getStringAttr(group), ValueRange{in}, ValueRange{out},
                             rt::ReduceOpAttr::get(ctx, reduce),
                             b.getI64IntegerAttr(token));
}

struct ParamInfo {
  std::string name;
  MemRefType type, gradType;
  /// The parameter's value and main grad: a whole buffer (offset -1) or a range of one.
  rt::BufferOp value, grad, expAvg, expAvgSq;
  /// bf16 parameters: their fp32 master weights (without the distributed optimizer).
  rt::BufferOp master;
  int64_t valueOffset = -1, gradOffset = -1;
  /// Sharded by tensor parallelism (its declaration has a split): each TP rank holds a distinct
  /// part, where replicated parameters are the same on every TP rank.
  bool tpSplit = false;
};

/// The main-grad layout of trainc-grad-buckets (GradLayout.h). The lowering is the same for
/// every DP rank: a rank's shard of a bucket is a view whose offset depends on the rank's dp
/// coordinate (rt.view axis = "dp"), resolved per rank by the export.
struct DpLayout {
  sched::GradBufferOp op;
  ::trainc::grad::GradLayout geo;
  rt::BufferOp mainGrad, params, expAvg, expAvgSq;
  /// bf16 parameters: the fp32 master weights of this rank's shards (like exp_avg).
  rt::BufferOp master;
  /// --grad-reduce-in-bf16 (module attribute trainc.grad_reduce_in_bf16) with dp > 1: the bf16
  /// copy of main_grad the buckets are reduced in (`main_grad.bf16`, laid out like main_grad).
  rt::BufferOp reduceGrad;
  int64_t dp() const { return geo.dp; }
  bool distributed() const { return geo.distributed; }
  int64_t bound(int64_t b) const { return geo.bounds[size_t(b)]; }
  int64_t numBuckets() const { return geo.numBuckets(); }
  /// Elements per DP shard of bucket b (the whole bucket without the distributed optimizer).
  int64_t shardSize(int64_t b) const { return geo.shardSize(b); }
  /// Where bucket b's shard starts in the rank's optimizer state (the concatenation of its shards).
  int64_t stateOffset(int64_t b) const { return bound(b) / (distributed() ? dp() : 1); }
  /// The bucket holding layout parameter i.
  int64_t bucketOf(size_t i) const {
    return int64_t(llvm::upper_bound(geo.bounds, geo.offsets[i]) - geo.bounds.begin()) - 1;
  }
};

struct BodyState;

/// Module-level state of the lowering: the buffer table and the well-known buffers.
class Lowering {
public:
  explicit Lowering(ModuleOp module) : module(module), b(module.getContext()) {}

  LogicalResult run();

private:
  rt::BufferOp addBuffer(StringRef name, MemRefType type, StringRef kind) {
    std::string unique = name.str();
    // `created` holds every symbol of the module (filled in run()): a lookup per buffer in the
    // module's op list would make lowering quadratic in the number of buffers.
    for (int i = 1; created.count(unique); ++i)
      unique = (name + "." + Twine(i)).str();
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(insertBefore);
    auto buf = b.create<rt::BufferOp>(module.getLoc(), b.getStringAttr(unique), TypeAttr::get(type),
                                      rt::BufferKindAttr::get(b.getContext(),
                                                              *rt::symbolizeBufferKind(kind)),
                                      b.getI64IntegerAttr(-1),
                                      /*group=*/StringAttr());
    created.insert(unique);
    return buf;
  }
  Value ref(OpBuilder &ob, Location loc, rt::BufferOp buf) {
    return ob.create<rt::BufferRefOp>(loc, buf.getType(), buf.getSymName());
  }
  /// `type`-shaped view at element `offset` of `buf` (the whole buffer when offset < 0).
  Value view(OpBuilder &ob, Location loc, rt::BufferOp buf, int64_t offset, MemRefType type) {
    Value r = ref(ob, loc, buf);
    if (offset < 0)
      return r;
    return ob.create<rt::ViewOp>(loc, type, r, ob.getI64IntegerAttr(offset));
  }
  /// Elements [begin, end) of the 1-D buffer `buf`.
  Value range(OpBuilder &ob, Location loc, rt::BufferOp buf, int64_t begin, int64_t end) {
    auto t = MemRefType::get({end - begin}, buf.getType().getElementType());
    if (begin == 0 && end == buf.getType().getNumElements())
      return ref(ob, loc, buf);
    return ob.create<rt::ViewOp>(loc, t, ref(ob, loc, buf), ob.getI64IntegerAttr(begin));
  }
  /// This DP rank's shard of bucket k of the 1-D buffer `buf` (main_grad or params): a view at
  /// bound(k) + dp_coordinate x shardSize(k).
  Value shardOf(OpBuilder &ob, Location loc, rt::BufferOp buf, int64_t k) {
    auto t = MemRefType::get({layout.shardSize(k)}, buf.getType().getElementType());
    auto v = ob.create<rt::ViewOp>(loc, t, ref(ob, loc, buf), ob.getI64IntegerAttr(layout.bound(k)),
                                   ob.getStringAttr("dp"),
                                   ob.getI64IntegerAttr(layout.shardSize(k)));
    return v;
  }
  Value valueRef(OpBuilder &ob, Location loc, const ParamInfo &p) {
    return view(ob, loc, p.value, p.valueOffset, p.type);
  }
  Value gradRef(OpBuilder &ob, Location loc, const ParamInfo &p) {
    return view(ob, loc, p.grad, p.gradOffset, p.gradType);
  }
  void collective(OpBuilder &ob, Location loc, StringRef kind, Value in, Value out,
                  int64_t token) {
    createCollective(ob, loc, kind, "dp", in, out, token);
  }
  LogicalResult lowerDataParallelOp(OpBuilder &ob, Location loc, Operation &op);
  /// The runtime token number of `token` (a sched.token that `user` waits on): bucket k's
  /// reduction is k and its all-gather numBuckets + k, found by following the token back to its
  /// start through unit results, stage-function arguments and the iteration's carried
  /// arguments. Fails, with an error on `user`, when it comes from no start.
  FailureOr<int64_t> tokenId(Value token, Operation *user);
  void lowerGradNorm(OpBuilder &ob, Location loc, double maxNorm);
  /// The grad norm's sum of squares into `sumsq` with the distributed optimizer and TP-sharded
  /// parameters.
  void lowerTensorParallelShardNorm(OpBuilder &ob, Location loc, Value sumsq);
  LogicalResult lowerAdamW(OpBuilder &ob, Location loc, sched::AdamWOp adam);
  void reduceLosses(OpBuilder &ob, Location loc) {
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
  /// The pipeline stages of the plan and this module's (trainc-pipeline-split; 1 and 0 without).
  int64_t pipelineSize() {
    auto a = module->getAttrOfType<IntegerAttr>("trainc.pipeline_size");
    return a ? a.getInt() : 1;
  }
  int64_t pipelineStage() {
    auto a = module->getAttrOfType<IntegerAttr>("trainc.pipeline_stage");
    return a ? a.getInt() : 0;
  }
  /// Whether `name` is a parameter held on two pipeline stages (GPT's tied word embedding).
  bool isSharedAcrossStages(StringRef name) {
    auto a = module->getAttrOfType<ArrayAttr>("trainc.pipeline_shared");
    return a && llvm::any_of(a, [&](Attribute x) {
             return cast<FlatSymbolRefAttr>(x).getValue() == name;
           });
  }
  /// Megatron's _allreduce_word_embedding_grads: the shared copies' main grads summed over the
  /// embd group (first and last stage), before finalize scales them.
  /// With the distributed optimizer the copy has a bucket of its own on both stages
  /// (trainc-grad-buckets), which the DP reduce-scatter has already reduced: only this rank's
  /// shard of it is summed (the same elements on both stages; Megatron all-reduces the whole
  /// main_grad, of which the optimizer reads the same shard).
  void allReduceSharedGrads(OpBuilder &ob, Location loc) {
    for (ParamInfo &p : params)
      if (isSharedAcrossStages(p.name)) {
        Value g = gradRef(ob, loc, p);
        if (layout.op && layout.distributed())
          g = shardOf(ob, loc, layout.mainGrad, sharedBucket(p));
        createCollective(ob, loc, "all_reduce", "embd", g, g, -1);
      }
  }
  /// The bucket of the shared parameter `p` under the distributed optimizer (its own).
  int64_t sharedBucket(const ParamInfo &p) { return layout.bucketOf(layoutIndex.lookup(p.name)); }
  /// Whether bucket k holds the copy of a shared parameter that a later stage must not count
  /// in the grad norm (the first stage counts it).
  bool isSharedCopyBucket(int64_t k) {
    if (pipelineStage() == 0)
      return false;
    for (ParamInfo &p : params)
      if (isSharedAcrossStages(p.name) && sharedBucket(p) == k)
        return true;
    return false;
  }
  rt::KernelOp kernel(OpBuilder &ob, Location loc, StringRef name, ValueRange ins, ValueRange outs,
                      ArrayRef<NamedAttribute> attrs = {}, ArrayRef<int32_t> inPlace = {}) {
    return ob.create<rt::KernelOp>(loc, name, ins, outs, ob.getDictionaryAttr(attrs),
                            inPlace.empty() ? DenseI32ArrayAttr()
                                            : ob.getDenseI32ArrayAttr(inPlace));
  }
  NamedAttribute f64(StringRef n, double v) { return b.getNamedAttr(n, b.getF64FloatAttr(v)); }
  NamedAttribute i64(StringRef n, int64_t v) { return b.getNamedAttr(n, b.getI64IntegerAttr(v)); }
  MemRefType scalarType() { return MemRefType::get({}, statsType); }
  rt::BufferOp scalar(StringRef name, StringRef kind) {
    auto it = scalars.find(name);
    if (it != scalars.end())
      return it->second;
    return scalars[name] = addBuffer(name, scalarType(), kind);
  }

  LogicalResult collectParams();
  /// The iteration's units so far: FLOPs and bytes of the calls, forward calls (= microbatches),
  /// the stash slots in use and which slot each live stash holds.
  struct UnitState {
    double flops = 0, bytes = 0;
    int64_t forwards = 0;
    SmallVector<int64_t> busySlots;
    llvm::DenseMap<Value, std::pair<int64_t, SmallVector<rt::BufferOp>>> stashOf;
  };
  /// A sched.microbatch, sched.forward or sched.backward as a call of its lowered stage function
  /// (forward: takes the lowest free stash slot; backward: releases its forward's).
  LogicalResult lowerUnit(OpBuilder &ob, Location loc, Operation &op, bool isEval,
                          UnitState &st);
  /// The input buffers of microbatch `mb` for the stage function `callee`, in argument order.
  SmallVector<Value> inputArgs(OpBuilder &ob, Location loc, StringRef callee, int64_t mb);
  /// The buffers of stash slot `slot` for the results of the forward unit `fwd`.
  SmallVector<rt::BufferOp> stashSlot(func::FuncOp fwd, int64_t slot);
  LogicalResult lowerStage(func::FuncOp fn);
  /// Megatron's gradient-accumulation fusion: when the only use of the weight gradient `gw`
  /// (model.linear_grad_weight, [N, K] from dy [..., N] and x [..., K]) is a sched.accumulate_grad
  /// into a main_grad of the same element type and shape (f32: an fp32 plan, or bf16/fp16
  /// inputs with the f32 result of docs/design.md "Mixed precision"), emits the GEMM straight
  /// into main_grad with beta = 1 (`rt.kernel "matmul" ... {beta = 1.0, trans_a = 1}`) instead
  /// of a temporary plus an `add`, and returns the accumulate_grad, which then lowers to
  /// nothing; returns null (nothing emitted) otherwise.
  sched::AccumulateGradOp fuseGradAccumulation(model::LinearGradWeightOp gw, Location loc,
                                               BodyState &st);
  /// The parameter whose main_grad `g` can be accumulated into by a GEMM: `g`'s only use is a
  /// sched.accumulate_grad into a main_grad of g's element type and shape; else null.
  const ParamInfo *fusableMainGrad(Value g);
  /// The matmul of `gw` with beta = 1 into `out` (a main_grad view or a callee's result buffer
  /// the caller made one); maps gw's result to `out`.
  void emitWgradAccumulate(model::LinearGradWeightOp gw, Value out, Location loc, BodyState &st);
  /// Per result of the called function `fn`: whether it is a weight-gradient GEMM that every
  /// call site accumulates into a main_grad (fusableMainGrad), so the callee's rt function adds
  /// into that result buffer (argument attribute `rt.accumulate`) and the caller passes the
  /// main_grad view. Computed once per function.
  ArrayRef<bool> accumulatingResults(func::FuncOp fn);
  llvm::StringMap<SmallVector<bool>> calleeAccumulates;
  LogicalResult lowerIteration(func::FuncOp fn);
  /// A function called from a stage (a layer, or a half of its derivative) as `<name>.rt` in
  /// destination-passing style: one memref argument per argument, then one per result, which
  /// the callee writes. Lowered once, whatever the number of calls; errors name the op.
  FailureOr<func::FuncOp> lowerCallee(func::CallOp call);
  /// The ops of a function body that stages and callees share: model ops (KernelOpInterface) and
  /// calls. Returns false for an op it does not handle.
  FailureOr<bool> lowerCommonOp(Operation &op, Location loc, BodyState &st);
  /// The func.return of a stage or callee body.
  void lowerReturn(Operation &ret, Location loc, BodyState &st);

  ModuleOp module;
  OpBuilder b;
  Operation *insertBefore = nullptr;
  llvm::StringSet<> created;
  Type statsType;
  /// fp16 loss scaling (module attribute trainc.loss_scaler, set by the compile for --fp16):
  /// {initial_loss_scale, min_loss_scale, loss_scale_window, hysteresis, dynamic}; null without.
  DictionaryAttr lossScaler;
  /// The backward seed times the loss scale (Megatron's scale_loss: loss * scale before backward).
  void scaleLossSeed(OpBuilder &ob, Location loc, Value seed) {
    if (lossScaler)
      kernel(ob, loc, "scale_by", {seed, ref(ob, loc, scalar("loss_scale", "scalar"))}, {seed}, {},
             {0});
  }
  /// main_grad *= 1 / loss_scale over `grads` (Megatron's _unscale_main_grads_and_check_for_nan;
  /// the check is the grad norm's finiteness, below).
  void unscaleGrads(OpBuilder &ob, Location loc, ArrayRef<Value> grads) {
    if (!lossScaler)
      return;
    Value inv = ref(ob, loc, scalar("inv_loss_scale", "workspace"));
    kernel(ob, loc, "reciprocal", {ref(ob, loc, scalar("loss_scale", "scalar"))}, {inv});
    for (Value g : grads)
      kernel(ob, loc, "scale_by", {g, inv}, {g}, {}, {0});
  }
  SmallVector<ParamInfo> params;
  llvm::StringMap<size_t> paramIndex;
  llvm::StringMap<rt::BufferOp> scalars;
  SymbolTableCollection symbols; // the module's parameter declarations
  llvm::StringMap<func::FuncOp> stages;           // original stage functions by name
  llvm::StringMap<SmallVector<unsigned>> stageInputs; // arg numbers tagged model.input
  llvm::StringMap<SmallVector<unsigned>> stageStash;  // arg numbers tagged sched.stash
  llvm::StringMap<double> stageFlops, stageBytes;
  /// Lowered callees and their FLOPs and bytes per call.
  llvm::StringMap<func::FuncOp> callees;
  llvm::StringMap<double> calleeFlops, calleeBytes;
  llvm::StringSet<> lowering; // callees being lowered (recursion check)
  llvm::StringMap<rt::BufferOp> inputBuffers;     // "<input>.<mb>"
  /// Stash slots: buffers per (slot, layout), and how many slots the iteration uses (their size
  /// is the memory planner's: rt.group_bytes).
  std::map<std::pair<int64_t, std::string>, SmallVector<rt::BufferOp>> stashBuffers;
  int64_t stashSlots = 0;
  DpLayout layout;
  llvm::StringMap<size_t> layoutIndex;
  /// Distributed optimizer: the sched.adamw that emits each bucket's update (its last one), with
  /// the bucket and the (begin, end, decay) ranges of the bucket's updated parameters.
  llvm::DenseMap<Operation *, std::pair<int64_t, SmallVector<int64_t>>> shardUpdates;
  SmallVector<Attribute> paramInfos; // distributed optimizer: the params buffer's contents
  SmallVector<Attribute> gradInfos;  // the main_grad buffer's contents
  SmallVector<int64_t> carriedTokens; // token numbers the training iteration returns
  /// Async tensor collectives (sched.async): the tokens each started; the next free one.
  llvm::DenseMap<Operation *, SmallVector<int64_t>> asyncTokens;
  int64_t nextAsyncToken = 0;
};

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

/// The location of an instruction lowered from `op`: op's own, named by the op (instructions keep
/// the location of the op they come from).
Location sourceLoc(Operation &op) {
  return NameLoc::get(StringAttr::get(op.getContext(), op.getName().getStringRef()), op.getLoc());
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
  }
  StashLayout layout = StashLayout::of(stashTypes);
  const unsigned firstStash = unsigned(argTypes.size());
  for (unsigned d = 0; d < layout.dtypes.size(); ++d)
    argTypes.push_back(layout.bufferType(d));
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
  for (unsigned d = 0; d < layout.dtypes.size(); ++d)
    nf.setArgAttr(firstStash + d, "rt.stash", mb.getI64IntegerAttr(int64_t(d)));
  // Stash tensor k as a view of its slot buffer.
  auto stashView = [&](size_t k) -> Value {
    auto [d, offset] = layout.place[k];
    return ob.create<rt::ViewOp>(fn.getLoc(), memrefOf(stashTypes[k]),
                                 entry->getArgument(firstStash + d),
                                 ob.getI64IntegerAttr(offset));
  };
  for (auto [k, i] : llvm::enumerate(stageStash[fname]))
    map.map(fn.getArgument(i), stashView(argBase + k));
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
    if (auto gw = dyn_cast<model::LinearGradWeightOp>(&op))
      if (sched::AccumulateGradOp acc = fuseGradAccumulation(gw, loc, st)) {
        st.fusedAccumulates.insert(acc);
        continue;
      }
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

sched::AccumulateGradOp Lowering::fuseGradAccumulation(model::LinearGradWeightOp gw, Location loc,
                                                       BodyState &st) {
  const ParamInfo *p = fusableMainGrad(gw.getResult());
  if (!p)
    return {};
  emitWgradAccumulate(gw, gradRef(st.ob, loc, *p), loc, st);
  return cast<sched::AccumulateGradOp>(*gw->getUsers().begin());
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
    ArrayRef<bool> accumulates = accumulatingResults(
        module.lookupSymbol<func::FuncOp>(call.getCallee()));
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

LogicalResult Lowering::lowerIteration(func::FuncOp fn) {
  OpBuilder mb(module.getContext());
  mb.setInsertionPoint(fn);
  auto nf = mb.create<func::FuncOp>(fn.getLoc(), (fn.getSymName() + ".rt").str(),
                                    mb.getFunctionType({}, {}));
  bool isEval = fn->hasAttr("sched.eval");
  if (isEval)
    nf->setAttr("rt.entry_point", mb.getStringAttr(fn.getSymName()));
  else
    nf->setAttr("rt.entry", mb.getUnitAttr());
  OpBuilder ob(module.getContext());
  ob.setInsertionPointToStart(nf.addEntryBlock());
  UnitState units;
  if (layout.distributed()) {
    // Each bucket's update goes where its last sched.adamw is (the updates are in layout order and
    // the bucket's all-gather follows that one).
    shardUpdates.clear();
    std::map<int64_t, std::pair<Operation *, SmallVector<int64_t>>> byBucket;
    for (sched::AdamWOp adam : fn.getBody().front().getOps<sched::AdamWOp>()) {
      auto it = layoutIndex.find(adam.getParam());
      if (it == layoutIndex.end())
        continue; // lowerAdamW names the parameter
      size_t i = it->second;
      int64_t k = layout.bucketOf(i), lo = layout.bound(k);
      auto &[last, segments] = byBucket[k];
      last = adam;
      segments.append({layout.geo.offsets[i] - lo, layout.geo.offsets[i] + layout.geo.sizes[i] - lo,
                       adam.getDecay() ? 1 : 0});
    }
    for (auto &[k, entry] : byBucket)
      shardUpdates[entry.first] = {k, std::move(entry.second)};
  }
  for (Operation &op : fn.getBody().front()) {
    Location loc = sourceLoc(op);
    if (isa<sched::ZeroLossesOp>(op)) {
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("loss_sum", "output"))});
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("num_tokens", "output"))});
    } else if (isa<sched::ZeroGradsOp>(op)) {
      if (layout.mainGrad)
        kernel(ob, loc, "fill", {}, {ref(ob, loc, layout.mainGrad)});
      else
        for (ParamInfo &p : params)
          kernel(ob, loc, "fill", {}, {ref(ob, loc, p.grad)});
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("loss_sum", "output"))});
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("num_tokens", "output"))});
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("one", "workspace"))}, {f64("value", 1)});
    } else if (auto io = dyn_cast<sched::FillInputsOp>(op)) {
      // Device scalars the control plane fills every iteration.
      scalar("lr", "scalar");
      scalar("weight_decay", "scalar");
      scalar("step", "scalar");
      ob.create<rt::HostIOOp>(loc, rt::HostIOKind::fill_inputs, io.getLabel());
    } else if (auto io = dyn_cast<sched::ReadOutputsOp>(op)) {
      scalar("grad_norm", "output");
      scalar("update_successful", "output");
      ob.create<rt::HostIOOp>(loc, rt::HostIOKind::read_outputs, io.getLabel());
    } else if (isa<sched::MicrobatchOp, sched::ForwardOp, sched::BackwardOp,
                   sched::BackwardInputOp, sched::BackwardWeightOp>(op)) {
      if (failed(lowerUnit(ob, loc, op, isEval, units)))
        return failure();
    } else if (auto fin = dyn_cast<sched::FinalizeGradsOp>(op)) {
      allReduceSharedGrads(ob, loc);
      if (layout.mainGrad) {
        // Only this rank's shards hold reduced gradients under the distributed optimizer.
        Value inv;
        if (fin.getNormalization() == sched::Normalization::per_token) {
          inv = ref(ob, loc, scalar("inv_num_tokens", "workspace"));
          kernel(ob, loc, "reciprocal", {ref(ob, loc, scalar("num_tokens", "output"))}, {inv});
        }
        auto mainGradShards = [&] {
          SmallVector<Value> shards;
          if (layout.distributed())
            for (int64_t k = 0; k < layout.numBuckets(); ++k)
              shards.push_back(shardOf(ob, loc, layout.mainGrad, k));
          else
            shards.push_back(ref(ob, loc, layout.mainGrad));
          return shards;
        };
        if (inv || layout.dp() > 1) {
          for (Value g : mainGradShards()) {
            if (inv)
              kernel(ob, loc, "scale_by", {g, inv}, {g}, {}, {0});
            else // legacy mode: Megatron averages the gradients over DP
              kernel(ob, loc, "scale", {g}, {g}, {f64("alpha", 1.0 / double(layout.dp()))}, {0});
          }
        }
        if (lossScaler)
          unscaleGrads(ob, loc, mainGradShards());
      } else if (fin.getNormalization() == sched::Normalization::per_token) {
        Value inv = ref(ob, loc, scalar("inv_num_tokens", "workspace"));
        kernel(ob, loc, "reciprocal", {ref(ob, loc, scalar("num_tokens", "output"))}, {inv});
        for (ParamInfo &p : params) {
          Value g = ref(ob, loc, p.grad);
          kernel(ob, loc, "scale_by", {g, inv}, {g}, {}, {0});
        }
      }
      if (lossScaler && !layout.mainGrad) {
        SmallVector<Value> grads;
        for (ParamInfo &p : params)
          grads.push_back(ref(ob, loc, p.grad));
        unscaleGrads(ob, loc, grads);
      }
    } else if (auto clip = dyn_cast<sched::ClipGradNormOp>(op)) {
      lowerGradNorm(ob, loc, clip.getMaxNorm().convertToDouble());
    } else if (isa<sched::GradSyncWaitOp, sched::ParamGatherStartOp, sched::ParamGatherWaitOp,
                   sched::ReduceLossesOp>(op)) {
      if (failed(lowerDataParallelOp(ob, loc, op)))
        return failure();
    } else if (auto adam = dyn_cast<sched::AdamWOp>(op)) {
      if (failed(lowerAdamW(ob, loc, adam)))
        return failure();
    } else if (isa<func::ReturnOp>(op)) {
      // The tokens the training iteration returns stay in flight into the next one.
      for (Value t : op.getOperands()) {
        FailureOr<int64_t> id = tokenId(t, &op);
        if (failed(id))
          return failure();
        if (!isEval)
          carriedTokens.push_back(*id);
      }
      ob.create<func::ReturnOp>(op.getLoc());
    } else {
      return op.emitOpError() << "cannot be lowered to rt in an iteration function";
    }
  }
  if (!units.busySlots.empty())
    return fn.emitOpError() << "ends with " << units.busySlots.size()
                            << " stash(es) that no sched.backward consumed";
  if (!isEval) {
    // The unit order the schedule pass chose (the plan's, or its explicit override).
    module->setAttr("rt.schedule",
                    b.getStringAttr(fn->hasAttr("sched.schedule")
                                        ? fn->getAttrOfType<StringAttr>("sched.schedule").getValue()
                                        : StringRef("no-pipelining")));
    if (stashSlots > 0)
      module->setAttr("rt.stash_slots", b.getI64IntegerAttr(stashSlots));
    module->setAttr("trainc.flops_per_iteration", b.getF64FloatAttr(units.flops));
    module->setAttr("trainc.bytes_per_iteration", b.getF64FloatAttr(units.bytes));
    module->setAttr("trainc.num_microbatches", b.getI64IntegerAttr(units.forwards));
  }
  return success();
}

LogicalResult Lowering::lowerUnit(OpBuilder &ob, Location loc, Operation &op, bool isEval,
                                  UnitState &st) {
  // One call of a stage function; its FLOPs and bytes count towards the iteration's.
  auto call = [&](StringRef callee, ArrayRef<Value> args, const Twine &label) {
    auto c = ob.create<func::CallOp>(loc, (callee + ".rt").str(), TypeRange{}, args);
    c->setAttr("rt.unit", ob.getStringAttr(label));
    st.flops += stageFlops[callee];
    st.bytes += stageBytes[callee];
  };
  auto stageOf = [&](StringRef callee) -> FailureOr<func::FuncOp> {
    auto it = stages.find(callee);
    if (it == stages.end())
      return op.emitOpError() << "calls @" << callee << ", not a stage function";
    return it->second;
  };
  auto unitLabel = [](const char *kind, int64_t mb, int64_t chunk) {
    return (Twine(kind) + " microbatch " + Twine(mb) + " chunk " + Twine(chunk)).str();
  };
  if (auto mb = dyn_cast<sched::MicrobatchOp>(op)) {
    if (failed(stageOf(mb.getCallee())))
      return failure();
    call(mb.getCallee(), inputArgs(ob, loc, mb.getCallee(), int64_t(mb.getIndex())),
         (isEval ? "F (eval) microbatch " : "F+B microbatch ") + Twine(mb.getIndex()));
    ++st.forwards;
    return success();
  }
  if (auto fwd = dyn_cast<sched::ForwardOp>(op)) {
    FailureOr<func::FuncOp> stage = stageOf(fwd.getCallee());
    if (failed(stage))
      return failure();
    // The lowest free stash slot holds this microbatch's activations until its backward.
    int64_t slot = 0;
    while (llvm::is_contained(st.busySlots, slot))
      ++slot;
    st.busySlots.push_back(slot);
    stashSlots = std::max(stashSlots, slot + 1);
    SmallVector<Value> args = inputArgs(ob, loc, fwd.getCallee(), int64_t(fwd.getMicrobatch()));
    SmallVector<rt::BufferOp> stash = stashSlot(*stage, slot);
    for (rt::BufferOp buf : stash)
      args.push_back(ref(ob, loc, buf));
    st.stashOf[fwd.getStash()] = {slot, stash};
    call(fwd.getCallee(), args, unitLabel("F", fwd.getMicrobatch(), fwd.getChunk()));
    if (fwd.getChunk() == 0) // microbatches, not the units of an interleaved rank's chunks
      ++st.forwards;
    return success();
  }
  // ZB-H1: B keeps the forward's slot (its values for W go into the same slot), W frees it.
  if (auto bi = dyn_cast<sched::BackwardInputOp>(op)) {
    if (failed(stageOf(bi.getCallee())))
      return failure();
    auto it = st.stashOf.find(bi.getStash());
    if (it == st.stashOf.end())
      return bi.emitOpError() << "consumes a stash no earlier sched.forward produced";
    SmallVector<Value> args = inputArgs(ob, loc, bi.getCallee(), int64_t(bi.getMicrobatch()));
    for (rt::BufferOp buf : it->second.second)
      args.push_back(ref(ob, loc, buf));
    call(bi.getCallee(), args, unitLabel("B", bi.getMicrobatch(), bi.getChunk()));
    auto held = it->second;
    st.stashOf.erase(it);
    st.stashOf[bi.getWeightStash()] = held;
    return success();
  }
  if (auto bw = dyn_cast<sched::BackwardWeightOp>(op)) {
    if (failed(stageOf(bw.getCallee())))
      return failure();
    auto it = st.stashOf.find(bw.getStash());
    if (it == st.stashOf.end())
      return bw.emitOpError() << "consumes a stash no earlier sched.backward_input produced";
    SmallVector<Value> args = inputArgs(ob, loc, bw.getCallee(), int64_t(bw.getMicrobatch()));
    for (rt::BufferOp buf : it->second.second)
      args.push_back(ref(ob, loc, buf));
    call(bw.getCallee(), args, unitLabel("W", bw.getMicrobatch(), bw.getChunk()));
    llvm::erase(st.busySlots, it->second.first);
    return success();
  }
  auto bwd = cast<sched::BackwardOp>(op);
  if (failed(stageOf(bwd.getCallee())))
    return failure();
  auto it = st.stashOf.find(bwd.getStash());
  if (it == st.stashOf.end())
    return bwd.emitOpError() << "consumes a stash no earlier sched.forward produced";
  SmallVector<Value> args = inputArgs(ob, loc, bwd.getCallee(), int64_t(bwd.getMicrobatch()));
  for (rt::BufferOp buf : it->second.second)
    args.push_back(ref(ob, loc, buf));
  call(bwd.getCallee(), args, unitLabel("B", bwd.getMicrobatch(), bwd.getChunk()));
  llvm::erase(st.busySlots, it->second.first);
  return success();
}

SmallVector<Value> Lowering::inputArgs(OpBuilder &ob, Location loc, StringRef callee,
                                       int64_t mb) {
  func::FuncOp stage = stages[callee];
  SmallVector<Value> args;
  for (unsigned i : stageInputs[callee]) {
    std::string name =
        stage.getArgAttrOfType<StringAttr>(i, "model.input").str() + "." + std::to_string(mb);
    rt::BufferOp &buf = inputBuffers[name];
    if (!buf)
      buf = addBuffer(name, memrefOf(stage.getArgument(i).getType()), "input");
    args.push_back(ref(ob, loc, buf));
  }
  return args;
}

SmallVector<rt::BufferOp> Lowering::stashSlot(func::FuncOp fwd, int64_t slot) {
  // Units with the same layout share a slot's buffers.
  SmallVector<Type> types(fwd.getResultTypes());
  if (auto zb = fwd->getAttrOfType<ArrayAttr>("sched.stash_layout")) {
    types.clear();
    for (Attribute a : zb)
      types.push_back(cast<TypeAttr>(a).getValue());
  }
  StashLayout layout = StashLayout::of(types);
  SmallVector<rt::BufferOp> &bufs = stashBuffers[{slot, layout.key()}];
  if (bufs.empty()) {
    for (unsigned d = 0; d < layout.dtypes.size(); ++d) {
      std::string name = ("stash" + Twine(slot)).str();
      if (layout.dtypes.size() > 1)
        name += "." + std::to_string(d);
      rt::BufferOp buf = addBuffer(name, layout.bufferType(d), "activation");
      buf.setGroupAttr(b.getStringAttr("stash." + Twine(slot)));
      bufs.push_back(buf);
    }
  }
  return bufs;
}

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

void Lowering::lowerTensorParallelShardNorm(OpBuilder &ob, Location loc, Value sumsq) {
  // The distributed optimizer under tensor parallelism: each bucket shard holds TP-sharded and
  // replicated parameters' ranges, which depend on the dp coordinate. Two sums per shard with
  // `segments` (rt.shard_segments: the export writes each DP rank's), the sharded one summed
  // over DP and TP, the replicated one over DP only (counted once, Megatron's
  // param_is_not_tensor_parallel_duplicate).
  std::map<int64_t, std::array<SmallVector<int64_t>, 2>> segments; // bucket -> (replicated, split)
  for (const ParamInfo &p : params) {
    if (pipelineStage() > 0 && isSharedAcrossStages(p.name))
      continue; // the tied copy counts on the first stage
    size_t i = layoutIndex.lookup(p.name);
    int64_t k = layout.bucketOf(i), lo = layout.bound(k);
    segments[k][p.tpSplit].append(
        {layout.geo.offsets[i] - lo, layout.geo.offsets[i] + layout.geo.sizes[i] - lo, 1});
  }
  Value split = ref(ob, loc, scalar("grad_sumsq_tp", "workspace"));
  for (int64_t k = 0; k < layout.numBuckets(); ++k)
    for (int cls = 0; cls < 2; ++cls) {
      // The bucket's ranges of this class in ascending order (shardSegments' input).
      SmallVector<int64_t> sorted;
      SmallVector<std::array<int64_t, 3>> triples;
      const SmallVector<int64_t> &src = segments[k][cls];
      for (size_t s = 0; s + 2 < src.size(); s += 3)
        triples.push_back({src[s], src[s + 1], src[s + 2]});
      llvm::sort(triples);
      for (auto &t : triples)
        sorted.append(t.begin(), t.end());
      auto sum = kernel(ob, loc, "sum_squares", {shardOf(ob, loc, layout.mainGrad, k)},
                        {cls ? split : sumsq},
                        {f64("beta", k == 0 ? 0.0 : 1.0),
                         b.getNamedAttr("segments", b.getDenseI64ArrayAttr(rt::shardSegments(
                                                        sorted, 0, layout.shardSize(k))))});
      sum->setAttr("rt.shard_segments", b.getDenseI64ArrayAttr(sorted));
    }
  if (layout.dp() > 1) {
    collective(ob, loc, "all_reduce", sumsq, sumsq, -1);
    collective(ob, loc, "all_reduce", split, split, -1);
  }
  createCollective(ob, loc, "all_reduce", "tp", split, split, -1);
  kernel(ob, loc, "add", {sumsq, split}, {sumsq}, {}, {0});
}

void Lowering::lowerGradNorm(OpBuilder &ob, Location loc, double maxNorm) {
  Value sumsq = ref(ob, loc, scalar("grad_sumsq", "workspace"));
  if (!layout.distributed()) {
    // Every rank holds the whole reduced gradient: sum over every parameter (a copy shared
    // across pipeline stages counts once, on the first stage). Under tensor parallelism the
    // sharded parameters' sum is summed over TP and the replicated ones are counted once
    // (Megatron's param_is_not_tensor_parallel_duplicate).
    bool anySplit = llvm::any_of(params, [](const ParamInfo &p) { return p.tpSplit; });
    Value split = anySplit ? ref(ob, loc, scalar("grad_sumsq_tp", "workspace")) : sumsq;
    bool firstSplit = true, firstReplicated = true;
    for (const ParamInfo &p : params) {
      if (pipelineStage() > 0 && isSharedAcrossStages(p.name))
        continue;
      bool &first = p.tpSplit && anySplit ? firstSplit : firstReplicated;
      kernel(ob, loc, "sum_squares", {gradRef(ob, loc, p)}, {p.tpSplit ? split : sumsq},
             {f64("beta", first ? 0.0 : 1.0)});
      first = false;
    }
    if (anySplit) {
      if (firstSplit) // every sharded parameter skipped
        kernel(ob, loc, "fill", {}, {split});
      createCollective(ob, loc, "all_reduce", "tp", split, split, -1);
      if (firstReplicated) // no replicated parameter
        kernel(ob, loc, "copy", {split}, {sumsq});
      else
        kernel(ob, loc, "add", {sumsq, split}, {sumsq}, {}, {0});
    } else if (firstReplicated) {
      kernel(ob, loc, "fill", {}, {sumsq});
    }
  } else if (llvm::any_of(params, [](const ParamInfo &p) { return p.tpSplit; })) {
    lowerTensorParallelShardNorm(ob, loc, sumsq);
  } else {
    // This rank's shard of every bucket (each element once over DP; the padding's gradients are
    // zero), then the sum over DP.
    // A later stage's copy of the tied embedding (its own bucket) is counted on the first stage.
    bool first = true;
    for (int64_t k = 0; k < layout.numBuckets(); ++k) {
      if (isSharedCopyBucket(k))
        continue;
      kernel(ob, loc, "sum_squares", {shardOf(ob, loc, layout.mainGrad, k)}, {sumsq},
             {f64("beta", first ? 0.0 : 1.0)});
      first = false;
    }
    if (first)
      kernel(ob, loc, "fill", {}, {sumsq});
    if (layout.dp() > 1)
      collective(ob, loc, "all_reduce", sumsq, sumsq, -1);
  }
  // The squares of every stage's gradients (the grad norm over the model-parallel group): the
  // same norm, clip factor and update_successful on every rank.
  if (pipelineSize() > 1)
    createCollective(ob, loc, "all_reduce", "pp", sumsq, sumsq, -1);
  kernel(ob, loc, "grad_norm_finalize", {sumsq},
         {ref(ob, loc, scalar("grad_norm", "output")),
          ref(ob, loc, scalar("grad_scale", "workspace")),
          ref(ob, loc, scalar("update_successful", "output"))},
         {f64("max_norm", maxNorm)});
  // fp16: found_inf is a non-finite norm (an inf or NaN in any unscaled main grad of any rank:
  // the sum of squares is summed over DP, TP and PP above, as Megatron's MAX over found_inf),
  // update_successful = 0 skips the step; the dynamic scale follows DynamicGradScaler.update.
  if (lossScaler && cast<BoolAttr>(lossScaler.get("dynamic")).getValue()) {
    Value scale = ref(ob, loc, scalar("loss_scale", "scalar"));
    Value growth = ref(ob, loc, scalar("loss_scale_growth_tracker", "scalar"));
    Value hyst = ref(ob, loc, scalar("loss_scale_hysteresis_tracker", "scalar"));
    auto i64Of = [&](StringRef k) { return cast<IntegerAttr>(lossScaler.get(k)).getInt(); };
    kernel(ob, loc, "loss_scale_update",
           {ref(ob, loc, scalar("update_successful", "output")), scale, growth, hyst},
           {scale, growth, hyst},
           {f64("growth_factor", 2.0), f64("backoff_factor", 0.5),
            i64("growth_interval", i64Of("loss_scale_window")),
            i64("hysteresis", i64Of("hysteresis")),
            f64("min_scale", cast<FloatAttr>(lossScaler.get("min_loss_scale")).getValueAsDouble())},
           {1, 2, 3});
  }
}

LogicalResult Lowering::lowerAdamW(OpBuilder &ob, Location loc, sched::AdamWOp adam) {
  auto it = paramIndex.find(adam.getParam());
  if (it == paramIndex.end())
    return adam.emitOpError() << "names unknown parameter '" << adam.getParam() << "'";
  ParamInfo &p = params[it->second];
  const bool mixed = p.type.getElementType() != statsType;
  if (mixed && !p.type.getElementType().isBF16() && !p.type.getElementType().isF16())
    return adam.emitOpError() << "parameter '" << p.name << "' has element type "
                              << p.type.getElementType()
                              << "; master weights exist for bf16 and f16 parameters only";
  SmallVector<NamedAttribute> attrs{f64("beta1", adam.getBeta1().convertToDouble()),
                                    f64("beta2", adam.getBeta2().convertToDouble()),
                                    f64("eps", adam.getEps().convertToDouble())};
  // bf16 parameters: AdamW on the fp32 master weights `master`, which also writes w = bf16(master)
  // (Megatron's Float16OptimizerWithFloat16Params).
  auto update = [&](Value w, Value g, Value m, Value v, Value master = {}) {
    SmallVector<Value> ins{master ? master : w, g, m, v, ref(ob, loc, scalar("lr", "scalar")),
                           ref(ob, loc, scalar("weight_decay", "scalar")),
                           ref(ob, loc, scalar("step", "scalar")),
                           ref(ob, loc, scalar("grad_scale", "workspace")),
                           ref(ob, loc, scalar("update_successful", "output"))};
    if (master)
      return kernel(ob, loc, "adamw_master", ins, {master, m, v, w}, attrs, {0, 2, 3, -1});
    return kernel(ob, loc, "adamw", ins, {w, m, v}, attrs, {0, 2, 3});
  };
  if (!layout.distributed()) {
    // One statement per operand: the order of the refs in the IR is fixed.
    Value w = valueRef(ob, loc, p);
    Value m = ref(ob, loc, p.expAvg);
    Value v = ref(ob, loc, p.expAvgSq);
    Value g = gradRef(ob, loc, p);
    attrs.push_back(i64("decay", adam.getDecay() ? 1 : 0));
    update(w, g, m, v, mixed ? ref(ob, loc, p.master) : Value());
    return success();
  }
  // ZeRO-1: one update per bucket shard, at the bucket's last sched.adamw, over this rank's shard;
  // Adam states are indexed by the position inside the concatenation of this rank's shards. The
  // updated parameters' bucket-relative ranges go in rt.shard_segments; `segments` (which parts of
  // the shard to update, each with its decay flag) is coordinate 0's, and the export computes
  // every other rank's from rt.shard_segments.
  auto it2 = shardUpdates.find(adam);
  if (it2 == shardUpdates.end())
    return success(); // folded into the bucket's update
  int64_t k = it2->second.first;
  const SmallVector<int64_t> &bucketSegments = it2->second.second;
  const int64_t size = layout.shardSize(k);
  attrs.push_back(b.getNamedAttr( // each segment has its own decay flag

      "segments", b.getDenseI64ArrayAttr(rt::shardSegments(bucketSegments, 0, size))));
  int64_t state = layout.stateOffset(k);
  Value w = shardOf(ob, loc, layout.params, k);
  Value m = range(ob, loc, layout.expAvg, state, state + size);
  Value v = range(ob, loc, layout.expAvgSq, state, state + size);
  Value g = shardOf(ob, loc, layout.mainGrad, k);
  Value master = mixed ? range(ob, loc, layout.master, state, state + size) : Value();
  update(w, g, m, v, master)->setAttr("rt.shard_segments", b.getDenseI64ArrayAttr(bucketSegments));
  return success();
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

struct LowerToRtPass : mlir::trainc::impl::LowerToRtPassBase<LowerToRtPass> {
  using LowerToRtPassBase::LowerToRtPassBase;
  void runOnOperation() override {
    if (failed(Lowering(getOperation()).run()))
      signalPassFailure();
  }
};

} // namespace
