//===- Passes.h - Lowering to rt and phase verifiers ----------------------===//
#ifndef TRAINC_PASSES_EXPORT_PASSES_H
#define TRAINC_PASSES_EXPORT_PASSES_H

#include "dialects/Model/ModelDialect.h"
#include "dialects/Rt/RtDialect.h"
#include "dialects/Sched/SchedDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::trainc {
#define GEN_PASS_DECL
#include "passes/Export/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/Export/Passes.h.inc"
} // namespace mlir::trainc

#endif
