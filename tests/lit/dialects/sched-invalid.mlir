// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// REQUIRES: compiler

// One case per sched op verifier message.

// Tests that sched.microbatch must name a function of the module.
func.func @train_step() {
  // expected-error@+1 {{'sched.microbatch' op callee @missing is not a function in this module}}
  sched.microbatch @missing {index = 0 : i64}
  return
}

// -----

// Tests that a symbol that is not a function is not a valid callee.
rt.buffer @buf activation : memref<4xf32>
func.func @train_step() {
  // expected-error@+1 {{'sched.microbatch' op callee @buf is not a function in this module}}
  sched.microbatch @buf {index = 0 : i64}
  return
}

// -----

// Tests that the callee must be a stage function that returns only tokens, as many as the call.
func.func @forward_backward(%x: tensor<f32> {model.input = "x"}) -> (tensor<f32>, tensor<f32>) {
  return %x, %x : tensor<f32>, tensor<f32>
}
func.func @train_step() {
  // expected-error@+1 {{'sched.microbatch' op callee @forward_backward returns 2 values but the call has 0 token results; a stage function accumulates its gradients and losses and returns only the tokens of the collectives it starts}}
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}

// -----

// Tests that the microbatch index is not negative. (The index is printed as unsigned today, see
// tests/lit/xfail/negative-attr-in-message.mlir; this case pins the rest of the message.)
func.func @stage() attributes {sched.stage} {
  return
}
func.func @train_step() {
  // expected-error-re@+1 {{'sched.microbatch' op microbatch index {{-?[0-9]+}} is negative}}
  sched.microbatch @stage {index = -1 : i64}
  return
}

// -----

// Tests that sched.accumulate_loss takes scalars.
func.func @stage(%l: tensor<1xf32>, %n: tensor<f32>) {
  // expected-error@+1 {{'sched.accumulate_loss' op loss_sum and num_tokens must be scalars (rank-0 tensors)}}
  sched.accumulate_loss %l, %n per_token : tensor<1xf32>, tensor<f32>
  return
}

// -----

// Tests that sched.accumulate_loss names a known normalization.
func.func @stage(%l: tensor<f32>, %n: tensor<f32>) {
  // expected-error@+2 {{expected ::mlir::trainc::sched::Normalization to be one of: per_token, per_microbatch}}
  // expected-error@+1 {{failed to parse Sched_NormalizationAttr}}
  sched.accumulate_loss %l, %n per_sample : tensor<f32>, tensor<f32>
  return
}

// -----

// Tests that sched.loss_seed divides by a positive number of microbatches.
func.func @stage(%n: tensor<f32>) {
  // expected-error@+1 {{'sched.loss_seed' op num_microbatches 0 must be positive}}
  %0 = sched.loss_seed %n {num_microbatches = 0 : i64} : (tensor<f32>) -> tensor<f32>
  return
}

// -----

// Tests that sched.loss_seed's result has num_tokens' type.
func.func @stage(%n: tensor<f32>) {
  // expected-error@+1 {{'sched.loss_seed' op result type 'tensor<f64>' differs from num_tokens type 'tensor<f32>'}}
  %0 = sched.loss_seed %n {num_microbatches = 2 : i64} : (tensor<f32>) -> tensor<f64>
  return
}

// -----

// Tests that sched.finalize_grads names a known normalization.
func.func @train_step() {
  // expected-error@+2 {{expected ::mlir::trainc::sched::Normalization to be one of: per_token, per_microbatch}}
  // expected-error@+2 {{failed to parse Sched_NormalizationAttr}}
  sched.finalize_grads mean
  return
}

// -----

// Tests that the optimizer step's beta1 is in [0, 1).
func.func @train_step() {
  // expected-error@+1 {{'sched.optimizer_step' op beta1 = 1.000000e+00, expected 0 <= beta1 < 1}}
  sched.optimizer_step {beta1 = 1.0 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, clip_grad = 1.0 : f64}
  return
}

// -----

// Tests that the optimizer step's beta2 is in [0, 1).
func.func @train_step() {
  // expected-error@+1 {{'sched.optimizer_step' op beta2 = -5.000000e-01, expected 0 <= beta2 < 1}}
  sched.optimizer_step {beta1 = 0.9 : f64, beta2 = -0.5 : f64, eps = 1.0e-08 : f64, clip_grad = 1.0 : f64}
  return
}

// -----

// Tests that the optimizer step's eps is positive.
func.func @train_step() {
  // expected-error@+1 {{'sched.optimizer_step' op eps = 0.000000e+00, expected > 0}}
  sched.optimizer_step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 0.0 : f64, clip_grad = 1.0 : f64}
  return
}

// -----

// Tests that the optimizer step's clip_grad is not negative (0 disables clipping).
func.func @train_step() {
  // expected-error@+1 {{'sched.optimizer_step' op clip_grad = -1.000000e+00, expected >= 0 (0 disables clipping)}}
  sched.optimizer_step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, clip_grad = -1.0 : f64}
  return
}

// -----

model.parameter @a {init = "zeros"} : tensor<4xf32>
// Tests that sched.grad_buffer needs a positive data-parallel size.
// expected-error@+1 {{'sched.grad_buffer' op dp = 0, expected a positive data-parallel size}}
sched.grad_buffer @grad_buffer {params = [@a], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 0 : i64}

// -----

model.parameter @a {init = "zeros"} : tensor<4xf32>
// Tests that every parameter has an offset and a size.
// expected-error@+1 {{'sched.grad_buffer' op has 2 params but 1 offsets and 1 sizes}}
sched.grad_buffer @grad_buffer {params = [@a, @b], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 1 : i64}

// -----

model.parameter @a {init = "zeros"} : tensor<4xf32>
// Tests that the buckets cover the buffer from 0 to numel.
// expected-error@+1 {{'sched.grad_buffer' op bucket_bounds must start at 0 and end at numel = 8}}
sched.grad_buffer @grad_buffer {params = [@a], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 8 : i64, bucket_bounds = array<i64: 0, 4>, dp = 1 : i64}

// -----

model.parameter @a {init = "zeros"} : tensor<4xf32>
// Tests that buckets are not empty.
// expected-error@+1 {{'sched.grad_buffer' op bucket 1 [4, 4) is empty or reversed}}
sched.grad_buffer @grad_buffer {params = [@a], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4, 4>, dp = 1 : i64}

// -----

model.parameter @a {init = "zeros"} : tensor<6xf32>
// Tests that the distributed optimizer needs buckets that are a multiple of dp.
// expected-error@+1 {{'sched.grad_buffer' op bucket 0 has 6 elements, not a multiple of dp = 4 (the distributed optimizer shards every bucket evenly)}}
sched.grad_buffer @grad_buffer {params = [@a], offsets = array<i64: 0>, sizes = array<i64: 6>, numel = 6 : i64, bucket_bounds = array<i64: 0, 6>, dp = 4 : i64, distributed_optimizer}

// -----

model.parameter @a {init = "zeros"} : tensor<4xf32>
model.parameter @b {init = "zeros"} : tensor<4xf32>
// Tests that parameters do not overlap.
// expected-error@+1 {{'sched.grad_buffer' op param @b at offset 2 with 4 elements overlaps the previous one or is empty}}
sched.grad_buffer @grad_buffer {params = [@a, @b], offsets = array<i64: 0, 2>, sizes = array<i64: 4, 4>, numel = 8 : i64, bucket_bounds = array<i64: 0, 8>, dp = 1 : i64}

// -----

model.parameter @a {init = "zeros"} : tensor<6xf32>
// Tests that a parameter stays inside one bucket (Megatron never splits one across buckets).
// expected-error@+1 {{'sched.grad_buffer' op param @a [0, 6) crosses a bucket boundary}}
sched.grad_buffer @grad_buffer {params = [@a], offsets = array<i64: 0>, sizes = array<i64: 6>, numel = 8 : i64, bucket_bounds = array<i64: 0, 4, 8>, dp = 1 : i64}

// -----

model.parameter @a {init = "zeros"} : tensor<10xf32>
// Tests that parameters end inside the buffer.
// expected-error@+1 {{'sched.grad_buffer' op param @a [0, 10) crosses a bucket boundary}}
sched.grad_buffer @grad_buffer {params = [@a], offsets = array<i64: 0>, sizes = array<i64: 10>, numel = 8 : i64, bucket_bounds = array<i64: 0, 8>, dp = 1 : i64}

// -----

// Tests that a backward unit consumes the stash of its own microbatch.
func.func @fwd(%w: tensor<4xf32> {model.param = @w}) -> tensor<4xf32> { return %w : tensor<4xf32> }
func.func @bwd(%w: tensor<4xf32> {model.param = @w}, %s: tensor<4xf32> {sched.stash = 0 : i64}) { return }
func.func @step() {
  %s = sched.forward @fwd microbatch 0 chunk 0
  // expected-error@+1 {{'sched.backward' op consumes the stash of microbatch 0 chunk 0 as microbatch 1 chunk 0}}
  sched.backward @bwd(%s) microbatch 1 chunk 0
  return
}

// -----

// Tests that a stash is consumed once.
func.func @fwd(%w: tensor<4xf32> {model.param = @w}) -> tensor<4xf32> { return %w : tensor<4xf32> }
func.func @bwd(%w: tensor<4xf32> {model.param = @w}, %s: tensor<4xf32> {sched.stash = 0 : i64}) { return }
func.func @step() {
  %s = sched.forward @fwd microbatch 0 chunk 0
  // expected-error@+1 {{'sched.backward' op stash of microbatch 0 is consumed more than once}}
  sched.backward @bwd(%s) microbatch 0 chunk 0
  sched.backward @bwd(%s) microbatch 0 chunk 0
  return
}

// -----

// Tests that the backward's stash arguments match the forward's results.
func.func @fwd(%w: tensor<4xf32> {model.param = @w}) -> tensor<4xf32> { return %w : tensor<4xf32> }
func.func @bwd(%w: tensor<4xf32> {model.param = @w}, %s: tensor<8xf32> {sched.stash = 0 : i64}) { return }
func.func @step() {
  %s = sched.forward @fwd microbatch 0 chunk 0
  // expected-error@+1 {{'sched.backward' op callee @bwd takes 1 stash arguments that do not match the 1 results of the forward unit @fwd}}
  sched.backward @bwd(%s) microbatch 0 chunk 0
  return
}

// -----

// Tests that a forward unit names a function.
func.func @step() {
  // expected-error@+1 {{'sched.forward' op callee @nope is not a function in this module}}
  %s = sched.forward @nope microbatch 0 chunk 0
  return
}

// -----

// Tests that a forward unit's microbatch is not negative.
func.func @fwd(%w: tensor<4xf32> {model.param = @w}) -> tensor<4xf32> { return %w : tensor<4xf32> }
func.func @step() {
  // expected-error@+1 {{'sched.forward' op microbatch -1 is negative}}
  %s = sched.forward @fwd microbatch -1 chunk 0
  return
}

// -----

// Tests that a forward unit's stash has static shapes.
func.func @fwd(%w: tensor<?xf32> {model.param = @w}) -> tensor<?xf32> { return %w : tensor<?xf32> }
func.func @step() {
  // expected-error@+1 {{'sched.forward' op callee @fwd returns 'tensor<?xf32>'; a forward unit returns its stash as statically shaped tensors of integers or floats}}
  %s = sched.forward @fwd microbatch 0 chunk 0
  return
}

// -----

// Tests that a backward unit's stash comes from a forward unit.
func.func @bwd(%s: tensor<4xf32> {sched.stash = 0 : i64}) { return }
func.func @step(%s: !sched.stash) {
  // expected-error@+1 {{'sched.backward' op stash operand is not the result of a sched.forward}}
  sched.backward @bwd(%s) microbatch 0 chunk 0
  return
}

// -----

// Tests that ZB-H1's weight-gradient unit consumes the handle of an input-gradient unit.
func.func @fwd(%w: tensor<4xf32> {model.param = @w}) -> tensor<4xf32> { return %w : tensor<4xf32> }
func.func @bw(%w: tensor<4xf32> {model.param = @w}, %s: tensor<4xf32> {sched.stash = 0 : i64}) { return }
func.func @step() {
  %s = sched.forward @fwd microbatch 0 chunk 0
  // expected-error@+1 {{'sched.backward_weight' op stash operand is not the result of a sched.backward_input}}
  sched.backward_weight @bw(%s) microbatch 0 chunk 0
  return
}

// -----

// Tests that ZB-H1's B and W units run on the same microbatch.
func.func @fwd(%w: tensor<4xf32> {model.param = @w}) -> tensor<4xf32> { return %w : tensor<4xf32> }
func.func @bi(%w: tensor<4xf32> {model.param = @w}, %s: tensor<4xf32> {sched.stash = 0 : i64}) -> tensor<2xf32> {
  %0 = model.fill {value = 0.0 : f64} : () -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
func.func @bw(%w: tensor<4xf32> {model.param = @w}, %s: tensor<4xf32> {sched.stash = 0 : i64}, %t: tensor<2xf32> {sched.stash = 1 : i64}) { return }
func.func @step() {
  %s = sched.forward @fwd microbatch 0 chunk 0
  %b = sched.backward_input @bi(%s) microbatch 0 chunk 0
  // expected-error@+1 {{'sched.backward_weight' op consumes the stash of microbatch 0 chunk 0 as microbatch 1 chunk 0}}
  sched.backward_weight @bw(%b) microbatch 1 chunk 0
  return
}

// -----

// Tests that ZB-H1's W unit takes the forward's stash, then B's values.
func.func @fwd(%w: tensor<4xf32> {model.param = @w}) -> tensor<4xf32> { return %w : tensor<4xf32> }
func.func @bi(%w: tensor<4xf32> {model.param = @w}, %s: tensor<4xf32> {sched.stash = 0 : i64}) -> tensor<2xf32> {
  %0 = model.fill {value = 0.0 : f64} : () -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
func.func @bw(%w: tensor<4xf32> {model.param = @w}, %s: tensor<4xf32> {sched.stash = 0 : i64}) { return }
func.func @step() {
  %s = sched.forward @fwd microbatch 0 chunk 0
  %b = sched.backward_input @bi(%s) microbatch 0 chunk 0
  // expected-error@+1 {{'sched.backward_weight' op callee @bw takes 1 stash arguments that do not match the forward unit's 1 results followed by the input-gradient unit's 1}}
  sched.backward_weight @bw(%b) microbatch 0 chunk 0
  return
}

// -----

// Tests that ZB-H1's slot layout lists tensor types.
// expected-error@+1 {{'func.func' op attribute 'sched.stash_layout' must be an array of statically shaped tensor types on a func.func, not [i32]}}
func.func @f() attributes {sched.stash_layout = [i32]} {
  return
}

// -----

// Tests that the sched dialect's attributes are checked where they are used.
// expected-error@+1 {{'func.func' op attribute 'sched.unit' must be "forward", "backward", "backward_input" or "backward_weight" on a func.func, not "sideways"}}
func.func @f() attributes {sched.unit = "sideways"} {
  return
}

// -----

// expected-error@+1 {{'func.func' op has unknown attribute 'sched.stages' of the sched dialect}}
func.func @f() attributes {sched.stages} {
  return
}

// -----

// expected-error@+1 {{'func.func' op attribute 'sched.num_microbatches' must be a positive integer on a func.func, not 0 : i64}}
func.func @f() attributes {sched.num_microbatches = 0 : i64} {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument 0: 'sched.stash' must be a non-negative integer (the stash index), not -1 : i64}}
func.func @f(%x: tensor<f32> {sched.stash = -1 : i64}) {
  return
}
