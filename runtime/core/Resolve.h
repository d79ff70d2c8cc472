//===- Resolve.h - Shared operand/attribute decoding (validator, executor) ===//
#ifndef TRAINC_RUNTIME_CORE_RESOLVE_H
#define TRAINC_RUNTIME_CORE_RESOLVE_H

#include "runtime/core/Kernel.h"
#include "runtime/schema/program.pb.h"

#include <string>

namespace trainc::rt {

/// An operand resolved against its function: base (buffer or argument), element offset into the
/// base, and the view's dtype and shape (data null).
struct ResolvedOperand {
  bool isArg = false;
  uint32_t base = 0;
  uint64_t elemOffset = 0;
  TensorView view;
};

inline DType toDType(schema::DType t) {
  int v = int(t);
  return (v >= 1 && v <= 7) ? DType(v) : DType::Invalid;
}

/// Resolves `op` inside function `fn`. Returns "" or a message naming the field that is wrong
/// (base index out of range, invalid shape, view outside its base).
std::string resolveOperand(const schema::Program &p, const schema::Function &fn,
                           const schema::Operand &op, ResolvedOperand &out);

/// Decodes a call's attributes into the signature's order, applying defaults. Returns "" or a
/// message (unknown attribute, wrong type, missing required attribute).
std::string decodeAttrs(const KernelSignature &sig,
                        const google::protobuf::RepeatedPtrField<schema::Attr> &attrs,
                        Attrs &out);

} // namespace trainc::rt

#endif
