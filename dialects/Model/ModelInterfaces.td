//===- ModelInterfaces.td - Per-op VJP, sharding, cost and kernel rules ---===//
//
// Passes never switch on op kinds: autodiff asks VJPOpInterface, the cost report asks
// CostOpInterface, tensor parallelism (a later issue) asks ShardingRuleOpInterface, and lowering to
// the runtime asks KernelOpInterface.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINC_MODEL_INTERFACES
#define TRAINC_MODEL_INTERFACES

include "mlir/IR/OpBase.td"

def Model_VJPOpInterface : OpInterface<"VJPOpInterface"> {
  let description = [{
    The op's vector-Jacobian product rule. Given the gradient of each result (a null Value where no
    gradient flows into that result), builds the ops that compute the gradient of each operand and
    returns them (a null Value for operands that are not differentiable, such as token ids, or that
    receive no gradient).
  }];
  let cppNamespace = "::mlir::trainc::model";
  let methods = [
    InterfaceMethod<"Builds the operand gradients from the result gradients.",
      "::llvm::SmallVector<::mlir::Value>", "buildVJP",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$resultGrads)>,
  ];
}

def Model_CostOpInterface : OpInterface<"CostOpInterface"> {
  let description = [{
    Floating-point operations and bytes moved by one execution of the op, from its static shapes
    (closed forms documented on each op; a multiply-add counts as 2 FLOPs).
  }];
  let cppNamespace = "::mlir::trainc::model";
  let methods = [
    InterfaceMethod<"FLOPs of one execution.", "double", "getFlops", (ins)>,
    InterfaceMethod<"Bytes read plus bytes written by one execution.", "double", "getBytesMoved",
      (ins)>,
  ];
}

def Model_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let description = [{
    How the op shards under Megatron tensor parallelism: a short rule string naming, per operand and
    result, the sharded dimension and the collective the layout implies (for example column-parallel
    linear: "x[...,K] w[N/tp,K] -> y[...,N/tp]"). Declared now; the sharding pass of the tensor
    parallel issue consumes it.
  }];
  let cppNamespace = "::mlir::trainc::model";
  let methods = [
    InterfaceMethod<"The op's tensor-parallel sharding rule.", "::llvm::StringRef",
      "getShardingRule", (ins)>,
  ];
}

def Model_KernelOpInterface : OpInterface<"KernelOpInterface"> {
  let description = [{
    Lowers the op to runtime kernel calls (runtime/core/KernelSignatures.cpp) on buffers: the
    emitter gives the buffer of each operand and result and records kernel calls or aliases.
  }];
  let cppNamespace = "::mlir::trainc::model";
  let methods = [
    InterfaceMethod<"Emits the kernel calls that compute the op's results.", "void",
      "emitKernels", (ins "::mlir::trainc::model::KernelEmitter &":$emitter)>,
  ];
}

#endif
