// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-autodiff | FileCheck %s
// RUN: trainc-opt %S/Inputs/tiny-model.mlir -trainc-autodiff="output=step_grad" | FileCheck %s --check-prefix=OUTPUT
// RUN: %not trainc-opt %S/Inputs/tiny-model.mlir -trainc-autodiff="function=model" 2>&1 | FileCheck %s --check-prefix=FUNCTION
// REQUIRES: compiler

// Tests that the forward function is kept as is and that @forward_backward returns the losses, then
// the gradient of every parameter in argument order (model.grad_of), computed by the VJP rules of
// embedding, rms_norm, linear, reshape and cross_entropy from a seed d(loss_sum) = 1.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: -> (tensor<f32>, tensor<f32>)
// CHECK-NOT: model.fill
// CHECK: return
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[WTE:[^:]+]]: tensor<11x8xf32> {model.param = @wte}
// CHECK-SAME: %[[LN:[^:]+]]: tensor<8xf32> {model.param = @ln}
// CHECK-SAME: %[[WOUT:[^:]+]]: tensor<11x8xf32> {model.param = @wout}
// CHECK-SAME: %[[TOK:[^:]+]]: tensor<2x5xi32> {model.input = "tokens"}
// CHECK-SAME: %[[LAB:[^:]+]]: tensor<10xi32> {model.input = "labels"}
// CHECK-SAME: %[[MASK:[^:]+]]: tensor<10xf32> {model.input = "loss_mask"}
// CHECK-SAME: -> (tensor<f32>, tensor<f32>, tensor<11x8xf32> {model.grad_of = @wte}, tensor<8xf32> {model.grad_of = @ln}, tensor<11x8xf32> {model.grad_of = @wout})
// CHECK: %[[X:.+]] = model.embedding %[[WTE]], %[[TOK]]
// CHECK: %[[H:.+]], %[[RSTD:.+]] = model.rms_norm %[[X]], %[[LN]]
// CHECK: %[[LOGITS:.+]] = model.linear %[[H]], %[[WOUT]]
// CHECK: %[[L2:.+]] = model.reshape %[[LOGITS]]
// CHECK: %[[LOSS:.+]], %[[N:.+]], %[[LSE:.+]] = model.cross_entropy %[[L2]], %[[LAB]], %[[MASK]]
// CHECK: %[[SEED:.+]] = model.fill {{.*}}{model.loss_seed, value = 1.000000e+00 : f64} : () -> tensor<f32>
// CHECK: %[[DL2:.+]] = model.cross_entropy_grad %[[L2]], %[[LAB]], %[[MASK]], %[[LSE]], %[[SEED]]
// CHECK: %[[DLOGITS:.+]] = model.reshape %[[DL2]] : (tensor<10x11xf32>) -> tensor<2x5x11xf32>
// CHECK: %[[DH:.+]] = model.linear_grad_input %[[DLOGITS]], %[[WOUT]]
// CHECK: %[[DWOUT:.+]] = model.linear_grad_weight %[[DLOGITS]], %[[H]]
// CHECK: %[[DX:.+]], %[[DLN:.+]] = model.rms_norm_grad %[[DH]], %[[X]], %[[LN]], %[[RSTD]]
// CHECK: %[[DWTE:.+]] = model.embedding_grad %[[TOK]], %[[DX]]
// CHECK-NOT: model.add
// CHECK: return %[[LOSS]], %[[N]], %[[DWTE]], %[[DLN]], %[[DWOUT]]
func.func @forward(
    %wte: tensor<11x8xf32> {model.param = @wte},
    %ln: tensor<8xf32> {model.param = @ln},
    %wout: tensor<11x8xf32> {model.param = @wout},
    %tokens: tensor<2x5xi32> {model.input = "tokens"},
    %labels: tensor<10xi32> {model.input = "labels"},
    %mask: tensor<10xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %x = model.embedding %wte, %tokens : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  %h, %rstd = model.rms_norm %x, %ln : (tensor<2x5x8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>)
  %logits = model.linear %h, %wout : (tensor<2x5x8xf32>, tensor<11x8xf32>) -> tensor<2x5x11xf32>
  %l2 = model.reshape %logits : (tensor<2x5x11xf32>) -> tensor<10x11xf32>
  %loss, %n, %lse = model.cross_entropy %l2, %labels, %mask : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}

// -----

// Tests that a tied embedding (used by the embedding and by the output linear) gets the sum of its
// two gradients with model.add, and that an unused parameter gets a zero gradient.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[WTE:[^:]+]]: tensor<11x8xf32> {model.param = @wte}
// CHECK-SAME: -> (tensor<f32>, tensor<f32>, tensor<11x8xf32> {model.grad_of = @wte}, tensor<8xf32> {model.grad_of = @ln}, tensor<4x8xf32> {model.grad_of = @unused})
// CHECK: %[[DW_LINEAR:.+]] = model.linear_grad_weight
// CHECK: %{{.+}}, %[[DLN:.+]] = model.rms_norm_grad
// CHECK: %[[DW_EMB:.+]] = model.embedding_grad
// CHECK: %[[DWTE:.+]] = model.add %[[DW_LINEAR]], %[[DW_EMB]] : (tensor<11x8xf32>, tensor<11x8xf32>) -> tensor<11x8xf32>
// CHECK: %[[ZERO:.+]] = model.fill {{.*}}{value = 0.000000e+00 : f64} : () -> tensor<4x8xf32>
// CHECK: return %{{.+}}, %{{.+}}, %[[DWTE]], %[[DLN]], %[[ZERO]]
func.func @forward(
    %wte: tensor<11x8xf32> {model.param = @wte},
    %ln: tensor<8xf32> {model.param = @ln},
    %unused: tensor<4x8xf32> {model.param = @unused},
    %tokens: tensor<2x5xi32> {model.input = "tokens"},
    %labels: tensor<10xi32> {model.input = "labels"},
    %mask: tensor<10xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %x = model.embedding %wte, %tokens : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  %h, %rstd = model.rms_norm %x, %ln : (tensor<2x5x8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>)
  %logits = model.linear %h, %wte : (tensor<2x5x8xf32>, tensor<11x8xf32>) -> tensor<2x5x11xf32>
  %l2 = model.reshape %logits : (tensor<2x5x11xf32>) -> tensor<10x11xf32>
  %loss, %n, %lse = model.cross_entropy %l2, %labels, %mask : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}

// -----

// Tests the VJP rules of attention and rope: attention_grad recomputes from the saved output and
// log-sum-exp, the three gradients of one value used as query, key and value are summed, and rope's
// gradient is rope_grad with the same base.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[W:[^:]+]]: tensor<16x8xf32> {model.param = @qkv}
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x5x8xf32> {model.input = "x"}
// CHECK-SAME: %[[POS:[^:]+]]: tensor<2x5xi32> {model.input = "pos"}
// CHECK: %[[Q:.+]] = model.rope %{{.+}}, %[[POS]] {base = 5.000000e+02 : f64}
// CHECK: %[[O:.+]], %[[LSE:.+]] = model.attention %[[Q]], %[[Q]], %[[Q]]
// CHECK: %[[DO:.+]] = model.reshape %{{.+}} : (tensor<10x16xf32>) -> tensor<2x5x4x4xf32>
// CHECK: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = model.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[O]], %[[LSE]], %[[DO]] :
// CHECK: %[[S1:.+]] = model.add %[[DQ]], %[[DK]]
// CHECK: %[[S2:.+]] = model.add %[[S1]], %[[DV]]
// CHECK: %[[DQ4:.+]] = model.rope_grad %[[S2]], %[[POS]] {base = 5.000000e+02 : f64}
// CHECK: %[[DQKV:.+]] = model.reshape %[[DQ4]] : (tensor<2x5x4x4xf32>) -> tensor<2x5x16xf32>
// CHECK: %[[DW:.+]] = model.linear_grad_weight %[[DQKV]], %[[X]]
// CHECK: return %{{.+}}, %{{.+}}, %[[DW]] :
func.func @forward(
    %wqkv: tensor<16x8xf32> {model.param = @qkv},
    %x: tensor<2x5x8xf32> {model.input = "x"},
    %pos: tensor<2x5xi32> {model.input = "pos"},
    %labels: tensor<10xi32> {model.input = "labels"},
    %mask: tensor<10xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %qkv = model.linear %x, %wqkv : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %q4 = model.reshape %qkv : (tensor<2x5x16xf32>) -> tensor<2x5x4x4xf32>
  %q = model.rope %q4, %pos {base = 500.0 : f64} : (tensor<2x5x4x4xf32>, tensor<2x5xi32>) -> tensor<2x5x4x4xf32>
  %o, %lse0 = model.attention %q, %q, %q : (tensor<2x5x4x4xf32>, tensor<2x5x4x4xf32>, tensor<2x5x4x4xf32>) -> (tensor<2x5x4x4xf32>, tensor<2x4x5xf32>)
  %l = model.reshape %o : (tensor<2x5x4x4xf32>) -> tensor<10x16xf32>
  %loss, %n, %lse = model.cross_entropy %l, %labels, %mask : (tensor<10x16xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}

// -----

// Tests that attention with dropout passes its key, p and op id to attention_grad (the backward
// regenerates the mask) and that the key gets no gradient.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[RNG:[^:]+]]: tensor<3xi64> {model.input = "rng"}
// CHECK: %[[O:.+]], %[[LSE:.+]] = model.attention %[[Q:[^,]+]], %[[Q]], %[[Q]], %[[RNG]] {dropout = 1.000000e-01 : f64, op_id = 7 : i64}
// CHECK: model.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[O]], %[[LSE]], %{{.+}}, %[[RNG]] {dropout = 1.000000e-01 : f64, op_id = 7 : i64}
func.func @forward(
    %wqkv: tensor<16x8xf32> {model.param = @qkv},
    %x: tensor<2x5x8xf32> {model.input = "x"},
    %rng: tensor<3xi64> {model.input = "rng"},
    %labels: tensor<10xi32> {model.input = "labels"},
    %mask: tensor<10xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %qkv = model.linear %x, %wqkv : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %q = model.reshape %qkv : (tensor<2x5x16xf32>) -> tensor<2x5x4x4xf32>
  %o, %lse0 = model.attention %q, %q, %q, %rng {dropout = 0.1 : f64, op_id = 7 : i64} : (tensor<2x5x4x4xf32>, tensor<2x5x4x4xf32>, tensor<2x5x4x4xf32>, tensor<3xi64>) -> (tensor<2x5x4x4xf32>, tensor<2x4x5xf32>)
  %l = model.reshape %o : (tensor<2x5x4x4xf32>) -> tensor<10x16xf32>
  %loss, %n, %lse = model.cross_entropy %l, %labels, %mask : (tensor<10x16xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}

// -----

// Tests the VJP rules of a GPT-style MLP block: layer_norm, linear with bias (bias_grad), gelu,
// swiglu, dropout (the same mask: p and op_id carried over) and the residual add, whose input
// gradient is the sum of the residual path and the block path.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: -> (tensor<f32>, tensor<f32>, tensor<8xf32> {model.grad_of = @ln.weight}, tensor<8xf32> {model.grad_of = @ln.bias}, tensor<16x8xf32> {model.grad_of = @fc1.weight}, tensor<16xf32> {model.grad_of = @fc1.bias})
// CHECK: %[[DROP:.+]] = model.dropout
// CHECK: model.fill {{.*}}model.loss_seed
// CHECK: %[[DDROP:.+]] = model.dropout_grad %{{.+}}, %{{.+}} {op_id = 5 : i64, p = 1.250000e-01 : f64}
// CHECK: %[[DG:.+]] = model.swiglu_grad %[[DDROP]], %{{.+}} : (tensor<2x5x8xf32>, tensor<2x5x16xf32>) -> tensor<2x5x16xf32>
// CHECK: %[[DF:.+]] = model.gelu_grad %[[DG]], %{{.+}} {approximate = true}
// CHECK: %[[DN:.+]] = model.linear_grad_input %[[DF]]
// CHECK: %[[DW1:.+]] = model.linear_grad_weight %[[DF]]
// CHECK: %[[DB1:.+]] = model.bias_grad %[[DF]] : (tensor<2x5x16xf32>) -> tensor<16xf32>
// CHECK: %{{.+}}, %[[DLNW:.+]], %[[DLNB:.+]] = model.layer_norm_grad %[[DN]], %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} :
// CHECK: return %{{.+}}, %{{.+}}, %[[DLNW]], %[[DLNB]], %[[DW1]], %[[DB1]] :
func.func @forward(
    %lnw: tensor<8xf32> {model.param = @ln.weight},
    %lnb: tensor<8xf32> {model.param = @ln.bias},
    %w1: tensor<16x8xf32> {model.param = @fc1.weight},
    %b1: tensor<16xf32> {model.param = @fc1.bias},
    %x: tensor<2x5x8xf32> {model.input = "x"},
    %rng: tensor<3xi64> {model.input = "rng"},
    %labels: tensor<10xi32> {model.input = "labels"},
    %mask: tensor<10xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %n0, %mean, %rstd = model.layer_norm %x, %lnw, %lnb : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>, tensor<10xf32>)
  %f = model.linear %n0, %w1, %b1 : (tensor<2x5x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %g = model.gelu %f {approximate = true} : (tensor<2x5x16xf32>) -> tensor<2x5x16xf32>
  %s = model.swiglu %g : (tensor<2x5x16xf32>) -> tensor<2x5x8xf32>
  %d = model.dropout %s, %rng {p = 0.125 : f64, op_id = 5 : i64} : (tensor<2x5x8xf32>, tensor<3xi64>) -> tensor<2x5x8xf32>
  %r = model.add %x, %d : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %l = model.reshape %r : (tensor<2x5x8xf32>) -> tensor<10x8xf32>
  %loss, %n, %lse = model.cross_entropy %l, %labels, %mask : (tensor<10x8xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}

// -----

// Tests that the pass needs the forward function.
// expected-error@+1 {{trainc-autodiff: no function @forward to differentiate}}
module {
  func.func @model() {
    return
  }
}

// -----

// Tests that the pass does not overwrite an existing function.
// expected-error@+1 {{trainc-autodiff: @forward_backward already exists}}
module {
  func.func @forward(%l: tensor<f32> {model.input = "l"}) -> (tensor<f32>, tensor<f32>) {
    return %l, %l : tensor<f32>, tensor<f32>
  }
  func.func @forward_backward() {
    return
  }
}

// -----

// Tests that the forward function returns (loss_sum, num_tokens).
// expected-error@+1 {{'func.func' op must return (loss_sum, num_tokens), returns 1 values}}
func.func @forward(%l: tensor<f32> {model.input = "l"}) -> tensor<f32> {
  return %l : tensor<f32>
}

// -----

// Tests that an op without a VJP rule on the gradient path is reported.
func.func @forward(%w: tensor<4x8xf32> {model.param = @w}, %dy: tensor<2x4xf32> {model.input = "dy"}, %labels: tensor<2xi32> {model.input = "labels"}, %mask: tensor<2xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  // expected-error@+1 {{'model.linear_grad_input' op has no VJP rule (VJPOpInterface) but a gradient flows into it}}
  %x = model.linear_grad_input %dy, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %loss, %n, %lse = model.cross_entropy %x, %labels, %mask : (tensor<2x8xf32>, tensor<2xi32>, tensor<2xf32>) -> (tensor<f32>, tensor<f32>, tensor<2xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}

// OUTPUT: func.func @forward(
// OUTPUT: func.func @step_grad(
// OUTPUT-SAME: {model.grad_of = @embedding.word_embeddings.weight}, tensor<8xf32> {model.grad_of = @decoder.final_layernorm.weight}, tensor<11x8xf32> {model.grad_of = @output_layer.weight})
// OUTPUT-NOT: @forward_backward

// FUNCTION: error: trainc-autodiff: no function @model to differentiate
