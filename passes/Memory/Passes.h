//===- Passes.h - Memory planning -----------------------------------------===//
#ifndef TRAINC_PASSES_MEMORY_PASSES_H
#define TRAINC_PASSES_MEMORY_PASSES_H

#include "dialects/Rt/RtDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::trainc {
#define GEN_PASS_DECL
#include "passes/Memory/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/Memory/Passes.h.inc"

/// Checks a planned module on the unrolled call trace (the liveness trainc-memory-plan uses): every
/// buffer has an offset and lies inside rt.arena_bytes (bytes), persistent buffers overlap
/// nothing, and no two buffers sharing a byte are live at the same trace step. Emits an error
/// naming the two buffers (and the first common step with its function) and fails.
LogicalResult verifyMemoryPlan(ModuleOp module);
} // namespace mlir::trainc

#endif
