//===- Passes.h - Sharding (tensor and sequence parallelism) --------------===//
#ifndef TRAINC_PASSES_SHARDING_PASSES_H
#define TRAINC_PASSES_SHARDING_PASSES_H

#include "dialects/Model/ModelDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::trainc {
#define GEN_PASS_DECL
#include "passes/Sharding/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/Sharding/Passes.h.inc"
} // namespace mlir::trainc

#endif
