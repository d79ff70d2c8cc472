//===- Passes.td - Lowering to rt and phase verifiers ---------------------===//
#ifndef TRAINC_PASSES_EXPORT
#define TRAINC_PASSES_EXPORT
include "mlir/Pass/PassBase.td"

def LowerToRtPass : Pass<"trainc-lower-to-rt", "::mlir::ModuleOp"> {
  let summary = "Lower stage and iteration functions to buffer-level rt ops";
  let description = [{
    Every tensor value becomes an rt.buffer (activations per stage function; parameters, main
    grads, Adam states, per-microbatch inputs, device scalars and outputs as persistent buffers),
    every model op is lowered through its KernelOpInterface, sched ops become kernel calls, calls
    and host I/O points. The module gets `trainc.flops_per_iteration` (from CostOpInterface, times
    the number of calls of each stage function) and `rt.entry`.

    Before: `%y = model.linear %x, %w : (...) -> tensor<18x48xf32>`
    After:
    ```mlir
    rt.buffer @forward_backward.linear.3 activation : memref<18x48xf32>
    %y = rt.buffer_ref @forward_backward.linear.3 : memref<18x48xf32>
    rt.kernel "matmul" ins(%x, %w : ...) outs(%y : memref<18x48xf32>) {kernel_attrs = {trans_b = 1 : i64}}
    ```

    With a `sched.grad_buffer` (trainc-grad-buckets) the main grads are views of one `main_grad`
    buffer and the DP ops become collectives on the "dp" group: grad_sync_start/wait an async
    all_reduce (or, with the distributed optimizer, reduce_scatter to this rank's shard) on token
    b; reduce_losses a sync all_reduce of loss_sum and num_tokens. With the distributed optimizer
    the parameters are views of one `params` buffer with the same layout, Adam states exist only
    for this rank's shards (`exp_avg`, `exp_avg_sq`), one AdamW per bucket shard updates the
    pieces of the parameters inside it (`segments`, padding excluded), the grad norm sums the
    shards and all-reduces over DP, and param_gather_start/wait is an async all_gather on token
    (num_buckets + b). The output is the same for every DP rank: a shard is an rt.view on axis
    "dp" whose offset the export resolves per rank (DESIGN.md: specialise per rank last).
  }];
  let dependentDialects = ["::mlir::trainc::rt::RtDialect"];
}

def VerifyPhasePass : Pass<"trainc-verify", "::mlir::ModuleOp"> {
  let summary = "Check the invariants that hold at a phase boundary";
  let description = [{
    phase=model: a forward function whose parameters are tagged and which returns (loss_sum,
    num_tokens); no backward or sched ops. phase=autodiff: every parameter has a gradient result.
    phase=sched: an iteration function exists and only calls stage functions. phase=rt: no model or
    sched ops remain and every tensor is gone. phase=memory: every buffer has an offset inside
    rt.arena_bytes and no two buffers that are live at the same time overlap.
  }];
  let options = [
    Option<"phase", "phase", "std::string", "\"rt\"", "model, autodiff, sched, rt or memory">,
  ];
}

#endif
