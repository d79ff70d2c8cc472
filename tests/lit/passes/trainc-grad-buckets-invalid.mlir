// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-grad-buckets="dp=2 distributed-optimizer=1"
// REQUIRES: compiler

// One case per trainc-grad-buckets error on IR that does not have the expected shape.

model.parameter @w {init = "zeros"} : tensor<4xf32>
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}
// Tests that the iteration must have exactly one finalize_grads.
// expected-error@+1 {{'func.func' op has 0 sched.finalize_grads; data parallelism needs exactly one}}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}
// Tests that the iteration must call the stage function.
// expected-error@+1 {{'func.func' op calls no microbatch of @forward_backward}}
func.func @train_step() attributes {sched.iteration} {
  sched.finalize_grads per_token
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}
// Tests that the distributed optimizer needs the expanded AdamW ops.
// expected-error@+1 {{'func.func' op has no sched.adamw (run trainc-optimizer-expand first)}}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  sched.finalize_grads per_token
  sched.optimizer_step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, clip_grad = 1.0 : f64}
  return
}
