// A tiny language model for the pass and pipeline tests (not a test itself: lit skips Inputs/):
// embedding -> rms_norm -> output linear -> cross_entropy. Vocab 11, hidden 8, batch 2, seq 5.
// Three parameters (the final norm weight has no weight decay) and three microbatch inputs.
func.func @forward(
    %wte: tensor<11x8xf32> {model.param = @embedding.word_embeddings.weight, model.init = "normal", model.init_std = 2.0e-02 : f64},
    %ln: tensor<8xf32> {model.param = @decoder.final_layernorm.weight, model.init = "ones", model.no_weight_decay},
    %wout: tensor<11x8xf32> {model.param = @output_layer.weight, model.init = "normal", model.init_std = 2.0e-02 : f64},
    %tokens: tensor<2x5xi32> {model.input = "tokens"},
    %labels: tensor<2x5xi32> {model.input = "labels"},
    %mask: tensor<2x5xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %x = model.embedding %wte, %tokens : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  %h, %rstd = model.rms_norm %x, %ln : (tensor<2x5x8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>)
  %logits = model.linear %h, %wout : (tensor<2x5x8xf32>, tensor<11x8xf32>) -> tensor<2x5x11xf32>
  %l2 = model.reshape %logits : (tensor<2x5x11xf32>) -> tensor<10x11xf32>
  %y = model.reshape %labels : (tensor<2x5xi32>) -> tensor<10xi32>
  %m = model.reshape %mask : (tensor<2x5xf32>) -> tensor<10xf32>
  %loss, %n, %lse = model.cross_entropy %l2, %y, %m : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}
