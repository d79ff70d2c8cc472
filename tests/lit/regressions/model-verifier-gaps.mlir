// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// REQUIRES: compiler
// Known gaps: these model ops verify only part of what their runtime kernel requires, so invalid IR
// is accepted and only fails after trainc-lower-to-rt, as an rt.kernel error far from the source
// (e.g. model.add of f32 and bf16 gives "'rt.kernel' op kernel 'add' input 1: dtype bf16, expected
// f32 (as input 0)"). Remove the XFAIL line when fixed.

// Tests that dropout_grad checks p like dropout.
func.func @dropout_grad_p(%dy: tensor<4xf32>, %rng: tensor<3xi64>) {
  // expected-error-re@+1 {{'model.dropout_grad' op p = {{.*}}, expected 0 <= p < 1}}
  %0 = model.dropout_grad %dy, %rng {p = 1.5 : f64, op_id = 1 : i64} : (tensor<4xf32>, tensor<3xi64>) -> tensor<4xf32>
  return
}

// -----

// Tests that dropout_grad checks the rng like dropout.
func.func @dropout_grad_rng(%dy: tensor<4xf32>, %rng: tensor<5xi64>) {
  // expected-error-re@+1 {{'model.dropout_grad' op rng {{.*}}has shape [5], expected [3]}}
  %0 = model.dropout_grad %dy, %rng {p = 0.5 : f64, op_id = 1 : i64} : (tensor<4xf32>, tensor<5xi64>) -> tensor<4xf32>
  return
}

// -----

// Tests that model.add's operands share an element type.
func.func @add_element_types(%a: tensor<4xf32>, %b: tensor<4xbf16>) {
  // expected-error-re@+1 {{'model.add' op {{.*}}element type{{.*}}}}
  %0 = model.add %a, %b : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  return
}

// -----

// Tests that rms_norm_grad's dy has the input's shape.
func.func @rms_norm_grad_dy(%dy: tensor<3x8xf32>, %x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %r: tensor<10xf32>) {
  // expected-error-re@+1 {{'model.rms_norm_grad' op grad has shape [3, 8], expected [2, 5, 8]}}
  %dx, %dg = model.rms_norm_grad %dy, %x, %g, %r : (tensor<3x8xf32>, tensor<2x5x8xf32>, tensor<8xf32>, tensor<10xf32>) -> (tensor<2x5x8xf32>, tensor<8xf32>)
  return
}

// -----

// Tests that swiglu_grad's dy is half the input's last dim.
func.func @swiglu_grad_dy(%dy: tensor<2x3xf32>, %x: tensor<2x8xf32>) {
  // expected-error-re@+1 {{'model.swiglu_grad' op grad has shape [2, 3], expected [2, 4]}}
  %0 = model.swiglu_grad %dy, %x : (tensor<2x3xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// Tests that gelu_grad's result has the input's shape.
func.func @gelu_grad_result(%dy: tensor<2x8xf32>, %x: tensor<2x8xf32>) {
  // expected-error-re@+1 {{'model.gelu_grad' op result has shape [3, 8], expected [2, 8]}}
  %0 = model.gelu_grad %dy, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<3x8xf32>
  return
}
