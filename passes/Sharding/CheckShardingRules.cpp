//===- CheckShardingRules.cpp - Verify and print the ops' sharding rules --===//

#include "passes/Sharding/Passes.h"

#include "mlir/IR/Diagnostics.h"

namespace mlir::trainc {
#define GEN_PASS_DEF_CHECKSHARDINGRULESPASS
#include "passes/Sharding/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

struct CheckShardingRulesPass
    : mlir::trainc::impl::CheckShardingRulesPassBase<CheckShardingRulesPass> {
  using CheckShardingRulesPassBase::CheckShardingRulesPassBase;
  void runOnOperation() override {
    WalkResult r = getOperation().walk([&](model::ShardingRuleOpInterface op) {
      model::ShardingRule rule = op.getShardingRule();
      if (failed(model::verifyShardingRule(op, rule)))
        return WalkResult::interrupt();
      if (remarks)
        op->emitRemark() << rule.str();
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
