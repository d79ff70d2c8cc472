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
      sched.accumulate_grad %dw {param = "w"} : tensor<4x8xf32>
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

#endif
