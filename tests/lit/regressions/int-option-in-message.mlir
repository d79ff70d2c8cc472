// RUN: %not trainc-opt %s -trainc-grad-accumulate="num-microbatches=0" 2>&1 | FileCheck %s --check-prefix=ACC
// RUN: %not trainc-opt %s -trainc-schedule="eval=false num-microbatches=-2" 2>&1 | FileCheck %s --check-prefix=SCHED
// REQUIRES: compiler
// Known bug: an int64_t pass option streamed into a diagnostic picks Diagnostic's operator<<(char),
// so "num-microbatches 0 must be positive" is printed with a raw NUL byte for the 0 (and byte 0xFE
// for -2). Remove the XFAIL line when fixed.

// Tests that the value of num-microbatches is printed as a number.
// ACC: error: trainc-grad-accumulate: num-microbatches 0 must be positive
// SCHED: error: trainc-schedule: num-microbatches -2 must be positive

func.func @forward_backward(%l: tensor<f32> {model.input = "l"}) -> (tensor<f32>, tensor<f32>) attributes {sched.stage} {
  return %l, %l : tensor<f32>, tensor<f32>
}
