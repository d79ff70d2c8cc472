//===- Passes.h - Gradient passes -----------------------------------------===//
#ifndef TRAINC_PASSES_GRAD_PASSES_H
#define TRAINC_PASSES_GRAD_PASSES_H

#include "dialects/Model/ModelDialect.h"
#include "dialects/Sched/SchedDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::trainc {
#define GEN_PASS_DECL
#include "passes/Grad/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/Grad/Passes.h.inc"
} // namespace mlir::trainc

#endif
