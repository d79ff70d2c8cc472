module attributes {sched.plan = #sched.plan<num_layers = 4, hidden_size = 16, num_attention_heads = 4, num_query_groups = 2, ffn_hidden_size = 32, seq_length = 9, padded_vocab_size = 128, tp = 1, cp = 1, ep = 1, dp = 1, pp = 2, virtual_stages = 2, micro_batch_size = 1, global_batch_size = 4, num_microbatches = 4, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01, adam_beta2 = 0.99899999999999999, adam_eps = 1.000000e-08, clip_grad = 1.000000e+00, weight_decay = 1.000000e-02, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "interleaved", recompute = "none">, trainc.megatron_flops_per_token = 7.104000e+04 : f64} {
  mesh.mesh @mesh(shape = 1x1x1x1x2) {trainc.axis_names = ["tp", "cp", "ep", "dp", "pp"]}
  model.parameter @embedding.word_embeddings.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<128x16xf32>
  model.parameter @decoder.layers.0.input_layernorm.weight {init = "ones", no_weight_decay} : tensor<16xf32>
  model.parameter @decoder.layers.0.self_attention.linear_q.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<16x16xf32>
  model.parameter @decoder.layers.0.self_attention.linear_k.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<8x16xf32>
  model.parameter @decoder.layers.0.self_attention.linear_v.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<8x16xf32>
  model.parameter @decoder.layers.0.self_attention.linear_proj.weight {init = "normal", init_std = 0.0070710678118654745 : f64} : tensor<16x16xf32>
  model.parameter @decoder.layers.0.pre_mlp_layernorm.weight {init = "ones", no_weight_decay} : tensor<16xf32>
  model.parameter @decoder.layers.0.mlp.linear_fc1.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<64x16xf32>
  model.parameter @decoder.layers.0.mlp.linear_fc2.weight {init = "normal", init_std = 0.0070710678118654745 : f64} : tensor<16x32xf32>
  model.parameter @decoder.layers.1.input_layernorm.weight {init = "ones", no_weight_decay} : tensor<16xf32>
  model.parameter @decoder.layers.1.self_attention.linear_q.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<16x16xf32>
  model.parameter @decoder.layers.1.self_attention.linear_k.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<8x16xf32>
  model.parameter @decoder.layers.1.self_attention.linear_v.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<8x16xf32>
  model.parameter @decoder.layers.1.self_attention.linear_proj.weight {init = "normal", init_std = 0.0070710678118654745 : f64} : tensor<16x16xf32>
  model.parameter @decoder.layers.1.pre_mlp_layernorm.weight {init = "ones", no_weight_decay} : tensor<16xf32>
  model.parameter @decoder.layers.1.mlp.linear_fc1.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<64x16xf32>
  model.parameter @decoder.layers.1.mlp.linear_fc2.weight {init = "normal", init_std = 0.0070710678118654745 : f64} : tensor<16x32xf32>
  model.parameter @decoder.layers.2.input_layernorm.weight {init = "ones", no_weight_decay} : tensor<16xf32>
  model.parameter @decoder.layers.2.self_attention.linear_q.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<16x16xf32>
  model.parameter @decoder.layers.2.self_attention.linear_k.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<8x16xf32>
  model.parameter @decoder.layers.2.self_attention.linear_v.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<8x16xf32>
  model.parameter @decoder.layers.2.self_attention.linear_proj.weight {init = "normal", init_std = 0.0070710678118654745 : f64} : tensor<16x16xf32>
  model.parameter @decoder.layers.2.pre_mlp_layernorm.weight {init = "ones", no_weight_decay} : tensor<16xf32>
  model.parameter @decoder.layers.2.mlp.linear_fc1.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<64x16xf32>
  model.parameter @decoder.layers.2.mlp.linear_fc2.weight {init = "normal", init_std = 0.0070710678118654745 : f64} : tensor<16x32xf32>
  model.parameter @decoder.layers.3.input_layernorm.weight {init = "ones", no_weight_decay} : tensor<16xf32>
  model.parameter @decoder.layers.3.self_attention.linear_q.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<16x16xf32>
  model.parameter @decoder.layers.3.self_attention.linear_k.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<8x16xf32>
  model.parameter @decoder.layers.3.self_attention.linear_v.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<8x16xf32>
  model.parameter @decoder.layers.3.self_attention.linear_proj.weight {init = "normal", init_std = 0.0070710678118654745 : f64} : tensor<16x16xf32>
  model.parameter @decoder.layers.3.pre_mlp_layernorm.weight {init = "ones", no_weight_decay} : tensor<16xf32>
  model.parameter @decoder.layers.3.mlp.linear_fc1.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<64x16xf32>
  model.parameter @decoder.layers.3.mlp.linear_fc2.weight {init = "normal", init_std = 0.0070710678118654745 : f64} : tensor<16x32xf32>
  model.parameter @decoder.final_layernorm.weight {init = "ones", no_weight_decay} : tensor<16xf32>
  model.parameter @output_layer.weight {init = "normal", init_std = 2.000000e-02 : f64} : tensor<128x16xf32>
  func.func private @decoder_layer(%arg0: tensor<1x9x16xf32>, %arg1: tensor<16xf32> {model.layer_param = "input_layernorm.weight"}, %arg2: tensor<16x16xf32> {model.layer_param = "self_attention.linear_q.weight"}, %arg3: tensor<8x16xf32> {model.layer_param = "self_attention.linear_k.weight"}, %arg4: tensor<8x16xf32> {model.layer_param = "self_attention.linear_v.weight"}, %arg5: tensor<16x16xf32> {model.layer_param = "self_attention.linear_proj.weight"}, %arg6: tensor<16xf32> {model.layer_param = "pre_mlp_layernorm.weight"}, %arg7: tensor<64x16xf32> {model.layer_param = "mlp.linear_fc1.weight"}, %arg8: tensor<16x32xf32> {model.layer_param = "mlp.linear_fc2.weight"}, %arg9: tensor<1x9xi32>) -> tensor<1x9x16xf32> attributes {model.layer = "decoder.layers"} {
    %result, %rstd = model.rms_norm %arg0, %arg1 : (tensor<1x9x16xf32>, tensor<16xf32>) -> (tensor<1x9x16xf32>, tensor<9xf32>)
    %0 = model.linear %result, %arg2 : (tensor<1x9x16xf32>, tensor<16x16xf32>) -> tensor<1x9x16xf32>
    %1 = model.reshape %0 : (tensor<1x9x16xf32>) -> tensor<1x9x4x4xf32>
    %2 = model.linear %result, %arg3 : (tensor<1x9x16xf32>, tensor<8x16xf32>) -> tensor<1x9x8xf32>
    %3 = model.reshape %2 : (tensor<1x9x8xf32>) -> tensor<1x9x2x4xf32>
    %4 = model.linear %result, %arg4 : (tensor<1x9x16xf32>, tensor<8x16xf32>) -> tensor<1x9x8xf32>
    %5 = model.reshape %4 : (tensor<1x9x8xf32>) -> tensor<1x9x2x4xf32>
    %6 = model.rope %1, %arg9 : (tensor<1x9x4x4xf32>, tensor<1x9xi32>) -> tensor<1x9x4x4xf32>
    %7 = model.rope %3, %arg9 : (tensor<1x9x2x4xf32>, tensor<1x9xi32>) -> tensor<1x9x2x4xf32>
    %result_0, %lse = model.attention %6, %7, %5 : (tensor<1x9x4x4xf32>, tensor<1x9x2x4xf32>, tensor<1x9x2x4xf32>) -> (tensor<1x9x4x4xf32>, tensor<1x4x9xf32>)
    %8 = model.reshape %result_0 : (tensor<1x9x4x4xf32>) -> tensor<1x9x16xf32>
    %9 = model.linear %8, %arg5 : (tensor<1x9x16xf32>, tensor<16x16xf32>) -> tensor<1x9x16xf32>
    %10 = model.add %arg0, %9 : (tensor<1x9x16xf32>, tensor<1x9x16xf32>) -> tensor<1x9x16xf32>
    %result_1, %rstd_2 = model.rms_norm %10, %arg6 : (tensor<1x9x16xf32>, tensor<16xf32>) -> (tensor<1x9x16xf32>, tensor<9xf32>)
    %11 = model.linear %result_1, %arg7 : (tensor<1x9x16xf32>, tensor<64x16xf32>) -> tensor<1x9x64xf32>
    %12 = model.swiglu %11 : (tensor<1x9x64xf32>) -> tensor<1x9x32xf32>
    %13 = model.linear %12, %arg8 : (tensor<1x9x32xf32>, tensor<16x32xf32>) -> tensor<1x9x16xf32>
    %14 = model.add %10, %13 : (tensor<1x9x16xf32>, tensor<1x9x16xf32>) -> tensor<1x9x16xf32>
    return %14 : tensor<1x9x16xf32>
  }
  func.func @forward(%arg0: tensor<128x16xf32> {model.param = @embedding.word_embeddings.weight}, %arg1: tensor<16xf32> {model.param = @decoder.layers.0.input_layernorm.weight}, %arg2: tensor<16x16xf32> {model.param = @decoder.layers.0.self_attention.linear_q.weight}, %arg3: tensor<8x16xf32> {model.param = @decoder.layers.0.self_attention.linear_k.weight}, %arg4: tensor<8x16xf32> {model.param = @decoder.layers.0.self_attention.linear_v.weight}, %arg5: tensor<16x16xf32> {model.param = @decoder.layers.0.self_attention.linear_proj.weight}, %arg6: tensor<16xf32> {model.param = @decoder.layers.0.pre_mlp_layernorm.weight}, %arg7: tensor<64x16xf32> {model.param = @decoder.layers.0.mlp.linear_fc1.weight}, %arg8: tensor<16x32xf32> {model.param = @decoder.layers.0.mlp.linear_fc2.weight}, %arg9: tensor<16xf32> {model.param = @decoder.layers.1.input_layernorm.weight}, %arg10: tensor<16x16xf32> {model.param = @decoder.layers.1.self_attention.linear_q.weight}, %arg11: tensor<8x16xf32> {model.param = @decoder.layers.1.self_attention.linear_k.weight}, %arg12: tensor<8x16xf32> {model.param = @decoder.layers.1.self_attention.linear_v.weight}, %arg13: tensor<16x16xf32> {model.param = @decoder.layers.1.self_attention.linear_proj.weight}, %arg14: tensor<16xf32> {model.param = @decoder.layers.1.pre_mlp_layernorm.weight}, %arg15: tensor<64x16xf32> {model.param = @decoder.layers.1.mlp.linear_fc1.weight}, %arg16: tensor<16x32xf32> {model.param = @decoder.layers.1.mlp.linear_fc2.weight}, %arg17: tensor<16xf32> {model.param = @decoder.layers.2.input_layernorm.weight}, %arg18: tensor<16x16xf32> {model.param = @decoder.layers.2.self_attention.linear_q.weight}, %arg19: tensor<8x16xf32> {model.param = @decoder.layers.2.self_attention.linear_k.weight}, %arg20: tensor<8x16xf32> {model.param = @decoder.layers.2.self_attention.linear_v.weight}, %arg21: tensor<16x16xf32> {model.param = @decoder.layers.2.self_attention.linear_proj.weight}, %arg22: tensor<16xf32> {model.param = @decoder.layers.2.pre_mlp_layernorm.weight}, %arg23: tensor<64x16xf32> {model.param = @decoder.layers.2.mlp.linear_fc1.weight}, %arg24: tensor<16x32xf32> {model.param = @decoder.layers.2.mlp.linear_fc2.weight}, %arg25: tensor<16xf32> {model.param = @decoder.layers.3.input_layernorm.weight}, %arg26: tensor<16x16xf32> {model.param = @decoder.layers.3.self_attention.linear_q.weight}, %arg27: tensor<8x16xf32> {model.param = @decoder.layers.3.self_attention.linear_k.weight}, %arg28: tensor<8x16xf32> {model.param = @decoder.layers.3.self_attention.linear_v.weight}, %arg29: tensor<16x16xf32> {model.param = @decoder.layers.3.self_attention.linear_proj.weight}, %arg30: tensor<16xf32> {model.param = @decoder.layers.3.pre_mlp_layernorm.weight}, %arg31: tensor<64x16xf32> {model.param = @decoder.layers.3.mlp.linear_fc1.weight}, %arg32: tensor<16x32xf32> {model.param = @decoder.layers.3.mlp.linear_fc2.weight}, %arg33: tensor<16xf32> {model.param = @decoder.final_layernorm.weight}, %arg34: tensor<128x16xf32> {model.param = @output_layer.weight}, %arg35: tensor<1x9xi32> {model.input = "tokens"}, %arg36: tensor<1x9xi32> {model.input = "position_ids"}, %arg37: tensor<1x9xi32> {model.input = "labels"}, %arg38: tensor<1x9xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
    %0 = model.embedding %arg0, %arg35 : (tensor<128x16xf32>, tensor<1x9xi32>) -> tensor<1x9x16xf32>
    %1 = call @decoder_layer(%0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8, %arg36) {model.layer_index = 0 : i64} : (tensor<1x9x16xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<64x16xf32>, tensor<16x32xf32>, tensor<1x9xi32>) -> tensor<1x9x16xf32>
    %2 = call @decoder_layer(%1, %arg9, %arg10, %arg11, %arg12, %arg13, %arg14, %arg15, %arg16, %arg36) {model.layer_index = 1 : i64} : (tensor<1x9x16xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<64x16xf32>, tensor<16x32xf32>, tensor<1x9xi32>) -> tensor<1x9x16xf32>
    %3 = call @decoder_layer(%2, %arg17, %arg18, %arg19, %arg20, %arg21, %arg22, %arg23, %arg24, %arg36) {model.layer_index = 2 : i64} : (tensor<1x9x16xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<64x16xf32>, tensor<16x32xf32>, tensor<1x9xi32>) -> tensor<1x9x16xf32>
    %4 = call @decoder_layer(%3, %arg25, %arg26, %arg27, %arg28, %arg29, %arg30, %arg31, %arg32, %arg36) {model.layer_index = 3 : i64} : (tensor<1x9x16xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<64x16xf32>, tensor<16x32xf32>, tensor<1x9xi32>) -> tensor<1x9x16xf32>
    %result, %rstd = model.rms_norm %4, %arg33 : (tensor<1x9x16xf32>, tensor<16xf32>) -> (tensor<1x9x16xf32>, tensor<9xf32>)
    %5 = model.linear %result, %arg34 : (tensor<1x9x16xf32>, tensor<128x16xf32>) -> tensor<1x9x128xf32>
    %6 = model.reshape %5 : (tensor<1x9x128xf32>) -> tensor<9x128xf32>
    %7 = model.reshape %arg38 : (tensor<1x9xf32>) -> tensor<9xf32>
    %8 = model.reshape %arg37 : (tensor<1x9xi32>) -> tensor<9xi32>
    %loss_sum, %num_tokens, %lse = model.cross_entropy %6, %8, %7 {valid_vocab = 37 : i64} : (tensor<9x128xf32>, tensor<9xi32>, tensor<9xf32>) -> (tensor<f32>, tensor<f32>, tensor<9xf32>)
    return %loss_sum, %num_tokens : tensor<f32>, tensor<f32>
  }
}
