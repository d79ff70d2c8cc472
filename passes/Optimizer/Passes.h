//===- Passes.h - Optimizer passes ----------------------------------------===//
#ifndef TRAINC_PASSES_OPTIMIZER_PASSES_H
#define TRAINC_PASSES_OPTIMIZER_PASSES_H

#include "dialects/Sched/SchedDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::trainc {
#define GEN_PASS_DECL
#include "passes/Optimizer/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/Optimizer/Passes.h.inc"
} // namespace mlir::trainc

#endif
