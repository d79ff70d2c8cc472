//===- TraincDialect.td - The trainc dialect: module-level settings and reports -===//
//
// No ops: the dialect owns the `trainc.*` discardable attributes that passes record on the module
// for later passes and the export (pipeline stage and split, FLOPs and bytes reports, the loss
// scaler, the gradient bucket bounds) and the mesh's axis names, so that each name is declared and
// verified once.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINC_TRAINC_DIALECT
#define TRAINC_TRAINC_DIALECT

include "mlir/IR/OpBase.td"

def Trainc_Dialect : Dialect {
  let name = "trainc";
  let summary = "The module-level settings and reports of a trainc compile (attributes only)";
  let cppNamespace = "::mlir::trainc::top";
  // On the module: trainc.pipeline_stage (non-negative integer), trainc.pipeline_size,
  // trainc.pipeline_virtual_stages, trainc.microbatch_group_size_per_vp_stage,
  // trainc.data_parallel_size (positive integers), trainc.num_microbatches (non-negative
  // integer), trainc.pipeline_layers and trainc.grad_bucket_bounds (array<i64>),
  // trainc.pipeline_shared (array of parameter symbols), trainc.flops_per_iteration,
  // trainc.bytes_per_iteration, trainc.megatron_flops_per_token,
  // trainc.recompute_flops_per_microbatch (non-negative floats), trainc.loss_scaler (dictionary),
  // trainc.grad_reduce_in_bf16 (unit); on a mesh.mesh trainc.axis_names (array of strings). Any
  // other trainc.* name is an error.
  let hasOperationAttrVerify = 1;
}

#endif
