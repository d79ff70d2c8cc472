// RUN: trainc-opt %s | trainc-opt | FileCheck %s
// REQUIRES: compiler

// Round trip of every model op. Shapes: batch 2, seq 5, hidden 8, 2 heads of dim 4, vocab 11.

// Tests that model.fill keeps its value and its result type.
// CHECK-LABEL: func.func @fill
// CHECK: %[[F:.+]] = model.fill {value = 1.500000e+00 : f64} : () -> tensor<2x5xf32>
// CHECK: return %[[F]]
func.func @fill() -> tensor<2x5xf32> {
  %0 = model.fill {value = 1.5 : f64} : () -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// Tests that model.reshape round-trips with its operand and result shapes.
// CHECK-LABEL: func.func @reshape
// CHECK-SAME: (%[[X:.+]]: tensor<2x5x8xf32>)
// CHECK: model.reshape %[[X]] : (tensor<2x5x8xf32>) -> tensor<10x8xf32>
func.func @reshape(%x: tensor<2x5x8xf32>) -> tensor<10x8xf32> {
  %0 = model.reshape %x : (tensor<2x5x8xf32>) -> tensor<10x8xf32>
  return %0 : tensor<10x8xf32>
}

// Tests that model.embedding keeps a non-default vocab_start.
// CHECK-LABEL: func.func @embedding
// CHECK-SAME: (%[[T:.+]]: tensor<11x8xf32>, %[[IDS:.+]]: tensor<2x5xi32>)
// CHECK: model.embedding %[[T]], %[[IDS]] {vocab_start = 3 : i64} : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
func.func @embedding(%t: tensor<11x8xf32>, %ids: tensor<2x5xi32>) -> tensor<2x5x8xf32> {
  %0 = model.embedding %t, %ids {vocab_start = 3 : i64} : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  return %0 : tensor<2x5x8xf32>
}

// Tests that model.linear round-trips with and without its optional bias.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x5x8xf32>, %[[W:[^:]+]]: tensor<12x8xf32>, %[[B:[^:]+]]: tensor<12xf32>)
// CHECK: model.linear %[[X]], %[[W]] : (tensor<2x5x8xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
// CHECK: model.linear %[[X]], %[[W]], %[[B]] : (tensor<2x5x8xf32>, tensor<12x8xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
func.func @linear(%x: tensor<2x5x8xf32>, %w: tensor<12x8xf32>, %b: tensor<12xf32>) -> (tensor<2x5x12xf32>, tensor<2x5x12xf32>) {
  %0 = model.linear %x, %w : (tensor<2x5x8xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  %1 = model.linear %x, %w, %b : (tensor<2x5x8xf32>, tensor<12x8xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %0, %1 : tensor<2x5x12xf32>, tensor<2x5x12xf32>
}

// Tests that model.layer_norm returns the result, mean and rstd and keeps a non-default eps.
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x5x8xf32>, %[[G:[^:]+]]: tensor<8xf32>, %[[B:[^:]+]]: tensor<8xf32>)
// CHECK: = model.layer_norm %[[X]], %[[G]], %[[B]] {eps = 2.500000e-01 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>, tensor<10xf32>)
func.func @layer_norm(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x5x8xf32> {
  %y, %mean, %rstd = model.layer_norm %x, %g, %b {eps = 0.25 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>, tensor<10xf32>)
  return %y : tensor<2x5x8xf32>
}

// Tests that model.rms_norm returns the result and rstd, keeps a non-default eps, and takes f64
// statistics for f64 data (default eps elided).
// CHECK-LABEL: func.func @rms_norm
// CHECK: model.rms_norm %{{.+}}, %{{.+}} {eps = 5.000000e-01 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>)
// CHECK: model.rms_norm %{{.+}}, %{{.+}} : (tensor<10x8xf64>, tensor<8xf64>) -> (tensor<10x8xf64>, tensor<10xf64>)
func.func @rms_norm(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %x2: tensor<10x8xf64>, %g2: tensor<8xf64>) -> (tensor<2x5x8xf32>, tensor<10x8xf64>) {
  %y, %rstd = model.rms_norm %x, %g {eps = 0.5 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>)
  %y2, %rstd2 = model.rms_norm %x2, %g2 : (tensor<10x8xf64>, tensor<8xf64>) -> (tensor<10x8xf64>, tensor<10xf64>)
  return %y, %y2 : tensor<2x5x8xf32>, tensor<10x8xf64>
}

// Tests that model.rope keeps base and rotary_dim.
// CHECK-LABEL: func.func @rope
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x5x2x4xf32>, %[[P:[^:]+]]: tensor<2x5xi32>)
// CHECK: model.rope %[[X]], %[[P]] {base = 5.000000e+02 : f64, rotary_dim = 2 : i64} : (tensor<2x5x2x4xf32>, tensor<2x5xi32>) -> tensor<2x5x2x4xf32>
func.func @rope(%x: tensor<2x5x2x4xf32>, %pos: tensor<2x5xi32>) -> tensor<2x5x2x4xf32> {
  %0 = model.rope %x, %pos {base = 500.0 : f64, rotary_dim = 2 : i64} : (tensor<2x5x2x4xf32>, tensor<2x5xi32>) -> tensor<2x5x2x4xf32>
  return %0 : tensor<2x5x2x4xf32>
}

// Tests that model.attention (grouped-query: 2 query heads, 1 key/value head) returns out and lse.
// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<2x5x2x4xf32>, %[[K:[^:]+]]: tensor<2x5x1x4xf32>, %[[V:[^:]+]]: tensor<2x5x1x4xf32>)
// CHECK: model.attention %[[Q]], %[[K]], %[[V]] {causal = false, scale = 5.000000e-01 : f64} : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>) -> (tensor<2x5x2x4xf32>, tensor<2x2x5xf32>)
func.func @attention(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x1x4xf32>, %v: tensor<2x5x1x4xf32>) -> tensor<2x5x2x4xf32> {
  %o, %lse = model.attention %q, %k, %v {causal = false, scale = 0.5 : f64} : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>) -> (tensor<2x5x2x4xf32>, tensor<2x2x5xf32>)
  return %o : tensor<2x5x2x4xf32>
}

// Tests that model.gelu keeps approximate and model.swiglu halves the last dim.
// CHECK-LABEL: func.func @gelu_swiglu
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x5x8xf32>)
// CHECK: %[[G:.+]] = model.gelu %[[X]] {approximate = true} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
// CHECK: model.swiglu %[[G]] : (tensor<2x5x8xf32>) -> tensor<2x5x4xf32>
func.func @gelu_swiglu(%x: tensor<2x5x8xf32>) -> tensor<2x5x4xf32> {
  %0 = model.gelu %x {approximate = true} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %1 = model.swiglu %0 : (tensor<2x5x8xf32>) -> tensor<2x5x4xf32>
  return %1 : tensor<2x5x4xf32>
}

// Tests that model.add and model.dropout round-trip (dropout keeps p and op_id).
// CHECK-LABEL: func.func @add_dropout
// CHECK-SAME: (%[[A:[^:]+]]: tensor<2x5x8xf32>, %[[B:[^:]+]]: tensor<2x5x8xf32>, %[[RNG:[^:]+]]: tensor<3xi64>)
// CHECK: %[[S:.+]] = model.add %[[A]], %[[B]] : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
// CHECK: model.dropout %[[S]], %[[RNG]] {op_id = 3 : i64, p = 1.000000e-01 : f64} : (tensor<2x5x8xf32>, tensor<3xi64>) -> tensor<2x5x8xf32>
func.func @add_dropout(%a: tensor<2x5x8xf32>, %b: tensor<2x5x8xf32>, %rng: tensor<3xi64>) -> tensor<2x5x8xf32> {
  %0 = model.add %a, %b : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %1 = model.dropout %0, %rng {p = 0.1 : f64, op_id = 3 : i64} : (tensor<2x5x8xf32>, tensor<3xi64>) -> tensor<2x5x8xf32>
  return %1 : tensor<2x5x8xf32>
}

// Tests that model.cross_entropy returns (loss_sum, num_tokens, lse) and keeps the vocab attributes.
// CHECK-LABEL: func.func @cross_entropy
// CHECK-SAME: (%[[L:[^:]+]]: tensor<10x11xf32>, %[[Y:[^:]+]]: tensor<10xi32>, %[[M:[^:]+]]: tensor<10xf32>)
// CHECK: %[[LS:[^,]+]], %[[NT:[^,]+]], %{{.+}} = model.cross_entropy %[[L]], %[[Y]], %[[M]] {valid_vocab = 10 : i64, vocab_start = 2 : i64} : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
// CHECK: return %[[LS]], %[[NT]]
func.func @cross_entropy(%logits: tensor<10x11xf32>, %labels: tensor<10xi32>, %mask: tensor<10xf32>) -> (tensor<f32>, tensor<f32>) {
  %l, %n, %lse = model.cross_entropy %logits, %labels, %mask {vocab_start = 2 : i64, valid_vocab = 10 : i64} : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %l, %n : tensor<f32>, tensor<f32>
}

// Tests that model.embedding_grad scatters dy rows into a [vocab, hidden] gradient.
// CHECK-LABEL: func.func @embedding_grad
// CHECK-SAME: (%[[IDS:[^:]+]]: tensor<2x5xi32>, %[[DY:[^:]+]]: tensor<2x5x8xf32>)
// CHECK: model.embedding_grad %[[IDS]], %[[DY]] : (tensor<2x5xi32>, tensor<2x5x8xf32>) -> tensor<11x8xf32>
func.func @embedding_grad(%ids: tensor<2x5xi32>, %dy: tensor<2x5x8xf32>) -> tensor<11x8xf32> {
  %0 = model.embedding_grad %ids, %dy : (tensor<2x5xi32>, tensor<2x5x8xf32>) -> tensor<11x8xf32>
  return %0 : tensor<11x8xf32>
}

// Tests that the three gradients of model.linear round-trip.
// CHECK-LABEL: func.func @linear_grads
// CHECK-SAME: (%[[DY:[^:]+]]: tensor<2x5x12xf32>, %[[X:[^:]+]]: tensor<2x5x8xf32>, %[[W:[^:]+]]: tensor<12x8xf32>)
// CHECK: model.linear_grad_input %[[DY]], %[[W]] : (tensor<2x5x12xf32>, tensor<12x8xf32>) -> tensor<2x5x8xf32>
// CHECK: model.linear_grad_weight %[[DY]], %[[X]] : (tensor<2x5x12xf32>, tensor<2x5x8xf32>) -> tensor<12x8xf32>
// CHECK: model.bias_grad %[[DY]] : (tensor<2x5x12xf32>) -> tensor<12xf32>
func.func @linear_grads(%dy: tensor<2x5x12xf32>, %x: tensor<2x5x8xf32>, %w: tensor<12x8xf32>) -> (tensor<2x5x8xf32>, tensor<12x8xf32>, tensor<12xf32>) {
  %0 = model.linear_grad_input %dy, %w : (tensor<2x5x12xf32>, tensor<12x8xf32>) -> tensor<2x5x8xf32>
  %1 = model.linear_grad_weight %dy, %x : (tensor<2x5x12xf32>, tensor<2x5x8xf32>) -> tensor<12x8xf32>
  %2 = model.bias_grad %dy : (tensor<2x5x12xf32>) -> tensor<12xf32>
  return %0, %1, %2 : tensor<2x5x8xf32>, tensor<12x8xf32>, tensor<12xf32>
}

// Tests that model.layer_norm_grad and model.rms_norm_grad round-trip with their saved statistics.
// CHECK-LABEL: func.func @norm_grads
// CHECK-SAME: (%[[DY:[^:]+]]: tensor<2x5x8xf32>, %[[X:[^:]+]]: tensor<2x5x8xf32>, %[[G:[^:]+]]: tensor<8xf32>, %[[MEAN:[^:]+]]: tensor<10xf32>, %[[RSTD:[^:]+]]: tensor<10xf32>)
// CHECK: model.layer_norm_grad %[[DY]], %[[X]], %[[G]], %[[MEAN]], %[[RSTD]] : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<8xf32>, tensor<10xf32>, tensor<10xf32>) -> (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK: model.rms_norm_grad %[[DY]], %[[X]], %[[G]], %[[RSTD]] : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<8xf32>, tensor<10xf32>) -> (tensor<2x5x8xf32>, tensor<8xf32>)
func.func @norm_grads(%dy: tensor<2x5x8xf32>, %x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %mean: tensor<10xf32>, %rstd: tensor<10xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x8xf32>) {
  %dx, %dg, %db = model.layer_norm_grad %dy, %x, %g, %mean, %rstd : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<8xf32>, tensor<10xf32>, tensor<10xf32>) -> (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %dx2, %dg2 = model.rms_norm_grad %dy, %x, %g, %rstd : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<8xf32>, tensor<10xf32>) -> (tensor<2x5x8xf32>, tensor<8xf32>)
  return %dx, %dx2 : tensor<2x5x8xf32>, tensor<2x5x8xf32>
}

// Tests that model.rope_grad keeps base and rotary_dim.
// CHECK-LABEL: func.func @rope_grad
// CHECK: model.rope_grad %{{.+}}, %{{.+}} {base = 5.000000e+02 : f64, rotary_dim = 4 : i64} : (tensor<2x5x2x4xf32>, tensor<2x5xi32>) -> tensor<2x5x2x4xf32>
func.func @rope_grad(%dy: tensor<2x5x2x4xf32>, %pos: tensor<2x5xi32>) -> tensor<2x5x2x4xf32> {
  %0 = model.rope_grad %dy, %pos {base = 500.0 : f64, rotary_dim = 4 : i64} : (tensor<2x5x2x4xf32>, tensor<2x5xi32>) -> tensor<2x5x2x4xf32>
  return %0 : tensor<2x5x2x4xf32>
}

// Tests that model.attention and model.attention_grad take the optional document starts
// (--reset-attention-mask) after the optional dropout key.
// CHECK-LABEL: func.func @attention_doc_start
// CHECK: model.attention %{{.*}}, %{{.*}}, %{{.*}} doc_start(%{{.*}}) : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5xi32>)
// CHECK: model.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} doc_start(%{{.*}}) {dropout = 1.000000e-01 : f64} : ({{.*}}, tensor<3xi64>, tensor<2x5xi32>)
// CHECK: model.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} doc_start(%{{.*}}) {dropout = 1.000000e-01 : f64} : ({{.*}}, tensor<3xi64>, tensor<2x5xi32>)
func.func @attention_doc_start(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x1x4xf32>, %v: tensor<2x5x1x4xf32>, %ds: tensor<2x5xi32>, %rng: tensor<3xi64>) -> tensor<2x5x2x4xf32> {
  %o, %lse = model.attention %q, %k, %v doc_start(%ds) : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5xi32>) -> (tensor<2x5x2x4xf32>, tensor<2x2x5xf32>)
  %o2, %lse2 = model.attention %q, %k, %v, %rng doc_start(%ds) {dropout = 0.1 : f64} : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>, tensor<3xi64>, tensor<2x5xi32>) -> (tensor<2x5x2x4xf32>, tensor<2x2x5xf32>)
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o2, %lse2, %o, %rng doc_start(%ds) {dropout = 0.1 : f64} : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x2x4xf32>, tensor<2x2x5xf32>, tensor<2x5x2x4xf32>, tensor<3xi64>, tensor<2x5xi32>) -> (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>)
  return %dq : tensor<2x5x2x4xf32>
}

// Tests that model.attention_grad returns dq, dk, dv of the grouped-query shapes.
// CHECK-LABEL: func.func @attention_grad
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<2x5x2x4xf32>, %[[K:[^:]+]]: tensor<2x5x1x4xf32>, %[[V:[^:]+]]: tensor<2x5x1x4xf32>, %[[O:[^:]+]]: tensor<2x5x2x4xf32>, %[[LSE:[^:]+]]: tensor<2x2x5xf32>, %[[DO:[^:]+]]: tensor<2x5x2x4xf32>)
// CHECK: model.attention_grad %[[Q]], %[[K]], %[[V]], %[[O]], %[[LSE]], %[[DO]] {causal = false, scale = 2.500000e-01 : f64} : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x2x4xf32>, tensor<2x2x5xf32>, tensor<2x5x2x4xf32>) -> (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>)
func.func @attention_grad(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x1x4xf32>, %v: tensor<2x5x1x4xf32>, %o: tensor<2x5x2x4xf32>, %lse: tensor<2x2x5xf32>, %do: tensor<2x5x2x4xf32>) -> tensor<2x5x2x4xf32> {
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %lse, %do {causal = false, scale = 0.25 : f64} : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x2x4xf32>, tensor<2x2x5xf32>, tensor<2x5x2x4xf32>) -> (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>)
  return %dq : tensor<2x5x2x4xf32>
}

// Tests that model.rng_offset round-trips and that dropout takes its [4] key.
// CHECK-LABEL: func.func @rng_offset
// CHECK: %[[K:.+]] = model.rng_offset %{{.+}} {offset = 4 : i64} : (tensor<3xi64>) -> tensor<4xi64>
// CHECK: %[[K2:.+]] = model.rng_offset %[[K]] {offset = 2 : i64} : (tensor<4xi64>) -> tensor<4xi64>
// CHECK: model.dropout %{{.+}}, %[[K2]] {op_id = 1 : i64, p = 1.000000e-01 : f64} : (tensor<2x5x8xf32>, tensor<4xi64>) -> tensor<2x5x8xf32>
func.func @rng_offset(%x: tensor<2x5x8xf32>, %rng: tensor<3xi64>) -> tensor<2x5x8xf32> {
  %k = model.rng_offset %rng {offset = 4 : i64} : (tensor<3xi64>) -> tensor<4xi64>
  %k2 = model.rng_offset %k {offset = 2 : i64} : (tensor<4xi64>) -> tensor<4xi64>
  %y = model.dropout %x, %k2 {p = 0.1 : f64, op_id = 1 : i64} : (tensor<2x5x8xf32>, tensor<4xi64>) -> tensor<2x5x8xf32>
  return %y : tensor<2x5x8xf32>
}

// Tests that model.gelu_grad, model.swiglu_grad and model.dropout_grad round-trip.
// CHECK-LABEL: func.func @elementwise_grads
// CHECK-SAME: (%[[DY:[^:]+]]: tensor<2x5x8xf32>, %[[X:[^:]+]]: tensor<2x5x8xf32>, %[[DH:[^:]+]]: tensor<2x5x4xf32>, %[[RNG:[^:]+]]: tensor<3xi64>)
// CHECK: model.gelu_grad %[[DY]], %[[X]] : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
// CHECK: model.swiglu_grad %[[DH]], %[[X]] : (tensor<2x5x4xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
// CHECK: model.dropout_grad %[[DY]], %[[RNG]] {op_id = 7 : i64, p = 2.500000e-01 : f64} : (tensor<2x5x8xf32>, tensor<3xi64>) -> tensor<2x5x8xf32>
func.func @elementwise_grads(%dy: tensor<2x5x8xf32>, %x: tensor<2x5x8xf32>, %dh: tensor<2x5x4xf32>, %rng: tensor<3xi64>) -> (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>) {
  %0 = model.gelu_grad %dy, %x : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %1 = model.swiglu_grad %dh, %x : (tensor<2x5x4xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %2 = model.dropout_grad %dy, %rng {p = 0.25 : f64, op_id = 7 : i64} : (tensor<2x5x8xf32>, tensor<3xi64>) -> tensor<2x5x8xf32>
  return %0, %1, %2 : tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>
}

// Tests that model.cross_entropy_grad takes the saved lse and the loss gradient.
// CHECK-LABEL: func.func @cross_entropy_grad
// CHECK-SAME: (%[[L:[^:]+]]: tensor<10x11xf32>, %[[Y:[^:]+]]: tensor<10xi32>, %[[M:[^:]+]]: tensor<10xf32>, %[[LSE:[^:]+]]: tensor<10xf32>, %[[D:[^:]+]]: tensor<f32>)
// CHECK: model.cross_entropy_grad %[[L]], %[[Y]], %[[M]], %[[LSE]], %[[D]] : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>) -> tensor<10x11xf32>
func.func @cross_entropy_grad(%logits: tensor<10x11xf32>, %labels: tensor<10xi32>, %mask: tensor<10xf32>, %lse: tensor<10xf32>, %d: tensor<f32>) -> tensor<10x11xf32> {
  %0 = model.cross_entropy_grad %logits, %labels, %mask, %lse, %d : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>) -> tensor<10x11xf32>
  return %0 : tensor<10x11xf32>
}
