// Cases of trainc-verify phase=sched, run by ../trainc-verify.mlir (lit skips Inputs/).

// Tests that the sched phase needs an iteration function.
// expected-error@+1 {{phase sched: no iteration function (sched.iteration)}}
module {
  func.func @forward_backward() attributes {sched.stage} {
    return
  }
}

// -----

// Tests that an iteration function holds no model op.
func.func @train_step() attributes {sched.iteration} {
  // expected-error@+1 {{'model.fill' op phase sched: model op in the iteration function}}
  %0 = model.fill {value = 0.0 : f64} : () -> tensor<f32>
  return
}

// -----

// Tests that an iteration function calls only stage functions, the evaluation step included.
func.func @forward_backward() attributes {sched.stage} {
  return
}
func.func @helper() {
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}
func.func @eval_step() attributes {sched.iteration, sched.eval} {
  // expected-error@+1 {{'sched.microbatch' op phase sched: calls @helper, not a stage function}}
  sched.microbatch @helper {index = 0 : i64}
  return
}
