// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-optimizer-expand | FileCheck %s
// RUN: trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false clip-grad=0.5" -trainc-optimizer-expand | FileCheck %s --check-prefix=PIPE
// REQUIRES: compiler

model.parameter @layer.weight {init = "zeros"} : tensor<4x8xf32>
model.parameter @layer.bias {init = "zeros", no_weight_decay} : tensor<4xf32>
model.parameter @norm.weight {init = "zeros", no_weight_decay} : tensor<8xf32>
// Tests that sched.optimizer_step becomes the global grad-norm clip and one AdamW per parameter,
// in argument order, with the step's betas and eps; parameters tagged model.no_weight_decay get
// decay = false.
// CHECK-LABEL: func.func @train_step()
// CHECK-NEXT: sched.zero_grads
// CHECK-NEXT: sched.clip_grad_norm {max_norm = 2.500000e-01 : f64}
// CHECK-NEXT: sched.adamw @layer.weight {beta1 = 5.000000e-01 : f64, beta2 = 7.500000e-01 : f64, decay = true, eps = 1.250000e-01 : f64}
// CHECK-NEXT: sched.adamw @layer.bias {beta1 = 5.000000e-01 : f64, beta2 = 7.500000e-01 : f64, decay = false, eps = 1.250000e-01 : f64}
// CHECK-NEXT: sched.adamw @norm.weight {beta1 = 5.000000e-01 : f64, beta2 = 7.500000e-01 : f64, decay = false, eps = 1.250000e-01 : f64}
// CHECK-NEXT: sched.read_outputs "outputs"
// CHECK-NOT: sched.optimizer_step
func.func @forward_backward(
    %w: tensor<4x8xf32> {model.param = @layer.weight},
    %b: tensor<4xf32> {model.param = @layer.bias},
    %g: tensor<8xf32> {model.param = @norm.weight},
    %x: tensor<2x8xf32> {model.input = "x"}) attributes {sched.stage} {
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.zero_grads
  sched.optimizer_step {beta1 = 0.5 : f64, beta2 = 0.75 : f64, eps = 0.125 : f64, clip_grad = 0.25 : f64}
  sched.read_outputs "outputs"
  return
}

// -----

model.parameter @forward_only {init = "zeros"} : tensor<4xf32>
model.parameter @shared {init = "zeros"} : tensor<4xf32>
model.parameter @second {init = "zeros"} : tensor<4xf32>
// Tests that a parameter of several stage functions gets one update, and that arguments of
// functions that are not stage functions are not parameters.
// CHECK-LABEL: func.func @train_step()
// CHECK-NEXT: sched.clip_grad_norm
// CHECK-NEXT: sched.adamw @shared {{.*}}
// CHECK-NEXT: sched.adamw @second {{.*}}
// CHECK-NEXT: return
func.func @forward(%p: tensor<4xf32> {model.param = @forward_only}) {
  return
}
func.func @stage0(%p: tensor<4xf32> {model.param = @shared}) attributes {sched.stage} {
  return
}
func.func @stage1(%p: tensor<4xf32> {model.param = @shared}, %q: tensor<4xf32> {model.param = @second}) attributes {sched.stage} {
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.optimizer_step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, clip_grad = 1.0 : f64}
  return
}

// -----

model.parameter @p {init = "zeros"} : tensor<4xf32>
// Tests that a module without sched.optimizer_step is left alone.
// CHECK-LABEL: func.func @train_step()
// CHECK-NOT: sched.clip_grad_norm
// CHECK-NOT: sched.adamw
// CHECK: return
func.func @stage(%p: tensor<4xf32> {model.param = @p}) attributes {sched.stage} {
  return
}
func.func @train_step() attributes {sched.iteration} {
  return
}

// -----

// Tests that an optimizer step without any parameter is reported.
func.func @stage(%x: tensor<4xf32> {model.input = "x"}) attributes {sched.stage} {
  return
}
func.func @train_step() attributes {sched.iteration} {
  // expected-error@+1 {{'sched.optimizer_step' op found no parameters (model.param arguments of sched.stage functions)}}
  sched.optimizer_step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, clip_grad = 1.0 : f64}
  return
}

// Tests the step trainc-schedule builds: its clip-grad option becomes max_norm and the norm weight
// (model.no_weight_decay) is not decayed.
// PIPE-LABEL: func.func @train_step()
// PIPE: sched.clip_grad_norm {max_norm = 5.000000e-01 : f64}
// PIPE-NEXT: sched.adamw @w {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decay = true, eps = 1.000000e-08 : f64}
// PIPE-NEXT: sched.adamw @b {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decay = false, eps = 1.000000e-08 : f64}
// PIPE-NEXT: sched.read_outputs
