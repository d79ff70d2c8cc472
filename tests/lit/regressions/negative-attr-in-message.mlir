// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// REQUIRES: compiler
// Known bug: verifiers stream I64Attr getters (uint64_t) into the message, so a negative value is
// printed as 2^64 - |v| ("microbatch index 18446744073709551615 is negative"); rt.view also calls a
// negative offset "exceeds the source". Remove the XFAIL line when fixed.

// Tests that a negative microbatch index is printed as such.
func.func @stage() attributes {sched.stage} {
  return
}
func.func @train_step() {
  // expected-error@+1 {{'sched.microbatch' op microbatch index -1 is negative}}
  sched.microbatch @stage {index = -1 : i64}
  return
}

// -----

// Tests that a negative number of microbatches is printed as such.
func.func @stage(%n: tensor<f32>) {
  // expected-error@+1 {{'sched.loss_seed' op num_microbatches -3 must be positive}}
  %0 = sched.loss_seed %n {num_microbatches = -3 : i64} : (tensor<f32>) -> tensor<f32>
  return
}

// -----

// Tests that a negative view offset is printed as such.
func.func @f(%a: memref<8xf32>) {
  // expected-error-re@+1 {{'rt.view' op offset -2 {{.*}}}}
  %0 = rt.view %a [-2] : memref<8xf32> to memref<2xf32>
  return
}
