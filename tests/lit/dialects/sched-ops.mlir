// RUN: trainc-opt %s | trainc-opt | FileCheck %s
// REQUIRES: compiler

// Round trip of every sched op.

model.parameter @w {init = "zeros"} : tensor<11x8xf32>
model.parameter @b {init = "zeros"} : tensor<6xf32>
model.parameter @a {init = "zeros"} : tensor<10xf32>
// Tests that the ops of a stage function (loss seed, loss and gradient accumulation) round-trip.
// CHECK-LABEL: func.func @stage
// CHECK-SAME: (%[[W:[^:]+]]: tensor<11x8xf32> {model.param = @w}, %[[L:[^:]+]]: tensor<f32> {model.input = "l"}, %[[N:[^:]+]]: tensor<f32> {model.input = "n"})
// CHECK-SAME: attributes {sched.stage}
// CHECK: %[[SEED:.+]] = sched.loss_seed %[[N]] {num_microbatches = 4 : i64} : (tensor<f32>) -> tensor<f32>
// CHECK: sched.accumulate_loss %[[L]], %[[N]] per_microbatch : tensor<f32>, tensor<f32>
// CHECK: sched.accumulate_loss %[[SEED]], %[[N]] per_token : tensor<f32>, tensor<f32>
// CHECK: sched.accumulate_grad %[[W]] into @w : tensor<11x8xf32>
func.func @stage(%w: tensor<11x8xf32> {model.param = @w}, %l: tensor<f32> {model.input = "l"}, %n: tensor<f32> {model.input = "n"}) attributes {sched.stage} {
  %seed = sched.loss_seed %n {num_microbatches = 4 : i64} : (tensor<f32>) -> tensor<f32>
  sched.accumulate_loss %l, %n per_microbatch : tensor<f32>, tensor<f32>
  sched.accumulate_loss %seed, %n per_token : tensor<f32>, tensor<f32>
  sched.accumulate_grad %w into @w : tensor<11x8xf32>
  return
}

// Tests that the ops of an iteration function (training, and evaluation with sched.zero_losses)
// round-trip in order, with their attributes.
// CHECK-LABEL: func.func @train_step
// CHECK-NEXT: sched.zero_grads
// CHECK-NEXT: sched.fill_inputs "batch"
// CHECK-NEXT: sched.microbatch @stage {index = 0 : i64}
// CHECK-NEXT: sched.microbatch @stage {index = 1 : i64}
// CHECK-NEXT: sched.finalize_grads per_token
// CHECK-NEXT: sched.optimizer_step {beta1 = 9.000000e-01 : f64, beta2 = 7.500000e-01 : f64, clip_grad = 1.000000e+00 : f64, eps = 1.000000e-08 : f64}
// CHECK-NEXT: sched.clip_grad_norm {max_norm = 5.000000e-01 : f64}
// CHECK-NEXT: sched.adamw @w {beta1 = 9.000000e-01 : f64, beta2 = 7.500000e-01 : f64, decay = false, eps = 1.000000e-08 : f64}
// CHECK-NEXT: sched.read_outputs "outputs"
// CHECK-NEXT: return
// CHECK-LABEL: func.func @eval_step
// CHECK-SAME: attributes {sched.eval, sched.iteration}
// CHECK-NEXT: sched.zero_losses
// CHECK-NEXT: return
func.func @train_step() attributes {sched.iteration} {
  sched.zero_grads
  sched.fill_inputs "batch"
  sched.microbatch @stage {index = 0 : i64}
  sched.microbatch @stage {index = 1 : i64}
  sched.finalize_grads per_token
  sched.optimizer_step {beta1 = 0.9 : f64, beta2 = 0.75 : f64, eps = 1.0e-08 : f64, clip_grad = 1.0 : f64}
  sched.clip_grad_norm {max_norm = 0.5 : f64}
  sched.adamw @w {decay = false, beta1 = 0.9 : f64, beta2 = 0.75 : f64, eps = 1.0e-08 : f64}
  sched.read_outputs "outputs"
  return
}
func.func @eval_step() attributes {sched.iteration, sched.eval} {
  sched.zero_losses
  return
}

// Tests that the data-parallel ops round-trip.
// CHECK: sched.grad_buffer @grad_buffer {bucket_bounds = array<i64: 0, 6, 16>, distributed_optimizer, dp = 2 : i64, numel = 16 : i64, offsets = array<i64: 0, 6>, params = [@b, @a], sizes = array<i64: 6, 10>}
sched.grad_buffer @grad_buffer {params = [@b, @a], offsets = array<i64: 0, 6>, sizes = array<i64: 6, 10>, numel = 16 : i64, bucket_bounds = array<i64: 0, 6, 16>, dp = 2 : i64, distributed_optimizer}
// CHECK-LABEL: func.func @dp_ops
// Starts name the buffer and bucket and produce a token; waits consume it; a stage function
// returns the tokens it starts and takes the ones it waits on.
func.func @dp_ops() {
  // CHECK: %[[T:.+]] = sched.grad_sync_start @grad_buffer bucket 0
  %t = sched.grad_sync_start @grad_buffer bucket 0
  // CHECK: sched.grad_sync_wait %[[T]]
  sched.grad_sync_wait %t
  // CHECK: sched.reduce_losses
  sched.reduce_losses
  // CHECK: %[[G:.+]] = sched.param_gather_start @grad_buffer bucket 1
  %g = sched.param_gather_start @grad_buffer bucket 1
  // CHECK: sched.param_gather_wait %[[G]]
  sched.param_gather_wait %g
  return
}
func.func @token_stage(%t: !sched.token) -> !sched.token attributes {sched.stage} {
  sched.param_gather_wait %t
  %s = sched.grad_sync_start @grad_buffer bucket 1
  return %s : !sched.token
}
// CHECK-LABEL: func.func @token_step(
// CHECK-SAME: %[[P:.+]]: !sched.token) -> !sched.token
// CHECK: %[[R:.+]] = sched.microbatch @token_stage(%[[P]]) {index = 0 : i64} -> !sched.token
func.func @token_step(%p: !sched.token) -> !sched.token attributes {sched.iteration} {
  %r = sched.microbatch @token_stage(%p) {index = 0 : i64} -> !sched.token
  sched.grad_sync_wait %r
  %g = sched.param_gather_start @grad_buffer bucket 0
  return %g : !sched.token
}

// Tests that forward and backward units round-trip with their stash handle, microbatch and chunk.
// CHECK-LABEL: func.func @unit_step()
// CHECK: %[[S:.+]] = sched.forward @fwd microbatch 3 chunk 1
// CHECK-NEXT: sched.backward @bwd(%[[S]]) microbatch 3 chunk 1
func.func @fwd(%w: tensor<4xf32> {model.param = @w}) -> tensor<4xf32> attributes {sched.stage} {
  return %w : tensor<4xf32>
}
func.func @bwd(%w: tensor<4xf32> {model.param = @w}, %s: tensor<4xf32> {sched.stash = 0 : i64}) attributes {sched.stage} {
  return
}
func.func @unit_step() {
  %s = sched.forward @fwd microbatch 3 chunk 1
  sched.backward @bwd(%s) microbatch 3 chunk 1
  return
}
