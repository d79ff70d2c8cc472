// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// REQUIRES: compiler

// The trainc.* module attributes belong to the trainc dialect (attributes only, loaded with the
// model, sched and rt dialects), which declares and verifies each name once (structured-IR
// issue, item 5): one module using each of them, then one case per message.

// Tests that every trainc.* attribute is accepted where it belongs.
module attributes {trainc.pipeline_stage = 0 : i64, trainc.pipeline_size = 2 : i64, trainc.pipeline_virtual_stages = 2 : i64, trainc.microbatch_group_size_per_vp_stage = 2 : i64, trainc.pipeline_layers = array<i64: 0, 2>, trainc.pipeline_shared = [@w], trainc.data_parallel_size = 2 : i64, trainc.num_microbatches = 4 : i64, trainc.grad_bucket_bounds = array<i64: 0, 8>, trainc.flops_per_iteration = 1.0e+06 : f64, trainc.bytes_per_iteration = 2.0e+03 : f64, trainc.megatron_flops_per_token = 4.0e+04 : f64, trainc.recompute_flops_per_microbatch = 0.0 : f64, trainc.loss_scaler = {dynamic = true}, trainc.grad_reduce_in_bf16} {
  mesh.mesh @mesh(shape = 1x1x1x2x2) {trainc.axis_names = ["tp", "cp", "ep", "dp", "pp"]}
  model.parameter @w {init = "ones", no_weight_decay} : tensor<8xf32>
}

// -----

// expected-error@+1 {{'builtin.module' op attribute 'trainc.pipeline_size' must be a positive i64 integer on the module, not 0 : i64}}
module attributes {trainc.pipeline_size = 0 : i64} {
  model.parameter @w {init = "ones"} : tensor<8xf32>
}

// -----

// expected-error@+1 {{'builtin.module' op attribute 'trainc.pipeline_layers' must be an array<i64> on the module, not [0, 2]}}
module attributes {trainc.pipeline_layers = [0, 2]} {
  model.parameter @w {init = "ones"} : tensor<8xf32>
}

// -----

// expected-error@+1 {{'builtin.module' op attribute 'trainc.pipeline_shared' must be an array of parameter symbols on the module, not ["w"]}}
module attributes {trainc.pipeline_shared = ["w"]} {
  model.parameter @w {init = "ones"} : tensor<8xf32>
}

// -----

// expected-error@+1 {{'builtin.module' op attribute 'trainc.flops_per_iteration' must be a non-negative float on the module, not -1.000000e+00 : f64}}
module attributes {trainc.flops_per_iteration = -1.0 : f64} {
  model.parameter @w {init = "ones"} : tensor<8xf32>
}

// -----

// expected-error@+1 {{'mesh.mesh' op attribute 'trainc.axis_names' must be an array of strings on a mesh.mesh, not [0, 1]}}
mesh.mesh @mesh(shape = 1x2) {trainc.axis_names = [0, 1]}
model.parameter @w {init = "ones"} : tensor<8xf32>

// -----

// expected-error@+1 {{'builtin.module' op has unknown attribute 'trainc.pipeline_stages' of the trainc dialect (trainc.axis_names, trainc.pipeline_stage, trainc.pipeline_size, trainc.pipeline_virtual_stages, trainc.microbatch_group_size_per_vp_stage, trainc.pipeline_layers, trainc.pipeline_shared, trainc.data_parallel_size, trainc.num_microbatches, trainc.grad_bucket_bounds, trainc.flops_per_iteration, trainc.bytes_per_iteration, trainc.megatron_flops_per_token, trainc.recompute_flops_per_microbatch, trainc.loss_scaler, trainc.grad_reduce_in_bf16, trainc.tp_reduce_in_bf16, trainc.overlap_p2p_comm, trainc.cuda_graph_impl, trainc.weight_args)}}
module attributes {trainc.pipeline_stages = 2 : i64} {
  model.parameter @w {init = "ones"} : tensor<8xf32>
}
