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
    How the op may be split across a mesh axis, as structured data in the vocabulary of MLIR's
    mesh ShardingInterface / linalg: the op's loops (name, extent, how a split combines) and one
    affine map per operand and result from the loops to its dimensions (ShardingRule in
    ModelDialect.h). Splitting a loop slices every operand and result indexed by it; results not
    indexed by it become partial (summed, or combined by log-sum-exp). Megatron's layouts are
    splits of these loops: column-parallel linear splits n, row-parallel k, vocab-parallel
    embedding v, attention the heads. The sharding pass of the tensor-parallel issue consumes it.
  }];
  let cppNamespace = "::mlir::trainc::model";
  let methods = [
    InterfaceMethod<"The op's sharding rule.", "::mlir::trainc::model::ShardingRule",
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
