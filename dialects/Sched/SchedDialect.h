//===- SchedDialect.h - The sched dialect ---------------------------------===//
#ifndef TRAINC_DIALECTS_SCHED_SCHEDDIALECT_H
#define TRAINC_DIALECTS_SCHED_SCHEDDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include <string>
#include <vector>

#include "dialects/Sched/SchedDialect.h.inc"
#include "dialects/Sched/SchedEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/Sched/SchedTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Sched/SchedAttrs.h.inc"

namespace mlir::trainc::sched {
/// The module attribute that holds the plan.
inline constexpr llvm::StringLiteral kPlanAttrName = "sched.plan";
/// On a mesh collective: started asynchronously, completed by its sched.collective_wait
/// (trainc-tp-comm-overlap).
inline constexpr llvm::StringLiteral kAsyncAttrName = "sched.async";
/// On the module: keep every tensor collective synchronous (Megatron's
/// --no-async-tensor-model-parallel-allreduce); trainc-tp-comm-overlap does nothing.
inline constexpr llvm::StringLiteral kNoAsyncTpCommAttrName = "sched.no_async_tp_comm";
/// The symbol of the main-grad buffer trainc-grad-buckets declares (sched.grad_buffer).
inline constexpr llvm::StringLiteral kGradBufferName = "grad_buffer";
/// The plan of the module that holds `op` (null if it has none).
PlanAttr getPlan(Operation *op);
/// The value of plan field `name` (a field of PlanAttr::getFields) for a pass: `explicitValue`
/// when set (an option given explicitly; it is then recorded in the plan of `op`'s module, so that
/// the dumps and later passes see the value that was used), else the plan's field, else
/// `fallback` (the option's default; no plan). Fails, with the error on the module, when
/// recording makes the plan inconsistent.
FailureOr<Attribute> resolvePlanField(Operation *op, llvm::StringRef name,
                                      Attribute explicitValue, Attribute fallback);

/// The plan's `recompute` field, Megatron's --recompute-granularity / --recompute-method /
/// --recompute-num-layers in one string: "none", "selective" (core attention of every layer),
/// "selective:M,..." (Megatron's --recompute-modules: core_attn, mlp), "full:uniform:N" (groups
/// of N consecutive layers, only each group's input stashed) or "full:block:N" (the first N
/// layers of the stage, each recomputed alone).
struct RecomputeSpec {
  std::string granularity = "none"; // none | selective | full
  std::string method;               // uniform | block with full, else empty
  int64_t numLayers = 0;            // with full: >= 1
  std::vector<std::string> modules; // with selective: core_attn and/or mlp
  /// The field's text for this spec ("full:uniform:2").
  std::string str() const;
};
/// Parses the recompute field; an error (through `emitError`) names the value and the accepted
/// forms. `numLayersPerStage` > 0 also bounds N (1 <= N <= layers per stage).
FailureOr<RecomputeSpec> parseRecompute(llvm::StringRef text, int64_t numLayersPerStage,
                                        llvm::function_ref<InFlightDiagnostic()> emitError);
} // namespace mlir::trainc::sched

#define GET_OP_CLASSES
#include "dialects/Sched/SchedOps.h.inc"

#endif
