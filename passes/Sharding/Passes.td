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

def ShardTensorParallelPass : Pass<"trainc-shard", "::mlir::ModuleOp"> {
  let summary = "Tensor parallelism: Megatron's column/row-parallel layouts and their collectives";
  let description = [{
    Runs on the model-level IR, before autodiff, when the plan's tp > 1 (mesh axis 0 of @mesh).
    Parameters take Megatron's layouts by name: q/k/v and fc1 (SwiGLU's gate and up halves split
    consistently) and the output layer column-parallel, linear_proj and fc2 row-parallel, the word
    embeddings vocab-parallel; every other op takes the split its sharding rule gives
    (attention by heads with kv groups, rope by heads, swiglu by f, reshapes keeping the split
    dim). Inserted: model.copy_to_region before each replicated input of column-parallel
    linears (one per value), mesh.all_reduce after row-parallel linears (their bias added after
    it with model.bias_add) and after the vocab-parallel embedding, and the vocab-parallel cross
    entropy (ce_local_max, all-reduce max, ce_local_sumexp, ce_target_logit, two all-reduce sums,
    ce_combine). A sharded parameter's declaration gets its local type and global_shape /
    split_dim / split_axis; a shard's vocab_start gets a model.rank_offsets entry.
    Errors: a parameter dim not divisible by tp (names the parameter, dim, extent and tp), a
    layout an op's rule cannot split, hidden dropout on a shard. Attention on a head shard gets
    `model.global_heads` and a head_start rank offset (its dropout mask is the single-rank one).
    With sequence-parallel (tp > 1): the values between blocks are sequence shards [b, s/tp, h];
    mesh.reduce_scatter along the sequence after the embedding and the row-parallel linears,
    mesh.all_gather along it before the column-parallel ones (one per value), mesh.all_slice of
    a replicated activation added to a shard, model.copy_to_region on replicated parameters
    used on a shard (their gradient is all-reduced over tp by autodiff), and dropout on a shard
    with `model.global_seq` and a seq_start rank offset.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", "1", "Tensor-parallel size (default: the plan's tp)">,
    Option<"sequenceParallel", "sequence-parallel", "bool", "false",
           "Megatron's --sequence-parallel (default: the module's model.sequence_parallel)">,
  ];
}

def TensorParallelCommOverlapPass : Pass<"trainc-tp-comm-overlap", "::mlir::ModuleOp"> {
  let summary = "Start tensor collectives asynchronously where independent compute can hide them";
  let description = [{
    Megatron overlaps the input-gradient all-reduce of a column-parallel linear (with sequence
    parallelism, its reduce-scatter) with the weight-gradient GEMM
    (LinearWithGradAccumulationAndAsyncCommunication). This pass finds such overlap from the
    IR's dependencies alone, for every mesh.all_reduce / reduce_scatter / all_gather of every
    function body (layer backward functions, units, stage functions), in block order:
    1. The ops after the previous wait and before the collective that its operand does not
       depend on (and that no op staying behind needs) move to right after it, keeping their
       order; an op with memory effects (sched.accumulate_grad, calls) moves only when no other
       op with memory effects stays after it, and ops of the mesh and sched dialects (other
       collectives, p2p, bucket syncs) never move.
    2. If the ops between the collective and the first user of its result, or the next
       collective, compute anything (FLOPs > 0 by CostOpInterface, or a call), the collective is
       marked `sched.async` and a `sched.collective_wait` placed before that point replaces its
       result. Otherwise it stays synchronous.
    Collectives keep their relative order (the communication stream runs them in issue order)
    and no two are in flight at once. Values are unchanged: only the order of independent
    ops changes, so the results are bitwise those of the synchronous plan.
    Before:
    ```mlir
    %dx = model.linear_grad_input %dy, %w : ...
    %dw = model.linear_grad_weight %dy, %x : ...
    %r = mesh.all_reduce %dx on @mesh mesh_axes = [0] : ...
    %g, %gw = model.rms_norm_grad %r, ...
    ```
    After:
    ```mlir
    %dx = model.linear_grad_input %dy, %w : ...
    %r = mesh.all_reduce %dx on @mesh mesh_axes = [0] {sched.async} : ...
    %dw = model.linear_grad_weight %dy, %x : ...
    %w = sched.collective_wait %r : ...
    %g, %gw = model.rms_norm_grad %w, ...
    ```
    Does nothing when the module has `sched.no_async_tp_comm` (Megatron's
    --no-async-tensor-model-parallel-allreduce) unless `enable` is given.
  }];
  let options = [
    Option<"enable", "enable", "bool", "true",
           "Overlap (default: on unless the module has sched.no_async_tp_comm)">,
  ];
}

#endif
