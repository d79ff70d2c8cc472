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
#include "dialects/Rt/RtEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Rt/RtAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/Rt/RtOps.h.inc"

namespace mlir::trainc::rt {
/// Whether buffers of this kind live for the whole run (parameters, grads, optimizer state, I/O);
/// activations and workspaces flow (the memory planner reuses their bytes).
bool isPersistentKind(BufferKind kind);
/// The adamw `segments` of one DP shard: `bucketSegments` are (begin, end, decay) triples of the
/// bucket's updated parameters, relative to the bucket's start (the ZeRO-1 layout of
/// GradLayout.h); the shard of dp coordinate `coord` is [coord x shardSize, (coord + 1) x
/// shardSize). Returns each non-empty intersection, relative to the shard, in ascending order, or
/// the single empty segment (0, 0, 0) when the shard holds only padding (an empty list would mean
/// "update every element").
SmallVector<int64_t> shardSegments(ArrayRef<int64_t> bucketSegments, int64_t coord,
                                   int64_t shardSize);
} // namespace mlir::trainc::rt

#endif
