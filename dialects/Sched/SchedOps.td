//===- SchedOps.td - The sched dialect: the iteration of a rank -----------===//
//
// The schedule of one training iteration: stage functions called per microbatch, gradient and loss
// accumulation, gradient finalisation and the optimizer step. Ops are still on tensors (inside
// stage functions) or have no operands (in the iteration function); lowering to rt turns them into
// buffer-level instructions.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINC_SCHED_OPS
#define TRAINC_SCHED_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"

def Sched_Dialect : Dialect {
  let name = "sched";
  let summary = "The training iteration: microbatch calls, gradient accumulation, optimizer step";
  let cppNamespace = "::mlir::trainc::sched";
}

class Sched_Op<string mnemonic, list<Trait> traits = []> : Op<Sched_Dialect, mnemonic, traits>;

def Sched_ZeroGradsOp : Sched_Op<"zero_grads"> {
  let summary = "Zero every main_grad buffer and the loss accumulators";
  let description = [{
    ```mlir
    sched.zero_grads
    ```
  }];
  let assemblyFormat = "attr-dict";
}

def Sched_ZeroLossesOp : Sched_Op<"zero_losses"> {
  let summary = "Zero the loss accumulators (loss_sum, num_tokens) only (evaluation)";
  let description = [{
    ```mlir
    sched.zero_losses
    ```
  }];
  let assemblyFormat = "attr-dict";
}

def Sched_FillInputsOp : Sched_Op<"fill_inputs"> {
  let summary = "Host I/O point: the control plane fills inputs and device scalars here";
  let description = [{
    ```mlir
    sched.fill_inputs "batch"
    ```
  }];
  let arguments = (ins StrAttr:$label);
  let assemblyFormat = "$label attr-dict";
}

def Sched_ReadOutputsOp : Sched_Op<"read_outputs"> {
  let summary = "Host I/O point: the control plane reads loss_sum, num_tokens, grad_norm, ...";
  let description = [{
    ```mlir
    sched.read_outputs "outputs"
    ```
  }];
  let arguments = (ins StrAttr:$label);
  let assemblyFormat = "$label attr-dict";
}

def Sched_MicrobatchOp : Sched_Op<"microbatch", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Run a stage function on microbatch `index` (its inputs bound to that microbatch)";
  let description = [{
    The callee is a stage function whose arguments are parameters (model.param) and per-microbatch
    inputs (model.input); parameters bind to the persistent buffers and inputs to the buffers of
    microbatch `index`. Calling, not cloning, keeps programs O(layers + microbatches).
    ```mlir
    sched.microbatch @forward_backward {index = 1 : i64}
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, I64Attr:$index);
  let assemblyFormat = "$callee attr-dict";
}

def Sched_AccumulateGradOp : Sched_Op<"accumulate_grad"> {
  let summary = "Add a microbatch's parameter gradient into the fp32 main_grad of `param`";
  let description = [{
    ```mlir
    sched.accumulate_grad %dw {param = "output_layer.weight"} : tensor<37x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$grad, StrAttr:$param);
  let assemblyFormat = "$grad attr-dict `:` type($grad)";
}

def Sched_AccumulateLossOp : Sched_Op<"accumulate_loss"> {
  let summary = "Add a microbatch's (loss_sum, num_tokens) into the iteration's loss outputs";
  let description = [{
    normalization "per_token" keeps sums apart (exact global per-token mean); "per_microbatch"
    (Megatron's legacy mode) adds loss_sum / num_tokens and counts one per microbatch.
    ```mlir
    sched.accumulate_loss %l, %n {normalization = "per_token"} : tensor<f32>, tensor<f32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$loss_sum, AnyRankedTensor:$num_tokens, StrAttr:$normalization);
  let assemblyFormat = "$loss_sum `,` $num_tokens attr-dict `:` type($loss_sum) `,` type($num_tokens)";
  let hasVerifier = 1;
}

def Sched_LossSeedOp : Sched_Op<"loss_seed"> {
  let summary = "d(loss_sum) seed of Megatron's legacy per-microbatch mean: 1 / (num_tokens * m)";
  let description = [{
    With the legacy normalisation every microbatch's loss is its own token mean divided by the
    number of microbatches, so backward starts from 1 / (num_tokens * num_microbatches)
    (0 when the microbatch has no valid token).
    ```mlir
    %seed = sched.loss_seed %n {num_microbatches = 4 : i64} : (tensor<f32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$num_tokens, I64Attr:$num_microbatches);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$num_tokens attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Sched_FinalizeGradsOp : Sched_Op<"finalize_grads"> {
  let summary = "Finish the gradients: per-token scaling (and, later, DP/TP/embedding reductions)";
  let description = [{
    ```mlir
    sched.finalize_grads {normalization = "per_token"}
    ```
  }];
  let arguments = (ins StrAttr:$normalization);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Sched_OptimizerStepOp : Sched_Op<"optimizer_step"> {
  let summary = "The optimizer step (expanded by trainc-optimizer-expand)";
  let description = [{
    ```mlir
    sched.optimizer_step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, clip_grad = 1.0 : f64}
    ```
  }];
  let arguments = (ins F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps, F64Attr:$clip_grad);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Sched_ClipGradNormOp : Sched_Op<"clip_grad_norm"> {
  let summary = "Global grad norm, clip coefficient and found-inf predicate, all on device";
  let description = [{
    grad_norm = sqrt(sum of squares of every main_grad); grad_scale = min(1, max_norm /
    (grad_norm + 1e-6)) (Megatron clip_grad_norm_fp32); update_successful = isfinite(grad_norm).
    ```mlir
    sched.clip_grad_norm {max_norm = 1.0 : f64}
    ```
  }];
  let arguments = (ins F64Attr:$max_norm);
  let assemblyFormat = "attr-dict";
}

def Sched_AdamWOp : Sched_Op<"adamw"> {
  let summary = "AdamW update of one parameter, predicated on update_successful";
  let description = [{
    ```mlir
    sched.adamw {param = "output_layer.weight", decay = true, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64}
    ```
  }];
  let arguments = (ins StrAttr:$param, BoolAttr:$decay, F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps);
  let assemblyFormat = "attr-dict";
}

#endif
