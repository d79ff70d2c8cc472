//===- Lowering.h - State shared by the trainc-lower-to-rt sources -------===//
//
// The lowering of stage and iteration functions to rt (trainc-lower-to-rt) is one class,
// `Lowering`, whose members are defined in four files by concern:
//   LowerToRt.cpp          parameters, stage and callee bodies, the pass;
//   LowerIteration.cpp     the iteration: units, inputs, stash slots;
//   LowerCollectives.cpp   data-parallel buckets, tokens, loss and tied-embedding reductions;
//   LowerOptimizer.cpp     grad norm, clipping, loss scaling, AdamW.
// Private to passes/Export.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINC_PASSES_EXPORT_LOWERING_H
#define TRAINC_PASSES_EXPORT_LOWERING_H

#include "passes/Export/Passes.h"
#include "passes/Grad/GradLayout.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <map>

namespace mlir::trainc::lower_to_rt {


inline MemRefType memrefOf(Type t) {
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
inline void createCollective(OpBuilder &b, Location loc, StringRef kind, StringRef group, Value in,
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
  void reduceLosses(OpBuilder &ob, Location loc);
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
  void allReduceSharedGrads(OpBuilder &ob, Location loc);
  /// The bucket of the shared parameter `p` under the distributed optimizer (its own).
  int64_t sharedBucket(const ParamInfo &p) { return layout.bucketOf(layoutIndex.lookup(p.name)); }
  /// Whether bucket k holds the copy of a shared parameter that a later stage must not count
  /// in the grad norm (the first stage counts it).
  bool isSharedCopyBucket(int64_t k);
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
    int64_t units = 0; // unit calls so far
    SmallVector<int64_t> busySlots;
    llvm::DenseMap<int64_t, int64_t> slotFreedAt; // stash slot -> unit call that last freed it
    /// --overlap-p2p-comm: the sends of the unit being called (send buffer pool entries).
    struct PendingSend {
      StringAttr group;
      IntegerAttr peer;
      unsigned slot;
      Type type;
    };
    SmallVector<PendingSend> sendsAfter;
    llvm::DenseMap<Value, std::pair<int64_t, SmallVector<rt::BufferOp>>> stashOf;
    /// ZB-H1: the slots of the stash parts only B reads (held from F to B), by forward stash.
    SmallVector<int64_t> busyBSlots;
    llvm::DenseMap<Value, std::pair<int64_t, SmallVector<rt::BufferOp>>> bOnlyOf;
  };
  /// A sched.microbatch, sched.forward or sched.backward as a call of its lowered stage function
  /// (forward: takes the lowest free stash slot; backward: releases its forward's).
  LogicalResult lowerUnit(OpBuilder &ob, Location loc, Operation &op, bool isEval,
                          UnitState &st);
  /// For each trailing argument of the unit function `rtCallee` that hoistPointToPoint made
  /// (rt.p2p = "recv"), an rt.recv into a receive buffer; appends the buffers to `args`. With
  /// --overlap-p2p-comm (overlapP2P) the receive is async, posted before the previous unit's
  /// call where that unit communicates nothing, and its rt.wait is just before this call; else
  /// it is synchronous, at the same place (so it directly follows the sends before it).
  void overlappedReceives(OpBuilder &ob, Location loc, StringRef rtCallee,
                          SmallVector<Value> &args, int64_t stashSlot, UnitState &st);
  /// The input buffers of microbatch `mb` for the stage function `callee`, in argument order.
  SmallVector<Value> inputArgs(OpBuilder &ob, Location loc, StringRef callee, int64_t mb);
  /// The buffers of stash slot `slot` for the results of the forward unit `fwd`: with
  /// `bOnly`, those of its part only B reads (ZB-H1; empty without), else the rest.
  SmallVector<rt::BufferOp> stashSlot(func::FuncOp fwd, int64_t slot, bool bOnly = false);
  /// ZB-H1: per tensor of the slot layout `layout` (sched.stash_layout), whether no weight-gradient
  /// unit of that layout reads it (a forward stash tensor only B reads, freed at B). All false
  /// when no unit has the layout. Computed once per layout.
  ArrayRef<bool> freedAtB(ArrayAttr layout);
  llvm::DenseMap<Attribute, SmallVector<bool>> freedAtBCache;
  LogicalResult lowerStage(func::FuncOp fn);
  /// Pipeline stages (trainc.pipeline_size > 1, or trainc.overlap_p2p_comm): the top-level synchronous
  /// receives of the lowered unit function `nf` (rt.recv into a buffer of its own) become
  /// trailing arguments tagged rt.p2p_group / rt.p2p_peer, which the iteration fills with an
  /// async rt.recv (lowerUnit); a receive into a view of a stash argument (a forward's
  /// received input, stashed for its backward) is listed in the function attribute
  /// rt.p2p_stash_recvs ({group, peer, arg, offset, type}) and received by the iteration into
  /// that view of the slot it passes. Other receives stay synchronous in the unit.
  /// Also the trailing sends (after the unit's last other communication) of a buffer of their
  /// own: arguments tagged rt.p2p = "send" (in reverse program order) that the unit writes and
  /// the iteration sends async after the call, waited before the buffer is written again or
  /// before the first non-unit op. Arguments of receives are tagged rt.p2p = "recv".
  void hoistPointToPoint(func::FuncOp nf);
  /// Whether the lowered function `name` (and what it calls) issues no communication (no
  /// rt.send, rt.recv, rt.collective or rt.wait): a receive may be posted before its call
  /// without changing this rank's order of communication.
  bool isCommFree(StringRef name);
  llvm::StringMap<bool> commFree;
  /// Stage functions called by sched.forward / sched.backward / sched.backward_input in the
  /// training iteration of a pipeline stage: their boundary transfers move into the iteration
  /// (hoistPointToPoint, overlappedReceives).
  llvm::StringSet<> overlapUnits;
  /// trainc.overlap_p2p_comm: the moved transfers are async (overlapped); without it they stay
  /// synchronous, placed so that a unit's trailing send directly precedes the next unit's
  /// leading receive (one batched pair at run time).
  bool overlapP2P = false;
  /// Receive buffers of the overlapped plan, per type: (buffer, index of the unit that reads
  /// it last); a buffer is reused once that unit has run.
  llvm::DenseMap<Type, SmallVector<std::pair<rt::BufferOp, int64_t>>> recvSlots;
  /// Send buffers of the overlapped plan, per type: (buffer, token of its send in flight or -1).
  llvm::DenseMap<Type, SmallVector<std::pair<rt::BufferOp, int64_t>>> sendSlots;
  /// Megatron's gradient-accumulation fusion: when the only use of the weight gradient `gw`
  /// (model.linear_grad_weight, [N, K] from dy [..., N] and x [..., K]) is a sched.accumulate_grad
  /// into a main_grad of the same element type and shape (f32: an fp32 plan, or bf16/fp16
  /// inputs with the f32 result of docs/design.md "Mixed precision"), emits the GEMM straight
  /// into main_grad with beta = 1 (`rt.kernel "matmul" ... {beta = 1.0, trans_a = 1}`) instead
  /// of a temporary plus an `add`, and returns the accumulate_grad, which then lowers to
  /// nothing; returns null (nothing emitted) otherwise. A model.embedding_grad is fused the same
  /// way (`embedding_backward` with beta = 1: it adds the tokens' rows into main_grad instead of
  /// zeroing a [V, H] temporary and adding all of it). A tied embedding's gradient,
  /// accumulate_grad(add(a, b)) with a and b two such producers used only by the add
  /// (tiedGradAdd), accumulates both into main_grad; the add is recorded in
  /// BodyState::fusedAdds and lowers to nothing (main_grad += a, then += b: one rounding more
  /// than main_grad += (a + b) after the first microbatch).
  sched::AccumulateGradOp fuseGradAccumulation(Operation *producer, Location loc, BodyState &st);
  /// The model.add of two gradient producers (model.linear_grad_weight or model.embedding_grad,
  /// distinct, each used only by the add) whose result `g` is accumulated into a main_grad
  /// (fusableMainGrad); else null.
  model::AddOp tiedGradAdd(Value g);
  /// Whether `op` is a model.linear_grad_weight or model.embedding_grad with one result.
  static bool isAccumulatingProducer(Operation *op);
  /// embedding_backward of `eg` with beta = 1 into `out` (a main_grad view); maps eg's result.
  void emitEmbeddingGradAccumulate(model::EmbeddingGradOp eg, Value out, Location loc,
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
  void scaleLossSeed(OpBuilder &ob, Location loc, Value seed);
  /// main_grad *= 1 / loss_scale over `grads` (Megatron's _unscale_main_grads_and_check_for_nan;
  /// the check is the grad norm's finiteness, below).
  void unscaleGrads(OpBuilder &ob, Location loc, ArrayRef<Value> grads);
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
  int64_t stashSlots = 0, stashBSlots = 0;
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

/// The location of an instruction lowered from `op`: op's own, named by the op (instructions keep
/// the location of the op they come from).
inline Location sourceLoc(Operation &op) {
  return NameLoc::get(StringAttr::get(op.getContext(), op.getName().getStringRef()), op.getLoc());
}

} // namespace mlir::trainc::lower_to_rt

#endif // TRAINC_PASSES_EXPORT_LOWERING_H
