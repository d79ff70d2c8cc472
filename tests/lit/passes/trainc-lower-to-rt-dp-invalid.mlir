// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-lower-to-rt
// REQUIRES: compiler

// One case per data-parallel error of trainc-lower-to-rt.

func.func @forward_backward(%w: tensor<4xf32> {model.param = "w"}) attributes {sched.stage} {
  sched.accumulate_grad %w {param = "w"} : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  // expected-error@+1 {{'sched.grad_sync_wait' op needs a sched.grad_buffer (run trainc-grad-buckets)}}
  sched.grad_sync_wait {bucket = 0 : i64}
  return
}

// -----

sched.grad_buffer {params = ["w"], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 2 : i64}
func.func @forward_backward(%w: tensor<4xf32> {model.param = "w"}) attributes {sched.stage} {
  sched.accumulate_grad %w {param = "w"} : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  // expected-error@+1 {{'sched.grad_sync_wait' op bucket 3 is not one of the 1 buckets}}
  sched.grad_sync_wait {bucket = 3 : i64}
  return
}

// -----

sched.grad_buffer {params = ["w"], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 2 : i64}
func.func @forward_backward(%w: tensor<4xf32> {model.param = "w"}) attributes {sched.stage} {
  sched.accumulate_grad %w {param = "w"} : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  // expected-error@+1 {{'sched.param_gather_start' op needs the distributed optimizer (sched.grad_buffer distributed_optimizer)}}
  sched.param_gather_start {bucket = 0 : i64}
  return
}

// -----

sched.grad_buffer {params = ["w"], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 2 : i64}
// expected-error@+1 {{'func.func' op parameter 'v' is not in the sched.grad_buffer layout}}
func.func @forward_backward(%w: tensor<4xf32> {model.param = "w"}, %v: tensor<4xf32> {model.param = "v"}) attributes {sched.stage} {
  sched.accumulate_grad %w {param = "w"} : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}

// -----

sched.grad_buffer {params = ["w"], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 1 : i64}
// expected-error@+1 {{'sched.grad_buffer' op is the second sched.grad_buffer; one is supported}}
sched.grad_buffer {params = ["w"], offsets = array<i64: 0>, sizes = array<i64: 4>, numel = 4 : i64, bucket_bounds = array<i64: 0, 4>, dp = 1 : i64}
func.func @forward_backward(%w: tensor<4xf32> {model.param = "w"}) attributes {sched.stage} {
  sched.accumulate_grad %w {param = "w"} : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}
