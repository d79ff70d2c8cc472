//===- Passes.td - Sharding (tensor and sequence parallelism) -------------===//
#ifndef TRAINC_PASSES_SHARDING
#define TRAINC_PASSES_SHARDING
include "mlir/Pass/PassBase.td"

def CheckShardingRulesPass : Pass<"trainc-check-sharding-rules", "::mlir::ModuleOp"> {
  let summary = "Check every op's sharding rule against its shapes and print it as a remark";
  let description = [{
    For each op with ShardingRuleOpInterface: verifyShardingRule (one map per operand and
    result, ranks, loop extents equal to the dims they index, every index inside its dim) and a
    remark with the rule, e.g.
    `remark: loops (l0=2, l1=5, n=48, k=8) ins [l0, l1, k] [n, k] outs [l0, l1, n]`.
    Fails on the first inconsistent rule. The tensor-parallel sharding pass reads the same rules.
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "true", "Print each rule as a remark">,
  ];
}

#endif
