//===- TraincDialect.cpp - The trainc dialect's attribute verifier --------===//

#include "dialects/Trainc/TraincDialect.h"
#include "dialects/AttrVerify.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::trainc::top;

#include "dialects/Trainc/TraincDialect.cpp.inc"

void TraincDialect::initialize() {}

LogicalResult TraincDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute v = attr.getValue();
  auto check = [&](bool ok, StringRef expected) {
    return mlir::trainc::checkAttribute(op, attr, ok, expected);
  };
  auto integerAtLeast = [&](int64_t min) { return mlir::trainc::isI64AtLeast(v, min); };
  const bool onModule = isa<ModuleOp>(op);
  if (name == "trainc.axis_names") {
    auto a = dyn_cast<ArrayAttr>(v);
    return check(a && isa<mesh::MeshOp>(op) &&
                     llvm::all_of(a, [](Attribute e) { return isa<StringAttr>(e); }),
                 "an array of strings on a mesh.mesh");
  }
  if (name == "trainc.pipeline_stage")
    return check(onModule && integerAtLeast(0), "a non-negative i64 integer on the module");
  if (name == "trainc.num_microbatches")
    return check(onModule && integerAtLeast(0), "a non-negative i64 integer on the module");
  if (llvm::is_contained({"trainc.pipeline_size", "trainc.pipeline_virtual_stages",
                          "trainc.microbatch_group_size_per_vp_stage",
                          "trainc.data_parallel_size"},
                         name))
    return check(onModule && integerAtLeast(1), "a positive i64 integer on the module");
  if (name == "trainc.pipeline_layers" || name == "trainc.grad_bucket_bounds")
    return check(onModule && isa<DenseI64ArrayAttr>(v), "an array<i64> on the module");
  if (name == "trainc.pipeline_shared") {
    auto a = dyn_cast<ArrayAttr>(v);
    return check(onModule && a &&
                     llvm::all_of(a, [](Attribute e) { return isa<FlatSymbolRefAttr>(e); }),
                 "an array of parameter symbols on the module");
  }
  if (llvm::is_contained({"trainc.flops_per_iteration", "trainc.bytes_per_iteration",
                          "trainc.megatron_flops_per_token",
                          "trainc.recompute_flops_per_microbatch"},
                         name)) {
    auto f = dyn_cast<FloatAttr>(v);
    return check(onModule && f && f.getValueAsDouble() >= 0,
                 "a non-negative float on the module");
  }
  if (name == "trainc.loss_scaler")
    return check(onModule && isa<DictionaryAttr>(v), "a dictionary on the module");
  if (name == "trainc.cuda_graph_impl") // its values are trainc-cuda-graph's to check
    return check(onModule && isa<StringAttr>(v), "a string on the module");
  if (name == "trainc.weight_args")
    return check(op->getName().getStringRef() == "func.func" && isa<DenseI64ArrayAttr>(v),
                 "an array<i64> of argument numbers on a func.func");
  if (llvm::is_contained({"trainc.grad_reduce_in_bf16", "trainc.tp_reduce_in_bf16",
                          "trainc.overlap_p2p_comm"},
                         name))
    return check(onModule && isa<UnitAttr>(v), "a unit attribute on the module");
  return op->emitOpError()
         << "has unknown attribute '" << name
         << "' of the trainc dialect (trainc.axis_names, trainc.pipeline_stage, "
            "trainc.pipeline_size, trainc.pipeline_virtual_stages, "
            "trainc.microbatch_group_size_per_vp_stage, trainc.pipeline_layers, "
            "trainc.pipeline_shared, trainc.data_parallel_size, trainc.num_microbatches, "
            "trainc.grad_bucket_bounds, trainc.flops_per_iteration, trainc.bytes_per_iteration, "
            "trainc.megatron_flops_per_token, trainc.recompute_flops_per_microbatch, "
            "trainc.loss_scaler, trainc.grad_reduce_in_bf16, trainc.tp_reduce_in_bf16, "
            "trainc.overlap_p2p_comm, "
            "trainc.cuda_graph_impl, trainc.weight_args)";
}
