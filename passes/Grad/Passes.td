//===- Passes.td - Gradient passes ----------------------------------------===//
#ifndef TRAINC_PASSES_GRAD
#define TRAINC_PASSES_GRAD
include "mlir/Pass/PassBase.td"

def GradAccumulatePass : Pass<"trainc-grad-accumulate", "::mlir::ModuleOp"> {
  let summary = "Turn a forward-backward function into a stage function that accumulates";
  let description = [{
    The stage function's parameter gradients become `sched.accumulate_grad` into the persistent
    fp32 main_grad of each parameter, and (loss_sum, num_tokens) become `sched.accumulate_loss`;
    the function then returns nothing and can be called once per microbatch.

    normalization = per_token (default; Megatron's calculate_per_token_loss): backward starts from
    d(loss_sum) = 1 and sched.finalize_grads divides every main_grad by the global token count, so
    the gradient is that of the exact per-token mean over the global batch.
    normalization = per_microbatch (Megatron's legacy mode): backward starts from
    1 / (num_tokens_mb * num_microbatches) (sched.loss_seed) and finalize does not scale.

    Before: `func.func @forward_backward(...) -> (loss_sum, num_tokens, dW...)`
    After:
    ```mlir
    func.func @forward_backward(...) {
      ...
      sched.accumulate_loss %l, %n {normalization = "per_token"} : tensor<f32>, tensor<f32>
      sched.accumulate_grad %dw into @w : tensor<4x8xf32>
      return
    }
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"forward_backward\"", "The stage function">,
    Option<"normalization", "normalization", "std::string", "\"per_token\"",
           "per_token (exact global per-token mean) or per_microbatch (Megatron legacy)">,
    Option<"numMicrobatches", "num-microbatches", "int64_t", "1",
           "Microbatches per iteration (the legacy seed divides by it)">,
  ];
  let dependentDialects = ["::mlir::trainc::sched::SchedDialect"];
}

def GradBucketsPass : Pass<"trainc-grad-buckets", "::mlir::ModuleOp"> {
  let summary = "Contiguous main-grad buffer, gradient buckets and their data-parallel collectives";
  let description = [{
    Megatron's DistributedDataParallel as a compiler pass. Runs on the sched IR after
    trainc-optimizer-expand.

    1. Each `sched.accumulate_grad` moves right after the op that computes its gradient, so the
       main_grad of a parameter is final as early as backward allows.
    2. The parameters are laid out in one contiguous main-grad buffer in the order their gradients
       become final (Megatron's "reverse order of use") and cut into buckets of at least
       `bucket-size` elements (0 = Megatron's default max(40M, 1M x dp)); a bucket closes after the
       parameter that reaches the size, so a parameter never spans two buckets. With the
       distributed optimizer every bucket is padded to a multiple of dp. The layout is written as
       one `sched.grad_buffer` op at the top of the module.
    3. With dp > 1: the stage function is cloned for the last microbatch (`<stage>_last`); in the
       clone a `sched.grad_sync_start {bucket = b}` follows the accumulate_grad of the bucket's last
       parameter, so its collective overlaps the rest of backward. Earlier microbatches issue no
       communication. The iteration waits for every bucket (`sched.grad_sync_wait`) and reduces
       (loss_sum, num_tokens) over DP (`sched.reduce_losses`) before sched.finalize_grads; the
       eval iteration reduces its losses before reading them.
    4. With the distributed optimizer the AdamW ops are ordered by the layout and a
       `sched.param_gather_start` follows the last update of each bucket, its wait at the end of
       the step. With overlap-param-gather the waits move into the next iteration: into a clone of
       the stage function for the first microbatch (`<stage>_first`; the stage itself when it is
       also the last), right before the first op that reads a parameter of the bucket, and to the
       start of the eval iteration.

    Before (2 microbatches, after trainc-optimizer-expand):
    ```mlir
    func.func @forward_backward(...) attributes {sched.stage} {
      %dw = model.linear_grad_weight ...
      ...
      sched.accumulate_grad %dw into @w : tensor<11x8xf32>
      sched.accumulate_grad %db into @b : tensor<11xf32>
      return
    }
    func.func @train_step() attributes {sched.iteration} {
      sched.microbatch @forward_backward {index = 0 : i64}
      sched.microbatch @forward_backward {index = 1 : i64}
      sched.finalize_grads {normalization = "per_token"}
      ...
    }
    ```
    After (dp=2 bucket-size=50):
    ```mlir
    sched.grad_buffer {bucket_bounds = array<i64: 0, 88, 99>, dp = 2 : i64, numel = 99 : i64,
                       offsets = array<i64: 0, 88>, params = [@w, @b], sizes = array<i64: 88, 11>}
    func.func @forward_backward_last(...) attributes {sched.last_microbatch, sched.stage} {
      %dw = model.linear_grad_weight ...
      sched.accumulate_grad %dw into @w : tensor<11x8xf32>
      sched.grad_sync_start {bucket = 0 : i64}
      ...
      sched.accumulate_grad %db into @b : tensor<11xf32>
      sched.grad_sync_start {bucket = 1 : i64}
      return
    }
    func.func @train_step() attributes {sched.iteration} {
      sched.microbatch @forward_backward {index = 0 : i64}
      sched.microbatch @forward_backward_last {index = 1 : i64}
      sched.grad_sync_wait {bucket = 0 : i64}
      sched.grad_sync_wait {bucket = 1 : i64}
      sched.reduce_losses
      sched.finalize_grads {normalization = "per_token"}
      ...
    }
    ```
  }];
  let options = [
    Option<"stage", "stage", "std::string", "\"forward_backward\"", "The training stage function">,
    Option<"dp", "dp", "int64_t", "1", "Data-parallel size">,
    Option<"bucketSize", "bucket-size", "int64_t", "0",
           "Bucket size in elements (0 = max(40000000, 1000000 * dp))">,
    Option<"distributedOptimizer", "distributed-optimizer", "bool", "false",
           "ZeRO-1: reduce-scatter gradients, shard the optimizer, all-gather parameters">,
    Option<"overlapParamGather", "overlap-param-gather", "bool", "false",
           "Wait for each bucket's parameter all-gather right before the next iteration's first "
           "read of it (in the first microbatch's forward and at the start of eval) instead of "
           "at the end of the step">,
  ];
  let dependentDialects = ["::mlir::trainc::sched::SchedDialect"];
}

#endif
