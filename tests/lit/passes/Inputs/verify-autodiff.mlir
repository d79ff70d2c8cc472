// Cases of trainc-verify phase=autodiff, run by ../trainc-verify.mlir (lit skips Inputs/).

// Tests that the autodiff phase needs @forward_backward.
// expected-error@+1 {{phase autodiff: no @forward_backward function}}
module {
  func.func @forward() {
    return
  }
}

// -----

// Tests that every parameter has a gradient result.
// expected-error@+1 {{'func.func' op phase autodiff: parameter 'b' has no gradient result}}
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}, %b: tensor<4xf32> {model.param = @b}, %l: tensor<f32> {model.input = "l"})
    -> (tensor<f32>, tensor<f32>, tensor<4xf32> {model.grad_of = @w}) {
  return %l, %l, %w : tensor<f32>, tensor<f32>, tensor<4xf32>
}
