// A stage body with main-grad updates around a tensor collective (see trainc-tp-comm-overlap.mlir).
module attributes {sched.plan = #sched.plan<num_layers = 1, hidden_size = 4, num_attention_heads = 1, num_query_groups = 1, ffn_hidden_size = 4, seq_length = 2, padded_vocab_size = 8, tp = 2, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 1, global_batch_size = 1, num_microbatches = 1, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01, adam_beta2 = 0.999, adam_eps = 1.000000e-08, clip_grad = 1.000000e+00, weight_decay = 1.000000e-02, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "no-pipelining", recompute = "none">} {
  mesh.mesh @mesh(shape = 2)
  model.parameter @a {init = "zeros"} : tensor<4x4xf32>
  model.parameter @b {init = "zeros"} : tensor<4x4xf32>
  // @a's update is the last op with memory effects in the window: it moves after the
  // all-reduce with the GEMM it needs. @b's update stays: the call computing the all-reduce's
  // operand (it stays, and may have memory effects) follows it; so does the GEMM it needs.
  func.func private @dgrad(tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
  func.func @moves(%dy: tensor<1x2x4xf32>, %x: tensor<1x2x4xf32>, %w: tensor<4x4xf32>) -> tensor<1x2x4xf32> {
    %dwb = model.linear_grad_weight %dy, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<4x4xf32>
    sched.accumulate_grad %dwb into @b : tensor<4x4xf32>
    %dx = func.call @dgrad(%dy, %w) : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
    %dwa = model.linear_grad_weight %dy, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<4x4xf32>
    sched.accumulate_grad %dwa into @a : tensor<4x4xf32>
    %r = mesh.all_reduce %dx on @mesh mesh_axes = [0] : tensor<1x2x4xf32> -> tensor<1x2x4xf32>
    %y = model.add %r, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    return %y : tensor<1x2x4xf32>
  }
  // Nothing independent to overlap: the all-reduce stays synchronous.
  func.func @stays_sync(%dy: tensor<1x2x4xf32>, %w: tensor<4x4xf32>) -> tensor<1x2x4xf32> {
    %dx = model.linear_grad_input %dy, %w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
    %r = mesh.all_reduce %dx on @mesh mesh_axes = [0] : tensor<1x2x4xf32> -> tensor<1x2x4xf32>
    %y = model.add %r, %dy : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    return %y : tensor<1x2x4xf32>
  }
}
