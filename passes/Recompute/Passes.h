//===- Passes.h - Activation recompute passes -----------------------------===//
#ifndef TRAINC_PASSES_RECOMPUTE_PASSES_H
#define TRAINC_PASSES_RECOMPUTE_PASSES_H

#include "dialects/Model/ModelDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::trainc {
#define GEN_PASS_DECL
#include "passes/Recompute/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/Recompute/Passes.h.inc"
} // namespace mlir::trainc

#endif
