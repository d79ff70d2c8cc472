//===- ModelDialect.h - The model dialect ---------------------------------===//
#ifndef TRAINC_DIALECTS_MODEL_MODELDIALECT_H
#define TRAINC_DIALECTS_MODEL_MODELDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

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
  /// Makes result `i` an alias of `buffer` (no kernel, no copy).
  virtual void aliasResult(unsigned i, Value buffer) = 0;
  /// Records a kernel call: inputs, outputs, attributes (i64 or f64) and, for outputs written in
  /// place of an input, inPlace[j] = that input's index (-1 otherwise; empty = none).
  virtual void kernel(StringRef name, ValueRange inputs, ValueRange outputs,
                      ArrayRef<NamedAttribute> attrs = {}, ArrayRef<int32_t> inPlace = {}) = 0;

  NamedAttribute intAttr(StringRef name, int64_t v);
  NamedAttribute floatAttr(StringRef name, double v);
};

/// Element count of a statically shaped type.
int64_t numElements(Type t);
/// Bytes of a statically shaped tensor or memref type.
double byteSize(Type t);
/// The statistics element type for data of element type `t`: f64 for f64, f32 otherwise (the
/// runtime's statsDType).
Type statsElementType(Type t);

} // namespace mlir::trainc::model

#include "dialects/Model/ModelDialect.h.inc"
#include "dialects/Model/ModelInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/Model/ModelOps.h.inc"

#endif
