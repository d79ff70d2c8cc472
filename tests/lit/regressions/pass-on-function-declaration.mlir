// RUN: echo 'func.func private @forward(tensor<f32> {model.input = "l"}) -> (tensor<f32>, tensor<f32>)' | %not trainc-opt -trainc-autodiff 2>&1 | FileCheck %s --check-prefix=AUTODIFF
// RUN: echo 'func.func private @forward(tensor<f32> {model.input = "l"}) -> (tensor<f32>, tensor<f32>)' | %not trainc-opt -trainc-phase-autodiff 2>&1 | FileCheck %s --check-prefix=AUTODIFF
// RUN: echo 'func.func private @forward_backward(tensor<f32> {model.input = "l"}) -> (tensor<f32>, tensor<f32>)' | %not trainc-opt -trainc-grad-accumulate 2>&1 | FileCheck %s --check-prefix=ACC
// RUN: echo 'func.func private @forward(tensor<f32> {model.input = "l"}) -> (tensor<f32>, tensor<f32>) func.func @forward_backward(%%l: tensor<f32> {model.input = "l"}) attributes {sched.stage} { return }' | %not trainc-opt -trainc-schedule 2>&1 | FileCheck %s --check-prefix=SCHED
// RUN: echo 'func.func private @forward_backward(tensor<f32> {model.input = "l"}) attributes {sched.stage} func.func @train_step() attributes {sched.iteration} { return }' | %not trainc-opt -trainc-lower-to-rt 2>&1 | FileCheck %s --check-prefix=LOWER
// RUN: echo 'func.func private @ext() func.func @train_step() attributes {rt.entry} { return }' | %not trainc-opt -trainc-memory-plan 2>&1 | FileCheck %s --check-prefix=MEMORY
// REQUIRES: compiler
// Known bug: the passes take fn.getBody().front() (or fn.getArgument(i)) of functions without a
// body: each of these inputs crashes trainc-opt (segfault) instead of reporting an error. (%not
// fails on a crash, so these lines fail today.) Remove the XFAIL line when fixed.

// Tests that each pass reports a function declaration instead of crashing.
// AUTODIFF: error: {{.*}}@forward
// ACC: error: {{.*}}@forward_backward
// SCHED: error: {{.*}}@forward
// LOWER: error: {{.*}}@forward_backward
// MEMORY: error: {{.*}}@ext
