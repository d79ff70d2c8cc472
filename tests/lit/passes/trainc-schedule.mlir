// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-schedule | FileCheck %s
// RUN: trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false num-microbatches=3 entry=iteration adam-beta1=0.5 adam-beta2=0.75 adam-eps=0.25 clip-grad=0" | FileCheck %s --check-prefix=OPTS
// RUN: trainc-opt %S/Inputs/tiny-model.mlir -trainc-autodiff -trainc-grad-accumulate -trainc-schedule="num-microbatches=2" | FileCheck %s --check-prefix=EVAL
// RUN: %not trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false stage=stage0" 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: %not trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false num-microbatches=0" 2>&1 | FileCheck %s --check-prefix=BADMB
// RUN: %not trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false adam-beta1=1.5" 2>&1 | FileCheck %s --check-prefix=BETA1
// RUN: %not trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule=eval=false -trainc-schedule=eval=false 2>&1 | FileCheck %s --check-prefix=TWICE
// REQUIRES: compiler

model.parameter @w {init = "zeros"} : tensor<4xf32>
// Tests that the iteration function of a single-stage rank (Megatron's no-pipelining schedule)
// zeroes the grads, fills the inputs, calls the stage function once per microbatch (here 1),
// finalizes with the stage's normalization and takes the default AdamW step; and that the
// evaluation step (eval, on by default) runs the forward function only and sums the losses.
// CHECK-LABEL: func.func @forward(
// CHECK-LABEL: func.func @forward_only(
// CHECK-SAME: %{{[^:]+}}: tensor<4xf32> {model.param = @w}, %[[L:[^:]+]]: tensor<f32> {model.input = "l"})
// CHECK-SAME: attributes {sched.stage}
// CHECK-NEXT: sched.accumulate_loss %[[L]], %[[L]] per_token
// CHECK-NEXT: return{{$}}
// CHECK-LABEL: func.func @forward_backward(
// CHECK-LABEL: func.func @train_step()
// CHECK-SAME: attributes {sched.iteration, sched.num_microbatches = 1 : i64}
// CHECK-NEXT: sched.zero_grads
// CHECK-NEXT: sched.fill_inputs "batch"
// CHECK-NEXT: sched.microbatch @forward_backward {index = 0 : i64}
// CHECK-NEXT: sched.finalize_grads per_token
// CHECK-NEXT: sched.optimizer_step {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, clip_grad = 1.000000e+00 : f64, eps = 1.000000e-08 : f64}
// CHECK-NEXT: sched.read_outputs "outputs"
// CHECK-NEXT: return
// CHECK-LABEL: func.func @eval_step()
// CHECK-SAME: attributes {sched.eval, sched.iteration, sched.num_microbatches = 1 : i64}
// CHECK-NEXT: sched.zero_losses
// CHECK-NEXT: sched.fill_inputs "eval_batch"
// CHECK-NEXT: sched.microbatch @forward_only {index = 0 : i64}
// CHECK-NEXT: sched.read_outputs "eval_outputs"
// CHECK-NEXT: return
func.func @forward(%w: tensor<4xf32> {model.param = @w}, %l: tensor<f32> {model.input = "l"}) -> (tensor<f32>, tensor<f32>) {
  return %l, %l : tensor<f32>, tensor<f32>
}
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}, %l: tensor<f32> {model.input = "l"}) attributes {sched.stage} {
  sched.accumulate_loss %l, %l per_token : tensor<f32>, tensor<f32>
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}

// -----

// Tests that the pass needs the stage function.
// expected-error@+1 {{trainc-schedule: no stage function @forward_backward (run trainc-grad-accumulate first)}}
module {
  func.func @forward() {
    return
  }
}

// -----

// Tests that a function of that name that is not a stage function (no sched.stage) is refused.
// expected-error@+1 {{trainc-schedule: no stage function @forward_backward (run trainc-grad-accumulate first)}}
module {
  func.func @forward_backward(%l: tensor<f32> {model.input = "l"}) -> (tensor<f32>, tensor<f32>) {
    return %l, %l : tensor<f32>, tensor<f32>
  }
}

// -----

// Tests that the evaluation step needs the forward function.
// expected-error@+1 {{trainc-schedule: eval needs the body of the forward function @forward}}
module {
  func.func @forward_backward(%l: tensor<f32> {model.input = "l"}) attributes {sched.stage} {
    return
  }
}

// -----

// Tests that the evaluation step needs a forward function that returns (loss_sum, num_tokens).
// expected-error@+1 {{'func.func' op must return (loss_sum, num_tokens)}}
func.func @forward(%l: tensor<f32> {model.input = "l"}) -> tensor<f32> {
  return %l : tensor<f32>
}
func.func @forward_backward(%l: tensor<f32> {model.input = "l"}) attributes {sched.stage} {
  return
}

// Tests that num-microbatches calls the stage function m times (indices 0 .. m-1), that the entry
// and Adam options are used, that finalize follows the stage's per_microbatch normalization and
// that eval=false builds no evaluation step.
// OPTS-LABEL: func.func @iteration()
// OPTS-SAME: attributes {sched.iteration, sched.num_microbatches = 3 : i64}
// OPTS-NEXT: sched.zero_grads
// OPTS-NEXT: sched.fill_inputs "batch"
// OPTS-NEXT: sched.microbatch @forward_backward {index = 0 : i64}
// OPTS-NEXT: sched.microbatch @forward_backward {index = 1 : i64}
// OPTS-NEXT: sched.microbatch @forward_backward {index = 2 : i64}
// OPTS-NEXT: sched.finalize_grads per_microbatch
// OPTS-NEXT: sched.optimizer_step {beta1 = 5.000000e-01 : f64, beta2 = 7.500000e-01 : f64, clip_grad = 0.000000e+00 : f64, eps = 2.500000e-01 : f64}
// OPTS-NEXT: sched.read_outputs "outputs"
// OPTS-NOT: @train_step
// OPTS-NOT: @eval_step
// OPTS-NOT: @forward_only

// Tests the evaluation step of the tiny model over two microbatches: forward only (no backward op,
// no seed), losses summed per token.
// EVAL-LABEL: func.func @forward_only(
// EVAL-NOT: model.fill
// EVAL-NOT: _grad
// EVAL: %[[LOSS:[^,]+]], %[[N:[^,]+]], %{{.+}} = model.cross_entropy
// EVAL-NEXT: sched.accumulate_loss %[[LOSS]], %[[N]] per_token
// EVAL-NEXT: return
// EVAL-LABEL: func.func @eval_step()
// EVAL-SAME: attributes {sched.eval, sched.iteration, sched.num_microbatches = 2 : i64}
// EVAL: sched.microbatch @forward_only {index = 0 : i64}
// EVAL-NEXT: sched.microbatch @forward_only {index = 1 : i64}
// EVAL-NOT: sched.optimizer_step
// EVAL: return

// Tests that the stage option names the stage function.
// STAGE: error: trainc-schedule: no stage function @stage0 (run trainc-grad-accumulate first)

// Tests that the number of microbatches is positive (the value itself is printed as a raw
// character today: see tests/lit/xfail/int-option-in-message.mlir).
// BADMB: error: trainc-schedule: num-microbatches {{.*}} must be positive

// Tests that an Adam option out of range is reported (by the verifier of the step the pass builds).
// BETA1: error: 'sched.optimizer_step' op beta1 = 1.500000e+00, expected 0 <= beta1 < 1

// Tests that a second run does not silently add a second iteration function.
// TWICE: error: redefinition of symbol named 'train_step'
