// RUN: trainc-opt %s -trainc-autodiff -trainc-recompute=recompute=full:uniform:2 | FileCheck %s --check-prefix=UNIFORM
// RUN: trainc-opt %s -trainc-autodiff -trainc-recompute=recompute=full:block:1 | FileCheck %s --check-prefix=BLOCK
// RUN: trainc-opt %s -trainc-autodiff -trainc-recompute=recompute=full:uniform:1 | trainc-opt -trainc-phase-schedule | FileCheck %s --check-prefix=STASH
// RUN: trainc-opt %s -trainc-autodiff | trainc-opt -trainc-phase-schedule | FileCheck %s --check-prefix=NONE
// RUN: trainc-opt %s -trainc-autodiff | trainc-opt '-trainc-phase-schedule=recompute=full:block:2' | FileCheck %s --check-prefix=PHASE
// RUN: %not trainc-opt %s -trainc-autodiff -trainc-recompute=recompute=full:sometimes:1 2>&1 | FileCheck %s --check-prefix=METHOD
// RUN: %not trainc-opt %s -trainc-autodiff -trainc-recompute=recompute=full:uniform:0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: %not trainc-opt %s -trainc-autodiff -trainc-recompute=recompute=full:uniform:4 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: %not trainc-opt %s -trainc-autodiff -trainc-recompute=recompute=partial 2>&1 | FileCheck %s --check-prefix=GRANULARITY
// RUN: %not trainc-opt %s -trainc-autodiff -trainc-recompute=recompute=full:block 2>&1 | FileCheck %s --check-prefix=GRANULARITY2
// RUN: %not trainc-opt %s -trainc-recompute-selective=recompute=selective:core_attn,moe 2>&1 | FileCheck %s --check-prefix=MODULE
// RUN: %not trainc-opt %s -trainc-recompute-selective=recompute=selective:mlp 2>&1 | FileCheck %s --check-prefix=NOMLP
// REQUIRES: compiler

// Tests trainc-recompute (Megatron's full recompute) on three layers. uniform:2 makes groups
// {0, 1} and {2}: the forward calls the plain @layer (no residuals) tagged "checkpoint" with its
// group, and right before each group's first backward use (the @layer.bwd of its last layer) the
// group's layers are replayed as @layer.fwd calls from the group's input (the stashed value),
// tagged "replay"; every backward use then reads the replayed values. The dropout key of a replay
// is the layer's own (model.rng_offset), so it draws the forward's mask.
// UNIFORM-LABEL: func.func @forward_backward(
// UNIFORM: %[[X0:.+]] = model.embedding
// UNIFORM: %[[K0:.+]] = model.rng_offset %{{.+}} {offset = 0 : i64}
// UNIFORM: %[[X1:.+]] = call @layer(%[[X0]], {{.+}}, %[[K0]]) {model.layer_index = 0 : i64, model.recompute = "checkpoint", model.recompute_group = 0 : i64}
// UNIFORM: %[[K1:.+]] = model.rng_offset %{{.+}} {offset = 1 : i64}
// UNIFORM: %[[X2:.+]] = call @layer(%[[X1]], {{.+}}, %[[K1]]) {model.layer_index = 1 : i64, model.recompute = "checkpoint", model.recompute_group = 0 : i64}
// UNIFORM: %[[K2:.+]] = model.rng_offset %{{.+}} {offset = 2 : i64}
// UNIFORM: %[[X3:.+]] = call @layer(%[[X2]], {{.+}}, %[[K2]]) {model.layer_index = 2 : i64, model.recompute = "checkpoint", model.recompute_group = 1 : i64}
// UNIFORM: model.fill {{.*}}model.loss_seed
// UNIFORM: model.linear_grad_weight %{{.+}}, %[[X3]]
// UNIFORM: %[[R2:.+]]:3 = call @layer.fwd(%[[X2]], {{.+}}, %[[K2]]) {model.layer_index = 2 : i64, model.recompute = "replay", model.recompute_group = 1 : i64}
// UNIFORM-NEXT: %[[B2:.+]]:3 = call @layer.bwd(%[[X2]], {{.+}}, %[[K2]], %[[R2]]#1, %[[R2]]#2, %{{.+}}) {model.layer_index = 2 : i64}
// UNIFORM-NEXT: %[[R0:.+]]:3 = call @layer.fwd(%[[X0]], {{.+}}, %[[K0]]) {model.layer_index = 0 : i64, model.recompute = "replay", model.recompute_group = 0 : i64}
// UNIFORM-NEXT: %[[R1:.+]]:3 = call @layer.fwd(%[[R0]]#0, {{.+}}, %[[K1]]) {model.layer_index = 1 : i64, model.recompute = "replay", model.recompute_group = 0 : i64}
// UNIFORM-NEXT: %[[B1:.+]]:3 = call @layer.bwd(%[[R0]]#0, {{.+}}, %[[K1]], %[[R1]]#1, %[[R1]]#2, %[[B2]]#0) {model.layer_index = 1 : i64}
// UNIFORM-NEXT: call @layer.bwd(%[[X0]], {{.+}}, %[[K0]], %[[R0]]#1, %[[R0]]#2, %[[B1]]#0) {model.layer_index = 0 : i64}

// block:1 recomputes the first layer only; the others keep their residuals.
// BLOCK-LABEL: func.func @forward_backward(
// BLOCK: call @layer({{.+}}) {model.layer_index = 0 : i64, model.recompute = "checkpoint", model.recompute_group = 0 : i64}
// BLOCK: call @layer.fwd({{.+}}) {model.layer_index = 1 : i64}
// BLOCK: call @layer.fwd({{.+}}) {model.layer_index = 2 : i64}
// BLOCK: call @layer.bwd({{.+}}) {model.layer_index = 2 : i64}
// BLOCK: call @layer.bwd({{.+}}) {model.layer_index = 1 : i64}
// BLOCK: %[[R:.+]]:3 = call @layer.fwd({{.+}}) {model.layer_index = 0 : i64, model.recompute = "replay", model.recompute_group = 0 : i64}
// BLOCK-NEXT: call @layer.bwd({{.+}}, %[[R]]#1, %[[R]]#2, %{{.+}}) {model.layer_index = 0 : i64}
// BLOCK-NOT: model.recompute

// The stash (the forward unit's results) holds only each layer's input (plus the last layer's
// output and the loss's residuals, which the head's backward reads); without recompute it holds
// every layer's residuals (the norm output and rstd).
// STASH-LABEL: func.func @forward_backward.forward(
// STASH: return %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %lse : tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x11xf32>, tensor<10xf32>
// STASH-LABEL: func.func @forward_backward.backward(
// STASH-COUNT-3: call @layer.fwd({{.+}}model.recompute = "replay"
// NONE-LABEL: func.func @forward_backward.forward(
// NONE: return {{.+}} : tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<10xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<10xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<10xf32>, tensor<2x5x11xf32>, tensor<10xf32>
// NONE-NOT: model.recompute

// trainc-phase-schedule runs the pass first and passes its option on.
// PHASE-LABEL: func.func @forward_backward.forward(
// PHASE: call @layer({{.+}}) {model.layer_index = 0 : i64, model.recompute = "checkpoint", model.recompute_group = 0 : i64}
// PHASE: call @layer({{.+}}) {model.layer_index = 1 : i64, model.recompute = "checkpoint", model.recompute_group = 1 : i64}
// PHASE: call @layer.fwd({{.+}}) {model.layer_index = 2 : i64}

// Refusals name the value and what was expected.
// METHOD: error: trainc-recompute: recompute = "full:sometimes:1": method 'sometimes' is not one of uniform, block
// ZERO: error: trainc-recompute: recompute = "full:uniform:0": num_layers 0, expected at least 1
// RANGE: error: 'func.func' op trainc-recompute: recompute = "full:uniform:4": num_layers 4 exceeds the 3 layer calls of @forward_backward
// GRANULARITY: error: trainc-recompute: recompute = "partial", expected none, selective, selective:M,... (M: core_attn, mlp), full:uniform:N or full:block:N
// GRANULARITY2: error: trainc-recompute: recompute = "full:block", expected none, selective, selective:M,... (M: core_attn, mlp), full:uniform:N or full:block:N
// MODULE: error: trainc-recompute-selective: recompute = "selective:core_attn,moe": module 'moe' is not one of core_attn, mlp
// NOMLP: error: 'func.func' op trainc-recompute-selective: recompute = "selective:mlp": @layer has no mlp.linear_fc1 -> ... -> mlp.linear_fc2 chain
func.func private @layer(%x: tensor<2x5x8xf32>, %w: tensor<8x8xf32> {model.layer_param = "w"}, %ln: tensor<8xf32>, %key: tensor<4xi64>) -> tensor<2x5x8xf32> attributes {model.layer = "layers"} {
  %h, %rstd = model.rms_norm %x, %ln : (tensor<2x5x8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>)
  %y = model.linear %h, %w : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %d = model.dropout %y, %key {p = 1.0e-01 : f64, op_id = 1 : i64} : (tensor<2x5x8xf32>, tensor<4xi64>) -> tensor<2x5x8xf32>
  %o = model.add %x, %d : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return %o : tensor<2x5x8xf32>
}
func.func @forward(
    %wte: tensor<11x8xf32> {model.param = @wte, model.init = "normal", model.init_std = 0.02 : f64},
    %w0: tensor<8x8xf32> {model.param = @layers.0.w, model.init = "normal", model.init_std = 0.02 : f64},
    %ln0: tensor<8xf32> {model.param = @layers.0.ln, model.init = "ones"},
    %w1: tensor<8x8xf32> {model.param = @layers.1.w, model.init = "normal", model.init_std = 0.02 : f64},
    %ln1: tensor<8xf32> {model.param = @layers.1.ln, model.init = "ones"},
    %w2: tensor<8x8xf32> {model.param = @layers.2.w, model.init = "normal", model.init_std = 0.02 : f64},
    %ln2: tensor<8xf32> {model.param = @layers.2.ln, model.init = "ones"},
    %tokens: tensor<2x5xi32> {model.input = "tokens"},
    %labels: tensor<10xi32> {model.input = "labels"},
    %mask: tensor<10xf32> {model.input = "loss_mask"},
    %rng: tensor<3xi64> {model.input = "rng"}) -> (tensor<f32>, tensor<f32>) {
  %x = model.embedding %wte, %tokens : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  %k0 = model.rng_offset %rng {offset = 0 : i64} : (tensor<3xi64>) -> tensor<4xi64>
  %x1 = call @layer(%x, %w0, %ln0, %k0) {model.layer_index = 0 : i64} : (tensor<2x5x8xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<4xi64>) -> tensor<2x5x8xf32>
  %k1 = model.rng_offset %rng {offset = 1 : i64} : (tensor<3xi64>) -> tensor<4xi64>
  %x2 = call @layer(%x1, %w1, %ln1, %k1) {model.layer_index = 1 : i64} : (tensor<2x5x8xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<4xi64>) -> tensor<2x5x8xf32>
  %k2 = model.rng_offset %rng {offset = 2 : i64} : (tensor<3xi64>) -> tensor<4xi64>
  %x3 = call @layer(%x2, %w2, %ln2, %k2) {model.layer_index = 2 : i64} : (tensor<2x5x8xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<4xi64>) -> tensor<2x5x8xf32>
  %logits = model.linear %x3, %wte : (tensor<2x5x8xf32>, tensor<11x8xf32>) -> tensor<2x5x11xf32>
  %l2 = model.reshape %logits : (tensor<2x5x11xf32>) -> tensor<10x11xf32>
  %loss, %n, %lse = model.cross_entropy %l2, %labels, %mask : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}
