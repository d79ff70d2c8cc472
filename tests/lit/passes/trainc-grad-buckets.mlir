// RUN: trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false num-microbatches=3" -trainc-optimizer-expand -trainc-grad-buckets="dp=2 bucket-size=50 distributed-optimizer=1" | FileCheck %s --check-prefix=ZERO
// RUN: trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false num-microbatches=3" -trainc-optimizer-expand -trainc-grad-buckets="dp=2" | FileCheck %s --check-prefix=PLAIN
// RUN: trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false num-microbatches=1" -trainc-optimizer-expand -trainc-grad-buckets="dp=4 bucket-size=1" | FileCheck %s --check-prefix=ONE
// RUN: trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false num-microbatches=3" -trainc-optimizer-expand -trainc-grad-buckets="dp=2 bucket-size=50 distributed-optimizer=1" -trainc-lower-to-rt | FileCheck %s --check-prefix=RT
// RUN: %not trainc-opt %S/Inputs/tiny-stage.mlir -trainc-grad-buckets 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: %not trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false" -trainc-optimizer-expand -trainc-grad-buckets="dp=0" 2>&1 | FileCheck %s --check-prefix=DP
// RUN: %not trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false" -trainc-optimizer-expand -trainc-grad-buckets="stage=nope" 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: %not trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false" -trainc-optimizer-expand -trainc-grad-buckets -trainc-grad-buckets 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false num-microbatches=3" -trainc-optimizer-expand -trainc-grad-buckets="dp=2 bucket-size=50 distributed-optimizer=1 overlap-param-gather=1" | FileCheck %s --check-prefix=OVERLAP
// RUN: trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false num-microbatches=3" -trainc-optimizer-expand -trainc-grad-buckets="dp=2 bucket-size=50 distributed-optimizer=1 overlap-param-gather=1" -trainc-lower-to-rt | FileCheck %s --check-prefix=CARRIED
// RUN: %not trainc-opt %S/Inputs/tiny-stage.mlir -trainc-schedule="eval=false" -trainc-optimizer-expand -trainc-grad-buckets="dp=2 overlap-param-gather=1" 2>&1 | FileCheck %s --check-prefix=NOZERO
// REQUIRES: compiler

// Tests the layout: parameters in the order their gradients become final (w, then b), buckets
// closed after the parameter reaching 50 elements, padded to a multiple of dp = 2 (88 and 11 -> 12).
// ZERO: sched.grad_buffer @grad_buffer {bucket_bounds = array<i64: 0, 88, 100>, distributed_optimizer, dp = 2 : i64, numel = 100 : i64, offsets = array<i64: 0, 88>, params = [@w, @b], sizes = array<i64: 88, 11>}
// Tests that earlier microbatches do not communicate and the last one starts each bucket's
// reduction right after the bucket's last gradient.
// ZERO-LABEL: func.func @forward_backward(
// ZERO-NOT: sched.grad_sync_start
// The clone returns the tokens of the reductions it starts.
// ZERO-LABEL: func.func @forward_backward_last(
// ZERO-SAME: -> (!sched.token, !sched.token)
// ZERO: sched.accumulate_grad %{{.*}} into @w
// ZERO-NEXT: %[[T0:.+]] = sched.grad_sync_start @grad_buffer bucket 0
// ZERO-NEXT: sched.accumulate_grad %{{.*}} into @b
// ZERO-NEXT: %[[T1:.+]] = sched.grad_sync_start @grad_buffer bucket 1
// ZERO-NEXT: return %[[T0]], %[[T1]] : !sched.token, !sched.token
// Tests the iteration: the last microbatch calls the clone, every bucket is waited for and the
// losses are reduced before finalize; each bucket's parameter all-gather starts after its last
// update and is waited for at the end of the step.
// ZERO-LABEL: func.func @train_step()
// ZERO: sched.microbatch @forward_backward {index = 1 : i64}
// ZERO-NEXT: %[[R:.+]]:2 = sched.microbatch @forward_backward_last {index = 2 : i64} -> !sched.token, !sched.token
// ZERO-NEXT: sched.grad_sync_wait %[[R]]#0
// ZERO-NEXT: sched.grad_sync_wait %[[R]]#1
// ZERO-NEXT: sched.reduce_losses
// ZERO-NEXT: sched.finalize_grads
// ZERO-NEXT: sched.clip_grad_norm
// ZERO-NEXT: sched.adamw @w {{.*}}
// ZERO-NEXT: %[[G0:.+]] = sched.param_gather_start @grad_buffer bucket 0
// ZERO-NEXT: sched.adamw @b {{.*}}
// ZERO-NEXT: %[[G1:.+]] = sched.param_gather_start @grad_buffer bucket 1
// ZERO-NEXT: sched.param_gather_wait %[[G0]]
// ZERO-NEXT: sched.param_gather_wait %[[G1]]
// ZERO-NEXT: sched.read_outputs

// Tests plain DP with the default bucket size: one bucket, no padding, no parameter gathers.
// PLAIN: sched.grad_buffer @grad_buffer {bucket_bounds = array<i64: 0, 99>, dp = 2 : i64, numel = 99 : i64
// PLAIN-LABEL: func.func @forward_backward_last(
// PLAIN: sched.accumulate_grad %{{.*}} into @b
// PLAIN-NEXT: sched.grad_sync_start @grad_buffer bucket 0
// PLAIN-NOT: sched.param_gather

// Tests that with one microbatch the stage function itself carries the syncs (no clone), one
// bucket per parameter with bucket-size 1.
// ONE: sched.grad_buffer @grad_buffer {bucket_bounds = array<i64: 0, 88, 99>
// ONE-NOT: forward_backward_last
// ONE: sched.accumulate_grad %{{.*}} into @w
// ONE-NEXT: sched.grad_sync_start @grad_buffer bucket 0
// ONE-NOT: forward_backward_last

// Tests the lowering, which is the same for every DP rank: main grads and parameters are ranges
// of one buffer each, Adam states exist for the rank's shards only (44 + 6 = 50 elements), and a
// rank's shard of bucket k is a view on the dp axis (offset bound(k) + dp x shard size: the export
// resolves it per rank). The reduce-scatter writes the shard in place, the grad norm sums the
// shards (the padding's gradients are zero) and all-reduces, one AdamW per bucket shard updates
// its parameters' pieces (`segments` of coordinate 0; rt.shard_segments are the bucket's: b is
// [0, 11) of bucket 1, padding excluded, no weight decay), and the all-gather returns each bucket.
// RT-DAG: rt.buffer @params parameter {param_info = [{init = "zeros", name = "w", offset = 0 : i64, shape = array<i64: 11, 8>}, {init = "zeros", name = "b", no_weight_decay, offset = 88 : i64, shape = array<i64: 11>}]} : memref<100xf32>
// RT-DAG: rt.buffer @main_grad main_grad {grad_info = [{name = "w", offset = 0 : i64}, {name = "b", offset = 88 : i64}]} : memref<100xf32>
// RT-DAG: rt.buffer @exp_avg optimizer_state : memref<50xf32>
// RT-LABEL: func.func @forward_backward_last(
// RT: %[[B0:.+]] = rt.view %{{.+}}[0] : memref<100xf32> to memref<88xf32>
// RT: %[[S0:.+]] = rt.view %{{.+}}[0] {axis = "dp", axis_stride = 44 : i64} : memref<100xf32> to memref<44xf32>
// RT: rt.collective reduce_scatter "dp" ins(%[[B0]] : memref<88xf32>) outs(%[[S0]] : memref<44xf32>) {token = 0 : i64}
// RT: %[[B1:.+]] = rt.view %{{.+}}[88] : memref<100xf32> to memref<12xf32>
// RT: %[[S1:.+]] = rt.view %{{.+}}[88] {axis = "dp", axis_stride = 6 : i64} : memref<100xf32> to memref<6xf32>
// RT: rt.collective reduce_scatter "dp" ins(%[[B1]] : memref<12xf32>) outs(%[[S1]] : memref<6xf32>) {token = 1 : i64}
// RT-LABEL: func.func @train_step()
// RT: rt.wait 0
// RT-NEXT: rt.wait 1
// RT: rt.collective all_reduce "dp" ins(%[[LS:.+]] : memref<f32>) outs(%[[LS]] : memref<f32>){{$}}
// RT: rt.collective all_reduce "dp" ins(%[[NT:.+]] : memref<f32>) outs(%[[NT]] : memref<f32>){{$}}
// Legacy normalization: the DP average.
// RT: rt.kernel "scale" {{.*}}alpha = 5.000000e-01
// RT: rt.view %{{.+}}[0] {axis = "dp", axis_stride = 44 : i64} : memref<100xf32> to memref<44xf32>
// RT-NEXT: rt.kernel "sum_squares" ins(%{{.+}} : memref<44xf32>) {{.*}}beta = 0.0
// RT: rt.view %{{.+}}[88] {axis = "dp", axis_stride = 6 : i64} : memref<100xf32> to memref<6xf32>
// RT-NEXT: rt.kernel "sum_squares" ins(%{{.+}} : memref<6xf32>) {{.*}}beta = 1.0
// RT-NEXT: rt.collective all_reduce "dp" ins(%[[SQ:.+]] : memref<f32>) outs(%[[SQ]] : memref<f32>)
// RT: rt.kernel "adamw" ins({{.*}} : memref<44xf32>, memref<44xf32>, memref<44xf32>, memref<44xf32>, {{.*}}segments = array<i64: 0, 44, 1>}, rt.shard_segments = array<i64: 0, 88, 1>}
// RT: rt.collective all_gather "dp" ins(%{{.+}} : memref<44xf32>) outs(%{{.+}} : memref<88xf32>) {token = 2 : i64}
// RT: rt.kernel "adamw" ins({{.*}} : memref<6xf32>, memref<6xf32>, memref<6xf32>, memref<6xf32>, {{.*}}segments = array<i64: 0, 6, 0>}, rt.shard_segments = array<i64: 0, 11, 0>}
// RT: rt.collective all_gather "dp" ins(%{{.+}} : memref<6xf32>) outs(%{{.+}} : memref<12xf32>) {token = 3 : i64}
// RT: rt.wait 2
// RT-NEXT: rt.wait 3

// ORDER: error: trainc-grad-buckets: no training iteration function (run trainc-schedule first)
// DP: error: trainc-grad-buckets: dp 0 must be positive
// STAGE: error: trainc-grad-buckets: no stage function @nope with a body (run trainc-grad-accumulate first)
// TWICE: error: trainc-grad-buckets: the module already has a sched.grad_buffer

// Tests --overlap-param-gather: the first microbatch runs a clone whose waits sit right before
// the first read of each bucket's parameters; the step ends without waiting and returns the
// gathers' tokens, which the next step takes as its arguments and passes to the first microbatch
// (and the eval step waits on first).
// OVERLAP-LABEL: func.func @forward_backward_first(
// OVERLAP-SAME: %[[W0:[a-z0-9]+]]: !sched.token, %[[W1:[a-z0-9]+]]: !sched.token)
// OVERLAP: sched.param_gather_wait %[[W0]]
// OVERLAP-NEXT: sched.accumulate_grad %{{.*}} into @w
// OVERLAP-NEXT: sched.param_gather_wait %[[W1]]
// OVERLAP-NEXT: sched.accumulate_grad %{{.*}} into @b
// OVERLAP-LABEL: func.func @train_step(
// OVERLAP-SAME: %[[P0:[a-z0-9]+]]: !sched.token, %[[P1:[a-z0-9]+]]: !sched.token) -> (!sched.token, !sched.token)
// OVERLAP: sched.microbatch @forward_backward_first(%[[P0]], %[[P1]]) {index = 0 : i64}
// OVERLAP-NEXT: sched.microbatch @forward_backward {index = 1 : i64}
// OVERLAP-NEXT: sched.microbatch @forward_backward_last {index = 2 : i64}
// OVERLAP: %[[G0:.+]] = sched.param_gather_start @grad_buffer bucket 0
// OVERLAP: %[[G1:.+]] = sched.param_gather_start @grad_buffer bucket 1
// OVERLAP-NEXT: sched.read_outputs
// OVERLAP-NEXT: return %[[G0]], %[[G1]] : !sched.token, !sched.token
// The gather tokens (2 and 3) are carried into the next run.
// CARRIED: module attributes {rt.carried_tokens = array<i64: 2, 3>
// NOZERO: error: trainc-grad-buckets: overlap-param-gather needs the distributed optimizer and dp > 1
