// trainc-shard's refusals (run by ../trainc-shard.mlir with tp = 3).

// A dim not divisible by tp names the parameter and the values.
mesh.mesh @mesh(shape = 3x1x1x1x1) {trainc.axis_names = ["tp", "cp", "ep", "dp", "pp"]}
// expected-error @+1 {{parameter 'decoder.layers.0.self_attention.linear_q.weight': dim 0 of extent 8 is not divisible by the tensor-parallel size 3}}
model.parameter @"decoder.layers.0.self_attention.linear_q.weight" {init = "normal", init_std = 0.02 : f64} : tensor<8x4xf32>
func.func @forward(%w: tensor<8x4xf32> {model.param = @"decoder.layers.0.self_attention.linear_q.weight"}, %x: tensor<2x4xf32>) -> tensor<2x8xf32> {
  %y = model.linear %x, %w : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----
// The mesh's tp axis must have the plan's size.
// expected-error @+1 {{trainc-shard: tp = 3 needs a mesh.mesh @mesh whose axis 0 (tp) has size 3}}
module {
  mesh.mesh @mesh(shape = 2x1x1x1x1) {trainc.axis_names = ["tp", "cp", "ep", "dp", "pp"]}
}

// -----
// A split value may not flow into an op whose rule keeps that loop whole: a column-parallel
// output into a norm over the hidden dim.
mesh.mesh @mesh(shape = 3x1x1x1x1) {trainc.axis_names = ["tp", "cp", "ep", "dp", "pp"]}
model.parameter @"decoder.layers.0.self_attention.linear_q.weight" {init = "normal", init_std = 0.02 : f64} : tensor<6x4xf32>
model.parameter @"decoder.final_layernorm.weight" {init = "ones", no_weight_decay} : tensor<6xf32>
func.func @forward(%w: tensor<6x4xf32> {model.param = @"decoder.layers.0.self_attention.linear_q.weight"}, %g: tensor<6xf32> {model.param = @"decoder.final_layernorm.weight"}, %x: tensor<2x4xf32>) -> tensor<2x6xf32> {
  %y = model.linear %x, %w : (tensor<2x4xf32>, tensor<6x4xf32>) -> tensor<2x6xf32>
  // expected-error @+1 {{loop 'h' may not be split (sharding rule)}}
  %n, %r = model.rms_norm %y, %g {eps = 1.0e-5 : f64} : (tensor<2x6xf32>, tensor<6xf32>) -> (tensor<2x6xf32>, tensor<2xf32>)
  return %n : tensor<2x6xf32>
}
