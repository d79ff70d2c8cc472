// Inputs of trainc-autodiff-call.mlir: calls autodiff cannot differentiate.
func.func private @external(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
func.func @forward(%wte: tensor<11x8xf32> {model.param = @wte}, %tokens: tensor<2x5xi32> {model.input = "tokens"},
                   %labels: tensor<10xi32> {model.input = "labels"}, %mask: tensor<10xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %x = model.embedding %wte, %tokens : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  %y = call @external(%x) : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %logits = model.linear %y, %wte : (tensor<2x5x8xf32>, tensor<11x8xf32>) -> tensor<2x5x11xf32>
  %l2 = model.reshape %logits : (tensor<2x5x11xf32>) -> tensor<10x11xf32>
  %loss, %n, %lse = model.cross_entropy %l2, %labels, %mask : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}

// -----

func.func private @loop(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  %y = call @loop(%x) : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return %y : tensor<2x5x8xf32>
}
func.func @forward(%wte: tensor<11x8xf32> {model.param = @wte}, %tokens: tensor<2x5xi32> {model.input = "tokens"},
                   %labels: tensor<10xi32> {model.input = "labels"}, %mask: tensor<10xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %x = model.embedding %wte, %tokens : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  %y = call @loop(%x) : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %logits = model.linear %y, %wte : (tensor<2x5x8xf32>, tensor<11x8xf32>) -> tensor<2x5x11xf32>
  %l2 = model.reshape %logits : (tensor<2x5x11xf32>) -> tensor<10x11xf32>
  %loss, %n, %lse = model.cross_entropy %l2, %labels, %mask : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}
