// RUN: rm -rf %t && trainc compile --preset tiny-llama --tensor-model-parallel-size 2 --data-parallel-size 2 --micro-batch-size 2 --global-batch-size 4 --dump-ir-dir %t/a -o %t/a-plan > /dev/null
// RUN: FileCheck %s < %t/a/2-schedule.mlir
// RUN: FileCheck %s --check-prefix=LOWER < %t/a/3-lower.mlir
// RUN: trainc compile --preset tiny-llama --tensor-model-parallel-size 2 --data-parallel-size 2 --micro-batch-size 2 --global-batch-size 4 --no-async-tensor-model-parallel-allreduce --dump-ir-dir %t/s -o %t/s-plan > /dev/null
// RUN: FileCheck %s --check-prefix=SYNC < %t/s/2-schedule.mlir
// The pass alone on the synchronous plan's schedule dump gives the overlapped plan's.
// RUN: trainc-opt %t/s/2-schedule.mlir -trainc-tp-comm-overlap=enable=true | grep -v "^module" > %t/s-overlapped.mlir
// RUN: trainc-opt %t/a/2-schedule.mlir | grep -v "^module" | diff - %t/s-overlapped.mlir
// RUN: trainc compile --preset tiny-llama --tensor-model-parallel-size 2 --sequence-parallel --seq-length 8 --max-position-embeddings 8 --micro-batch-size 2 --global-batch-size 2 --dump-ir-dir %t/sp -o %t/sp-plan > /dev/null
// RUN: FileCheck %s --check-prefix=SP < %t/sp/2-schedule.mlir
// RUN: trainc-opt %S/Inputs/tp-comm-overlap-effects.mlir -trainc-tp-comm-overlap | FileCheck %s --check-prefix=EFFECTS
// RUN: trainc-opt %S/Inputs/tp-comm-overlap-invalid.mlir -split-input-file -verify-diagnostics -o /dev/null
// REQUIRES: compiler

// Tests trainc-tp-comm-overlap (placement of asynchronous tensor collectives from the IR's
// dependencies): Megatron's overlap of a column-parallel linear's input-gradient all-reduce
// (reduce-scatter under SP) with the weight-gradient GEMMs. The collective is marked
// sched.async, the weight gradients that do not depend on it follow it, and the
// sched.collective_wait sits right before the first user of its result.

// In a layer's backward: fc1's input gradient all-reduced while fc2's and fc1's weight
// gradients run; then the attention block's (q/k/v) while linear_proj's and q/k/v's run.
// CHECK-LABEL: func.func private @decoder_layer.bwd(
// CHECK: %[[DX:.*]] = model.linear_grad_input %{{.*}}, %arg7 : (tensor<2x9x32xf32>, tensor<32x16xf32>)
// CHECK-NEXT: %[[AR:.*]] = mesh.all_reduce %[[DX]] on @mesh mesh_axes = [0] {sched.async}
// CHECK-NOT: rms_norm_grad
// CHECK-COUNT-2: model.linear_grad_weight
// CHECK-NEXT: %[[W:.*]] = sched.collective_wait %[[AR]] : tensor<2x9x16xf32>
// CHECK-NEXT: model.rms_norm_grad %[[W]]
// CHECK: %[[AR2:.*]] = mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] {sched.async}
// CHECK-COUNT-4: model.linear_grad_weight
// CHECK-NEXT: %[[W2:.*]] = sched.collective_wait %[[AR2]]
// CHECK-NEXT: model.rms_norm_grad %[[W2]]
// CHECK: return
// The loss's sum-exp all-reduce overlaps the target logit; the max one has nothing to overlap.
// CHECK-LABEL: func.func @forward_backward.forward(
// CHECK: mesh.all_reduce %{{.*}} reduction = <max> :
// CHECK: %[[S:.*]] = mesh.all_reduce %{{.*}} {sched.async} : tensor<18xf32>
// CHECK: model.ce_target_logit
// CHECK: sched.collective_wait %[[S]]
// The output layer's input gradient overlaps its weight gradient and main-grad update; the
// DP bucket sync is not moved.
// CHECK-LABEL: func.func @forward_backward.backward(
// CHECK: %[[O:.*]] = mesh.all_reduce %{{.*}} {sched.async}
// CHECK-NEXT: model.linear_grad_weight
// CHECK-NEXT: sched.accumulate_grad %{{.*}} into @output_layer.weight
// CHECK-NEXT: sched.collective_wait %[[O]]
// CHECK: sched.grad_sync_start @grad_buffer bucket 0

// Lowered: each async collective gets its own token after the DP buckets' (1 bucket: 0 and 1),
// waited where the sched.collective_wait was.
// LOWER-LABEL: func.func @decoder_layer.bwd(
// LOWER: rt.collective  all_reduce "tp" {{.*}} {token = [[T1:[0-9]+]] : i64}
// LOWER: rt.kernel "matmul"
// LOWER: rt.wait [[T1]]
// LOWER: rt.collective  all_reduce "tp" {{.*}} {token = [[T2:[0-9]+]] : i64}
// LOWER: rt.wait [[T2]]
// LOWER-NOT: token = 0 :
// LOWER-NOT: token = 1 :
// LOWER: {token = 0 : i64}

// --no-async-tensor-model-parallel-allreduce keeps every collective synchronous.
// SYNC: module attributes {sched.no_async_tp_comm
// SYNC-NOT: sched.async
// SYNC-NOT: collective_wait

// Sequence parallelism: the reduce-scatters of fc1's and q/k/v's input gradients overlap the
// weight gradients; the re-gathers for the weight gradients stay synchronous (the next
// collective follows at once), as do those with nothing to overlap.
// SP-LABEL: func.func private @decoder_layer.bwd(
// SP: %[[RS:.*]] = mesh.reduce_scatter %{{.*}} scatter_axis = 1 {sched.async}
// SP-COUNT-2: model.linear_grad_weight
// SP-NEXT: %[[W:.*]] = sched.collective_wait %[[RS]] : tensor<2x4x16xf32>
// SP-NEXT: model.rms_norm_grad %[[W]]
// SP: %[[RS2:.*]] = mesh.reduce_scatter %{{.*}} scatter_axis = 1 {sched.async}
// SP-COUNT-4: model.linear_grad_weight
// SP-NEXT: %[[W2:.*]] = sched.collective_wait %[[RS2]]
// SP-NEXT: model.rms_norm_grad %[[W2]]

// EFFECTS-LABEL: func.func @moves(
// EFFECTS-NEXT: model.linear_grad_weight
// EFFECTS-NEXT: sched.accumulate_grad %{{.*}} into @b
// EFFECTS-NEXT: %[[DX:.*]] = call @dgrad
// EFFECTS-NEXT: %[[R:.*]] = mesh.all_reduce %[[DX]] on @mesh mesh_axes = [0] {sched.async}
// EFFECTS-NEXT: model.linear_grad_weight
// EFFECTS-NEXT: sched.accumulate_grad %{{.*}} into @a
// EFFECTS-NEXT: %[[W:.*]] = sched.collective_wait %[[R]]
// EFFECTS-NEXT: model.add %[[W]]
// EFFECTS-LABEL: func.func @stays_sync(
// EFFECTS-NOT: sched.async
// EFFECTS: return
