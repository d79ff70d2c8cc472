// trainc-shard's refusals under sequence parallelism (run by ../trainc-shard-sp.mlir with
// tp = 2 and sequence-parallel = true).

// The vocab-parallel embedding is reduce-scattered along the sequence: 5 positions over 2 ranks.
mesh.mesh @mesh(shape = 2x1x1x1x1) {trainc.axis_names = ["tp", "cp", "ep", "dp", "pp"]}
model.parameter @embedding.word_embeddings.weight {init = "normal", init_std = 0.02 : f64} : tensor<12x8xf32>
func.func @forward(%t: tensor<12x8xf32> {model.param = @embedding.word_embeddings.weight}, %ids: tensor<2x5xi32>) -> tensor<2x5x8xf32> {
  // expected-error @+1 {{sequence parallelism: result 'tensor<2x5x8xf32>' is not a [b, s, h] activation with s divisible by the tensor-parallel size 2}}
  %x = model.embedding %t, %ids : (tensor<12x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  return %x : tensor<2x5x8xf32>
}

// -----
// Hidden dropout on a hidden-dim shard (a column-parallel output) is refused: only sequence
// shards key their mask on the global element.
mesh.mesh @mesh(shape = 2x1x1x1x1) {trainc.axis_names = ["tp", "cp", "ep", "dp", "pp"]}
model.parameter @"decoder.layers.0.self_attention.linear_q.weight" {init = "normal", init_std = 0.02 : f64} : tensor<6x4xf32>
func.func @forward(%w: tensor<6x4xf32> {model.param = @"decoder.layers.0.self_attention.linear_q.weight"}, %x: tensor<2x4x4xf32>, %rng: tensor<3xi64>) -> tensor<2x4x6xf32> {
  %y = model.linear %x, %w : (tensor<2x4x4xf32>, tensor<6x4xf32>) -> tensor<2x4x6xf32>
  // expected-error @+1 {{dropout on a tensor-parallel shard other than a sequence shard is not supported yet}}
  %d = model.dropout %y, %rng {p = 0.1 : f64, op_id = 1 : i64} : (tensor<2x4x6xf32>, tensor<3xi64>) -> tensor<2x4x6xf32>
  return %d : tensor<2x4x6xf32>
}
