//===- Passes.td - Optimizer passes ---------------------------------------===//
#ifndef TRAINC_PASSES_OPTIMIZER
#define TRAINC_PASSES_OPTIMIZER
include "mlir/Pass/PassBase.td"

def OptimizerExpandPass : Pass<"trainc-optimizer-expand", "::mlir::ModuleOp"> {
  let summary = "Expand sched.optimizer_step into grad-norm clipping and one AdamW per parameter";
  let description = [{
    AdamW with decoupled weight decay; parameters tagged `model.no_weight_decay` (biases and norm
    weights, Megatron's no_wd rule) get none. The update of every parameter is predicated on the
    device flag update_successful that clip_grad_norm computes (finite grad norm).

    Before: `sched.optimizer_step {beta1 = 0.9 : f64, ...}`
    After:
    ```mlir
    sched.clip_grad_norm {max_norm = 1.0 : f64}
    sched.adamw @w {decay = true, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64}
    ```
  }];
  let dependentDialects = ["::mlir::trainc::sched::SchedDialect"];
}

#endif
