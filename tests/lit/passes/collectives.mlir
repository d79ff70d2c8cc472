// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-autodiff | FileCheck %s
// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-autodiff -trainc-grad-accumulate -trainc-schedule="eval=false" -trainc-optimizer-expand -trainc-grad-buckets -trainc-lower-to-rt | FileCheck %s --check-prefix=RT
// REQUIRES: compiler

// Tests the VJP rules of the tensor collectives on mesh axes: a collective's backward is its
// conjugate. Megatron's f (model.copy_to_region: identity forward) gets an all-reduce of the
// gradient; g (mesh.all_reduce) gets model.copy_to_region, an identity; all_gather gets a
// reduce_scatter on the same axis and dimension, and reduce_scatter an all_gather.
// CHECK-LABEL: func.func @forward_backward(
// CHECK: %[[C:.+]] = model.copy_to_region %[[X:.+]] on @mesh mesh_axes = [0]
// CHECK: %[[Y:.+]] = model.linear %[[C]], %[[W:[^ ]+]]
// CHECK: %[[R:.+]] = mesh.all_reduce %[[Y]] on @mesh mesh_axes = [0] : tensor<2x5x8xf32> -> tensor<2x5x8xf32>
// CHECK: %[[S:.+]] = mesh.reduce_scatter %[[R]] on @mesh mesh_axes = [3] scatter_axis = 0 : tensor<2x5x8xf32> -> tensor<1x5x8xf32>
// CHECK: %[[G:.+]] = mesh.all_gather %[[S]] on @mesh mesh_axes = [3] gather_axis = 0 : tensor<1x5x8xf32> -> tensor<2x5x8xf32>
// The backward, in reverse order.
// CHECK: %[[DS:.+]] = mesh.reduce_scatter %{{.+}} on @mesh mesh_axes = [3] scatter_axis = 0 : tensor<2x5x8xf32> -> tensor<1x5x8xf32>
// CHECK: %[[DR:.+]] = mesh.all_gather %[[DS]] on @mesh mesh_axes = [3] gather_axis = 0 : tensor<1x5x8xf32> -> tensor<2x5x8xf32>
// CHECK: %[[DY:.+]] = model.copy_to_region %[[DR]] on @mesh mesh_axes = [0]
// CHECK: %[[DC:.+]] = model.linear_grad_input %[[DY]], %[[W]]
// CHECK: %{{.+}} = mesh.all_reduce %[[DC]] on @mesh mesh_axes = [0] : tensor<2x5x8xf32> -> tensor<2x5x8xf32>
// The lowering: sync collectives on the groups of the named axes; copy_to_region is no kernel.
// RT-LABEL: func.func @forward_backward(
// RT: rt.collective all_reduce "tp"
// RT: rt.collective reduce_scatter "dp"
// RT: rt.collective all_gather "dp"
// RT: rt.collective reduce_scatter "dp"
// RT: rt.collective all_gather "dp"
// RT: rt.collective all_reduce "tp"
mesh.mesh @mesh(shape = 2x1x1x2x1) {trainc.axis_names = ["tp", "cp", "ep", "dp", "pp"]}
func.func @forward(
    %w: tensor<8x8xf32> {model.param = @w},
    %wout: tensor<11x8xf32> {model.param = @wout},
    %x: tensor<2x5x8xf32> {model.input = "x"},
    %labels: tensor<10xi32> {model.input = "labels"},
    %mask: tensor<10xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %c = model.copy_to_region %x on @mesh mesh_axes = [0] : tensor<2x5x8xf32> -> tensor<2x5x8xf32>
  %y = model.linear %c, %w : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %r = mesh.all_reduce %y on @mesh mesh_axes = [0] : tensor<2x5x8xf32> -> tensor<2x5x8xf32>
  %s = mesh.reduce_scatter %r on @mesh mesh_axes = [3] scatter_axis = 0 : tensor<2x5x8xf32> -> tensor<1x5x8xf32>
  %g = mesh.all_gather %s on @mesh mesh_axes = [3] gather_axis = 0 : tensor<1x5x8xf32> -> tensor<2x5x8xf32>
  %logits = model.linear %g, %wout : (tensor<2x5x8xf32>, tensor<11x8xf32>) -> tensor<2x5x11xf32>
  %l2 = model.reshape %logits : (tensor<2x5x11xf32>) -> tensor<10x11xf32>
  %loss, %n, %lse = model.cross_entropy %l2, %labels, %mask : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}
