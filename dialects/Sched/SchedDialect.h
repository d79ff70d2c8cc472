//===- SchedDialect.h - The sched dialect ---------------------------------===//
#ifndef TRAINC_DIALECTS_SCHED_SCHEDDIALECT_H
#define TRAINC_DIALECTS_SCHED_SCHEDDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "dialects/Sched/SchedDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/Sched/SchedTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Sched/SchedAttrs.h.inc"

namespace mlir::trainc::sched {
/// The module attribute that holds the plan.
inline constexpr llvm::StringLiteral kPlanAttrName = "sched.plan";
/// The plan of the module that holds `op` (null if it has none).
PlanAttr getPlan(Operation *op);
/// Records an explicit pass option in the plan of `op`'s module (no-op without a plan), so that
/// the dumps and later passes see the value that was used. Errors (an inconsistent result) are
/// emitted on the module.
LogicalResult overridePlanField(Operation *op, llvm::StringRef name, Attribute value);
} // namespace mlir::trainc::sched

#define GET_OP_CLASSES
#include "dialects/Sched/SchedOps.h.inc"

#endif
