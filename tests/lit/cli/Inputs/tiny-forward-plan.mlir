// tiny-forward.mlir with its own plan, which the configuration starts from (not a test itself).
module attributes {sched.plan = #sched.plan<num_layers = 1, hidden_size = 8, num_attention_heads = 1, num_query_groups = 1, ffn_hidden_size = 8, seq_length = 5, padded_vocab_size = 11, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 2, global_batch_size = 6, num_microbatches = 3, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 0.9, adam_beta2 = 0.95, adam_eps = 1.0e-08, clip_grad = 0.5, weight_decay = 0.1, loss_mode = "per_microbatch", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "no-pipelining", recompute = "none">} {
func.func @forward(%emb: tensor<11x8xf32> {model.param = @embedding.word_embeddings.weight, model.init = "normal", model.init_std = 0.02 : f64},
                   %g: tensor<8xf32> {model.param = @decoder.final_layernorm.weight, model.init = "ones", model.no_weight_decay},
                   %w: tensor<11x8xf32> {model.param = @output_layer.weight, model.init = "normal", model.init_std = 0.02 : f64},
                   %tokens: tensor<2x5xi32> {model.input = "tokens"},
                   %labels: tensor<2x5xi32> {model.input = "labels"},
                   %mask: tensor<2x5xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %x = model.embedding %emb, %tokens : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  %h, %rstd = model.rms_norm %x, %g : (tensor<2x5x8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>)
  %l = model.linear %h, %w : (tensor<2x5x8xf32>, tensor<11x8xf32>) -> tensor<2x5x11xf32>
  %l2 = model.reshape %l : (tensor<2x5x11xf32>) -> tensor<10x11xf32>
  %lab = model.reshape %labels : (tensor<2x5xi32>) -> tensor<10xi32>
  %m = model.reshape %mask : (tensor<2x5xf32>) -> tensor<10xf32>
  %ls, %nt, %lse = model.cross_entropy %l2, %lab, %m : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return %ls, %nt : tensor<f32>, tensor<f32>
}
}
