// Tests the verifiers of sched.async and sched.collective_wait.
mesh.mesh @mesh(shape = 2)
func.func @no_wait(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{is marked sched.async but its result is not used by exactly one sched.collective_wait (it has 1 uses)}}
  %r = mesh.all_reduce %x on @mesh mesh_axes = [0] {sched.async} : tensor<4xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

mesh.mesh @mesh(shape = 2)
func.func @not_async(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = mesh.all_reduce %x on @mesh mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
  // expected-error@+1 {{waits on a value that is not the result of a collective marked sched.async}}
  %w = sched.collective_wait %r : tensor<4xf32>
  return %w : tensor<4xf32>
}

// -----

func.func @not_a_collective(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{attribute 'sched.async' must be a unit attribute on a mesh.all_reduce, mesh.reduce_scatter or mesh.all_gather}}
  %r = model.add %x, %x {sched.async} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
