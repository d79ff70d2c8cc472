//===- RtDialect.h - The rt dialect ---------------------------------------===//
#ifndef TRAINC_DIALECTS_RT_RTDIALECT_H
#define TRAINC_DIALECTS_RT_RTDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Rt/RtDialect.h.inc"

#define GET_OP_CLASSES
#include "dialects/Rt/RtOps.h.inc"

namespace mlir::trainc::rt {
/// The buffer kinds of program.proto, in its enum order starting at 1.
ArrayRef<StringRef> bufferKinds();
/// Whether buffers of this kind live for the whole run (parameters, grads, optimizer state, I/O).
bool isPersistentKind(StringRef kind);
} // namespace mlir::trainc::rt

#endif
