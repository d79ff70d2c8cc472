// RUN: trainc-opt %s -trainc-phase-autodiff | FileCheck %s --check-prefix=AUTODIFF
// RUN: trainc-opt %s -trainc-phase-autodiff | trainc-opt -trainc-phase-schedule="num-microbatches=2 normalization=per_microbatch clip-grad=0.5" | FileCheck %s --check-prefix=SCHED
// RUN: trainc-opt %s -trainc-phase-autodiff | trainc-opt -trainc-phase-schedule | trainc-opt -trainc-phase-lower | FileCheck %s --check-prefix=LOWER --implicit-check-not=model. --implicit-check-not=sched. '--implicit-check-not=tensor<'
// RUN: trainc-opt %s -trainc-phase-autodiff | trainc-opt -trainc-phase-schedule | trainc-opt -trainc-phase-lower | trainc-opt -trainc-phase-memory | FileCheck %s --check-prefix=MEMORY
// RUN: trainc-opt %s -trainc-compile="num-microbatches=2 normalization=per_microbatch clip-grad=0.5" > %t.compiled.mlir
// RUN: trainc-opt %s -trainc-phase-autodiff | trainc-opt -trainc-phase-schedule="num-microbatches=2 normalization=per_microbatch clip-grad=0.5" | trainc-opt -trainc-phase-lower | trainc-opt -trainc-phase-memory > %t.phases.mlir
// RUN: diff %t.compiled.mlir %t.phases.mlir
// RUN: FileCheck %s --check-prefix=COMPILE < %t.compiled.mlir
// RUN: %not trainc-opt %s -trainc-phase-schedule 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: %not trainc-opt %s -trainc-compile="normalization=mean" 2>&1 | FileCheck %s --check-prefix=NORM
// RUN: %not trainc-opt %S/../dialects/rt-ops.mlir -trainc-phase-autodiff 2>&1 | FileCheck %s --check-prefix=NOFWD
// REQUIRES: compiler

// The input: a tiny language model (embedding -> rms_norm -> linear -> cross_entropy; vocab 11,
// hidden 8, batch 2, seq 5; the final norm weight has no weight decay).
func.func @forward(
    %wte: tensor<11x8xf32> {model.param = @wte, model.init = "normal", model.init_std = 2.0e-02 : f64},
    %ln: tensor<8xf32> {model.param = @ln, model.init = "ones", model.no_weight_decay},
    %wout: tensor<11x8xf32> {model.param = @wout, model.init = "normal", model.init_std = 2.0e-02 : f64},
    %tokens: tensor<2x5xi32> {model.input = "tokens"},
    %labels: tensor<2x5xi32> {model.input = "labels"},
    %mask: tensor<2x5xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %x = model.embedding %wte, %tokens : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  %h, %rstd = model.rms_norm %x, %ln : (tensor<2x5x8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>)
  %logits = model.linear %h, %wout : (tensor<2x5x8xf32>, tensor<11x8xf32>) -> tensor<2x5x11xf32>
  %l2 = model.reshape %logits : (tensor<2x5x11xf32>) -> tensor<10x11xf32>
  %y = model.reshape %labels : (tensor<2x5xi32>) -> tensor<10xi32>
  %m = model.reshape %mask : (tensor<2x5xf32>) -> tensor<10xf32>
  %loss, %n, %lse = model.cross_entropy %l2, %y, %m : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}

// Tests that trainc-phase-autodiff keeps @forward and adds @forward_backward with one gradient per
// parameter.
// AUTODIFF-LABEL: func.func @forward(
// AUTODIFF-LABEL: func.func @forward_backward(
// AUTODIFF-SAME: -> (tensor<f32>, tensor<f32>, tensor<11x8xf32> {model.grad_of = @wte}, tensor<8xf32> {model.grad_of = @ln}, tensor<11x8xf32> {model.grad_of = @wout})
// AUTODIFF: model.embedding_grad

// Tests that trainc-phase-schedule passes its options on: per_microbatch normalization (legacy
// seed), two microbatches, the clip; the optimizer step is expanded (no decay for the norm weight).
// The stage is split into a forward unit (the loss accumulation, the legacy seed's num_tokens in
// its stash) and a backward unit (the seed), ordered as Megatron's F0 B0 F1 B1.
// SCHED-LABEL: func.func @forward_backward.forward(
// SCHED-SAME: attributes {sched.stage, sched.unit = "forward"}
// SCHED: sched.accumulate_loss %{{.+}}, %{{.+}} per_microbatch
// SCHED-LABEL: func.func @forward_backward.backward(
// SCHED-SAME: sched.stash = 0 : i64
// SCHED-SAME: attributes {sched.stage, sched.unit = "backward"}
// SCHED: sched.loss_seed %{{.+}} {num_microbatches = 2 : i64}
// SCHED-NOT: sched.accumulate_loss
// SCHED-LABEL: func.func @train_step()
// SCHED-SAME: sched.num_microbatches = 2 : i64
// SCHED: %[[S0:.+]] = sched.forward @forward_backward.forward microbatch 0 chunk 0
// SCHED-NEXT: sched.backward @forward_backward.backward(%[[S0]]) microbatch 0 chunk 0
// SCHED-NEXT: %[[S1:.+]] = sched.forward @forward_backward.forward microbatch 1 chunk 0
// SCHED-NEXT: sched.backward @forward_backward.backward(%[[S1]]) microbatch 1 chunk 0
// SCHED-NEXT: sched.finalize_grads per_microbatch
// SCHED-NEXT: sched.clip_grad_norm {max_norm = 5.000000e-01 : f64}
// SCHED-NEXT: sched.adamw @wte {{.*}}decay = true
// SCHED-NEXT: sched.adamw @ln {{.*}}decay = false
// SCHED-NEXT: sched.adamw @wout {{.*}}decay = true
// SCHED-NOT: sched.optimizer_step
// SCHED-LABEL: func.func @eval_step()

// Tests that trainc-phase-lower leaves only rt-level IR (no model or sched op, no tensor): the stage
// functions on memrefs, the training entry and the evaluation entry point.
// LOWER: module attributes {rt.schedule = "no-pipelining", rt.stash_slots = 1 : i64, trainc.bytes_per_iteration = {{.+}}, trainc.data_parallel_size = 1 : i64, trainc.flops_per_iteration = 5.280000e+03 : f64, trainc.grad_bucket_bounds = array<i64: 0, {{[0-9]+}}>, trainc.num_microbatches = 1 : i64}
// LOWER-DAG: func.func @forward_backward.forward({{.*}}) attributes {rt.stage}
// LOWER-DAG: func.func @forward_backward.backward({{.*}}) attributes {rt.stage}
// LOWER-DAG: func.func @forward_only({{.*}}) attributes {rt.stage}
// LOWER-DAG: func.func @train_step() attributes {rt.entry}
// LOWER-DAG: func.func @eval_step() attributes {rt.entry_point = "eval_step"}

// Tests that trainc-phase-memory gives every buffer an offset and the module its arena.
// MEMORY: module attributes {rt.arena_bytes = {{[0-9]+}} : i64, rt.flowing_peak_bytes = {{[0-9]+}} : i64, rt.group_bytes = {stash.0 = 1216 : i64}, rt.persistent_bytes = {{[0-9]+}} : i64,
// MEMORY: rt.buffer @wte parameter {{.*}}offset = 0 : i64
// MEMORY-NOT: rt.buffer @{{[^ ]+}} {{[a-z_]+}} :

// Tests that trainc-compile is the four phases in a row (the outputs above are identical) and
// passes its options on.
// COMPILE: module attributes {rt.arena_bytes = {{[0-9]+}} : i64, {{.*}}trainc.num_microbatches = 2 : i64}
// COMPILE-DAG: rt.buffer @tokens.1 input
// COMPILE-DAG: rt.kernel "grad_norm_finalize" {{.*}}max_norm = 5.000000e-01 : f64
// COMPILE-DAG: rt.kernel "scale" {{.*}}alpha = 5.000000e-01 : f64

// Tests that a phase run out of order is reported by the pass that needs the earlier phase.
// ORDER: error: trainc-grad-accumulate: no function @forward_backward (run trainc-autodiff first)

// Tests that a pipeline option is checked by the pass it reaches.
// NORM: error: trainc-grad-accumulate: normalization 'mean' is not per_token or per_microbatch

// Tests that the autodiff phase starts with the model-phase check.
// NOFWD: error: phase model: no @forward function
