// RUN: trainc-opt %s -trainc-autodiff | FileCheck %s
// REQUIRES: compiler
// Known bug: a constant (model.fill) in the forward function on the gradient path stops autodiff
// with "'model.fill' op has no VJP rule (VJPOpInterface) but a gradient flows into it"; an op
// without differentiable operands needs no VJP rule, its gradient can be dropped. Remove the
// XFAIL line when fixed.

// Tests that a constant added to the logits does not stop differentiation.
// CHECK-LABEL: func.func @forward_backward(
// CHECK: %[[DW:.+]] = model.linear_grad_weight
// CHECK: return %{{.+}}, %{{.+}}, %[[DW]] :
func.func @forward(%w: tensor<4x8xf32> {model.param = @w}, %x: tensor<2x8xf32> {model.input = "x"}, %labels: tensor<2xi32> {model.input = "labels"}, %mask: tensor<2xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %logits = model.linear %x, %w : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  %c = model.fill {value = 1.0 : f64} : () -> tensor<2x4xf32>
  %s = model.add %logits, %c : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %loss, %n, %lse = model.cross_entropy %s, %labels, %mask : (tensor<2x4xf32>, tensor<2xi32>, tensor<2xf32>) -> (tensor<f32>, tensor<f32>, tensor<2xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}
