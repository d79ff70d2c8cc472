//===- Passes.h - Schedule passes -----------------------------------------===//
#ifndef TRAINC_PASSES_PIPELINE_PASSES_H
#define TRAINC_PASSES_PIPELINE_PASSES_H

#include "dialects/Sched/SchedDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::trainc {
#define GEN_PASS_DECL
#include "passes/Pipeline/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/Pipeline/Passes.h.inc"
} // namespace mlir::trainc

#endif
