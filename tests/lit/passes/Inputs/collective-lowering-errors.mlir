// Collectives the lowering refuses, one per split (tests/lit/passes/collectives-invalid.mlir).
mesh.mesh @mesh(shape = 2x1x1x2x1) {trainc.axis_names = ["tp", "cp", "ep", "dp", "pp"]}
func.func @forward_backward(%x: tensor<2x4xf32> {model.input = "x"}) attributes {sched.stage} {
  %g = mesh.all_reduce %x on @mesh mesh_axes = [0, 3] : tensor<2x4xf32> -> tensor<2x4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}

// -----

mesh.mesh @m(shape = 2)
func.func @forward_backward(%x: tensor<2x4xf32> {model.input = "x"}) attributes {sched.stage} {
  %g = mesh.all_reduce %x on @m mesh_axes = [0] : tensor<2x4xf32> -> tensor<2x4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}

// -----

mesh.mesh @mesh(shape = 2x1x1x2x1) {trainc.axis_names = ["tp", "cp", "ep", "dp", "pp"]}
func.func @forward_backward(%x: tensor<4x4xf32> {model.input = "x"}) attributes {sched.stage} {
  %g = mesh.reduce_scatter %x on @mesh mesh_axes = [3] reduction = <max> scatter_axis = 0 : tensor<4x4xf32> -> tensor<2x4xf32>
  return
}
func.func @train_step() attributes {sched.iteration} {
  sched.microbatch @forward_backward {index = 0 : i64}
  return
}
