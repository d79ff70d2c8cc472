// RUN: trainc-opt %s -trainc-phase-autodiff -trainc-phase-schedule | FileCheck %s
// RUN: trainc-opt %s -trainc-phase-autodiff '-trainc-phase-schedule=num-microbatches=2 schedule=no-pipelining' | FileCheck %s --check-prefix=OVERRIDE
// REQUIRES: compiler

// Tests that the schedule phase reads the module's plan: 3 microbatches, the legacy loss mode,
// Adam's beta2 and the clip, and the all-forward-first order; options given explicitly override
// the fields they name and leave the others to the plan.
// CHECK: sched.loss_seed %{{.+}} {num_microbatches = 3 : i64}
// CHECK-LABEL: func.func @train_step()
// CHECK-SAME: sched.num_microbatches = 3 : i64
// CHECK: sched.forward @forward_backward.forward microbatch 0
// CHECK-NEXT: sched.forward @forward_backward.forward microbatch 1
// CHECK-NEXT: sched.forward @forward_backward.forward microbatch 2
// CHECK-NEXT: sched.backward
// CHECK: sched.clip_grad_norm {max_norm = 5.000000e-01 : f64}
// CHECK-NEXT: sched.adamw @{{[^ ]+}} {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64
// The plan records what the overrides chose (the global batch follows num_microbatches).
// OVERRIDE: module attributes {sched.plan = #sched.plan<{{.*}}micro_batch_size = 2, global_batch_size = 4, num_microbatches = 2, {{.*}}schedule = "no-pipelining", recompute = "none">}
// OVERRIDE: sched.loss_seed %{{.+}} {num_microbatches = 2 : i64}
// OVERRIDE-LABEL: func.func @train_step()
// OVERRIDE: %[[S:.+]] = sched.forward @forward_backward.forward microbatch 0
// OVERRIDE-NEXT: sched.backward @forward_backward.backward(%[[S]]) microbatch 0
// OVERRIDE: sched.clip_grad_norm {max_norm = 5.000000e-01 : f64}
module attributes {sched.plan = #sched.plan<num_layers = 1, hidden_size = 8, num_attention_heads = 1, num_query_groups = 1, ffn_hidden_size = 8, seq_length = 5, padded_vocab_size = 11, tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, virtual_stages = 1, micro_batch_size = 2, global_batch_size = 6, num_microbatches = 3, params_dtype = "fp32", optimizer = "adam", adam_beta1 = 0.9, adam_beta2 = 0.95, adam_eps = 1.0e-08, clip_grad = 0.5, weight_decay = 0.1, loss_mode = "per_microbatch", bucket_size = 0, distributed_optimizer = false, overlap_param_gather = false, schedule = "all-forward-first", recompute = "none">} {
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
}
