//===- PlanOption.h - Pass options that default to the module's plan ------===//
//
// A pass option that names a field of the module's `#sched.plan`: given explicitly it overrides
// the plan (and is recorded there), else the plan's value is used, else the option's default.
// Shared by the pass families that read the plan.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_PASSES_PLANOPTION_H
#define TRAINC_PASSES_PLANOPTION_H

#include "dialects/Sched/SchedDialect.h"

#include "mlir/IR/Builders.h"

#include <string>

namespace mlir::trainc {

namespace detail {
inline Attribute planValue(Builder &b, int64_t v) { return b.getI64IntegerAttr(v); }
inline Attribute planValue(Builder &b, double v) { return b.getF64FloatAttr(v); }
inline Attribute planValue(Builder &b, bool v) { return b.getBoolAttr(v); }
inline Attribute planValue(Builder &b, const std::string &v) { return b.getStringAttr(v); }
inline void fromPlanValue(Attribute a, int64_t &v) { v = cast<IntegerAttr>(a).getInt(); }
inline void fromPlanValue(Attribute a, double &v) { v = cast<FloatAttr>(a).getValueAsDouble(); }
inline void fromPlanValue(Attribute a, bool &v) { v = cast<BoolAttr>(a).getValue(); }
inline void fromPlanValue(Attribute a, std::string &v) { v = cast<StringAttr>(a).str(); }
} // namespace detail

/// Sets `value` to what a pass uses for `option`, which names plan field `field` (see
/// sched::resolvePlanField). The option itself is never assigned, so a pass instance run again on
/// another module reads that module's plan. Fails, with the error on the module, when recording
/// an explicit option makes the plan inconsistent.
template <typename OptionT, typename T>
LogicalResult resolvePlanOption(ModuleOp module, const OptionT &option, StringRef field,
                                T &value) {
  Builder b(module.getContext());
  const T given = option;
  FailureOr<Attribute> a =
      sched::resolvePlanField(module, field, option.hasValue() ? detail::planValue(b, given)
                                                               : Attribute(),
                              detail::planValue(b, given));
  if (failed(a))
    return failure();
  detail::fromPlanValue(*a, value);
  return success();
}

} // namespace mlir::trainc

#endif
