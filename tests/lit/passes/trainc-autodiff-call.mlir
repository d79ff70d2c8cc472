// RUN: trainc-opt %s -trainc-autodiff | FileCheck %s
// RUN: trainc-opt %s -trainc-compile | FileCheck %s --check-prefix=LOWER
// RUN: %not trainc-opt %S/Inputs/autodiff-call-invalid.mlir -split-input-file -trainc-autodiff 2>&1 | FileCheck %s --check-prefix=INVALID
// REQUIRES: compiler

// Tests autodiff through func.call: a layer function called twice is split once into @layer.fwd
// (its result, then the residuals its backward needs: the norm output and rstd) and @layer.bwd
// (the arguments it reads again, the residuals, the result's gradient -> the gradients of the
// float arguments). Views (model.reshape) are recomputed in the backward instead of stashed, and
// the dropout key is an argument (no gradient).
// CHECK-LABEL: func.func private @layer.fwd(
// CHECK-SAME: -> (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<10xf32>) attributes {model.derivative = "forward", model.layer = "layers"}
// CHECK: %[[H:.+]], %[[RSTD:.+]] = model.rms_norm
// CHECK: %[[Y:.+]] = model.add
// CHECK: return %[[Y]], %[[H]], %[[RSTD]]
// CHECK-LABEL: func.func private @layer.bwd(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x5x8xf32>, %[[W:[^:]+]]: tensor<8x8xf32> {model.layer_param = "w"}, %[[LN:[^:]+]]: tensor<8xf32>, %[[KEY:[^:]+]]: tensor<4xi64>, %[[RH:[^:]+]]: tensor<2x5x8xf32>, %[[RRSTD:[^:]+]]: tensor<10xf32>, %[[DY:[^:]+]]: tensor<2x5x8xf32>)
// CHECK-SAME: -> (tensor<2x5x8xf32>, tensor<8x8xf32>, tensor<8xf32>) attributes {model.derivative = "backward"
// CHECK: model.reshape %[[DY]]
// CHECK: %[[DD:.+]] = model.dropout_grad %{{.+}}, %[[KEY]] {op_id = 1 : i64
// CHECK: %[[DH:.+]] = model.linear_grad_input %[[DD]], %[[W]]
// CHECK: %[[DW:.+]] = model.linear_grad_weight %[[DD]], %[[RH]]
// CHECK: %[[DXN:.+]], %[[DLN:.+]] = model.rms_norm_grad %[[DH]], %[[X]], %[[LN]], %[[RRSTD]]
// CHECK: %[[DX:.+]] = model.add %[[DY]], %[[DXN]]
// CHECK: return %[[DX]], %[[DW]], %[[DLN]]
// The original stays for forward-only callers.
// CHECK-LABEL: func.func private @layer(
// CHECK-LABEL: func.func @forward_backward(
// CHECK: %[[X0:.+]] = model.embedding
// CHECK: %[[K0:.+]] = model.rng_offset %{{.+}} {offset = 0 : i64}
// CHECK: %[[L0:.+]]:3 = call @layer.fwd(%[[X0]], %{{.+}}, %{{.+}}, %[[K0]]) {model.layer_index = 0 : i64}
// CHECK: %[[K1:.+]] = model.rng_offset %{{.+}} {offset = 1 : i64}
// CHECK: %[[L1:.+]]:3 = call @layer.fwd(%[[L0]]#0, %{{.+}}, %{{.+}}, %[[K1]]) {model.layer_index = 1 : i64}
// CHECK: model.fill {{.*}}model.loss_seed
// CHECK: %[[D1:.+]] = model.linear_grad_input
// CHECK: %[[B1:.+]]:3 = call @layer.bwd(%[[L0]]#0, %{{.+}}, %{{.+}}, %[[K1]], %[[L1]]#1, %[[L1]]#2, %[[D1]]) {model.layer_index = 1 : i64}
// CHECK: %[[B0:.+]]:3 = call @layer.bwd(%[[X0]], %{{.+}}, %{{.+}}, %[[K0]], %[[L0]]#1, %[[L0]]#2, %[[B1]]#0) {model.layer_index = 0 : i64}
// CHECK: model.embedding_grad %{{.+}}, %[[B0]]#0
// CHECK: return {{.+}}, %[[B0]]#1, %[[B0]]#2, %[[B1]]#1, %[[B1]]#2

// Tests the lowering: each called function is lowered once in destination-passing style (one
// memref per argument, then one per result, {rt.result = k}), and each call passes its caller's
// buffers; the forward unit writes the residuals of each call straight into its stash slot.
// LOWER-LABEL: func.func @layer.fwd(
// LOWER-SAME: %{{[^:]+}}: memref<2x5x8xf32>, %{{[^:]+}}: memref<8x8xf32>, %{{[^:]+}}: memref<8xf32>, %{{[^:]+}}: memref<4xi64>, %{{[^:]+}}: memref<2x5x8xf32> {rt.result = 0 : i64}, %{{[^:]+}}: memref<2x5x8xf32> {rt.result = 1 : i64}, %{{[^:]+}}: memref<10xf32> {rt.result = 2 : i64})
// LOWER-SAME: attributes {rt.function, rt.layer = "layers"}
// LOWER: rt.kernel "rms_norm"
// LOWER: rt.kernel "dropout"
// LOWER-LABEL: func.func @layer.bwd(
// LOWER-LABEL: func.func @forward_backward.forward(
// LOWER: rt.kernel "rng_offset"
// LOWER: %[[Y:.+]] = rt.view %arg4[{{[0-9]+}}] : memref<554xf32> to memref<2x5x8xf32>
// LOWER: %[[RH:.+]] = rt.view %arg4[{{[0-9]+}}] : memref<554xf32> to memref<2x5x8xf32>
// LOWER: %[[RS:.+]] = rt.view %arg4[{{[0-9]+}}] : memref<554xf32> to memref<10xf32>
// LOWER: call @layer.fwd({{.+}}, %[[Y]], %[[RH]], %[[RS]]) {rt.layer_index = 0 : i64}
// LOWER: call @layer.fwd({{.+}}) {rt.layer_index = 1 : i64}
// LOWER-LABEL: func.func @forward_backward.backward(
// LOWER: call @layer.bwd({{.+}}) {rt.layer_index = 1 : i64}
// LOWER: call @layer.bwd({{.+}}) {rt.layer_index = 0 : i64}

// INVALID: error: 'func.call' op calls @external, which has no body to differentiate
// INVALID: error: 'func.func' op @loop calls itself; autodiff needs an acyclic call graph
func.func private @layer(%x: tensor<2x5x8xf32>, %w: tensor<8x8xf32> {model.layer_param = "w"}, %ln: tensor<8xf32>, %key: tensor<4xi64>) -> tensor<2x5x8xf32> attributes {model.layer = "layers"} {
  %h, %rstd = model.rms_norm %x, %ln : (tensor<2x5x8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>)
  %y = model.linear %h, %w : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %d = model.dropout %y, %key {p = 1.0e-01 : f64, op_id = 1 : i64} : (tensor<2x5x8xf32>, tensor<4xi64>) -> tensor<2x5x8xf32>
  %r = model.reshape %d : (tensor<2x5x8xf32>) -> tensor<10x8xf32>
  %r2 = model.reshape %r : (tensor<10x8xf32>) -> tensor<2x5x8xf32>
  %o = model.add %x, %r2 : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return %o : tensor<2x5x8xf32>
}
func.func @forward(
    %wte: tensor<11x8xf32> {model.param = @wte},
    %w0: tensor<8x8xf32> {model.param = @layers.0.w},
    %ln0: tensor<8xf32> {model.param = @layers.0.ln},
    %w1: tensor<8x8xf32> {model.param = @layers.1.w},
    %ln1: tensor<8xf32> {model.param = @layers.1.ln},
    %tokens: tensor<2x5xi32> {model.input = "tokens"},
    %labels: tensor<10xi32> {model.input = "labels"},
    %mask: tensor<10xf32> {model.input = "loss_mask"},
    %rng: tensor<3xi64> {model.input = "rng"}) -> (tensor<f32>, tensor<f32>) {
  %x = model.embedding %wte, %tokens : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  %k0 = model.rng_offset %rng {offset = 0 : i64} : (tensor<3xi64>) -> tensor<4xi64>
  %x1 = call @layer(%x, %w0, %ln0, %k0) {model.layer_index = 0 : i64} : (tensor<2x5x8xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<4xi64>) -> tensor<2x5x8xf32>
  %k1 = model.rng_offset %rng {offset = 1 : i64} : (tensor<3xi64>) -> tensor<4xi64>
  %x2 = call @layer(%x1, %w1, %ln1, %k1) {model.layer_index = 1 : i64} : (tensor<2x5x8xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<4xi64>) -> tensor<2x5x8xf32>
  %logits = model.linear %x2, %wte : (tensor<2x5x8xf32>, tensor<11x8xf32>) -> tensor<2x5x11xf32>
  %l2 = model.reshape %logits : (tensor<2x5x11xf32>) -> tensor<10x11xf32>
  %loss, %n, %lse = model.cross_entropy %l2, %labels, %mask : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}
