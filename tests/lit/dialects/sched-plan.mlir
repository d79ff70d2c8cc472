// RUN: trainc-opt %s -split-input-file -verify-diagnostics | FileCheck %s
// REQUIRES: compiler

// The plan attribute: round trip, a truncated plan (the parser names the missing field) and
// inconsistent plans (the verifier names the fields and values).

// CHECK: module attributes {sched.plan = #sched.plan<num_layers = 2, {{.*}}global_batch_size = 8, num_microbatches = 4, {{.*}}schedule = "no-pipelining", recompute = "none">}
module attributes {sched.plan = #sched.plan<num_layers = 2, hidden_size = 16, num_attention_heads = 4, num_query_groups = 2, ffn_hidden_size = 32, seq_length = 9, padded_vocab_size = 128, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 2, global_batch_size = 8, num_microbatches = 4, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01 : f64, adam_beta2 = 0.99899999999999999 : f64, adam_eps = 1.000000e-08 : f64, clip_grad = 1.000000e+00 : f64, weight_decay = 1.000000e-02 : f64, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "no-pipelining", recompute = "none">} {
}

// -----

// expected-error@+1 {{#sched.plan is missing field 'num_microbatches'}}
module attributes {sched.plan = #sched.plan<num_layers = 2, hidden_size = 16, num_attention_heads = 4, num_query_groups = 2, ffn_hidden_size = 32, seq_length = 9, padded_vocab_size = 128, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 2, global_batch_size = 8, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01 : f64, adam_beta2 = 0.99899999999999999 : f64, adam_eps = 1.000000e-08 : f64, clip_grad = 1.000000e+00 : f64, weight_decay = 1.000000e-02 : f64, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "no-pipelining", recompute = "none">} {
}

// -----

// expected-error@+1 {{#sched.plan: global_batch_size = 10 is not micro_batch_size x dp x num_microbatches = 2 x 1 x 4}}
module attributes {sched.plan = #sched.plan<num_layers = 2, hidden_size = 16, num_attention_heads = 4, num_query_groups = 2, ffn_hidden_size = 32, seq_length = 9, padded_vocab_size = 128, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 2, global_batch_size = 10, num_microbatches = 4, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01 : f64, adam_beta2 = 0.99899999999999999 : f64, adam_eps = 1.000000e-08 : f64, clip_grad = 1.000000e+00 : f64, weight_decay = 1.000000e-02 : f64, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "no-pipelining", recompute = "none">} {
}

// -----

// expected-error@+1 {{#sched.plan: schedule = "zigzag", expected no-pipelining, 1f1b, interleaved, zb-h1 or all-forward-first}}
module attributes {sched.plan = #sched.plan<num_layers = 2, hidden_size = 16, num_attention_heads = 4, num_query_groups = 2, ffn_hidden_size = 32, seq_length = 9, padded_vocab_size = 128, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 2, global_batch_size = 8, num_microbatches = 4, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01 : f64, adam_beta2 = 0.99899999999999999 : f64, adam_eps = 1.000000e-08 : f64, clip_grad = 1.000000e+00 : f64, weight_decay = 1.000000e-02 : f64, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "zigzag", recompute = "none">} {
}

// -----

// expected-error@+1 {{#sched.plan has no field 'tensor_parallel'}}
module attributes {sched.plan = #sched.plan<num_layers = 2, tensor_parallel = 2>} {
}

// -----

// expected-error@+1 {{#sched.plan field 'dp' = "2" is not an integer}}
module attributes {sched.plan = #sched.plan<num_layers = 2, hidden_size = 16, num_attention_heads = 4, num_query_groups = 2, ffn_hidden_size = 32, seq_length = 9, padded_vocab_size = 128, tp = 1, cp = 1, ep = 1, dp = "2", pp = 1, virtual_stages = 1, micro_batch_size = 2, global_batch_size = 8, num_microbatches = 4, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01 : f64, adam_beta2 = 0.99899999999999999 : f64, adam_eps = 1.000000e-08 : f64, clip_grad = 1.000000e+00 : f64, weight_decay = 1.000000e-02 : f64, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "no-pipelining", recompute = "none">} {
}

// -----

// expected-error@+1 {{#sched.plan field 'tp' is given twice}}
module attributes {sched.plan = #sched.plan<num_layers = 2, tp = 1, tp = 2>} {
}

// -----

// expected-error@+1 {{#sched.plan: overlap_param_gather needs distributed_optimizer and dp > 1 (dp = 1)}}
module attributes {sched.plan = #sched.plan<num_layers = 2, hidden_size = 16, num_attention_heads = 4, num_query_groups = 2, ffn_hidden_size = 32, seq_length = 9, padded_vocab_size = 128, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 2, global_batch_size = 8, num_microbatches = 4, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01 : f64, adam_beta2 = 0.99899999999999999 : f64, adam_eps = 1.000000e-08 : f64, clip_grad = 1.000000e+00 : f64, weight_decay = 1.000000e-02 : f64, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = true, schedule = "no-pipelining", recompute = "none">} {
}

// -----

// expected-error@+1 {{#sched.plan: num_attention_heads = 4 is not a multiple of num_query_groups = 3}}
module attributes {sched.plan = #sched.plan<num_layers = 2, hidden_size = 16, num_attention_heads = 4, num_query_groups = 3, ffn_hidden_size = 32, seq_length = 9, padded_vocab_size = 128, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 2, global_batch_size = 8, num_microbatches = 4, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01 : f64, adam_beta2 = 0.99899999999999999 : f64, adam_eps = 1.000000e-08 : f64, clip_grad = 1.000000e+00 : f64, weight_decay = 1.000000e-02 : f64, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "no-pipelining", recompute = "none">} {
}

// -----

// expected-error@+1 {{#sched.plan: micro_batch_size = 0, expected a positive value}}
module attributes {sched.plan = #sched.plan<num_layers = 2, hidden_size = 16, num_attention_heads = 4, num_query_groups = 2, ffn_hidden_size = 32, seq_length = 9, padded_vocab_size = 128, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 0, global_batch_size = 8, num_microbatches = 4, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01 : f64, adam_beta2 = 0.99899999999999999 : f64, adam_eps = 1.000000e-08 : f64, clip_grad = 1.000000e+00 : f64, weight_decay = 1.000000e-02 : f64, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "no-pipelining", recompute = "none">} {
}

// -----

// expected-error@+1 {{#sched.plan: recompute = "full:uniform:3": num_layers 3 is out of range [1, 2] (the layers per pipeline stage)}}
module attributes {sched.plan = #sched.plan<num_layers = 2, hidden_size = 16, num_attention_heads = 4, num_query_groups = 2, ffn_hidden_size = 32, seq_length = 9, padded_vocab_size = 128, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 2, global_batch_size = 8, num_microbatches = 4, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01 : f64, adam_beta2 = 0.99899999999999999 : f64, adam_eps = 1.000000e-08 : f64, clip_grad = 1.000000e+00 : f64, weight_decay = 1.000000e-02 : f64, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "no-pipelining", recompute = "full:uniform:3">} {
}

// -----

// expected-error@+1 {{#sched.plan: recompute = "full:fast:1": method 'fast' is not one of uniform, block}}
module attributes {sched.plan = #sched.plan<num_layers = 2, hidden_size = 16, num_attention_heads = 4, num_query_groups = 2, ffn_hidden_size = 32, seq_length = 9, padded_vocab_size = 128, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 2, global_batch_size = 8, num_microbatches = 4, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 9.000000e-01 : f64, adam_beta2 = 0.99899999999999999 : f64, adam_eps = 1.000000e-08 : f64, clip_grad = 1.000000e+00 : f64, weight_decay = 1.000000e-02 : f64, loss_mode = "per_token", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "no-pipelining", recompute = "full:fast:1">} {
}
