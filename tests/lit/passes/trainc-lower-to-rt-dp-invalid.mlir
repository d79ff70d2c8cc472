// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-lower-to-rt
// REQUIRES: compiler

// One case per data-parallel error of trainc-lower-to-rt, then the errors of calls.

model.parameter @w {init = "zeros"} : tensor<4xf32>
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  // expected-error@+1 {{'sched.grad_sync_start' op names @grad_buffer, which is not a sched.grad_buffer}}
  %t = sched.grad_sync_start @grad_buffer bucket 0
  sched.grad_sync_wait %t
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
sched.grad_buffer @grad_buffer {params = [@w], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 2 : i64}
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  // expected-error@+1 {{'sched.grad_sync_start' op bucket 3 is not one of the 1 buckets of @grad_buffer}}
  %t = sched.grad_sync_start @grad_buffer bucket 3
  sched.grad_sync_wait %t
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
sched.grad_buffer @grad_buffer {params = [@w], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 2 : i64}
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  // expected-error@+1 {{'sched.param_gather_start' op needs the distributed optimizer (@grad_buffer has no distributed_optimizer)}}
  %t = sched.param_gather_start @grad_buffer bucket 0
  sched.param_gather_wait %t
  return
}

// -----

// Tests that a wait on a token no start produced (an iteration argument the iteration does not
// return) is refused.
model.parameter @w {init = "zeros"} : tensor<4xf32>
sched.grad_buffer @grad_buffer {params = [@w], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 2 : i64, distributed_optimizer}
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}
func.func @train_step(%t: !sched.token) attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  // expected-error@+1 {{'sched.param_gather_wait' op waits on a token that comes from no sched.grad_sync_start or sched.param_gather_start}}
  sched.param_gather_wait %t
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
model.parameter @v {init = "zeros"} : tensor<4xf32>
sched.grad_buffer @grad_buffer {params = [@w], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 2 : i64}
// expected-error@+1 {{'func.func' op parameter 'v' is not in the sched.grad_buffer layout}}
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}, %v: tensor<4xf32> {model.param = @v}) attributes {sched.stage} {
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
sched.grad_buffer @grad_buffer {params = [@w], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 1 : i64}
// expected-error@+1 {{'sched.grad_buffer' op is the second sched.grad_buffer; one is supported}}
sched.grad_buffer @grad_buffer_2 {params = [@w], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 1 : i64}
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
// The errors of calls inside stages (layer functions).
func.func private @external(%x: tensor<4xf32>) -> tensor<4xf32>
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  // expected-error@+1 {{'func.call' op calls @external, not a function with a body}}
  %0 = call @external(%w) : (tensor<4xf32>) -> tensor<4xf32>
  sched.accumulate_grad %0 into @w : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
func.func private @loop(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'func.call' op calls @loop recursively; a program's call graph is acyclic}}
  %0 = call @loop(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  %0 = call @loop(%w) : (tensor<4xf32>) -> tensor<4xf32>
  sched.accumulate_grad %0 into @w : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
func.func private @layer(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'sched.accumulate_grad' op cannot be lowered to rt in a called function (only model ops and calls are)}}
  sched.accumulate_grad %x into @w : tensor<4xf32>
  return %x : tensor<4xf32>
}
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  %0 = call @layer(%w) : (tensor<4xf32>) -> tensor<4xf32>
  sched.accumulate_grad %0 into @w : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  // expected-error@+1 {{'func.call' op calls the stage function @forward_backward; stages are called by sched units only}}
  call @forward_backward(%w) : (tensor<4xf32>) -> ()
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}
