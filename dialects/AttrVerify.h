//===- AttrVerify.h - Shared pieces of the dialects' attribute verifiers ---===//
//
// The model, rt and trainc dialects declare their discardable attributes and verify them in
// verifyOperationAttribute; these are the checks and the message they share.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_DIALECTS_ATTRVERIFY_H
#define TRAINC_DIALECTS_ATTRVERIFY_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

namespace mlir::trainc {

/// Whether `v` is an i64 IntegerAttr whose value is at least `min`.
inline bool isI64AtLeast(Attribute v, int64_t min) {
  auto i = dyn_cast<IntegerAttr>(v);
  return i && i.getType().isInteger(64) && i.getInt() >= min;
}

/// success() when `ok`; otherwise the error on `op` "attribute '<name>' must be <expected>, not
/// <value>" for the discardable attribute `attr`.
inline LogicalResult checkAttribute(Operation *op, NamedAttribute attr, bool ok,
                                    StringRef expected) {
  if (ok)
    return success();
  return op->emitOpError() << "attribute '" << attr.getName().getValue() << "' must be "
                           << expected << ", not " << attr.getValue();
}

} // namespace mlir::trainc

#endif // TRAINC_DIALECTS_ATTRVERIFY_H
