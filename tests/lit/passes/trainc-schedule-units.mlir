// RUN: trainc-opt %s -split-input-file -trainc-schedule="eval=false num-microbatches=3" -trainc-optimizer-expand -trainc-grad-buckets="dp=2" -trainc-schedule-units | FileCheck %s
// RUN: trainc-opt %s -split-input-file -trainc-schedule="eval=false num-microbatches=3" -trainc-optimizer-expand -trainc-grad-buckets="dp=2" -trainc-schedule-units="schedule=all-forward-first" | FileCheck %s --check-prefix=FIRST
// RUN: %not trainc-opt %s -split-input-file -trainc-schedule="eval=false" -trainc-schedule-units="schedule=zigzag" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: %not trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule-units 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: %not trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false" -trainc-schedule-units 2>&1 | FileCheck %s --check-prefix=NOSEED
// RUN: trainc-opt %s -split-input-file -trainc-schedule="eval=false num-microbatches=3" -trainc-optimizer-expand -trainc-grad-buckets="dp=2" -trainc-schedule-units | FileCheck %s --check-prefix=GONE --implicit-check-not='func.func @forward_backward(' --implicit-check-not='func.func @forward_backward_last(' --implicit-check-not=sched.microbatch
// RUN: trainc-opt %s -split-input-file -trainc-schedule="eval=false num-microbatches=3" -trainc-optimizer-expand -trainc-grad-buckets="dp=2" -trainc-schedule-units="schedule=all-forward-first" -trainc-lower-to-rt | FileCheck %s --check-prefix=RT
// RUN: trainc-opt %s -split-input-file -trainc-schedule="eval=false num-microbatches=3" -trainc-optimizer-expand -trainc-grad-buckets="dp=2" -trainc-schedule-units -trainc-lower-to-rt -trainc-memory-plan | FileCheck %s --check-prefix=RT1
// REQUIRES: compiler

model.parameter @w {init = "zeros"} : tensor<4x3xf32>
// A stage function as trainc-grad-accumulate leaves it: the forward (linear, a view of its
// result), the seed, a backward that reads the forward's view and an input.
func.func @forward_backward(%w: tensor<4x3xf32> {model.param = @w},
                            %x: tensor<2x3xf32> {model.input = "x"},
                            %z: tensor<3x2xf32> {model.input = "z"},
                            %n: tensor<f32> {model.input = "n"}) attributes {sched.stage} {
  %y = model.linear %x, %w : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %v = model.reshape %y : (tensor<2x4xf32>) -> tensor<8xf32>
  %seed = model.fill {model.loss_seed, value = 1.0 : f64} : () -> tensor<f32>
  %u = model.reshape %v : (tensor<8xf32>) -> tensor<4x2xf32>
  %dw = model.linear %u, %z : (tensor<4x2xf32>, tensor<3x2xf32>) -> tensor<4x3xf32>
  sched.accumulate_loss %n, %n per_token : tensor<f32>, tensor<f32>
  sched.accumulate_grad %dw into @w : tensor<4x3xf32>
  return
}

// Tests the split: the forward returns the linear's result (the view is recomputed in the
// backward, not stashed) and accumulates the loss; the backward takes the stage's arguments plus
// the stash. The last microbatch's clone (dp = 2) has its own backward but shares the forward.
// CHECK-LABEL: func.func @forward_backward.forward(
// CHECK-SAME: %{{.+}}: tensor<4x3xf32> {model.param = @w}, %{{.+}}: tensor<2x3xf32> {model.input = "x"}, %{{.+}}: tensor<3x2xf32> {model.input = "z"}, %{{.+}}: tensor<f32> {model.input = "n"}) -> tensor<2x4xf32> attributes {sched.stage, sched.unit = "forward"}
// CHECK: %[[Y:.+]] = model.linear
// CHECK-NOT: model.reshape
// CHECK: sched.accumulate_loss
// CHECK-NEXT: return %[[Y]] : tensor<2x4xf32>
// CHECK-LABEL: func.func @forward_backward.backward(
// CHECK-SAME: %[[S:[a-z0-9]+]]: tensor<2x4xf32> {sched.stash = 0 : i64}) attributes {sched.stage, sched.unit = "backward"}
// CHECK-NEXT: %[[V:.+]] = model.reshape %[[S]]
// CHECK-NEXT: model.fill {model.loss_seed
// CHECK-NEXT: model.reshape %[[V]]
// CHECK-NOT: sched.accumulate_loss
// CHECK: sched.accumulate_grad
// CHECK-NOT: sched.grad_sync_start
// CHECK: return
// CHECK-NOT: func.func @forward_backward_last.forward
// CHECK-LABEL: func.func @forward_backward_last.backward(
// CHECK-SAME: attributes {sched.last_microbatch, sched.stage, sched.unit = "backward"}
// CHECK: %[[T:.+]] = sched.grad_sync_start @grad_buffer bucket 0
// CHECK: return %[[T]] : !sched.token
// Tests Megatron's order: each microbatch's backward right after its forward.
// CHECK-LABEL: func.func @train_step()
// CHECK: %[[S0:.+]] = sched.forward @forward_backward.forward microbatch 0 chunk 0
// CHECK-NEXT: sched.backward @forward_backward.backward(%[[S0]]) microbatch 0 chunk 0
// CHECK-NEXT: %[[S1:.+]] = sched.forward @forward_backward.forward microbatch 1 chunk 0
// CHECK-NEXT: sched.backward @forward_backward.backward(%[[S1]]) microbatch 1 chunk 0
// CHECK-NEXT: %[[S2:.+]] = sched.forward @forward_backward.forward microbatch 2 chunk 0
// CHECK-NEXT: %[[T2:.+]] = sched.backward @forward_backward_last.backward(%[[S2]]) microbatch 2 chunk 0 -> !sched.token
// CHECK-NEXT: sched.grad_sync_wait %[[T2]]
// Tests that the split stage functions and the microbatch calls are gone.
// GONE: func.func @train_step()

// Tests the test-only order: every forward, then every backward in microbatch order.
// FIRST-LABEL: func.func @train_step()
// FIRST: %[[S0:.+]] = sched.forward @forward_backward.forward microbatch 0 chunk 0
// FIRST-NEXT: %[[S1:.+]] = sched.forward @forward_backward.forward microbatch 1 chunk 0
// FIRST-NEXT: %[[S2:.+]] = sched.forward @forward_backward.forward microbatch 2 chunk 0
// FIRST-NEXT: sched.backward @forward_backward.backward(%[[S0]]) microbatch 0 chunk 0
// FIRST-NEXT: sched.backward @forward_backward.backward(%[[S1]]) microbatch 1 chunk 0
// FIRST-NEXT: sched.backward @forward_backward_last.backward(%[[S2]]) microbatch 2 chunk 0

// UNKNOWN: error: trainc-schedule-units: schedule 'zigzag' is not one of 'no-pipelining', '1f1b', 'interleaved', 'zb-h1', 'all-forward-first'
// ORDER: error: trainc-schedule-units: no training iteration function (run trainc-schedule first)
// NOSEED: error: 'func.func' op @forward_backward has no loss seed (model.fill {model.loss_seed} or sched.loss_seed): nothing marks where its backward starts

// Tests the lowering: one stash slot per microbatch in flight (3 when all forwards run first),
// a 1-D buffer per slot in its planner group, passed as one argument; the forward unit writes the
// linear's result straight into a view of it and the backward reads the same view.
// RT: rt.buffer @stash0 activation {group = "stash.0"} : memref<8xf32>
// RT: rt.buffer @stash1 activation {group = "stash.1"} : memref<8xf32>
// RT: rt.buffer @stash2 activation {group = "stash.2"} : memref<8xf32>
// RT-LABEL: func.func @forward_backward.forward(
// RT-SAME: %[[A:[a-z0-9]+]]: memref<8xf32> {rt.stash = 0 : i64})
// RT: %[[V:.+]] = rt.view %[[A]][0] : memref<8xf32> to memref<2x4xf32>
// RT: rt.kernel "matmul" ins({{.*}}) outs(%[[V]] : memref<2x4xf32>)
// RT-LABEL: func.func @forward_backward.backward(
// RT-SAME: %[[B:[a-z0-9]+]]: memref<8xf32> {rt.stash = 0 : i64})
// RT-NEXT: rt.view %[[B]][0] : memref<8xf32> to memref<2x4xf32>
// RT-LABEL: func.func @train_step()
// RT: rt.buffer_ref @stash0
// RT-NEXT: call @forward_backward.forward({{.*}}) {rt.unit = "F microbatch 0 chunk 0", rt.unit_flops = {{.*}}}
// RT: rt.buffer_ref @stash1
// RT-NEXT: call @forward_backward.forward({{.*}}) {rt.unit = "F microbatch 1 chunk 0", rt.unit_flops = {{.*}}}
// RT: rt.buffer_ref @stash2
// RT-NEXT: call @forward_backward.forward({{.*}}) {rt.unit = "F microbatch 2 chunk 0", rt.unit_flops = {{.*}}}
// RT: rt.buffer_ref @stash0
// RT-NEXT: call @forward_backward.backward({{.*}}) {rt.unit = "B microbatch 0 chunk 0", rt.unit_flops = {{.*}}}
// Megatron's order needs one slot; the planner sizes its group (8 floats, 64-byte aligned).
// RT1: module attributes {{{.*}}rt.group_bytes = {stash.0 = 64 : i64}, {{.*}}rt.schedule = "no-pipelining", rt.stash_slots = 1 : i64
// RT1: rt.buffer @stash0 activation {group = "stash.0"
// RT1-NOT: @stash1
