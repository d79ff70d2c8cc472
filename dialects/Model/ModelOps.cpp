//===- ModelOps.cpp - Model dialect: verifiers, VJP, cost, sharding, kernels ===//

#include "dialects/Model/ModelDialect.h"
#include "dialects/AttrVerify.h"
#include "dialects/Trainc/TraincDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <type_traits>

using namespace mlir;
using namespace mlir::trainc::model;

#include "dialects/Model/ModelDialect.cpp.inc"
#include "dialects/Model/ModelInterfaces.cpp.inc"

void ModelDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Model/ModelOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace mlir::trainc::model {

namespace {
/// Mixed precision: the type of the gradient of a 16-bit norm weight, norm bias
/// or linear bias (model.rms_norm_grad / layer_norm_grad / bias_grad), f32. The
/// kernels sum over the rows in fp32 and write that sum unrounded, as the
/// weight GEMMs do; under --sequence-parallel it is each rank's partial sum
/// over its sequence shard, all-reduced over tp in fp32 (the VJP of
/// model.copy_to_region), so every layout gives main_grad the same fp32 sum
/// (docs/design.md "fp32 tensor-parallel reductions"). --tp-reduce-in-bf16
/// keeps Megatron's bf16 gradients (and so its bf16 partial sums and
/// reduction); fp16 is always fp32.
Type paramGradType(Operation *op, Value param) {
  auto t = cast<RankedTensorType>(param.getType());
  Type wide = statsElementType(t.getElementType());
  auto module = op->getParentOfType<ModuleOp>();
  if (wide == t.getElementType() ||
      (t.getElementType().isBF16() && module &&
       module->hasAttr("trainc.tp_reduce_in_bf16")))
    return t;
  return RankedTensorType::get(t.getShape(), wide);
}
} // namespace

NamedAttribute KernelEmitter::intAttr(StringRef name, int64_t v) {
  Builder b(getContext());
  return b.getNamedAttr(name, b.getI64IntegerAttr(v));
}
NamedAttribute KernelEmitter::floatAttr(StringRef name, double v) {
  Builder b(getContext());
  return b.getNamedAttr(name, b.getF64FloatAttr(v));
}

int64_t numElements(Type t) { return cast<ShapedType>(t).getNumElements(); }

double byteSize(Type t) {
  auto s = cast<ShapedType>(t);
  return double(s.getNumElements()) * double((s.getElementTypeBitWidth() + 7) / 8);
}

Type statsElementType(Type t) {
  return t.isF64() ? t : Float32Type::get(t.getContext());
}

} // namespace mlir::trainc::model

namespace {

RankedTensorType ty(Value v) { return cast<RankedTensorType>(v.getType()); }
ArrayRef<int64_t> shapeOf(Value v) { return ty(v).getShape(); }
int64_t rowsOf(Value v) {
  ArrayRef<int64_t> s = shapeOf(v);
  int64_t n = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i)
    n *= s[i];
  return n;
}

std::string str(ArrayRef<int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

/// Checks that `v` has exactly `shape`; the message names `what`.
LogicalResult expectShape(Operation *op, Value v, ArrayRef<int64_t> shape, StringRef what) {
  if (shapeOf(v) != shape)
    return op->emitOpError() << what << " has shape " << str(shapeOf(v)) << ", expected "
                             << str(shape);
  return success();
}

LogicalResult expectElementType(Operation *op, Value v, Type t, StringRef what) {
  if (ty(v).getElementType() != t)
    return op->emitOpError() << what << " has element type " << ty(v).getElementType()
                             << ", expected " << t;
  return success();
}

/// Statistics tensors (mean/rstd/lse/loss) use f64 for f64 data and f32 otherwise.
LogicalResult expectStats(Operation *op, Value v, Value data, ArrayRef<int64_t> shape,
                          StringRef what) {
  if (failed(expectShape(op, v, shape, what)))
    return failure();
  return expectElementType(op, v, statsElementType(ty(data).getElementType()), what);
}

/// Operands whose last dim the verifier reads must have rank >= 1.
LogicalResult expectRankAtLeast1(Operation *op, Value v, StringRef what) {
  if (ty(v).getRank() < 1)
    return op->emitOpError() << what << " must have rank >= 1, got shape " << str(shapeOf(v));
  return success();
}

SmallVector<int64_t> withLast(ArrayRef<int64_t> s, int64_t last) {
  SmallVector<int64_t> r(s.begin(), s.end());
  r.back() = last;
  return r;
}

double bytesOf(Operation *op) {
  double b = 0;
  for (Value v : op->getOperands())
    b += byteSize(v.getType());
  for (Value v : op->getResults())
    b += byteSize(v.getType());
  return b;
}

/// Attention FLOPs of one forward pass: two [s x s x d] matmuls per head (QK^T and PV), half of
/// them under causal masking (FlashAttention-2's accounting).
double attentionFlops(Value q, bool causal) {
  ArrayRef<int64_t> s = shapeOf(q);
  double f = 4.0 * double(s[0]) * double(s[2]) * double(s[1]) * double(s[1]) * double(s[3]);
  return causal ? f / 2 : f;
}

} // namespace

//===----------------------------------------------------------------------===//
// fill, reshape
//===----------------------------------------------------------------------===//

LogicalResult FillOp::verify() { return success(); }
double FillOp::getFlops() { return 0; }
double FillOp::getBytesMoved() { return byteSize(getType()); }
void FillOp::emitKernels(KernelEmitter &e) {
  e.kernel("fill", {}, {e.result(0)}, {e.floatAttr("value", getValue().convertToDouble())});
}

LogicalResult ReshapeOp::verify() {
  if (ty(getInput()).getElementType() != ty(getResult()).getElementType())
    return emitOpError() << "changes the element type from " << ty(getInput()).getElementType()
                         << " to " << ty(getResult()).getElementType();
  if (numElements(getInput().getType()) != numElements(getResult().getType()))
    return emitOpError() << "result shape " << str(shapeOf(getResult())) << " has "
                         << numElements(getResult().getType()) << " elements, the input shape "
                         << str(shapeOf(getInput())) << " has "
                         << numElements(getInput().getType());
  return success();
}
double ReshapeOp::getFlops() { return 0; }
double ReshapeOp::getBytesMoved() { return 0; }
void ReshapeOp::emitKernels(KernelEmitter &e) {
  e.aliasResult(0, e.reshape(e.operand(0), shapeOf(getResult())));
}
SmallVector<Value> ReshapeOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value()};
  return {b.create<ReshapeOp>(getLoc(), getInput().getType(), g[0])};
}

//===----------------------------------------------------------------------===//
// embedding
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  if (ty(getTable()).getRank() != 2)
    return emitOpError() << "table has rank " << ty(getTable()).getRank()
                         << ", expected 2 ([vocab, hidden])";
  SmallVector<int64_t> want(shapeOf(getIds()));
  want.push_back(shapeOf(getTable())[1]);
  if (failed(expectShape(*this, getResult(), want, "result")))
    return failure();
  return expectElementType(*this, getResult(), ty(getTable()).getElementType(), "result");
}
double EmbeddingOp::getFlops() { return 0; }
double EmbeddingOp::getBytesMoved() {
  return byteSize(getIds().getType()) + 2 * byteSize(getResult().getType());
}
void EmbeddingOp::emitKernels(KernelEmitter &e) {
  e.kernel("embedding", {e.operand(0), e.operand(1)}, {e.result(0)},
           {e.intAttr("vocab_start", getVocabStart())});
}
SmallVector<Value> EmbeddingOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value(), Value()};
  auto dt = b.create<EmbeddingGradOp>(getLoc(), getTable().getType(), getIds(), g[0],
                                      getVocabStartAttr());
  copyRankOffsets(*this, dt);
  return {dt, Value()};
}

LogicalResult EmbeddingGradOp::verify() {
  if (ty(getResult()).getRank() != 2)
    return emitOpError() << "result has rank " << ty(getResult()).getRank() << ", expected 2";
  SmallVector<int64_t> want(shapeOf(getIds()));
  want.push_back(shapeOf(getResult())[1]);
  return expectShape(*this, getGrad(), want, "grad");
}
double EmbeddingGradOp::getFlops() { return 0; }
double EmbeddingGradOp::getBytesMoved() { return bytesOf(*this); }
void EmbeddingGradOp::emitKernels(KernelEmitter &e) {
  e.kernel("embedding_backward", {e.operand(0), e.operand(1)}, {e.result(0)},
           {e.intAttr("vocab_start", getVocabStart()), e.floatAttr("beta", 0)});
}

//===----------------------------------------------------------------------===//
// linear
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::verify() {
  if (ty(getWeight()).getRank() != 2)
    return emitOpError() << "weight has rank " << ty(getWeight()).getRank()
                         << ", expected 2 ([out_features, in_features])";
  if (ty(getInput()).getRank() < 1)
    return emitOpError() << "input must have rank >= 1";
  int64_t k = shapeOf(getInput()).back(), n = shapeOf(getWeight())[0];
  if (k != shapeOf(getWeight())[1])
    return emitOpError() << "input feature size " << k << " does not match weight in_features "
                         << shapeOf(getWeight())[1];
  if (getBias() && failed(expectShape(*this, getBias(), {n}, "bias")))
    return failure();
  Type et = ty(getInput()).getElementType();
  if (failed(expectElementType(*this, getWeight(), et, "operand")))
    return failure();
  // A bf16/fp16 GEMM may keep its fp32 accumulator (a tensor-parallel partial sum reduced in
  // fp32 before the one rounding); without a bias, whose add would be in the narrow type.
  Type acc = statsElementType(et);
  Type rt = ty(getResult()).getElementType();
  if (rt == acc && acc != et && getBias())
    return emitOpError() << "result has element type " << rt << " with a bias; an " << acc
                         << " result of " << et << " operands is a partial sum without bias";
  if (!(rt == acc && acc != et) && failed(expectElementType(*this, getResult(), et, "operand")))
    return failure();
  return expectShape(*this, getResult(), withLast(shapeOf(getInput()), n), "result");
}
double LinearOp::getFlops() {
  return 2.0 * double(rowsOf(getInput())) * double(shapeOf(getWeight())[0]) *
         double(shapeOf(getWeight())[1]);
}
double LinearOp::getBytesMoved() { return bytesOf(*this); }
void LinearOp::emitKernels(KernelEmitter &e) {
  int64_t k = shapeOf(getInput()).back(), n = shapeOf(getWeight())[0], r = rowsOf(getInput());
  Value x = e.reshape(e.operand(0), {r, k});
  Value y = e.reshape(e.result(0), {r, n});
  e.kernel("matmul", {x, e.operand(1)}, {y}, {e.intAttr("trans_b", 1)});
  if (getBias())
    e.kernel("add_bias", {y, e.operand(2)}, {y}, {}, {0});
}
SmallVector<Value> LinearOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return SmallVector<Value>(getNumOperands(), Value());
  SmallVector<Value> r;
  // An fp32 result of bf16 operands (a partial sum kept in fp32): the gradient is the widened
  // bf16 gradient of the rounded sum, so narrowing it back is exact; the GEMMs take it in the
  // operands' type.
  Value dy = g[0];
  Type et = ty(getInput()).getElementType();
  if (ty(dy).getElementType() != et)
    dy = b.create<CastOp>(getLoc(), RankedTensorType::get(shapeOf(dy), et), dy);
  r.push_back(b.create<LinearGradInputOp>(getLoc(), getInput().getType(), dy, getWeight()));
  // bf16 weights: the weight-gradient GEMM writes fp32 (bf16 products accumulated in fp32, no
  // bf16 temporary), the dtype of the main grad it is accumulated into.
  auto wt = cast<RankedTensorType>(getWeight().getType());
  auto gradType = RankedTensorType::get(wt.getShape(), statsElementType(wt.getElementType()));
  r.push_back(b.create<LinearGradWeightOp>(getLoc(), gradType, dy, getInput()));
  if (getBias())
    r.push_back(
        b.create<BiasGradOp>(getLoc(), paramGradType(*this, getBias()), dy));
  return r;
}

LogicalResult LinearGradInputOp::verify() {
  if (failed(expectRankAtLeast1(*this, getGrad(), "grad")))
    return failure();
  if (ty(getWeight()).getRank() != 2)
    return emitOpError() << "weight has rank " << ty(getWeight()).getRank() << ", expected 2";
  int64_t n = shapeOf(getWeight())[0], k = shapeOf(getWeight())[1];
  if (shapeOf(getGrad()).back() != n)
    return emitOpError() << "grad feature size " << shapeOf(getGrad()).back()
                         << " does not match weight out_features " << n;
  // The grad's element type, or f32 for 16-bit operands (the GEMM's fp32 accumulator, summed
  // in fp32 before one rounding).
  Type et = ty(getGrad()).getElementType(), rt = ty(getResult()).getElementType();
  if (failed(expectElementType(*this, getWeight(), et, "weight")))
    return failure();
  if (rt != et && rt != statsElementType(et))
    return emitOpError() << "result has element type " << rt << ", expected " << et
                         << " (as grad) or " << statsElementType(et);
  return expectShape(*this, getResult(), withLast(shapeOf(getGrad()), k), "result");
}
double LinearGradInputOp::getFlops() {
  return 2.0 * double(rowsOf(getGrad())) * double(shapeOf(getWeight())[0]) *
         double(shapeOf(getWeight())[1]);
}
double LinearGradInputOp::getBytesMoved() { return bytesOf(*this); }
void LinearGradInputOp::emitKernels(KernelEmitter &e) {
  int64_t n = shapeOf(getWeight())[0], k = shapeOf(getWeight())[1], r = rowsOf(getGrad());
  e.kernel("matmul", {e.reshape(e.operand(0), {r, n}), e.operand(1)},
           {e.reshape(e.result(0), {r, k})});
}

LogicalResult LinearGradWeightOp::verify() {
  if (failed(expectRankAtLeast1(*this, getGrad(), "grad")) ||
      failed(expectRankAtLeast1(*this, getInput(), "input")))
    return failure();
  if (rowsOf(getGrad()) != rowsOf(getInput()))
    return emitOpError() << "grad has " << rowsOf(getGrad()) << " rows, input has "
                         << rowsOf(getInput());
  return expectShape(*this, getResult(), {shapeOf(getGrad()).back(), shapeOf(getInput()).back()},
                     "result");
}
double LinearGradWeightOp::getFlops() {
  return 2.0 * double(rowsOf(getGrad())) * double(shapeOf(getGrad()).back()) *
         double(shapeOf(getInput()).back());
}
double LinearGradWeightOp::getBytesMoved() { return bytesOf(*this); }
void LinearGradWeightOp::emitKernels(KernelEmitter &e) {
  int64_t n = shapeOf(getGrad()).back(), k = shapeOf(getInput()).back(), r = rowsOf(getGrad());
  e.kernel("matmul", {e.reshape(e.operand(0), {r, n}), e.reshape(e.operand(1), {r, k})},
           {e.result(0)}, {e.intAttr("trans_a", 1)});
}

LogicalResult BiasGradOp::verify() {
  if (failed(expectRankAtLeast1(*this, getGrad(), "grad")))
    return failure();
  return expectShape(*this, getResult(), {shapeOf(getGrad()).back()}, "result");
}
double BiasGradOp::getFlops() { return 0; }
double BiasGradOp::getBytesMoved() { return bytesOf(*this); }
void BiasGradOp::emitKernels(KernelEmitter &e) {
  e.kernel("sum_rows", {e.operand(0)}, {e.result(0)});
}

//===----------------------------------------------------------------------===//
// layer_norm, rms_norm
//===----------------------------------------------------------------------===//

namespace {
LogicalResult verifyNorm(Operation *op, Value x, Value w, Value y, ValueRange stats) {
  if (failed(expectRankAtLeast1(op, x, "input")))
    return failure();
  int64_t h = shapeOf(x).back();
  if (failed(expectShape(op, w, {h}, "weight")) || failed(expectShape(op, y, shapeOf(x), "result")))
    return failure();
  for (Value s : stats)
    if (failed(expectStats(op, s, x, {rowsOf(x)}, "statistics result")))
      return failure();
  return success();
}
} // namespace

LogicalResult LayerNormOp::verify() {
  if (failed(expectRankAtLeast1(*this, getInput(), "input")))
    return failure();
  if (failed(expectShape(*this, getBias(), {shapeOf(getInput()).back()}, "bias")))
    return failure();
  return verifyNorm(*this, getInput(), getWeight(), getResult(), {getMean(), getRstd()});
}
double LayerNormOp::getFlops() { return 0; }
double LayerNormOp::getBytesMoved() { return bytesOf(*this); }
void LayerNormOp::emitKernels(KernelEmitter &e) {
  e.kernel("layer_norm", {e.operand(0), e.operand(1), e.operand(2)},
           {e.result(0), e.result(1), e.result(2)}, {e.floatAttr("eps", getEps().convertToDouble())});
}
SmallVector<Value> LayerNormOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value(), Value(), Value()};
  auto grad = b.create<LayerNormGradOp>(
      getLoc(),
      TypeRange{getInput().getType(), paramGradType(*this, getWeight()),
                paramGradType(*this, getBias())},
      g[0], getInput(), getWeight(), getMean(), getRstd());
  return {grad.getInputGrad(), grad.getWeightGrad(), grad.getBiasGrad()};
}

LogicalResult LayerNormGradOp::verify() {
  if (failed(verifyNorm(*this, getInput(), getWeight(), getInputGrad(), {getMean(), getRstd()})))
    return failure();
  return expectShape(*this, getGrad(), shapeOf(getInput()), "grad");
}
double LayerNormGradOp::getFlops() { return 0; }
double LayerNormGradOp::getBytesMoved() { return bytesOf(*this); }
void LayerNormGradOp::emitKernels(KernelEmitter &e) {
  e.kernel("layer_norm_backward",
           {e.operand(0), e.operand(1), e.operand(2), e.operand(3), e.operand(4)},
           {e.result(0), e.result(1), e.result(2)});
}

LogicalResult RMSNormOp::verify() {
  return verifyNorm(*this, getInput(), getWeight(), getResult(), {getRstd()});
}
double RMSNormOp::getFlops() { return 0; }
double RMSNormOp::getBytesMoved() { return bytesOf(*this); }
void RMSNormOp::emitKernels(KernelEmitter &e) {
  e.kernel("rms_norm", {e.operand(0), e.operand(1)}, {e.result(0), e.result(1)},
           {e.floatAttr("eps", getEps().convertToDouble())});
}
SmallVector<Value> RMSNormOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value(), Value()};
  auto grad = b.create<RMSNormGradOp>(
      getLoc(),
      TypeRange{getInput().getType(), paramGradType(*this, getWeight())}, g[0],
      getInput(), getWeight(), getRstd());
  return {grad.getInputGrad(), grad.getWeightGrad()};
}

LogicalResult RMSNormGradOp::verify() {
  if (failed(verifyNorm(*this, getInput(), getWeight(), getInputGrad(), {getRstd()})))
    return failure();
  return expectShape(*this, getGrad(), shapeOf(getInput()), "grad");
}
double RMSNormGradOp::getFlops() { return 0; }
double RMSNormGradOp::getBytesMoved() { return bytesOf(*this); }
void RMSNormGradOp::emitKernels(KernelEmitter &e) {
  e.kernel("rms_norm_backward", {e.operand(0), e.operand(1), e.operand(2), e.operand(3)},
           {e.result(0), e.result(1)});
}

//===----------------------------------------------------------------------===//
// rope
//===----------------------------------------------------------------------===//

namespace {
LogicalResult verifyRope(Operation *op, Value x, Value pos, Value y, int64_t rotaryDim) {
  if (ty(x).getRank() != 4)
    return op->emitOpError() << "input has rank " << ty(x).getRank()
                             << ", expected 4 ([batch, seq, heads, head_dim])";
  if (failed(expectShape(op, pos, {shapeOf(x)[0], shapeOf(x)[1]}, "positions")) ||
      failed(expectShape(op, y, shapeOf(x), "result")))
    return failure();
  int64_t d = shapeOf(x)[3], rd = rotaryDim == 0 ? d : rotaryDim;
  if (rd <= 0 || rd > d || rd % 2)
    return op->emitOpError() << "rotary_dim " << rd << " must be even and at most head_dim " << d;
  return success();
}
} // namespace

LogicalResult RopeOp::verify() {
  return verifyRope(*this, getInput(), getPositions(), getResult(), getRotaryDim());
}
double RopeOp::getFlops() { return 0; }
double RopeOp::getBytesMoved() { return bytesOf(*this); }
void RopeOp::emitKernels(KernelEmitter &e) {
  e.kernel("rope", {e.operand(0), e.operand(1)}, {e.result(0)},
           {e.floatAttr("base", getBase().convertToDouble()), e.intAttr("rotary_dim", getRotaryDim())});
}
SmallVector<Value> RopeOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value(), Value()};
  return {b.create<RopeGradOp>(getLoc(), getInput().getType(), g[0], getPositions(),
                               getBaseAttr(), getRotaryDimAttr()),
          Value()};
}

LogicalResult RopeGradOp::verify() {
  return verifyRope(*this, getGrad(), getPositions(), getResult(), getRotaryDim());
}
double RopeGradOp::getFlops() { return 0; }
double RopeGradOp::getBytesMoved() { return bytesOf(*this); }
void RopeGradOp::emitKernels(KernelEmitter &e) {
  e.kernel("rope_backward", {e.operand(0), e.operand(1)}, {e.result(0)},
           {e.floatAttr("base", getBase().convertToDouble()), e.intAttr("rotary_dim", getRotaryDim())});
}

//===----------------------------------------------------------------------===//
// attention
//===----------------------------------------------------------------------===//

namespace {
LogicalResult verifyAttention(Operation *op, Value q, Value k, Value v) {
  for (Value x : {q, k, v})
    if (ty(x).getRank() != 4)
      return op->emitOpError() << "query, key and value must have rank 4 ([batch, seq, heads, "
                                  "head_dim]), got shape "
                               << str(shapeOf(x));
  ArrayRef<int64_t> qs = shapeOf(q), ks = shapeOf(k);
  if (failed(expectShape(op, v, ks, "value")))
    return failure();
  if (ks[0] != qs[0] || ks[1] != qs[1] || ks[3] != qs[3])
    return op->emitOpError() << "key shape " << str(ks) << " does not match query shape "
                             << str(qs) << " in batch, sequence or head_dim";
  if (ks[2] <= 0 || qs[2] % ks[2] != 0)
    return op->emitOpError() << "query heads " << qs[2] << " is not divisible by key/value heads "
                             << ks[2];
  return success();
}
} // namespace

static LogicalResult verifyRngKey(Operation *op, Value rng);

namespace {
/// Attention dropout: 0 <= p < 1, and p > 0 needs the rng key.
LogicalResult verifyAttentionDropout(Operation *op, double p, Value rng) {
  if (!(p >= 0 && p < 1))
    return op->emitOpError() << "dropout = " << p << ", expected 0 <= dropout < 1";
  if (p > 0 && !rng)
    return op->emitOpError() << "dropout = " << p << " needs the rng operand (a dropout key)";
  return rng ? verifyRngKey(op, rng) : success();
}
} // namespace

namespace {
/// --reset-attention-mask: doc_start is i32 [batch, seq] of the query, and the mask causal.
LogicalResult verifyDocStart(Operation *op, Value q, Value docStart, bool causal) {
  if (!docStart)
    return success();
  ArrayRef<int64_t> qs = shapeOf(q);
  if (ty(q).getRank() == 4 && failed(expectShape(op, docStart, {qs[0], qs[1]}, "doc_start")))
    return failure();
  if (!causal)
    return op->emitOpError() << "doc_start (--reset-attention-mask) needs causal = true";
  return success();
}

/// The kernel of the forward (backward when `grad`): attention[_dropout][_segments][_backward].
std::string attentionKernelName(bool dropout, bool segments, bool grad) {
  return std::string("attention") + (dropout ? "_dropout" : "") + (segments ? "_segments" : "") +
         (grad ? "_backward" : "");
}
} // namespace

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionDropout(*this, getDropout().convertToDouble(), getRng())))
    return failure();
  if (failed(verifyDocStart(*this, getQuery(), getDocStart(), getCausal())))
    return failure();
  if (failed(verifyAttention(*this, getQuery(), getKey(), getValue())) ||
      failed(expectShape(*this, getResult(), shapeOf(getQuery()), "result")))
    return failure();
  ArrayRef<int64_t> qs = shapeOf(getQuery());
  return expectStats(*this, getLse(), getQuery(), {qs[0], qs[2], qs[1]}, "lse");
}
double AttentionOp::getFlops() { return attentionFlops(getQuery(), getCausal()); }
double AttentionOp::getBytesMoved() { return bytesOf(*this); }
namespace {
/// The model's head count for the attention dropout key: `model.global_heads` (set by
/// trainc-shard on a head shard, whose head_start is a model.rank_offsets entry), else the
/// op's own (query dim 2).
int64_t globalHeads(Operation *op) {
  if (auto a = op->getAttrOfType<IntegerAttr>("model.global_heads"))
    return a.getInt();
  return shapeOf(op->getOperand(0))[2];
}
} // namespace

void AttentionOp::emitKernels(KernelEmitter &e) {
  // Inputs q, k, v[, rng][, doc_start] (the operands' order); the segment kernels take doc_start
  // last.
  const bool dropout = getDropout().convertToDouble() > 0, segments = bool(getDocStart());
  SmallVector<Value> in = {e.operand(0), e.operand(1), e.operand(2)};
  if (dropout)
    in.push_back(e.operand(3));
  if (segments)
    in.push_back(e.operand(getNumOperands() - 1));
  SmallVector<NamedAttribute> attrs = {e.intAttr("causal", getCausal()),
                                       e.floatAttr("scale", getScale().convertToDouble())};
  if (dropout)
    attrs.append({e.floatAttr("p", getDropout().convertToDouble()), e.intAttr("op_id", getOpId()),
                  e.intAttr("head_start", 0), e.intAttr("num_heads", globalHeads(*this))});
  e.kernel(attentionKernelName(dropout, segments, false), in, {e.result(0), e.result(1)}, attrs);
}
SmallVector<Value> AttentionOp::buildVJP(OpBuilder &b, ValueRange g) {
  SmallVector<Value> none(getNumOperands(), Value());
  if (!g[0])
    return none;
  auto grad = b.create<AttentionGradOp>(
      getLoc(), TypeRange{getQuery().getType(), getKey().getType(), getValue().getType()},
      getQuery(), getKey(), getValue(), getResult(), getLse(), g[0], getRng(), getDocStart(),
      getCausalAttr(), getScaleAttr(), getDropoutAttr(), getOpIdAttr());
  copyRankOffsets(*this, grad);
  if (Attribute heads = (*this)->getAttr("model.global_heads"))
    grad->setAttr("model.global_heads", heads);
  SmallVector<Value> grads = {grad.getQueryGrad(), grad.getKeyGrad(), grad.getValueGrad()};
  grads.resize(getNumOperands()); // no cotangent for rng and doc_start
  return grads;
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionDropout(*this, getDropout().convertToDouble(), getRng())))
    return failure();
  if (failed(verifyDocStart(*this, getQuery(), getDocStart(), getCausal())))
    return failure();
  if (failed(verifyAttention(*this, getQuery(), getKey(), getValue())) ||
      failed(expectShape(*this, getGrad(), shapeOf(getQuery()), "grad")) ||
      failed(expectShape(*this, getOut(), shapeOf(getQuery()), "out")))
    return failure();
  ArrayRef<int64_t> qs = shapeOf(getQuery());
  if (failed(expectStats(*this, getLse(), getQuery(), {qs[0], qs[2], qs[1]}, "lse")))
    return failure();
  if (failed(expectShape(*this, getQueryGrad(), qs, "query_grad")) ||
      failed(expectShape(*this, getKeyGrad(), shapeOf(getKey()), "key_grad")) ||
      failed(expectShape(*this, getValueGrad(), shapeOf(getValue()), "value_grad")))
    return failure();
  return success();
}
double AttentionGradOp::getFlops() { return 2.5 * attentionFlops(getQuery(), getCausal()); }
double AttentionGradOp::getBytesMoved() { return bytesOf(*this); }
void AttentionGradOp::emitKernels(KernelEmitter &e) {
  // Inputs q, k, v, o, lse, do[, rng][, doc_start], as the forward's.
  const bool dropout = getDropout().convertToDouble() > 0, segments = bool(getDocStart());
  SmallVector<Value> in;
  for (unsigned i = 0; i < 6; ++i)
    in.push_back(e.operand(i));
  if (dropout)
    in.push_back(e.operand(6));
  if (segments)
    in.push_back(e.operand(getNumOperands() - 1));
  SmallVector<NamedAttribute> attrs = {e.intAttr("causal", getCausal()),
                                       e.floatAttr("scale", getScale().convertToDouble())};
  if (dropout)
    attrs.append({e.floatAttr("p", getDropout().convertToDouble()), e.intAttr("op_id", getOpId()),
                  e.intAttr("head_start", 0), e.intAttr("num_heads", globalHeads(*this))});
  e.kernel(attentionKernelName(dropout, segments, true), in,
           {e.result(0), e.result(1), e.result(2)}, attrs);
}

//===----------------------------------------------------------------------===//
// gelu, swiglu, add, dropout
//===----------------------------------------------------------------------===//

LogicalResult GeluOp::verify() {
  return expectShape(*this, getResult(), shapeOf(getInput()), "result");
}
double GeluOp::getFlops() { return 0; }
double GeluOp::getBytesMoved() { return bytesOf(*this); }
void GeluOp::emitKernels(KernelEmitter &e) {
  e.kernel("gelu", {e.operand(0)}, {e.result(0)}, {e.intAttr("approximate", getApproximate())});
}
SmallVector<Value> GeluOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value()};
  return {b.create<GeluGradOp>(getLoc(), getInput().getType(), g[0], getInput(),
                               getApproximateAttr())};
}
LogicalResult GeluGradOp::verify() {
  if (failed(expectShape(*this, getGrad(), shapeOf(getInput()), "grad")))
    return failure();
  return expectShape(*this, getResult(), shapeOf(getInput()), "result");
}
double GeluGradOp::getFlops() { return 0; }
double GeluGradOp::getBytesMoved() { return bytesOf(*this); }
void GeluGradOp::emitKernels(KernelEmitter &e) {
  e.kernel("gelu_backward", {e.operand(0), e.operand(1)}, {e.result(0)},
           {e.intAttr("approximate", getApproximate())});
}

LogicalResult SwigluOp::verify() {
  if (failed(expectRankAtLeast1(*this, getInput(), "input")))
    return failure();
  int64_t last = shapeOf(getInput()).back();
  if (last % 2)
    return emitOpError() << "input last dim " << last << " must be even (two halves)";
  return expectShape(*this, getResult(), withLast(shapeOf(getInput()), last / 2), "result");
}
double SwigluOp::getFlops() { return 0; }
double SwigluOp::getBytesMoved() { return bytesOf(*this); }
void SwigluOp::emitKernels(KernelEmitter &e) {
  e.kernel("swiglu", {e.operand(0)}, {e.result(0)});
}
SmallVector<Value> SwigluOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value()};
  return {b.create<SwigluGradOp>(getLoc(), getInput().getType(), g[0], getInput())};
}
LogicalResult SwigluGradOp::verify() {
  if (failed(expectRankAtLeast1(*this, getInput(), "input")))
    return failure();
  int64_t last = shapeOf(getInput()).back();
  if (last % 2)
    return emitOpError() << "input last dim " << last << " must be even (two halves)";
  if (failed(expectShape(*this, getGrad(), withLast(shapeOf(getInput()), last / 2), "grad")))
    return failure();
  return expectShape(*this, getResult(), shapeOf(getInput()), "result");
}
double SwigluGradOp::getFlops() { return 0; }
double SwigluGradOp::getBytesMoved() { return bytesOf(*this); }
void SwigluGradOp::emitKernels(KernelEmitter &e) {
  e.kernel("swiglu_backward", {e.operand(0), e.operand(1)}, {e.result(0)});
}

LogicalResult AddOp::verify() {
  if (failed(expectShape(*this, getRhs(), shapeOf(getLhs()), "rhs")))
    return failure();
  for (Value v : {getRhs(), getResult()})
    if (failed(expectElementType(*this, v, ty(getLhs()).getElementType(), "operand")))
      return failure();
  return expectShape(*this, getResult(), shapeOf(getLhs()), "result");
}
double AddOp::getFlops() { return 0; }
double AddOp::getBytesMoved() { return bytesOf(*this); }
void AddOp::emitKernels(KernelEmitter &e) {
  e.kernel("add", {e.operand(0), e.operand(1)}, {e.result(0)});
}
SmallVector<Value> AddOp::buildVJP(OpBuilder &b, ValueRange g) { return {g[0], g[0]}; }

LogicalResult CastOp::verify() {
  return expectShape(*this, getResult(), shapeOf(getInput()), "result");
}
double CastOp::getFlops() { return 0; }
double CastOp::getBytesMoved() { return bytesOf(*this); }
void CastOp::emitKernels(KernelEmitter &e) { e.kernel("cast", {e.operand(0)}, {e.result(0)}); }
SmallVector<Value> CastOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value()};
  return {b.create<CastOp>(getLoc(), getInput().getType(), g[0])};
}

bool mlir::trainc::model::isCheaperToRecompute(Operation *op) {
  return isa<ReshapeOp, RngOffsetOp, mesh::AllGatherOp>(op) ||
         (op->getNumOperands() == 0 && isa<ModelDialect>(op->getDialect()));
}

/// Checks that `rng` is a dropout key: tensor<3xi64> or rng_offset's tensor<4xi64>.

static LogicalResult verifyRngKey(Operation *op, Value rng) {
  if (numElements(rng.getType()) == 4)
    return expectShape(op, rng, {4}, "rng (seed, iteration, microbatch, op_id offset)");
  return expectShape(op, rng, {3}, "rng (seed, iteration, microbatch)");
}

LogicalResult DropoutOp::verify() {
  double p = getP().convertToDouble();
  if (!(p >= 0 && p < 1))
    return emitOpError() << "p = " << p << ", expected 0 <= p < 1";
  if (failed(verifyRngKey(*this, getRng())))
    return failure();
  return expectShape(*this, getResult(), shapeOf(getInput()), "result");
}
double DropoutOp::getFlops() { return 0; }
double DropoutOp::getBytesMoved() { return bytesOf(*this); }
namespace {
/// The global sequence length of a dropout on a sequence shard (`model.global_seq`, set by
/// trainc-shard with a seq_start rank offset), else 0 (the operand holds whole samples).
int64_t globalSeq(Operation *op) {
  if (auto a = op->getAttrOfType<IntegerAttr>(kGlobalSeqAttr))
    return a.getInt();
  return 0;
}
} // namespace
void DropoutOp::emitKernels(KernelEmitter &e) {
  e.kernel("dropout", {e.operand(0), e.operand(1)}, {e.result(0)},
           {e.floatAttr("p", getP().convertToDouble()), e.intAttr("op_id", getOpId()),
            e.intAttr("seq_start", 0), e.intAttr("seq_length", globalSeq(*this))});
}
SmallVector<Value> DropoutOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value(), Value()};
  auto grad = b.create<DropoutGradOp>(getLoc(), getInput().getType(), g[0], getRng(), getPAttr(),
                                      getOpIdAttr());
  copyRankOffsets(*this, grad);
  if (Attribute seq = (*this)->getAttr(kGlobalSeqAttr))
    grad->setAttr(kGlobalSeqAttr, seq);
  return {grad, Value()};
}
LogicalResult DropoutGradOp::verify() {
  double p = getP().convertToDouble();
  if (!(p >= 0 && p < 1))
    return emitOpError() << "p = " << p << ", expected 0 <= p < 1";
  if (failed(verifyRngKey(*this, getRng())))
    return failure();
  return expectShape(*this, getResult(), shapeOf(getGrad()), "result");
}

LogicalResult RngOffsetOp::verify() {
  if (failed(verifyRngKey(*this, getRng())))
    return failure();
  if (int64_t(getOffset()) < 0)
    return emitOpError() << "offset = " << int64_t(getOffset()) << ", expected >= 0";
  return expectShape(*this, getResult(), {4}, "result (seed, iteration, microbatch, op_id offset)");
}
double RngOffsetOp::getFlops() { return 0; }
double RngOffsetOp::getBytesMoved() { return 0; }
SmallVector<Value> RngOffsetOp::buildVJP(OpBuilder &, ValueRange) { return {Value()}; }
void RngOffsetOp::emitKernels(KernelEmitter &e) {
  e.kernel("rng_offset", {e.operand(0)}, {e.result(0)}, {e.intAttr("offset", getOffset())});
}
double DropoutGradOp::getFlops() { return 0; }
double DropoutGradOp::getBytesMoved() { return bytesOf(*this); }
void DropoutGradOp::emitKernels(KernelEmitter &e) {
  e.kernel("dropout_backward", {e.operand(0), e.operand(1)}, {e.result(0)},
           {e.floatAttr("p", getP().convertToDouble()), e.intAttr("op_id", getOpId()),
            e.intAttr("seq_start", 0), e.intAttr("seq_length", globalSeq(*this))});
}

//===----------------------------------------------------------------------===//
// cross_entropy
//===----------------------------------------------------------------------===//

namespace {
LogicalResult verifyCE(Operation *op, Value logits, Value labels, Value mask) {
  if (ty(logits).getRank() != 2)
    return op->emitOpError() << "logits have rank " << ty(logits).getRank()
                             << ", expected 2 ([tokens, vocab])";
  int64_t n = shapeOf(logits)[0];
  if (failed(expectShape(op, labels, {n}, "labels")))
    return failure();
  return expectStats(op, mask, logits, {n}, "loss_mask");
}
} // namespace

LogicalResult CrossEntropyOp::verify() {
  if (failed(verifyCE(*this, getLogits(), getLabels(), getLossMask())))
    return failure();
  if (failed(expectStats(*this, getLossSum(), getLogits(), {}, "loss_sum")) ||
      failed(expectStats(*this, getNumTokens(), getLogits(), {}, "num_tokens")))
    return failure();
  if (int64_t(getValidVocab()) != -1 && int64_t(getValidVocab()) <= int64_t(getVocabStart()))
    return emitOpError() << "valid_vocab " << int64_t(getValidVocab()) << " leaves no valid column after vocab_start "
                         << getVocabStart();
  return expectStats(*this, getLse(), getLogits(), {shapeOf(getLogits())[0]}, "lse");
}
double CrossEntropyOp::getFlops() { return 0; }
double CrossEntropyOp::getBytesMoved() { return bytesOf(*this); }
void CrossEntropyOp::emitKernels(KernelEmitter &e) {
  e.kernel("cross_entropy", {e.operand(0), e.operand(1), e.operand(2)},
           {e.result(0), e.result(1), e.result(2)},
           {e.intAttr("vocab_start", getVocabStart()), e.intAttr("valid_vocab", getValidVocab())});
}
SmallVector<Value> CrossEntropyOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value(), Value(), Value()};
  Value d = b.create<CrossEntropyGradOp>(getLoc(), getLogits().getType(), getLogits(),
                                         getLabels(), getLossMask(), getLse(), g[0],
                                         getVocabStartAttr(), getValidVocabAttr());
  return {d, Value(), Value()};
}

LogicalResult CrossEntropyGradOp::verify() {
  if (failed(verifyCE(*this, getLogits(), getLabels(), getLossMask())))
    return failure();
  if (failed(expectStats(*this, getLossGrad(), getLogits(), {}, "loss_grad")) ||
      failed(expectStats(*this, getLse(), getLogits(), {shapeOf(getLogits())[0]}, "lse")))
    return failure();
  return expectShape(*this, getResult(), shapeOf(getLogits()), "result");
}
double CrossEntropyGradOp::getFlops() { return 0; }
double CrossEntropyGradOp::getBytesMoved() { return bytesOf(*this); }
void CrossEntropyGradOp::emitKernels(KernelEmitter &e) {
  e.kernel("cross_entropy_backward",
           {e.operand(0), e.operand(1), e.operand(2), e.operand(3), e.operand(4)}, {e.result(0)},
           {e.intAttr("vocab_start", getVocabStart()), e.intAttr("valid_vocab", getValidVocab())});
}

//===----------------------------------------------------------------------===//
// bias_add and the vocab-parallel cross entropy pieces
//===----------------------------------------------------------------------===//

void mlir::trainc::model::copyRankOffsets(Operation *from, Operation *to) {
  if (Attribute a = from->getAttr(kRankOffsetsAttr))
    to->setAttr(kRankOffsetsAttr, a);
}

LogicalResult BiasAddOp::verify() {
  if (failed(expectRankAtLeast1(*this, getInput(), "input")))
    return failure();
  if (failed(expectShape(*this, getBias(), {shapeOf(getInput()).back()}, "bias")))
    return failure();
  return expectShape(*this, getResult(), shapeOf(getInput()), "result");
}
double BiasAddOp::getFlops() { return 0; }
double BiasAddOp::getBytesMoved() { return bytesOf(*this); }
void BiasAddOp::emitKernels(KernelEmitter &e) {
  e.kernel("add_bias", {e.operand(0), e.operand(1)}, {e.result(0)});
}
SmallVector<Value> BiasAddOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value(), Value()};
  return {g[0], b.create<BiasGradOp>(getLoc(), paramGradType(*this, getBias()),
                                     g[0])};
}

namespace {
/// logits [N, V] and a row vector `v` [N] of the statistics type.
LogicalResult verifyRows(Operation *op, Value logits, Value v, StringRef what) {
  if (ty(logits).getRank() != 2)
    return op->emitOpError() << "logits have rank " << ty(logits).getRank()
                             << ", expected 2 ([tokens, vocab])";
  return expectStats(op, v, logits, {shapeOf(logits)[0]}, what);
}
SmallVector<NamedAttribute> vocabAttrs(KernelEmitter &e, int64_t start, int64_t valid) {
  return {e.intAttr("vocab_start", start), e.intAttr("valid_vocab", valid)};
}
} // namespace

LogicalResult CeLocalMaxOp::verify() { return verifyRows(*this, getLogits(), getResult(), "result"); }
double CeLocalMaxOp::getFlops() { return 0; }
double CeLocalMaxOp::getBytesMoved() { return bytesOf(*this); }
void CeLocalMaxOp::emitKernels(KernelEmitter &e) {
  e.kernel("ce_local_max", {e.operand(0)}, {e.result(0)},
           vocabAttrs(e, getVocabStart(), getValidVocab()));
}
LogicalResult CeLocalSumExpOp::verify() {
  if (failed(verifyRows(*this, getLogits(), getMax(), "max")))
    return failure();
  return verifyRows(*this, getLogits(), getResult(), "result");
}
double CeLocalSumExpOp::getFlops() { return 0; }
double CeLocalSumExpOp::getBytesMoved() { return bytesOf(*this); }
void CeLocalSumExpOp::emitKernels(KernelEmitter &e) {
  e.kernel("ce_local_sumexp", {e.operand(0), e.operand(1)}, {e.result(0)},
           vocabAttrs(e, getVocabStart(), getValidVocab()));
}
LogicalResult CeTargetLogitOp::verify() {
  if (failed(verifyRows(*this, getLogits(), getResult(), "result")))
    return failure();
  return expectShape(*this, getLabels(), {shapeOf(getLogits())[0]}, "labels");
}
double CeTargetLogitOp::getFlops() { return 0; }
double CeTargetLogitOp::getBytesMoved() { return bytesOf(*this); }
void CeTargetLogitOp::emitKernels(KernelEmitter &e) {
  e.kernel("ce_target_logit", {e.operand(0), e.operand(1)}, {e.result(0)},
           vocabAttrs(e, getVocabStart(), getValidVocab()));
}
LogicalResult CeCombineOp::verify() {
  if (failed(verifyCE(*this, getLogits(), getLabels(), getLossMask())))
    return failure();
  for (auto [v, what] : {std::pair{getMax(), "max"}, {getSumexp(), "sumexp"},
                         {getTarget(), "target"}, {getLse(), "lse"}})
    if (failed(verifyRows(*this, getLogits(), v, what)))
      return failure();
  if (failed(expectStats(*this, getLossSum(), getLogits(), {}, "loss_sum")))
    return failure();
  return expectStats(*this, getNumTokens(), getLogits(), {}, "num_tokens");
}
double CeCombineOp::getFlops() { return 0; }
double CeCombineOp::getBytesMoved() {
  return byteSize(getMax().getType()) * 4 + byteSize(getLse().getType());
}
void CeCombineOp::emitKernels(KernelEmitter &e) {
  e.kernel("ce_combine", {e.operand(3), e.operand(4), e.operand(5), e.operand(2)},
           {e.result(0), e.result(1), e.result(2)});
}
SmallVector<Value> CeCombineOp::buildVJP(OpBuilder &b, ValueRange g) {
  SmallVector<Value> none(getNumOperands(), Value());
  if (!g[0])
    return none;
  auto d = b.create<CrossEntropyGradOp>(getLoc(), getLogits().getType(), getLogits(), getLabels(),
                                        getLossMask(), getLse(), g[0], getVocabStartAttr(),
                                        getValidVocabAttr());
  copyRankOffsets(*this, d);
  none[0] = d;
  return none;
}

#define GET_OP_CLASSES
#include "dialects/Model/ModelOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Tensor collectives on mesh axes: model.copy_to_region and the mesh dialect's collectives
//===----------------------------------------------------------------------===//

std::string mlir::trainc::model::meshAxisName(Operation *op, FlatSymbolRefAttr mesh, int64_t axis) {
  auto m = SymbolTable::lookupNearestSymbolFrom<mesh::MeshOp>(op, mesh);
  if (!m)
    return "";
  auto names = m->getAttrOfType<ArrayAttr>(kAxisNamesAttr);
  if (!names || axis < 0 || axis >= int64_t(names.size()))
    return "";
  auto name = dyn_cast<StringAttr>(names[size_t(axis)]);
  return name ? name.str() : "";
}

namespace {

/// Checks that `mesh` names a mesh.mesh and `axes` are distinct axes of it.
LogicalResult verifyMeshAxes(Operation *op, FlatSymbolRefAttr mesh, ArrayRef<int16_t> axes) {
  auto m = SymbolTable::lookupNearestSymbolFrom<mesh::MeshOp>(op, mesh);
  if (!m)
    return op->emitOpError() << "names mesh " << mesh << ", which is not a mesh.mesh symbol";
  for (auto [i, a] : llvm::enumerate(axes)) {
    if (a < 0 || int64_t(a) >= m.getRank())
      return op->emitOpError() << "mesh axis " << a << " is not one of the " << m.getRank()
                               << " axes of " << mesh;
    if (llvm::count(axes, a) > 1)
      return op->emitOpError() << "mesh axis " << a << " appears twice";
  }
  return success();
}

/// The communicator group of a collective on `axes` of `mesh`: one named axis.
std::string groupOf(KernelEmitter &e, Operation *op, FlatSymbolRefAttr mesh,
                    ArrayRef<int16_t> axes) {
  if (axes.size() != 1) {
    e.fail("a collective on " + Twine(axes.size()) +
           " mesh axes cannot be lowered yet (one axis per collective)");
    return "";
  }
  std::string name = meshAxisName(op, mesh, axes[0]);
  if (name.empty())
    e.fail("mesh axis " + Twine(axes[0]) + " of @" + mesh.getValue() + " has no name (" +
           kAxisNamesAttr + ")");
  return name;
}

/// The product of the dims of `shape` before `axis` (1 when none).
int64_t outerExtent(ArrayRef<int64_t> shape, int64_t axis) {
  int64_t n = 1;
  for (int64_t d = 0; d < axis; ++d)
    n *= shape[size_t(d)];
  return n;
}
/// The product of the dims of `shape` from `axis` on.
int64_t innerExtent(ArrayRef<int64_t> shape, int64_t axis) {
  int64_t n = 1;
  for (size_t d = size_t(axis); d < shape.size(); ++d)
    n *= shape[d];
  return n;
}

struct AllReduceModel
    : public VJPOpInterface::ExternalModel<AllReduceModel, mesh::AllReduceOp> {
  SmallVector<Value> buildVJP(Operation *op, OpBuilder &b, ValueRange g) const {
    auto ar = cast<mesh::AllReduceOp>(op);
    if (!g[0] || ar.getReduction() != mesh::ReductionKind::Sum)
      return {Value()}; // a max (vocab-parallel cross entropy's) is not differentiated
    return {b.create<CopyToRegionOp>(op->getLoc(), g[0].getType(), g[0], ar.getMeshAttr(),
                                     ar.getMeshAxesAttr())};
  }
};
struct AllGatherModel
    : public VJPOpInterface::ExternalModel<AllGatherModel, mesh::AllGatherOp> {
  SmallVector<Value> buildVJP(Operation *op, OpBuilder &b, ValueRange g) const {
    auto ag = cast<mesh::AllGatherOp>(op);
    if (!g[0])
      return {Value()};
    return {b.create<mesh::ReduceScatterOp>(
        op->getLoc(), ag.getInput().getType(), ag.getMeshAttr(), ag.getMeshAxesAttr(), g[0],
        mesh::ReductionKindAttr::get(b.getContext(), mesh::ReductionKind::Sum),
        ag.getGatherAxisAttr())};
  }
};
/// mesh.all_slice (Megatron's scatter_to_sequence_parallel_region: each rank keeps its chunk of
/// a replicated value): its VJP gathers the chunks' gradients (gather_from_sequence_parallel_
/// region's forward, as Megatron's backward of the scatter).
struct AllSliceModel : public VJPOpInterface::ExternalModel<AllSliceModel, mesh::AllSliceOp> {
  SmallVector<Value> buildVJP(Operation *op, OpBuilder &b, ValueRange g) const {
    auto sl = cast<mesh::AllSliceOp>(op);
    if (!g[0])
      return {Value()};
    return {b.create<mesh::AllGatherOp>(op->getLoc(), sl.getInput().getType(), sl.getMeshAttr(),
                                        sl.getMeshAxesAttr(), g[0], sl.getSliceAxisAttr())};
  }
};
struct ReduceScatterModel
    : public VJPOpInterface::ExternalModel<ReduceScatterModel, mesh::ReduceScatterOp> {
  SmallVector<Value> buildVJP(Operation *op, OpBuilder &b, ValueRange g) const {
    auto rs = cast<mesh::ReduceScatterOp>(op);
    if (!g[0])
      return {Value()};
    return {b.create<mesh::AllGatherOp>(op->getLoc(), rs.getInput().getType(), rs.getMeshAttr(),
                                        rs.getMeshAxesAttr(), g[0], rs.getScatterAxisAttr())};
  }
};

/// Collectives move bytes and compute no FLOPs (the reduction's adds are not counted, as
/// Megatron's FLOPs formula does not count them).
template <typename Op>
struct CollectiveCostModel : public CostOpInterface::ExternalModel<CollectiveCostModel<Op>, Op> {
  double getFlops(Operation *) const { return 0; }
  double getBytesMoved(Operation *op) const {
    return byteSize(op->getOperand(0).getType()) + byteSize(op->getResult(0).getType());
  }
};

template <typename Op>
struct CollectiveKernelModel
    : public KernelOpInterface::ExternalModel<CollectiveKernelModel<Op>, Op> {
  void emitKernels(Operation *op, KernelEmitter &e) const {
    auto c = cast<Op>(op);
    std::string group = groupOf(e, op, c.getMeshAttr(), c.getMeshAxes());
    if (group.empty())
      return;
    StringRef kind;
    if constexpr (std::is_same_v<Op, mesh::AllReduceOp>) {
      kind = "all_reduce";
      if (c.getReduction() != mesh::ReductionKind::Sum &&
          c.getReduction() != mesh::ReductionKind::Max)
        return e.fail("only sum and max all-reduces can be lowered yet");
      return e.collective(kind, group, e.operand(0), e.result(0),
                          c.getReduction() == mesh::ReductionKind::Max);
    }
    // all_gather / reduce_scatter / all_slice along `axis`: the runtime's collectives work on
    // flat buffers, so a split along a dim after one of extent > 1 (the sequence of [b, s, h]
    // under sequence parallelism) is one collective per index of the dims before it, each on
    // contiguous views (docs/design.md "Tensor parallelism").
    ArrayRef<int64_t> full, part;
    int64_t axis = 0;
    if constexpr (std::is_same_v<Op, mesh::AllGatherOp>) {
      kind = "all_gather";
      full = cast<ShapedType>(c.getResult().getType()).getShape();
      part = cast<ShapedType>(c.getInput().getType()).getShape();
      axis = int64_t(c.getGatherAxis().getSExtValue());
    } else if constexpr (std::is_same_v<Op, mesh::ReduceScatterOp>) {
      kind = "reduce_scatter";
      if (c.getReduction() != mesh::ReductionKind::Sum)
        return e.fail("only sum reduce-scatters can be lowered yet");
      full = cast<ShapedType>(c.getInput().getType()).getShape();
      part = cast<ShapedType>(c.getResult().getType()).getShape();
      axis = int64_t(c.getScatterAxis().getSExtValue());
    } else if constexpr (std::is_same_v<Op, mesh::AllSliceOp>) {
      full = cast<ShapedType>(c.getInput().getType()).getShape();
      part = cast<ShapedType>(c.getResult().getType()).getShape();
      axis = int64_t(c.getSliceAxis().getSExtValue());
    }
    const int64_t outer = outerExtent(full, axis), innerFull = innerExtent(full, axis),
                  innerPart = innerExtent(part, axis);
    if constexpr (std::is_same_v<Op, mesh::AllSliceOp>) {
      // No communication: the rank's chunk of each row, at its coordinate on the axis.
      for (int64_t o = 0; o < outer; ++o) {
        Value from = e.view(e.operand(0), o * innerFull, {innerPart}, group, innerPart);
        Value to = e.view(e.result(0), o * innerPart, {innerPart});
        e.kernel("copy", {from}, {to});
      }
      return;
    } else {
      if (outer == 1)
        return e.collective(kind, group, e.operand(0), e.result(0));
      const bool gather = std::is_same_v<Op, mesh::AllGatherOp>;
      const int64_t in = gather ? innerPart : innerFull, out = gather ? innerFull : innerPart;
      for (int64_t o = 0; o < outer; ++o) {
        Value from = e.view(e.operand(0), o * in, {in});
        Value to = e.view(e.result(0), o * out, {out});
        e.collective(kind, group, from, to);
      }
    }
  }
};

/// Pipeline parallelism's point-to-point transfers (Megatron's p2p_communication): MLIR's
/// mesh.send / mesh.recv on one mesh axis (the pp axis). mesh.send is the identity on its value
/// (its result is its input, sent to `destination`); its VJP is the identity too, and autodiff
/// seeds the gradient of its result with a mesh.recv from the destination (a stage's backward
/// starts from the next stage's input gradient). mesh.recv's input only gives the result's type;
/// its VJP sends the result's gradient back to `source`. Both lower to synchronous rt.send /
/// rt.recv with the peer's coordinate on the axis as the group rank.
struct SendModel : public VJPOpInterface::ExternalModel<SendModel, mesh::SendOp> {
  SmallVector<Value> buildVJP(Operation *, OpBuilder &, ValueRange g) const { return {g[0]}; }
};
struct RecvModel : public VJPOpInterface::ExternalModel<RecvModel, mesh::RecvOp> {
  SmallVector<Value> buildVJP(Operation *op, OpBuilder &b, ValueRange g) const {
    auto r = cast<mesh::RecvOp>(op);
    if (g[0] && r.getSource())
      b.create<mesh::SendOp>(op->getLoc(), g[0].getType(), r.getMeshAttr(), r.getMeshAxesAttr(),
                             g[0], r.getSourceAttr(), ValueRange{});
    return {Value()};
  }
};
template <typename Op>
struct PointToPointCostModel
    : public CostOpInterface::ExternalModel<PointToPointCostModel<Op>, Op> {
  double getFlops(Operation *) const { return 0; }
  double getBytesMoved(Operation *op) const { return byteSize(op->getResult(0).getType()); }
};
template <typename Op>
struct PointToPointKernelModel
    : public KernelOpInterface::ExternalModel<PointToPointKernelModel<Op>, Op> {
  void emitKernels(Operation *op, KernelEmitter &e) const {
    auto c = cast<Op>(op);
    std::string group = groupOf(e, op, c.getMeshAttr(), c.getMeshAxes());
    if (group.empty())
      return;
    constexpr bool isSend = std::is_same_v<Op, mesh::SendOp>;
    std::optional<ArrayRef<int64_t>> peer;
    bool dynamic = false;
    if constexpr (isSend) {
      peer = c.getDestination();
      dynamic = !c.getDestinationDynamic().empty();
    } else {
      if (c.getSource())
        peer = *c.getSource();
      dynamic = !c.getSourceDynamic().empty();
    }
    if (!peer || peer->size() != 1 || dynamic)
      return e.fail(Twine(isSend ? "mesh.send" : "mesh.recv") +
                    " needs one static peer coordinate on its one mesh axis");
    if constexpr (isSend) {
      e.pointToPoint(true, group, (*peer)[0], e.operand(0));
      e.aliasResult(0, e.operand(0));
    } else {
      e.pointToPoint(false, group, (*peer)[0], e.result(0));
    }
  }
};

} // namespace

LogicalResult CopyToRegionOp::verify() {
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type " << getResult().getType()
                         << " differs from the input type " << getInput().getType();
  return verifyMeshAxes(*this, getMeshAttr(), getMeshAxes());
}
double CopyToRegionOp::getFlops() { return 0; }
double CopyToRegionOp::getBytesMoved() { return 0; }
void CopyToRegionOp::emitKernels(KernelEmitter &e) { e.aliasResult(0, e.operand(0)); }
SmallVector<Value> CopyToRegionOp::buildVJP(OpBuilder &b, ValueRange g) {
  if (!g[0])
    return {Value()};
  SmallVector<mesh::MeshAxis> axes(getMeshAxes());
  return {b.create<mesh::AllReduceOp>(getLoc(), g[0], getMesh(), axes, mesh::ReductionKind::Sum)};
}

void mlir::trainc::model::registerCollectiveInterfaces(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, mesh::MeshDialect *) {
    mesh::AllReduceOp::attachInterface<AllReduceModel, CollectiveCostModel<mesh::AllReduceOp>,
                                       CollectiveKernelModel<mesh::AllReduceOp>>(*ctx);
    mesh::AllGatherOp::attachInterface<AllGatherModel, CollectiveCostModel<mesh::AllGatherOp>,
                                       CollectiveKernelModel<mesh::AllGatherOp>>(*ctx);
    mesh::AllSliceOp::attachInterface<AllSliceModel, CollectiveCostModel<mesh::AllSliceOp>,
                                      CollectiveKernelModel<mesh::AllSliceOp>>(*ctx);
    mesh::ReduceScatterOp::attachInterface<ReduceScatterModel,
                                           CollectiveCostModel<mesh::ReduceScatterOp>,
                                           CollectiveKernelModel<mesh::ReduceScatterOp>>(*ctx);
    mesh::SendOp::attachInterface<SendModel, PointToPointCostModel<mesh::SendOp>,
                                  PointToPointKernelModel<mesh::SendOp>>(*ctx);
    mesh::RecvOp::attachInterface<RecvModel, PointToPointCostModel<mesh::RecvOp>,
                                  PointToPointKernelModel<mesh::RecvOp>>(*ctx);
  });
}

//===----------------------------------------------------------------------===//
// Sharding rules (ShardingRuleOpInterface)
//===----------------------------------------------------------------------===//

namespace {

/// Collects loops, then operand and result index expressions; build() makes the maps.
class RuleBuilder {
public:
  explicit RuleBuilder(MLIRContext *ctx) : ctx(ctx) {}
  AffineExpr loop(const std::string &name, int64_t extent, LoopSplit split = LoopSplit::Sum) {
    rule.loops.push_back({name, extent, split});
    return getAffineDimExpr(unsigned(rule.loops.size() - 1), ctx);
  }
  /// One loop per dimension of `shape` before `keep` trailing ones, named prefix0, prefix1, ...
  SmallVector<AffineExpr> leading(ArrayRef<int64_t> shape, size_t keep, StringRef prefix = "l") {
    SmallVector<AffineExpr> e;
    for (size_t i = 0; i + keep < shape.size(); ++i)
      e.push_back(loop((prefix + Twine(i)).str(), shape[i]));
    return e;
  }
  /// The row-major flattening of `dims` with extents `shape`.
  static AffineExpr flatten(ArrayRef<AffineExpr> dims, ArrayRef<int64_t> shape, MLIRContext *c) {
    AffineExpr e = getAffineConstantExpr(0, c);
    for (auto [d, n] : llvm::zip(dims, shape))
      e = e * n + d;
    return e;
  }
  void operand(ArrayRef<AffineExpr> e) { ins.emplace_back(e.begin(), e.end()); }
  void result(ArrayRef<AffineExpr> e) { outs.emplace_back(e.begin(), e.end()); }
  ShardingRule build() {
    unsigned n = unsigned(rule.loops.size());
    for (auto &e : ins)
      rule.operands.push_back(AffineMap::get(n, 0, e, ctx));
    for (auto &e : outs)
      rule.results.push_back(AffineMap::get(n, 0, e, ctx));
    return rule;
  }
  MLIRContext *ctx;

private:
  ShardingRule rule;
  SmallVector<SmallVector<AffineExpr>> ins, outs;
};

template <typename A, typename B>
SmallVector<AffineExpr> cat(const A &a, const B &b) {
  SmallVector<AffineExpr> r(a.begin(), a.end());
  r.append(b.begin(), b.end());
  return r;
}

/// Every operand and result indexed by the same loops (one per dimension of the result; operands
/// without loops, such as the dropout key, are replicated).
ShardingRule elementwise(Operation *op) {
  RuleBuilder r(op->getContext());
  SmallVector<AffineExpr> all = r.leading(shapeOf(op->getResult(0)), 0, "d");
  for (Value v : op->getOperands())
    r.operand(isa<FloatType>(ty(v).getElementType()) ? ArrayRef<AffineExpr>(all)
                                                       : ArrayRef<AffineExpr>());
  r.result(all);
  return r.build();
}

/// norms: leading loops, the hidden dim whole; statistics indexed by the flattened rows.
ShardingRule normRule(Operation *op, unsigned numParams) {
  RuleBuilder r(op->getContext());
  ArrayRef<int64_t> shape = shapeOf(op->getOperand(0));
  SmallVector<AffineExpr> lead = r.leading(shape, 1);
  AffineExpr h = r.loop("h", shape.back(), LoopSplit::Whole);
  AffineExpr rows = RuleBuilder::flatten(lead, shape.drop_back(), r.ctx);
  r.operand(cat(lead, ArrayRef<AffineExpr>{h}));
  for (unsigned i = 0; i < numParams; ++i)
    r.operand({h});
  r.result(cat(lead, ArrayRef<AffineExpr>{h}));
  for (unsigned i = 1; i < op->getNumResults(); ++i)
    r.result({rows});
  return r.build();
}

} // namespace

std::string ShardingRule::str() const {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "loops (";
  for (auto [i, l] : llvm::enumerate(loops)) {
    os << (i ? ", " : "") << l.name << "=" << l.extent;
    if (l.split == LoopSplit::LogSumExp)
      os << ":logsumexp";
    else if (l.split == LoopSplit::Whole)
      os << ":whole";
  }
  os << ")";
  auto print = [&](const char *what, ArrayRef<AffineMap> maps) {
    os << " " << what;
    for (AffineMap m : maps) {
      os << " [";
      for (auto [i, e] : llvm::enumerate(m.getResults())) {
        std::string t;
        llvm::raw_string_ostream es(t);
        e.print(es);
        // d<i> -> the loop's name.
        for (int64_t k = int64_t(loops.size()) - 1; k >= 0; --k) {
          std::string d = "d" + std::to_string(k);
          const std::string &name = loops[size_t(k)].name;
          for (size_t pos = t.find(d); pos != std::string::npos;
               pos = t.find(d, pos + name.size()))
            t.replace(pos, d.size(), name);
        }
        os << (i ? ", " : "") << t;
      }
      os << "]";
    }
  };
  print("ins", operands);
  print("outs", results);
  return out;
}

LogicalResult mlir::trainc::model::verifyShardingRule(Operation *op, const ShardingRule &rule) {
  if (rule.operands.size() != op->getNumOperands() || rule.results.size() != op->getNumResults())
    return op->emitOpError() << "sharding rule has " << rule.operands.size() << " operand and "
                             << rule.results.size() << " result maps for "
                             << op->getNumOperands() << " operands and " << op->getNumResults()
                             << " results";
  SmallVector<int64_t> first(rule.loops.size(), 0), last;
  for (const ShardingRule::Loop &l : rule.loops) {
    if (l.extent <= 0)
      return op->emitOpError() << "sharding rule: loop " << l.name << " has extent " << l.extent;
    last.push_back(l.extent - 1);
  }
  auto check = [&](Value v, AffineMap m, const Twine &what) -> LogicalResult {
    ArrayRef<int64_t> shape = shapeOf(v);
    if (m.getNumDims() != rule.loops.size())
      return op->emitOpError() << "sharding rule: the map of " << what << " has " << m.getNumDims()
                               << " dims for " << rule.loops.size() << " loops";
    if (m.getNumResults() != 0 && m.getNumResults() != shape.size())
      return op->emitOpError() << "sharding rule: the map of " << what << " has "
                               << m.getNumResults() << " results for rank " << shape.size();
    SmallVector<int64_t> lo = m.compose(first), hi = m.compose(last);
    for (unsigned d = 0; d < m.getNumResults(); ++d) {
      if (auto dim = dyn_cast<AffineDimExpr>(m.getResult(d)))
        if (rule.loops[dim.getPosition()].extent != shape[d])
          return op->emitOpError()
                 << "sharding rule: loop " << rule.loops[dim.getPosition()].name << " has extent "
                 << rule.loops[dim.getPosition()].extent << " but indexes dim " << d << " of "
                 << what << " of size " << shape[d];
      if (lo[d] < 0 || hi[d] >= shape[d])
        return op->emitOpError() << "sharding rule: dim " << d << " of " << what
                                 << " is indexed from " << lo[d] << " to " << hi[d]
                                 << ", outside its size " << shape[d];
    }
    return success();
  };
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (failed(check(v, rule.operands[i], "operand " + Twine(i))))
      return failure();
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (failed(check(v, rule.results[i], "result " + Twine(i))))
      return failure();
  return success();
}

ShardingRule ReshapeOp::getShardingRule() {
  // Loops over the result; the input index is the same linear position, delinearised.
  RuleBuilder r(getContext());
  ArrayRef<int64_t> in = shapeOf(getInput()), outShape = shapeOf(getResult());
  SmallVector<AffineExpr> out = r.leading(outShape, 0, "d");
  AffineExpr linear = RuleBuilder::flatten(out, outShape, getContext());
  SmallVector<AffineExpr> idx;
  int64_t stride = 1;
  for (int64_t d = int64_t(in.size()) - 1; d >= 0; --d) {
    AffineExpr e = linear.floorDiv(stride);
    if (d > 0)
      e = e % in[size_t(d)];
    idx.insert(idx.begin(), e);
    stride *= in[size_t(d)];
  }
  r.operand(idx);
  r.result(out);
  return r.build();
}

ShardingRule EmbeddingOp::getShardingRule() {
  // Vocab-parallel (Megatron's VocabParallelEmbedding): split v; ids outside the shard give zero
  // rows, so each rank's output is a partial sum.
  RuleBuilder r(getContext());
  SmallVector<AffineExpr> lead = r.leading(shapeOf(getIds()), 0);
  AffineExpr h = r.loop("h", shapeOf(getTable())[1]);
  AffineExpr v = r.loop("v", shapeOf(getTable())[0]);
  r.operand({v, h});
  r.operand(lead);
  r.result(cat(lead, ArrayRef<AffineExpr>{h}));
  return r.build();
}

ShardingRule LinearOp::getShardingRule() {
  // Column-parallel splits n (w and b by rows, y by columns); row-parallel splits k (x by
  // columns, w by columns; y is a partial sum, and the bias must be added after the reduction).
  RuleBuilder r(getContext());
  ArrayRef<int64_t> x = shapeOf(getInput());
  SmallVector<AffineExpr> lead = r.leading(x, 1);
  AffineExpr n = r.loop("n", shapeOf(getWeight())[0]);
  AffineExpr k = r.loop("k", x.back());
  r.operand(cat(lead, ArrayRef<AffineExpr>{k}));
  r.operand({n, k});
  if (getBias())
    r.operand({n});
  r.result(cat(lead, ArrayRef<AffineExpr>{n}));
  return r.build();
}

ShardingRule LayerNormOp::getShardingRule() { return normRule(*this, 2); }
ShardingRule RMSNormOp::getShardingRule() { return normRule(*this, 1); }

ShardingRule RopeOp::getShardingRule() {
  // x [b, s, heads, d]: any of b, s, heads; the head dim holds the rotary pairs.
  RuleBuilder r(getContext());
  ArrayRef<int64_t> x = shapeOf(getInput());
  AffineExpr b = r.loop("b", x[0]), s = r.loop("s", x[1]), h = r.loop("heads", x[2]);
  AffineExpr d = r.loop("d", x[3], LoopSplit::Whole);
  r.operand({b, s, h, d});
  r.operand({b, s});
  r.result({b, s, h, d});
  return r.build();
}

ShardingRule AttentionOp::getShardingRule() {
  // Heads (Megatron's TP): query head h reads key/value group h / (heads / groups), so a split
  // of the heads splits the groups when tp divides them (kv heads are replicated otherwise).
  RuleBuilder r(getContext());
  ArrayRef<int64_t> q = shapeOf(getQuery()), k = shapeOf(getKey());
  AffineExpr b = r.loop("b", q[0]), s = r.loop("s", q[1]), h = r.loop("heads", q[2]);
  AffineExpr d = r.loop("d", q[3], LoopSplit::Whole);
  AffineExpr t = r.loop("t", k[1], LoopSplit::Whole);
  AffineExpr g = h.floorDiv(q[2] / k[2]);
  r.operand({b, s, h, d});
  r.operand({b, t, g, d});
  r.operand({b, t, g, d});
  if (getRng())
    r.operand({}); // the dropout key is replicated
  if (getDocStart())
    r.operand({b, s}); // document starts: per query position, every head
  r.result({b, s, h, d});
  r.result({b, h, s});
  return r.build();
}

ShardingRule GeluOp::getShardingRule() { return elementwise(*this); }
ShardingRule AddOp::getShardingRule() { return elementwise(*this); }
ShardingRule CastOp::getShardingRule() { return elementwise(*this); }
ShardingRule DropoutOp::getShardingRule() {
  // The mask is keyed by the global element index: the same for any split.
  return elementwise(*this);
}
ShardingRule CopyToRegionOp::getShardingRule() { return elementwise(*this); }
ShardingRule BiasAddOp::getShardingRule() {
  // x [..., n] + b [n]: any loop; the bias is indexed by the last.
  RuleBuilder r(getContext());
  SmallVector<AffineExpr> all = r.leading(shapeOf(getInput()), 0, "d");
  r.operand(all);
  r.operand({all.back()});
  r.result(all);
  return r.build();
}
ShardingRule RngOffsetOp::getShardingRule() {
  // A key is the same on every rank: its one loop may not be split.
  RuleBuilder r(getContext());
  AffineExpr k = r.loop("key", 4, LoopSplit::Whole);
  r.operand({});
  r.result({k});
  return r.build();
}

ShardingRule SwigluOp::getShardingRule() {
  // y[..., f] = silu(x[..., f]) * x[..., F + f]: a split of f gives each rank matching gate and
  // up halves (the loop `half` picks one).
  RuleBuilder r(getContext());
  ArrayRef<int64_t> y = shapeOf(getResult());
  SmallVector<AffineExpr> lead = r.leading(y, 1);
  AffineExpr f = r.loop("f", y.back());
  AffineExpr half = r.loop("half", 2, LoopSplit::Whole);
  r.operand(cat(lead, ArrayRef<AffineExpr>{half * y.back() + f}));
  r.result(cat(lead, ArrayRef<AffineExpr>{f}));
  return r.build();
}

ShardingRule CrossEntropyOp::getShardingRule() {
  // Vocab-parallel (Megatron's vocab_parallel_cross_entropy): split v, combine by log-sum-exp
  // (MAX, then SUM all-reduces); a split of the tokens n makes loss_sum and num_tokens partial sums.
  RuleBuilder r(getContext());
  ArrayRef<int64_t> l = shapeOf(getLogits());
  AffineExpr n = r.loop("n", l[0]);
  AffineExpr v = r.loop("v", l[1], LoopSplit::LogSumExp);
  r.operand({n, v});
  r.operand({n});
  r.operand({n});
  r.result({});
  r.result({});
  r.result({n});
  return r.build();
}

//===----------------------------------------------------------------------===//
// Parameter declarations
//===----------------------------------------------------------------------===//

LogicalResult ParameterOp::verify() {
  StringRef init = getInit();
  if (init != "normal" && init != "ones" && init != "zeros")
    return emitOpError() << "init '" << init << "' is not one of normal, ones, zeros";
  if (init == "normal" && (!getInitStd() || getInitStd()->convertToDouble() <= 0))
    return emitOpError() << "init 'normal' needs init_std > 0";
  if (init != "normal" && getInitStd())
    return emitOpError() << "init_std is only meaningful with init 'normal', not '" << init << "'";
  if (bool(getGlobalShape()) != bool(getSplitDim()) || bool(getSplitDim()) != bool(getSplitAxis()))
    return emitOpError() << "global_shape, split_dim and split_axis go together";
  if (getGlobalShape()) {
    ArrayRef<int64_t> g = *getGlobalShape();
    int64_t d = *getSplitDim(), n = 1;
    if (d < 0 || d >= int64_t(g.size()))
      return emitOpError() << "split_dim " << d << " is not a dim of global_shape (rank "
                           << g.size() << ")";
    for (int64_t e : g)
      n *= e;
    int64_t local = cast<ShapedType>(getType()).getNumElements();
    if (local <= 0 || n % local || g[size_t(d)] % (n / local))
      return emitOpError() << "type has " << local << " elements, not global_shape's " << n
                           << " split evenly along dim " << d;
  }
  return success();
}

FlatSymbolRefAttr mlir::trainc::model::paramOf(func::FuncOp fn, unsigned arg) {
  return fn.getArgAttrOfType<FlatSymbolRefAttr>(arg, kParamAttr);
}

DictionaryAttr mlir::trainc::model::parameterAttrs(SymbolTableCollection &symbols, Operation *from,
                                                   func::FuncOp fn, unsigned arg) {
  FlatSymbolRefAttr name = paramOf(fn, arg);
  if (!name)
    return {};
  auto decl = symbols.lookupNearestSymbolFrom<ParameterOp>(from, name);
  if (!decl)
    return {};
  Builder b(fn.getContext());
  SmallVector<NamedAttribute> a{b.getNamedAttr("init", decl.getInitAttr())};
  if (decl.getInitStdAttr())
    a.push_back(b.getNamedAttr("init_std", decl.getInitStdAttr()));
  if (decl.getNoWeightDecay())
    a.push_back(b.getNamedAttr("no_weight_decay", b.getUnitAttr()));
  if (decl.getGlobalShapeAttr()) {
    a.push_back(b.getNamedAttr("global_shape", decl.getGlobalShapeAttr()));
    a.push_back(b.getNamedAttr("split_dim", decl.getSplitDimAttr()));
    a.push_back(b.getNamedAttr("split_axis", decl.getSplitAxisAttr()));
  }
  return b.getDictionaryAttr(a);
}

LogicalResult mlir::trainc::model::declareParameters(ModuleOp module) {
  SymbolTable table(module);
  OpBuilder b(module.getContext());
  b.setInsertionPointToStart(module.getBody());
  // Insert after existing declarations so the order stays the order of first use.
  for (Operation &op : *module.getBody())
    if (isa<ParameterOp>(op))
      b.setInsertionPointAfter(&op);
  for (func::FuncOp fn : module.getOps<func::FuncOp>()) {
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      FlatSymbolRefAttr name = paramOf(fn, i);
      if (!name)
        continue;
      auto type = dyn_cast<RankedTensorType>(fn.getArgument(i).getType());
      if (!type)
        return fn.emitOpError() << "argument " << i << " holds parameter " << name
                                << " but is not a ranked tensor";
      auto init = fn.getArgAttrOfType<StringAttr>(i, "model.init");
      auto std = fn.getArgAttrOfType<FloatAttr>(i, "model.init_std");
      bool noWd = bool(fn.getArgAttr(i, "model.no_weight_decay"));
      fn.removeArgAttr(i, "model.init");
      fn.removeArgAttr(i, "model.init_std");
      fn.removeArgAttr(i, "model.no_weight_decay");
      auto decl = table.lookup<ParameterOp>(name.getValue());
      if (!decl) {
        if (table.lookup(name.getValue()))
          return fn.emitOpError() << "argument " << i << " names " << name
                                  << ", which is not a model.parameter";
        decl = b.create<ParameterOp>(fn.getLoc(), name.getAttr(), TypeAttr::get(type),
                                     init ? init : b.getStringAttr("zeros"), std,
                                     noWd ? b.getUnitAttr() : UnitAttr());
        table.insert(decl, b.getInsertionPoint());
        b.setInsertionPointAfter(decl);
        if (failed(decl.verify()))
          return failure();
        continue;
      }
      if (decl.getType() != type)
        return fn.emitOpError() << "argument " << i << " holds parameter " << name << " as "
                                << type << " but it is declared " << decl.getType();
      if ((init && init != decl.getInitAttr()) || (std && std != decl.getInitStdAttr()) ||
          (noWd && !decl.getNoWeightDecay()))
        return fn.emitOpError() << "argument " << i << " gives parameter " << name
                                << " another initialisation or weight decay than its "
                                   "declaration";
    }
  }
  return success();
}

LogicalResult ModelDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute v = attr.getValue();
  auto fail = [&](StringRef expected) {
    return mlir::trainc::checkAttribute(op, attr, false, expected);
  };
  auto integer = [&](int64_t min) { return mlir::trainc::isI64AtLeast(v, min); };
  const bool onFunction = isa<func::FuncOp>(op);
  if (name == "model.layer")
    return isa<StringAttr>(v) && onFunction ? success() : fail("a string on a func.func");
  if (name == "model.derivative") {
    auto s = dyn_cast<StringAttr>(v);
    return s && onFunction && (s.getValue() == "forward" || s.getValue() == "backward")
               ? success()
               : fail("\"forward\" or \"backward\" on a func.func");
  }
  if (name == "model.layer_index" || name == "model.recompute_group")
    return integer(0) ? success() : fail("a non-negative i64 integer");
  if (name == "model.global_heads" || name == kGlobalSeqAttr)
    return integer(1) ? success() : fail("a positive i64 integer");
  if (name == "model.loss_seed")
    return isa<UnitAttr>(v) ? success() : fail("a unit attribute");
  if (name == kRecomputeAttrName) {
    auto s = dyn_cast<StringAttr>(v);
    return s && llvm::is_contained({"selective", "checkpoint", "replay"}, s.getValue())
               ? success()
               : fail("\"selective\", \"checkpoint\" or \"replay\"");
  }
  if (name == kRankOffsetsAttr) {
    auto d = dyn_cast<DictionaryAttr>(v);
    bool ok = d && llvm::all_of(d, [](NamedAttribute e) {
      auto pair = dyn_cast<DenseI64ArrayAttr>(e.getValue());
      return pair && pair.size() == 2 && pair[0] >= 0;
    });
    return ok ? success()
              : fail("a dictionary of {attribute = array<i64: mesh axis, stride>} entries");
  }
  if (name == kSequenceParallelAttr)
    return isa<UnitAttr>(v) && isa<ModuleOp>(op) ? success() : fail("a unit attribute on the module");
  return op->emitOpError() << "has unknown attribute '" << name
                           << "' of the model dialect (model.layer, model.derivative, "
                              "model.layer_index, model.recompute_group, model.loss_seed, "
                              "model.recompute, model.global_heads, model.global_seq, "
                              "model.rank_offsets, model.sequence_parallel)";
}

LogicalResult ModelDialect::verifyRegionArgAttribute(Operation *op, unsigned region,
                                                     unsigned arg, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  auto fail = [&](StringRef expected) {
    return op->emitOpError() << "argument " << arg << " of region " << region << ": '" << name
                             << "' must be " << expected << ", not " << attr.getValue();
  };
  if (name == kParamAttr)
    return isa<FlatSymbolRefAttr>(attr.getValue())
               ? success()
               : fail("a symbol reference to a model.parameter (@<name>)");
  if (name == "model.input" || name == "model.layer_param" || name == "model.init")
    return isa<StringAttr>(attr.getValue()) ? success() : fail("a string");
  if (name == "model.init_std")
    return isa<FloatAttr>(attr.getValue()) ? success() : fail("a float");
  if (name == "model.no_weight_decay")
    return isa<UnitAttr>(attr.getValue()) ? success() : fail("a unit attribute");
  return success();
}
