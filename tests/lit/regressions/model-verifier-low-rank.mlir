// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// REQUIRES: compiler
// Known bug: model verifiers read the last dim (or dim 1 of the weight) before checking the rank:
// a rank-0 operand crashes trainc-opt (segfault) and a rank-1 linear_grad_input weight reads out of
// bounds (the message shows garbage like "expected [2, 94123119936160]"). Each case should be a
// clean verifier error about the rank. Remove the XFAIL line when fixed.

// Tests that linear_grad_input rejects a scalar dy.
func.func @lgi_rank0(%dy: tensor<f32>, %w: tensor<4x8xf32>) {
  // expected-error-re@+1 {{'model.linear_grad_input' op {{.*}}rank{{.*}}}}
  %0 = model.linear_grad_input %dy, %w : (tensor<f32>, tensor<4x8xf32>) -> tensor<f32>
  return
}

// -----

// Tests that linear_grad_input rejects a rank-1 weight.
func.func @lgi_weight_rank1(%dy: tensor<2x4xf32>, %w: tensor<4xf32>) {
  // expected-error-re@+1 {{'model.linear_grad_input' op {{.*}}rank{{.*}}}}
  %0 = model.linear_grad_input %dy, %w : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

// Tests that linear_grad_weight rejects scalars.
func.func @lgw_rank0(%dy: tensor<f32>, %x: tensor<f32>) {
  // expected-error-re@+1 {{'model.linear_grad_weight' op {{.*}}rank{{.*}}}}
  %0 = model.linear_grad_weight %dy, %x : (tensor<f32>, tensor<f32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests that bias_grad rejects a scalar dy.
func.func @bias_grad_rank0(%dy: tensor<f32>) {
  // expected-error-re@+1 {{'model.bias_grad' op {{.*}}rank{{.*}}}}
  %0 = model.bias_grad %dy : (tensor<f32>) -> tensor<4xf32>
  return
}

// -----

// Tests that rms_norm rejects a scalar input.
func.func @rms_norm_rank0(%x: tensor<f32>, %g: tensor<8xf32>) {
  // expected-error-re@+1 {{'model.rms_norm' op {{.*}}rank{{.*}}}}
  %0, %1 = model.rms_norm %x, %g : (tensor<f32>, tensor<8xf32>) -> (tensor<f32>, tensor<1xf32>)
  return
}

// -----

// Tests that layer_norm rejects a scalar input.
func.func @layer_norm_rank0(%x: tensor<f32>, %g: tensor<8xf32>) {
  // expected-error-re@+1 {{'model.layer_norm' op {{.*}}rank{{.*}}}}
  %0, %1, %2 = model.layer_norm %x, %g, %g : (tensor<f32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<f32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

// Tests that rms_norm_grad rejects a scalar input.
func.func @rms_norm_grad_rank0(%x: tensor<f32>, %g: tensor<8xf32>) {
  // expected-error-re@+1 {{'model.rms_norm_grad' op {{.*}}rank{{.*}}}}
  %0, %1 = model.rms_norm_grad %x, %x, %g, %x : (tensor<f32>, tensor<f32>, tensor<8xf32>, tensor<f32>) -> (tensor<f32>, tensor<8xf32>)
  return
}

// -----

// Tests that swiglu rejects a scalar input.
func.func @swiglu_rank0(%x: tensor<f32>) {
  // expected-error-re@+1 {{'model.swiglu' op {{.*}}rank{{.*}}}}
  %0 = model.swiglu %x : (tensor<f32>) -> tensor<f32>
  return
}
