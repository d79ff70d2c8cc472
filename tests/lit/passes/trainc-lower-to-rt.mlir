// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-lower-to-rt | FileCheck %s
// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-lower-to-rt | FileCheck %s --check-prefix=BUF
// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-lower-to-rt | FileCheck %s --check-prefix=MASTER
// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-lower-to-rt | FileCheck %s --check-prefix=FUSED
// The first case's weight-gradient GEMM writes into the main grad: no buffer for its result.
// FUSED-NOT: rt.buffer @forward_backward.linear_grad_weight.7 
// REQUIRES: compiler

// Tests the buffers of the lowering: per parameter (tagged model.param, with its model.init*
// attributes and model.no_weight_decay carried over) a parameter buffer, an fp32 main_grad and
// two Adam states; per stage function one activation buffer per op result; per microbatch one
// buffer per model.input; device scalars and outputs. Nothing is planned yet (no offset). The
// module records the FLOPs of the iteration (two calls of 2 x 1760 matmul FLOPs).
// BUF: module attributes {rt.schedule = "no-pipelining", trainc.bytes_per_iteration = {{.+}}, trainc.flops_per_iteration = 7.040000e+03 : f64, trainc.num_microbatches = 2 : i64}
// BUF-DAG: rt.buffer @output_layer.weight parameter {init = "normal", init_std = 2.000000e-02 : f64, param_name = "output_layer.weight"} : memref<11x8xf32>
// BUF-DAG: rt.buffer @output_layer.weight.main_grad main_grad {grad_of = "output_layer.weight"} : memref<11x8xf32>
// BUF-DAG: rt.buffer @output_layer.weight.exp_avg optimizer_state : memref<11x8xf32>
// BUF-DAG: rt.buffer @output_layer.weight.exp_avg_sq optimizer_state : memref<11x8xf32>
// BUF-DAG: rt.buffer @norm.weight parameter {init = "ones", no_weight_decay, param_name = "norm.weight"} : memref<8xf32>
// BUF-DAG: rt.buffer @forward_backward.linear.1 activation : memref<2x5x11xf32>
// BUF-DAG: rt.buffer @forward_backward.cross_entropy.3.0 activation : memref<f32>
// BUF-DAG: rt.buffer @forward_backward.cross_entropy.3.2 activation : memref<10xf32>
// BUF-DAG: rt.buffer @loss_sum output : memref<f32>
// BUF-DAG: rt.buffer @num_tokens output : memref<f32>
// BUF-DAG: rt.buffer @lr scalar : memref<f32>
// BUF-DAG: rt.buffer @hidden.0 input : memref<2x5x8xf32>
// BUF-DAG: rt.buffer @hidden.1 input : memref<2x5x8xf32>
// BUF-DAG: rt.buffer @labels.1 input : memref<10xi32>
// BUF-DAG: rt.buffer @grad_norm output : memref<f32>
// BUF-DAG: rt.buffer @grad_scale workspace : memref<f32>
// BUF-DAG: rt.buffer @update_successful output : memref<f32>
// BUF-NOT: offset =

// Tests the stage function: inputs become memref arguments (rt.input), model ops become kernels
// through KernelOpInterface (linear: a matmul with trans_b on [rows, features] views; reshape: a
// view, no kernel), and the accumulations become in-place adds into main_grad and the loss outputs.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[X:[^:]+]]: memref<2x5x8xf32> {rt.input = "hidden"}, %[[LAB:[^:]+]]: memref<10xi32> {rt.input = "labels"}, %[[MASK:[^:]+]]: memref<10xf32> {rt.input = "loss_mask"})
// CHECK-SAME: attributes {rt.stage}
// CHECK: %[[W:.+]] = rt.buffer_ref @output_layer.weight : memref<11x8xf32>
// CHECK: %[[X2:.+]] = rt.view %[[X]][0] : memref<2x5x8xf32> to memref<10x8xf32>
// CHECK: %[[Y:.+]] = rt.buffer_ref @forward_backward.linear.1 : memref<2x5x11xf32>
// CHECK: %[[Y2:.+]] = rt.view %[[Y]][0] : memref<2x5x11xf32> to memref<10x11xf32>
// CHECK: rt.kernel "matmul" ins(%[[X2]], %[[W]] : memref<10x8xf32>, memref<11x8xf32>) outs(%[[Y2]] : memref<10x11xf32>) {kernel_attrs = {trans_b = 1 : i64}}
// CHECK-NOT: rt.kernel
// CHECK: %[[LOGITS:.+]] = rt.view %[[Y]][0] : memref<2x5x11xf32> to memref<10x11xf32>
// CHECK: %[[LS:.+]] = rt.buffer_ref @forward_backward.cross_entropy.3.0
// CHECK: %[[NT:.+]] = rt.buffer_ref @forward_backward.cross_entropy.3.1
// CHECK: %[[LSE:.+]] = rt.buffer_ref @forward_backward.cross_entropy.3.2
// CHECK: rt.kernel "cross_entropy" ins(%[[LOGITS]], %[[LAB]], %[[MASK]] : {{.*}}) outs(%[[LS]], %[[NT]], %[[LSE]] : {{.*}}) {kernel_attrs = {valid_vocab = -1 : i64, vocab_start = 0 : i64}}
// CHECK: %[[SEED:.+]] = rt.buffer_ref @forward_backward.fill.4 : memref<f32>
// CHECK: rt.kernel "fill" outs(%[[SEED]] : memref<f32>) {kernel_attrs = {value = 1.000000e+00 : f64}}
// CHECK: rt.kernel "cross_entropy_backward" ins(%[[LOGITS]], %[[LAB]], %[[MASK]], %[[LSE]], %[[SEED]] :
// Gradient-accumulation fusion: the weight-gradient GEMM accumulates into the main grad
// (beta = 1); no temporary and no add into it.
// CHECK: %[[MG:.+]] = rt.buffer_ref @output_layer.weight.main_grad : memref<11x8xf32>
// CHECK: rt.kernel "matmul" ins({{.*}}) outs(%[[MG]] : memref<11x8xf32>) {kernel_attrs = {beta = 1.000000e+00 : f64, trans_a = 1 : i64}}
// CHECK: %[[LOSS:.+]] = rt.buffer_ref @loss_sum : memref<f32>
// CHECK: %[[NUM:.+]] = rt.buffer_ref @num_tokens : memref<f32>
// CHECK: rt.kernel "add" ins(%[[LOSS]], %[[LS]] : memref<f32>, memref<f32>) outs(%[[LOSS]] : memref<f32>) {in_place = array<i32: 0>}
// CHECK: rt.kernel "add" ins(%[[NUM]], %[[NT]] : memref<f32>, memref<f32>) outs(%[[NUM]] : memref<f32>) {in_place = array<i32: 0>}
// CHECK-NOT: rt.kernel "add" ins(%[[MG]]
// CHECK: return

model.parameter @output_layer.weight {init = "normal", init_std = 2.0e-02 : f64} : tensor<11x8xf32>
model.parameter @norm.weight {init = "ones", no_weight_decay} : tensor<8xf32>
// Tests the iteration function: main grads and loss outputs zeroed, one call per microbatch on that
// microbatch's input buffers, per-token finalize (grads scaled by 1 / num_tokens in place), the
// grad-norm clip, and one in-place AdamW kernel per parameter.
// CHECK-LABEL: func.func @train_step()
// CHECK-SAME: attributes {rt.entry}
// CHECK: %[[MG0:.+]] = rt.buffer_ref @output_layer.weight.main_grad
// CHECK-NEXT: rt.kernel "fill" outs(%[[MG0]] : memref<11x8xf32>){{$}}
// CHECK: rt.host_io fill_inputs "batch"
// CHECK: %[[H0:.+]] = rt.buffer_ref @hidden.0
// CHECK: %[[L0:.+]] = rt.buffer_ref @labels.0
// CHECK: %[[M0:.+]] = rt.buffer_ref @loss_mask.0
// CHECK: call @forward_backward(%[[H0]], %[[L0]], %[[M0]])
// CHECK: %[[H1:.+]] = rt.buffer_ref @hidden.1
// CHECK: call @forward_backward(%[[H1]],
// CHECK: %[[INV:.+]] = rt.buffer_ref @inv_num_tokens
// CHECK: rt.kernel "reciprocal" ins(%{{.+}} : memref<f32>) outs(%[[INV]] : memref<f32>)
// CHECK: %[[MG1:.+]] = rt.buffer_ref @output_layer.weight.main_grad
// CHECK: rt.kernel "scale_by" ins(%[[MG1]], %[[INV]] : memref<11x8xf32>, memref<f32>) outs(%[[MG1]] : memref<11x8xf32>) {in_place = array<i32: 0>}
// CHECK: %[[SUMSQ:.+]] = rt.buffer_ref @grad_sumsq
// CHECK: rt.kernel "sum_squares" ins(%{{.+}} : memref<11x8xf32>) outs(%[[SUMSQ]] : memref<f32>) {kernel_attrs = {beta = 0.000000e+00 : f64}}
// CHECK: rt.kernel "sum_squares" ins(%{{.+}} : memref<8xf32>) outs(%[[SUMSQ]] : memref<f32>) {kernel_attrs = {beta = 1.000000e+00 : f64}}
// CHECK: rt.kernel "grad_norm_finalize" ins(%[[SUMSQ]] : memref<f32>) outs({{.*}}) {kernel_attrs = {max_norm = 5.000000e-01 : f64}}
// CHECK: %[[P:.+]] = rt.buffer_ref @output_layer.weight : memref<11x8xf32>
// CHECK: %[[M:.+]] = rt.buffer_ref @output_layer.weight.exp_avg :
// CHECK: %[[V:.+]] = rt.buffer_ref @output_layer.weight.exp_avg_sq :
// CHECK: %[[G:.+]] = rt.buffer_ref @output_layer.weight.main_grad :
// CHECK: rt.kernel "adamw" ins(%[[P]], %[[G]], %[[M]], %[[V]], {{.*}}) outs(%[[P]], %[[M]], %[[V]] : {{.*}}) {in_place = array<i32: 0, 2, 3>, kernel_attrs = {beta1 = 9.000000e-01 : f64, beta2 = 7.500000e-01 : f64, decay = 1 : i64, eps = 1.000000e-08 : f64}}
// CHECK: rt.kernel "adamw" {{.*}}decay = 0 : i64
// CHECK: rt.host_io read_outputs "outputs"
// CHECK-NOT: sched.
// CHECK-NOT: model.
func.func @forward_backward(
    %w: tensor<11x8xf32> {model.param = @output_layer.weight},
    %g: tensor<8xf32> {model.param = @norm.weight},
    %x: tensor<2x5x8xf32> {model.input = "hidden"},
    %labels: tensor<10xi32> {model.input = "labels"},
    %mask: tensor<10xf32> {model.input = "loss_mask"}) attributes {sched.stage} {
  %logits = model.linear %x, %w : (tensor<2x5x8xf32>, tensor<11x8xf32>) -> tensor<2x5x11xf32>
  %l2 = model.reshape %logits : (tensor<2x5x11xf32>) -> tensor<10x11xf32>
  %loss, %n, %lse = model.cross_entropy %l2, %labels, %mask : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  %seed = model.fill {model.loss_seed, value = 1.0 : f64} : () -> tensor<f32>
  %dl2 = model.cross_entropy_grad %l2, %labels, %mask, %lse, %seed : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>) -> tensor<10x11xf32>
  %dlogits = model.reshape %dl2 : (tensor<10x11xf32>) -> tensor<2x5x11xf32>
  %dw = model.linear_grad_weight %dlogits, %x : (tensor<2x5x11xf32>, tensor<2x5x8xf32>) -> tensor<11x8xf32>
  %dg = model.fill {value = 0.0 : f64} : () -> tensor<8xf32>
  sched.accumulate_loss %loss, %n per_token : tensor<f32>, tensor<f32>
  sched.accumulate_grad %dw into @output_layer.weight : tensor<11x8xf32>
  sched.accumulate_grad %dg into @norm.weight : tensor<8xf32>
  return
}
func.func @train_step() attributes {sched.iteration, sched.num_microbatches = 2 : i64} {
  sched.zero_grads
  sched.fill_inputs "batch"
  sched.microbatch @forward_backward {index = 0 : i64}
  sched.microbatch @forward_backward {index = 1 : i64}
  sched.finalize_grads per_token
  sched.clip_grad_norm {max_norm = 0.5 : f64}
  sched.adamw @output_layer.weight {decay = true, beta1 = 0.9 : f64, beta2 = 0.75 : f64, eps = 1.0e-08 : f64}
  sched.adamw @norm.weight {decay = false, beta1 = 0.9 : f64, beta2 = 0.75 : f64, eps = 1.0e-08 : f64}
  sched.read_outputs "outputs"
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<11x8xbf16>
// Tests Megatron's legacy per-microbatch normalization: the seed is 1 / (num_tokens * m) (a
// reciprocal, then a scale by 1/m), the loss outputs still add the microbatch's sums (Megatron
// logs Sigma loss / Sigma tokens in both modes); finalize does not scale the grads.
// Tests also that a bf16 gradient is cast to the fp32 main_grad before it is accumulated.
// CHECK-LABEL: func.func @forward_backward(
// CHECK: rt.kernel "cross_entropy" ins({{.*}}) outs(%{{.+}}, %[[NT:.+]], %{{.+}} :
// CHECK: %[[INV:.+]] = rt.buffer_ref @mb_inv_num_tokens : memref<f32>
// CHECK: rt.kernel "reciprocal" ins(%[[NT]] : memref<f32>) outs(%[[INV]] : memref<f32>)
// CHECK: %[[SEED:.+]] = rt.buffer_ref @forward_backward.loss_seed : memref<f32>
// CHECK: rt.kernel "scale" ins(%[[INV]] : memref<f32>) outs(%[[SEED]] : memref<f32>) {kernel_attrs = {alpha = 2.500000e-01 : f64}}
// CHECK: rt.kernel "cross_entropy_backward" ins({{.*}}, %[[SEED]] :
// CHECK: %[[LOSS:.+]] = rt.buffer_ref @loss_sum
// CHECK: %[[NUM:.+]] = rt.buffer_ref @num_tokens
// CHECK-NOT: mb_loss_mean
// CHECK: rt.kernel "add" ins(%[[LOSS]], %{{.+}} : memref<f32>, memref<f32>) outs(%[[LOSS]] : memref<f32>) {in_place = array<i32: 0>}
// CHECK-NEXT: rt.kernel "add" ins(%[[NUM]], %[[NT]] : memref<f32>, memref<f32>) outs(%[[NUM]] : memref<f32>) {in_place = array<i32: 0>}
// CHECK: %[[MG:.+]] = rt.buffer_ref @w.main_grad : memref<11x8xf32>
// CHECK: %[[TMP:.+]] = rt.buffer_ref @forward_backward.grad_cast.{{[0-9]+}} : memref<11x8xf32>
// CHECK: rt.kernel "cast" ins(%{{.+}} : memref<11x8xbf16>) outs(%[[TMP]] : memref<11x8xf32>)
// CHECK: rt.kernel "add" ins(%[[MG]], %[[TMP]] : memref<11x8xf32>, memref<11x8xf32>) outs(%[[MG]] : memref<11x8xf32>) {in_place = array<i32: 0>}
// CHECK-LABEL: func.func @train_step()
// CHECK: %[[ONE2:.+]] = rt.buffer_ref @one
// CHECK-NEXT: rt.kernel "fill" outs(%[[ONE2]] : memref<f32>) {kernel_attrs = {value = 1.000000e+00 : f64}}
// CHECK: call @forward_backward
// CHECK-NOT: rt.kernel
// CHECK: return
func.func @forward_backward(
    %w: tensor<11x8xbf16> {model.param = @w},
    %x: tensor<10x8xbf16> {model.input = "x"},
    %labels: tensor<10xi32> {model.input = "labels"},
    %mask: tensor<10xf32> {model.input = "loss_mask"}) attributes {sched.stage} {
  %logits = model.linear %x, %w : (tensor<10x8xbf16>, tensor<11x8xbf16>) -> tensor<10x11xbf16>
  %loss, %n, %lse = model.cross_entropy %logits, %labels, %mask : (tensor<10x11xbf16>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  %seed = sched.loss_seed %n {num_microbatches = 4 : i64} : (tensor<f32>) -> tensor<f32>
  %dl = model.cross_entropy_grad %logits, %labels, %mask, %lse, %seed : (tensor<10x11xbf16>, tensor<10xi32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>) -> tensor<10x11xbf16>
  %dw = model.linear_grad_weight %dl, %x : (tensor<10x11xbf16>, tensor<10x8xbf16>) -> tensor<11x8xbf16>
  sched.accumulate_loss %loss, %n per_microbatch : tensor<f32>, tensor<f32>
  sched.accumulate_grad %dw into @w : tensor<11x8xbf16>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.zero_grads
  sched.microbatch @forward_backward {index = 0 : i64}
  sched.finalize_grads per_microbatch
  return
}

// -----

model.parameter @emb {init = "normal", init_std = 2.0e-02 : f64} : tensor<11x8xf32>
model.parameter @pos {init = "normal", init_std = 2.0e-02 : f64} : tensor<5x8xf32>
// Tests the gradient-accumulation fusion of embedding gradients: an embedding_grad accumulated
// into its main grad becomes an embedding_backward with beta = 1 straight into it, and a tied
// embedding's gradient (accumulate_grad of an add of the output layer's weight gradient and the
// embedding_grad) becomes the GEMM and the embedding_backward both accumulating into the main
// grad: no temporary, no add of the two, no add into the main grad.
// CHECK-LABEL: func.func @forward_backward(
// CHECK: %[[MGW:.+]] = rt.buffer_ref @emb.main_grad : memref<11x8xf32>
// CHECK: rt.kernel "matmul" ins({{.*}}) outs(%[[MGW]] : memref<11x8xf32>) {kernel_attrs = {beta = 1.000000e+00 : f64, trans_a = 1 : i64}}
// CHECK: %[[MGP:.+]] = rt.buffer_ref @pos.main_grad : memref<5x8xf32>
// CHECK: rt.kernel "embedding_backward" ins(%{{.+}}, %{{.+}} : memref<2x5xi32>, memref<2x5x8xf32>) outs(%[[MGP]] : memref<5x8xf32>) {kernel_attrs = {beta = 1.000000e+00 : f64, vocab_start = 0 : i64}}
// CHECK: %[[MGE:.+]] = rt.buffer_ref @emb.main_grad : memref<11x8xf32>
// CHECK: rt.kernel "embedding_backward" ins(%{{.+}}, %{{.+}} : memref<2x5xi32>, memref<2x5x8xf32>) outs(%[[MGE]] : memref<11x8xf32>) {kernel_attrs = {beta = 1.000000e+00 : f64, vocab_start = 0 : i64}}
// CHECK-NOT: rt.kernel "add" ins({{.*}}memref<11x8xf32>
// CHECK-NOT: rt.kernel "add" ins({{.*}}memref<5x8xf32>
// CHECK-LABEL: func.func @train_step()
func.func @forward_backward(
    %w: tensor<11x8xf32> {model.param = @emb},
    %p: tensor<5x8xf32> {model.param = @pos},
    %dx: tensor<2x5x8xf32> {model.input = "dx"},
    %x: tensor<2x5x8xf32> {model.input = "x"},
    %dlogits: tensor<2x5x11xf32> {model.input = "dlogits"},
    %ids: tensor<2x5xi32> {model.input = "tokens"},
    %pids: tensor<2x5xi32> {model.input = "position_ids"}) attributes {sched.stage} {
  %dwo = model.linear_grad_weight %dlogits, %x : (tensor<2x5x11xf32>, tensor<2x5x8xf32>) -> tensor<11x8xf32>
  %dp = model.embedding_grad %pids, %dx : (tensor<2x5xi32>, tensor<2x5x8xf32>) -> tensor<5x8xf32>
  sched.accumulate_grad %dp into @pos : tensor<5x8xf32>
  %dwe = model.embedding_grad %ids, %dx : (tensor<2x5xi32>, tensor<2x5x8xf32>) -> tensor<11x8xf32>
  %dw = model.add %dwo, %dwe : (tensor<11x8xf32>, tensor<11x8xf32>) -> tensor<11x8xf32>
  sched.accumulate_grad %dw into @emb : tensor<11x8xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.zero_grads
  sched.microbatch @forward_backward {index = 0 : i64}
  sched.finalize_grads per_token
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4x8xf32>
// Tests that an evaluation iteration (sched.eval) becomes an extra entry point named after it, that
// sched.zero_losses zeroes only the loss outputs, and that the FLOPs recorded on the module are
// those of the training iteration only (one call of a 2 x 10 x 4 x 8 = 640-FLOP linear; the three
// evaluation calls do not count).
// CHECK: module attributes {{.*}}trainc.flops_per_iteration = 6.400000e+02 : f64, trainc.num_microbatches = 1 : i64}
// CHECK-LABEL: func.func @train_step()
// CHECK-SAME: attributes {rt.entry}
// CHECK: call @forward_backward(
// CHECK-LABEL: func.func @eval_step()
// CHECK-SAME: attributes {rt.entry_point = "eval_step"}
// CHECK-NEXT: %[[LS:.+]] = rt.buffer_ref @loss_sum : memref<f32>
// CHECK-NEXT: rt.kernel "fill" outs(%[[LS]] : memref<f32>){{$}}
// CHECK-NEXT: %[[NT:.+]] = rt.buffer_ref @num_tokens : memref<f32>
// CHECK-NEXT: rt.kernel "fill" outs(%[[NT]] : memref<f32>){{$}}
// CHECK-NEXT: rt.host_io fill_inputs "eval_batch"
// CHECK: call @forward_only(
// CHECK: call @forward_only(
// CHECK: call @forward_only(
// CHECK: rt.host_io read_outputs "eval_outputs"
func.func @forward_backward(%w: tensor<4x8xf32> {model.param = @w}, %x: tensor<10x8xf32> {model.input = "x"}) attributes {sched.stage} {
  %y = model.linear %x, %w : (tensor<10x8xf32>, tensor<4x8xf32>) -> tensor<10x4xf32>
  return
}
func.func @forward_only(%w: tensor<4x8xf32> {model.param = @w}, %x: tensor<10x8xf32> {model.input = "x"}) attributes {sched.stage} {
  %y = model.linear %x, %w : (tensor<10x8xf32>, tensor<4x8xf32>) -> tensor<10x4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}
func.func @eval_step() attributes {sched.iteration, sched.eval} {
  sched.zero_losses
  sched.fill_inputs "eval_batch"
  sched.microbatch @forward_only {index = 0 : i64}
  sched.microbatch @forward_only {index = 1 : i64}
  sched.microbatch @forward_only {index = 2 : i64}
  sched.read_outputs "eval_outputs"
  return
}

// -----

// Tests that an evaluation iteration does not count as the training iteration.
// expected-error@+1 {{trainc-lower-to-rt: expected one training iteration function (sched.iteration without sched.eval), found 0}}
module {
  model.parameter @w {init = "zeros"} : tensor<4xf32>
  func.func @forward_only(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
    return
  }
  func.func @eval_step() attributes {sched.iteration, sched.eval} {
    return
  }
}

// -----

// Tests that an empty module is refused.
// expected-error@+1 {{trainc-lower-to-rt: empty module}}
module {
}

// -----

// Tests that a module needs a stage function.
// expected-error@+1 {{trainc-lower-to-rt: no stage function (sched.stage)}}
module {
  func.func @train_step() attributes {sched.iteration} {
    return
  }
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
// Tests that every stage function argument is a parameter or an input.
// expected-error@+1 {{'func.func' op argument 1 is neither a model.param, a model.input nor a sched.stash}}
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}, %x: tensor<4xf32>) attributes {sched.stage} {
  return
}

// -----

// Tests that a module needs exactly one training iteration function.
// expected-error@+1 {{trainc-lower-to-rt: expected one training iteration function (sched.iteration without sched.eval), found 2}}
module {
  model.parameter @w {init = "zeros"} : tensor<4xf32>
  func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
    return
  }
  func.func @a() attributes {sched.iteration} {
    return
  }
  func.func @b() attributes {sched.iteration} {
    return
  }
}

// -----

model.parameter @v {init = "zeros"} : tensor<4xf32>
model.parameter @w {init = "zeros"} : tensor<4xf32>
// Tests that a gradient is accumulated into a known parameter.
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  // expected-error@+1 {{'sched.accumulate_grad' op names unknown parameter 'v'}}
  sched.accumulate_grad %w into @v : tensor<4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
// Tests that an op without a kernel lowering in a stage function is reported.
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  // expected-error@+1 {{'sched.zero_grads' op cannot be lowered to rt (no KernelOpInterface)}}
  sched.zero_grads
  return
}
func.func @train_step() attributes {sched.iteration} {
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
// Tests that the iteration function calls only stage functions.
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  return
}
func.func @helper() {
  return
}
func.func @train_step() attributes {sched.iteration} {
  // expected-error@+1 {{'sched.microbatch' op calls @helper, not a stage function}}
  sched.microbatch @helper {index = 0 : i64}
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
// Tests that AdamW updates a known parameter.
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  return
}
func.func @train_step() attributes {sched.iteration} {
  // expected-error@+1 {{'sched.adamw' op names @v, which is not declared in this module}}
  sched.adamw @v {decay = true, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64}
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xbf16>
// Tests that a bf16 parameter gets fp32 master weights, an fp32 main grad and fp32 Adam states,
// and that its AdamW is adamw_master: the update on the master, writing the bf16 parameter.
// MASTER-DAG: rt.buffer @w parameter{{.*}} : memref<4xbf16>
// MASTER-DAG: rt.buffer @w.main_grad main_grad{{.*}} : memref<4xf32>
// MASTER-DAG: rt.buffer @w.exp_avg optimizer_state{{.*}} : memref<4xf32>
// MASTER-DAG: rt.buffer @w.master master_param{{.*}} : memref<4xf32>
// MASTER: rt.kernel "adamw_master" ins(%[[M:.+]], %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} : memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xf32>, {{.+}}) outs(%[[M]], %{{.+}}, %{{.+}}, %{{.+}} : memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xbf16>)
func.func @forward_backward(%w: tensor<4xbf16> {model.param = @w}) attributes {sched.stage} {
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.adamw @w {decay = true, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64}
  return
}

// -----

model.parameter @w {init = "zeros"} : tensor<4xf32>
// Tests that an unexpanded optimizer step in the iteration function is reported.
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w}) attributes {sched.stage} {
  return
}
func.func @train_step() attributes {sched.iteration} {
  // expected-error@+1 {{'sched.optimizer_step' op cannot be lowered to rt in an iteration function}}
  sched.optimizer_step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, clip_grad = 1.0 : f64}
  return
}
