// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// RUN: trainc-opt %S/collectives.mlir -split-input-file -trainc-autodiff -trainc-grad-accumulate -trainc-schedule="eval=false" -trainc-optimizer-expand -trainc-grad-buckets -trainc-lower-to-rt -o /dev/null
// RUN: %not trainc-opt %S/Inputs/collective-lowering-errors.mlir -split-input-file -trainc-lower-to-rt 2>&1 | FileCheck %s --check-prefix=LOWER
// REQUIRES: compiler

// Tests that model.copy_to_region names a mesh.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'model.copy_to_region' op names mesh @nope, which is not a mesh.mesh symbol}}
  %y = model.copy_to_region %x on @nope mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that its axes are axes of the mesh.
mesh.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'model.copy_to_region' op mesh axis 2 is not one of the 2 axes of @mesh}}
  %y = model.copy_to_region %x on @mesh mesh_axes = [2] : tensor<4xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that an axis appears once.
mesh.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'model.copy_to_region' op mesh axis 1 appears twice}}
  %y = model.copy_to_region %x on @mesh mesh_axes = [1, 1] : tensor<4xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that the result has the input's type.
mesh.mesh @mesh(shape = 2x2)
func.func @f(%x: tensor<4xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'model.copy_to_region' op result type 'tensor<2xf32>' differs from the input type 'tensor<4xf32>'}}
  %y = model.copy_to_region %x on @mesh mesh_axes = [0] : tensor<4xf32> -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// LOWER: error: 'mesh.all_reduce' op cannot be lowered to rt: a collective on 2 mesh axes cannot be lowered yet (one axis per collective)
// LOWER: error: 'mesh.all_reduce' op cannot be lowered to rt: mesh axis 0 of @m has no name (trainc.axis_names)
// LOWER: error: 'mesh.reduce_scatter' op cannot be lowered to rt: only sum reduce-scatters can be lowered yet
