// Cases of trainc-verify phase=model, run by ../trainc-verify.mlir (lit skips Inputs/).

// Tests that the model phase needs @forward.
// expected-error@+1 {{phase model: no @forward function}}
module {
  func.func @model() {
    return
  }
}

// -----

// Tests that @forward returns (loss_sum, num_tokens).
// expected-error@+1 {{'func.func' op phase model: must return (loss_sum, num_tokens), returns 3 values}}
func.func @forward(%l: tensor<f32> {model.input = "l"}) -> (tensor<f32>, tensor<f32>, tensor<f32>) {
  return %l, %l, %l : tensor<f32>, tensor<f32>, tensor<f32>
}

// -----

// Tests that every argument of @forward is tagged.
// expected-error@+1 {{'func.func' op phase model: argument 1 is neither a model.param nor a model.input}}
func.func @forward(%l: tensor<f32> {model.input = "l"}, %x: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  return %l, %l : tensor<f32>, tensor<f32>
}

// -----

// Tests that @forward holds no backward op.
func.func @forward(%w: tensor<4x8xf32> {model.param = @w}, %dy: tensor<2x4xf32> {model.input = "dy"}) -> (tensor<f32>, tensor<f32>) {
  // expected-error@+1 {{'model.linear_grad_input' op phase model: backward or schedule op in the forward function}}
  %0 = model.linear_grad_input %dy, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %1 = model.fill {value = 0.0 : f64} : () -> tensor<f32>
  return %1, %1 : tensor<f32>, tensor<f32>
}

// -----

// Tests that @forward holds no schedule op.
func.func @forward(%l: tensor<f32> {model.input = "l"}) -> (tensor<f32>, tensor<f32>) {
  // expected-error@+1 {{'sched.accumulate_loss' op phase model: backward or schedule op in the forward function}}
  sched.accumulate_loss %l, %l per_token : tensor<f32>, tensor<f32>
  return %l, %l : tensor<f32>, tensor<f32>
}

// -----

// Tests that a function @forward calls (a layer) holds forward ops only too.
func.func private @layer(%w: tensor<4x8xf32>, %dy: tensor<2x4xf32>) -> tensor<2x8xf32> {
  // expected-error@+1 {{'model.linear_grad_input' op phase model: backward or schedule op in the forward function}}
  %0 = model.linear_grad_input %dy, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}
func.func @forward(%w: tensor<4x8xf32> {model.param = @w}, %dy: tensor<2x4xf32> {model.input = "dy"}) -> (tensor<f32>, tensor<f32>) {
  %0 = call @layer(%w, %dy) : (tensor<4x8xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %1 = model.fill {value = 0.0 : f64} : () -> tensor<f32>
  return %1, %1 : tensor<f32>, tensor<f32>
}

// -----

// Tests that @forward calls only functions with a body.
func.func private @external(%x: tensor<f32>) -> tensor<f32>
func.func @forward(%l: tensor<f32> {model.input = "l"}) -> (tensor<f32>, tensor<f32>) {
  // expected-error@+1 {{'func.call' op phase model: calls @external, not a function with a body in the module}}
  %0 = call @external(%l) : (tensor<f32>) -> tensor<f32>
  return %0, %0 : tensor<f32>, tensor<f32>
}
