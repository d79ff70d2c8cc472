//===- Passes.td - Autodiff passes ----------------------------------------===//
#ifndef TRAINC_PASSES_AUTODIFF
#define TRAINC_PASSES_AUTODIFF
include "mlir/Pass/PassBase.td"

def AutodiffPass : Pass<"trainc-autodiff", "::mlir::ModuleOp"> {
  let summary = "Append the backward pass to a forward function by the ops' VJP rules";
  let description = [{
    Clones the forward function (arguments tagged `model.param` are parameters, results are
    (loss_sum, num_tokens)) into `output`, seeds d(loss_sum) = 1 with a `model.fill` tagged
    `model.loss_seed`, walks the ops in reverse asking each VJPOpInterface for operand gradients,
    sums gradients of values with several uses, and returns the gradient of every parameter after
    the losses (result attribute `model.grad_of`). A parameter that receives no gradient gets zeros.

    Before:
    ```mlir
    func.func @forward(%w: tensor<4x8xf32> {model.param = @w}, %x: tensor<2x8xf32> {model.input = "x"}, ...)
        -> (tensor<f32>, tensor<f32>)
    ```
    After (added):
    ```mlir
    func.func @forward_backward(%w: ..., %x: ..., ...)
        -> (tensor<f32>, tensor<f32>, tensor<4x8xf32> {model.grad_of = @w}) {
      ... forward ops ...
      %seed = model.fill {model.loss_seed, value = 1.0 : f64} : () -> tensor<f32>
      ... backward ops ...
    }
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"forward\"", "The forward function">,
    Option<"output", "output", "std::string", "\"forward_backward\"", "Name of the new function">,
  ];
  let dependentDialects = ["::mlir::trainc::model::ModelDialect"];
}

#endif
