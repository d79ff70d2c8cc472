//===- ModelDialect.h - The model dialect ---------------------------------===//
#ifndef TRAINC_DIALECTS_MODEL_MODELDIALECT_H
#define TRAINC_DIALECTS_MODEL_MODELDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace mlir::trainc::model {

/// Receives the kernel calls of one op being lowered to buffers (implemented by the lowering pass).
/// Buffers are statically shaped memrefs; kernel names and attributes are those of
/// runtime/core/KernelSignatures.cpp.
class KernelEmitter {
public:
  virtual ~KernelEmitter() = default;
  virtual MLIRContext *getContext() = 0;
  /// The buffer holding operand `i` of the op.
  virtual Value operand(unsigned i) = 0;
  /// The buffer for result `i` (allocated on first use unless aliased).
  virtual Value result(unsigned i) = 0;
  /// A contiguous view of `buffer` with another static shape of the same element count.
  virtual Value reshape(Value buffer, ArrayRef<int64_t> shape) = 0;
  /// A contiguous view of numel(shape) elements of `buffer` from element `offset`; with `axis`
  /// ("tp", ...) the offset is `offset + c * axisStride` on the rank at coordinate c of that
  /// mesh axis (rt.view). Used to split a collective along a non-leading dim into contiguous
  /// ones.
  virtual Value view(Value buffer, int64_t offset, ArrayRef<int64_t> shape, StringRef axis = "",
                     int64_t axisStride = 0) {
    fail("views at an offset cannot be lowered by this emitter");
    return buffer;
  }
  /// Makes result `i` an alias of `buffer` (no kernel, no copy).
  virtual void aliasResult(unsigned i, Value buffer) = 0;
  /// Records a kernel call: inputs, outputs, attributes (i64 or f64) and, for outputs written in
  /// place of an input, inPlace[j] = that input's index (-1 otherwise; empty = none).
  virtual void kernel(StringRef name, ValueRange inputs, ValueRange outputs,
                      ArrayRef<NamedAttribute> attrs = {}, ArrayRef<int32_t> inPlace = {}) = 0;

  /// Records a collective of `kind` (all_reduce, all_gather, reduce_scatter) over the communicator
  /// group of mesh axis `axis` ("tp", "dp", ...), reading `input` and writing `output`, reducing
  /// with `max` instead of a sum when set (all_reduce only).
  virtual void collective(StringRef kind, StringRef axis, Value input, Value output,
                          bool max = false) = 0;
  /// Records a synchronous point-to-point transfer with group rank `peer` of the group of mesh
  /// axis `axis`: a send reads `buffer`, a recv writes it (pipeline parallelism).
  virtual void pointToPoint(bool send, StringRef axis, int64_t peer, Value buffer) {
    fail("point-to-point transfers cannot be lowered by this emitter");
  }
  /// Reports that the op cannot be lowered as it is (the lowering fails with this message).
  virtual void fail(const Twine &message) = 0;

  NamedAttribute intAttr(StringRef name, int64_t v);
  NamedAttribute floatAttr(StringRef name, double v);
};

/// How a split of one loop of an op's iteration space combines (ShardingRuleOpInterface).
enum class LoopSplit : uint8_t {
  /// Operands and results indexed by the loop are sliced; results not indexed by it become
  /// partial sums (an all-reduce or reduce-scatter restores them).
  Sum,
  /// As Sum, but results not indexed by it combine by log-sum-exp (a MAX and a SUM all-reduce:
  /// Megatron's vocab-parallel cross entropy). Results that do not depend on the loop at all
  /// (cross entropy's token count) are the same on every split.
  LogSumExp,
  /// The loop may not be split: the op needs its whole extent (norm statistics over the hidden
  /// dim, rotary pairs inside a head, attention keys, SwiGLU's gate/up pairing).
  Whole,
};

/// An op's sharding rule: loops and, per operand and result, an affine map from the loops to its
/// dimensions (a map with no results: not indexed by any loop, i.e. replicated, such as the
/// dropout key). E.g. linear: loops (l0, l1, n, k: sum), x (l0, l1, k), w (n, k), y (l0, l1, n).
struct ShardingRule {
  struct Loop {
    std::string name;
    int64_t extent = 0;
    LoopSplit split = LoopSplit::Sum;
  };
  SmallVector<Loop> loops;
  SmallVector<AffineMap> operands, results;
  /// One line, e.g. "loops (l0=2, l1=9, n=48, k=16:sum) ins [l0, l1, k] [n, k] outs [l0, l1, n]".
  std::string str() const;
};

/// Checks `rule` against `op`'s shapes: one map per operand and result, as many map results as
/// the operand's rank, every loop's extent equal to the dimension it indexes directly, and every
/// index expression inside its dimension at the loops' first and last index. Emits an error on
/// `op` naming the operand and dimension otherwise.
LogicalResult verifyShardingRule(Operation *op, const ShardingRule &rule);

/// Argument attribute naming the parameter an argument holds: `model.param = @<name>`, the
/// symbol of the module's `model.parameter @<name>` (Megatron's global name).
constexpr llvm::StringLiteral kParamAttr = "model.param";

/// The parameter argument `arg` of `fn` holds (its `model.param` symbol), null when the argument
/// is not a parameter.
FlatSymbolRefAttr paramOf(func::FuncOp fn, unsigned arg);

/// The declared attributes of the parameter held by argument `arg` of `fn`: init, init_std,
/// no_weight_decay of the module's `model.parameter @<name>` (looked up from `from`). Null when
/// the argument is not a parameter or the parameter is not declared. `symbols` caches the
/// module's symbol table (one lookup per parameter, not a scan of the module).
DictionaryAttr parameterAttrs(SymbolTableCollection &symbols, Operation *from, func::FuncOp fn,
                              unsigned arg);

/// Declares, at the top of `module`, every parameter that a function argument names
/// (`model.param = @<name>`) but no `model.parameter` declares, from the argument's
/// `model.init` / `model.init_std` / `model.no_weight_decay` (hand-written IR; init "zeros" when
/// absent), and removes those three attributes from every argument. Fails, with an error on the
/// argument, when two arguments give one parameter different types or initialisations, or when
/// a declaration's type differs from an argument's.
LogicalResult declareParameters(ModuleOp module);

/// Whether `op` is cheaper to recompute in a backward than to stash for it: views (model.reshape),
/// constants (model ops without operands), dropout keys (model.rng_offset) and all-gathers
/// (sequence parallelism's gather before a column-parallel linear: as Megatron, the backward
/// gathers the input again for the weight gradient instead of saving the whole sequence, one
/// more all-gather for 1/tp of that memory). Used wherever a forward is split from its
/// backward (autodiff of called functions, the schedule's units).
bool isCheaperToRecompute(Operation *op);

/// The attribute of activation recompute: "selective" on an op autodiff re-runs in a layer's
/// backward instead of saving its results (trainc-recompute-selective); "checkpoint" / "replay"
/// on the layer calls of full recompute (trainc-recompute).
inline constexpr llvm::StringLiteral kRecomputeAttrName = "model.recompute";
/// Whether autodiff re-materialises `op`'s results in the backward instead of saving them
/// (model.recompute = "selective").
inline bool isSelectiveRecompute(Operation *op) {
  auto a = op->getAttrOfType<StringAttr>(kRecomputeAttrName);
  return a && a.getValue() == "selective";
}

/// Element count of a statically shaped type.
int64_t numElements(Type t);
/// Bytes of a statically shaped tensor or memref type.
double byteSize(Type t);
/// The statistics element type for data of element type `t`: f64 for f64, f32 otherwise (the
/// runtime's statsDType).
Type statsElementType(Type t);

/// The module's device mesh: the `mesh.mesh` symbol (MLIR's mesh dialect) that trainc compile
/// puts on every module, with the axis names of Megatron's order in `trainc.axis_names`.
constexpr llvm::StringLiteral kMeshName = "mesh";
constexpr llvm::StringLiteral kAxisNamesAttr = "trainc.axis_names";
/// The name of axis `axis` of the mesh `mesh` that `op` refers to, or "" when the mesh or its
/// axis names are missing.
std::string meshAxisName(Operation *op, FlatSymbolRefAttr mesh, int64_t axis);

/// Discardable attribute of a model op (and of the rt.kernel it lowers to) whose integer
/// attributes depend on the rank: `model.rank_offsets = {vocab_start = array<i64: 0, 32>}` says
/// that on the rank at coordinate c of mesh axis 0 the attribute vocab_start is its IR value
/// plus c x 32 (a vocabulary shard's first row). The IR stays one program for every rank; the
/// export records these sites and ExportedPlan::specialise writes each rank's value.
constexpr llvm::StringLiteral kRankOffsetsAttr = "model.rank_offsets";
/// Unit attribute of the module: Megatron's --sequence-parallel (trainc-shard splits norms,
/// dropout and residual adds along the sequence, dim 1 of [b, s, h]).
constexpr llvm::StringLiteral kSequenceParallelAttr = "model.sequence_parallel";
/// Integer attribute of a dropout on a sequence shard: the global sequence length; its
/// shard's first position is the `seq_start` rank offset (the mask is the single-rank one).
constexpr llvm::StringLiteral kGlobalSeqAttr = "model.global_seq";
/// Copies `from`'s model.rank_offsets (if any) to `to` (VJP rules building the backward op).
void copyRankOffsets(Operation *from, Operation *to);

/// Attaches VJPOpInterface, CostOpInterface and KernelOpInterface to the mesh dialect's
/// tensor collectives: mesh.all_reduce (VJP: model.copy_to_region, Megatron's g/f pair),
/// mesh.all_gather (VJP: mesh.reduce_scatter) and mesh.reduce_scatter (VJP: mesh.all_gather).
void registerCollectiveInterfaces(DialectRegistry &registry);

} // namespace mlir::trainc::model

#include "dialects/Model/ModelDialect.h.inc"
#include "dialects/Model/ModelInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/Model/ModelOps.h.inc"

#endif
