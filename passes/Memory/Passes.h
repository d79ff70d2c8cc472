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

/// Checks a planned module: every buffer has an offset, lies inside rt.arena_bytes, persistent
/// buffers overlap nothing, and flowing buffers that are live at the same time do not overlap.
/// Emits an error naming the two buffers.
LogicalResult verifyMemoryPlan(ModuleOp module);
} // namespace mlir::trainc

#endif
