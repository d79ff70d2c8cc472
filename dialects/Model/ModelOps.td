//===- ModelOps.td - The model dialect: forward and backward ops -----------===//
//
// Value semantics on statically shaped ranked tensors. Forward ops sit at library-kernel
// granularity (one op ~ one runtime kernel); each has a backward op that its VJP rule emits.
// Layouts: activations [batch, seq, hidden]; attention heads [batch, seq, heads, head_dim];
// weights of linear layers [out_features, in_features] (y = x w^T + b, as torch.nn.Linear).
//
//===----------------------------------------------------------------------===//

#ifndef TRAINC_MODEL_OPS
#define TRAINC_MODEL_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "ModelInterfaces.td"

def Model_Dialect : Dialect {
  let name = "model";
  let summary = "Transformer ops at library-kernel granularity, with VJP, sharding and cost rules";
  let description = [{
    The first IR level of trainc: a model's forward function as ops on ranked tensors, and the
    backward ops that autodiff appends. Every op implements KernelOpInterface (lowering to runtime
    kernels) and CostOpInterface; forward ops also implement VJPOpInterface and
    ShardingRuleOpInterface.
  }];
  let cppNamespace = "::mlir::trainc::model";
  // Argument attributes: `model.param = @<name>` (a model.parameter symbol), `model.input`,
  // `model.layer_param` (strings) and, in hand-written IR before autodiff declares them,
  // `model.init`, `model.init_std`, `model.no_weight_decay`.
  let hasRegionArgAttrVerify = 1;
  // The discardable attributes of the dialect, each checked once here: on functions model.layer
  // (string) and model.derivative ("forward" | "backward"); on layer calls model.layer_index and
  // model.recompute_group (non-negative integers); on ops model.loss_seed (unit),
  // model.recompute ("selective" | "checkpoint" | "replay"), model.global_heads and
  // model.global_seq (positive integers), model.rank_offsets ({attr = array<i64: axis,
  // stride>}); on the module model.sequence_parallel (unit). Any other model.* name is an error.
  let hasOperationAttrVerify = 1;
  // Loads the trainc dialect, which verifies the trainc.* module attributes.
  let dependentDialects = ["::mlir::trainc::top::TraincDialect"];
}

class Model_Op<string mnemonic, list<Trait> traits = []>
    : Op<Model_Dialect, mnemonic, !listconcat(traits, [Pure,
        DeclareOpInterfaceMethods<Model_CostOpInterface>,
        DeclareOpInterfaceMethods<Model_KernelOpInterface>])> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

class Model_FwdOp<string mnemonic, list<Trait> traits = []>
    : Model_Op<mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<Model_VJPOpInterface>,
        DeclareOpInterfaceMethods<Model_ShardingRuleOpInterface>])>;

def Model_ParameterOp : Op<Model_Dialect, "parameter", [Symbol]> {
  let summary = "A parameter's declaration: global name, type, initialisation and weight decay";
  let description = [{
    One per parameter at module level (Megatron's global name as the symbol): the attributes a
    parameter has once, wherever it is used. Function arguments that hold it carry only
    `model.param = @<name>`, and sched ops name it by the same symbol.
    ```mlir
    model.parameter @"decoder.layers.0.mlp.linear_fc1.weight" {init = "normal", init_std = 2.0e-02 : f64} : tensor<64x16xf32>
    model.parameter @"decoder.final_layernorm.weight" {init = "ones", no_weight_decay} : tensor<16xf32>
    ```
    A parameter sharded by tensor parallelism (trainc-shard) has its local type and records the
    tensor it is a slice of: `global_shape` (the tensor's elements, row-major, e.g. SwiGLU's fc1
    [2F, H] as [2, F, H] so that each rank's gate and up halves form one box), split evenly along
    `split_dim` over mesh axis `split_axis`; rank c of that axis holds the box starting at
    c x local extent. The local type is global_shape with split_dim divided by the axis size,
    reshaped to `type`; a global_shape of one more dim than `type` stands for the tensor whose
    first dim is global_shape's first two merged (the export's Parameter.tensor_shape).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<AnyRankedTensor>:$type, StrAttr:$init,
                   OptionalAttr<F64Attr>:$init_std, UnitAttr:$no_weight_decay,
                   OptionalAttr<DenseI64ArrayAttr>:$global_shape,
                   OptionalAttr<I64Attr>:$split_dim, OptionalAttr<I64Attr>:$split_axis);
  let builders = [OpBuilder<(ins "StringAttr":$sym_name, "TypeAttr":$type, "StringAttr":$init,
                                 "FloatAttr":$init_std, "UnitAttr":$no_weight_decay), [{
    build($_builder, $_state, sym_name, type, init, init_std, no_weight_decay,
          DenseI64ArrayAttr(), IntegerAttr(), IntegerAttr());
  }]>];
  let assemblyFormat = "$sym_name attr-dict `:` $type";
  let hasVerifier = 1;
}

def FloatTensor : RankedTensorOf<[F32, F64, BF16, F16]>;
def IdTensor : RankedTensorOf<[I32]>;
def RngTensor : RankedTensorOf<[I64]>;

//===----------------------------------------------------------------------===//
// Forward ops
//===----------------------------------------------------------------------===//

def Model_FillOp : Model_Op<"fill"> {
  let summary = "A tensor filled with a constant";
  let description = [{
    ```mlir
    %one = model.fill {value = 1.0 : f64} : () -> tensor<f32>
    ```
  }];
  let arguments = (ins F64Attr:$value);
  let results = (outs AnyRankedTensor:$result);
}

def Model_ReshapeOp : Model_FwdOp<"reshape"> {
  let summary = "Same elements, another static shape (row-major; free at run time)";
  let description = [{
    ```mlir
    %h = model.reshape %x : (tensor<2x9x16xf32>) -> tensor<2x9x4x4xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
}

def Model_EmbeddingOp : Model_FwdOp<"embedding"> {
  let summary = "Row lookup: y[..., :] = table[ids[...] - vocab_start, :]";
  let description = [{
    Ids outside [vocab_start, vocab_start + V) give zero rows (Megatron's VocabParallelEmbedding).
    ```mlir
    %x = model.embedding %table, %ids : (tensor<37x16xf32>, tensor<2x9xi32>) -> tensor<2x9x16xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$table, IdTensor:$ids, DefaultValuedAttr<I64Attr, "0">:$vocab_start);
  let results = (outs FloatTensor:$result);
}

def Model_LinearOp : Model_FwdOp<"linear"> {
  let summary = "y = x w^T (+ bias); w is [out_features, in_features]";
  let description = [{
    The result has the input's element type, or f32 for bf16/f16 operands without a bias (the
    GEMM's fp32 accumulator: a tensor-parallel partial sum reduced in fp32 before one rounding).
    ```mlir
    %y = model.linear %x, %w, %b : (tensor<2x9x16xf32>, tensor<48x16xf32>, tensor<48xf32>) -> tensor<2x9x48xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$input, FloatTensor:$weight, Optional<FloatTensor>:$bias);
  let results = (outs FloatTensor:$result);
}

def Model_LayerNormOp : Model_FwdOp<"layer_norm"> {
  let summary = "LayerNorm over the last dim; also returns mean and rstd per row";
  let description = [{
    ```mlir
    %y, %mean, %rstd = model.layer_norm %x, %g, %b {eps = 1.0e-05 : f64}
        : (tensor<2x9x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<2x9x16xf32>, tensor<18xf32>, tensor<18xf32>)
    ```
  }];
  let arguments = (ins FloatTensor:$input, FloatTensor:$weight, FloatTensor:$bias,
                   DefaultValuedAttr<F64Attr, "1e-5">:$eps);
  let results = (outs FloatTensor:$result, FloatTensor:$mean, FloatTensor:$rstd);
}

def Model_RMSNormOp : Model_FwdOp<"rms_norm"> {
  let summary = "RMSNorm over the last dim; also returns rstd per row";
  let description = [{
    ```mlir
    %y, %rstd = model.rms_norm %x, %g {eps = 1.0e-05 : f64}
        : (tensor<2x9x16xf32>, tensor<16xf32>) -> (tensor<2x9x16xf32>, tensor<18xf32>)
    ```
  }];
  let arguments = (ins FloatTensor:$input, FloatTensor:$weight, DefaultValuedAttr<F64Attr, "1e-5">:$eps);
  let results = (outs FloatTensor:$result, FloatTensor:$rstd);
}

def Model_RopeOp : Model_FwdOp<"rope"> {
  let summary = "Rotary position embedding (rotate-half form) on [b, s, heads, head_dim]";
  let description = [{
    ```mlir
    %q = model.rope %x, %pos {base = 1.0e+04 : f64} : (tensor<2x9x4x4xf32>, tensor<2x9xi32>) -> tensor<2x9x4x4xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$input, IdTensor:$positions,
                   DefaultValuedAttr<F64Attr, "10000.0">:$base,
                   DefaultValuedAttr<I64Attr, "0">:$rotary_dim);
  let results = (outs FloatTensor:$result);
}

def Model_AttentionOp : Model_FwdOp<"attention", [AttrSizedOperandSegments]> {
  let summary = "Fused core attention (causal, GQA) returning out and log-sum-exp";
  let description = [{
    q [b, s, heads, d], k and v [b, s, groups, d] with groups dividing heads; out [b, s, heads, d],
    lse [b, heads, s]. With `dropout` = p > 0 the optional `rng` key (as model.dropout's) drops
    each probability with probability p (keyed by op_id and its global (b, head, query, key)
    coordinates) and scales the kept ones by 1/(1-p); lse stays that of the undropped softmax.
    The optional `doc_start` [b, s] (i32; Megatron's --reset-attention-mask) confines query i of
    sample b to keys doc_start[b, i] <= j <= i: no attention across documents (causal only).
    ```mlir
    %o, %lse = model.attention %q, %k, %v {causal = true}
        : (tensor<1x9x4x4xf32>, tensor<1x9x2x4xf32>, tensor<1x9x2x4xf32>) -> (tensor<1x9x4x4xf32>, tensor<1x4x9xf32>)
    ```
  }];
  let arguments = (ins FloatTensor:$query, FloatTensor:$key, FloatTensor:$value,
                   Optional<RngTensor>:$rng, Optional<IdTensor>:$doc_start,
                   DefaultValuedAttr<BoolAttr, "true">:$causal,
                   DefaultValuedAttr<F64Attr, "0.0">:$scale,
                   DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                   DefaultValuedAttr<I64Attr, "0">:$op_id);
  let results = (outs FloatTensor:$result, FloatTensor:$lse);
  // The generic form's syntax, with the document starts after the keyword doc_start.
  let assemblyFormat = [{
    $query `,` $key `,` $value (`,` $rng^)? (`doc_start` `(` $doc_start^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Model_GeluOp : Model_FwdOp<"gelu"> {
  let summary = "GELU (erf form; tanh form when approximate)";
  let description = [{
    ```mlir
    %y = model.gelu %x : (tensor<2x9x64xf32>) -> tensor<2x9x64xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$input, DefaultValuedAttr<BoolAttr, "false">:$approximate);
  let results = (outs FloatTensor:$result);
}

def Model_SwigluOp : Model_FwdOp<"swiglu"> {
  let summary = "y = silu(x[..., :F]) * x[..., F:]";
  let description = [{
    ```mlir
    %y = model.swiglu %x : (tensor<2x9x64xf32>) -> tensor<2x9x32xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$input);
  let results = (outs FloatTensor:$result);
}

def Model_AddOp : Model_FwdOp<"add"> {
  let summary = "Elementwise sum of two tensors of one shape (residual connections)";
  let description = [{
    ```mlir
    %y = model.add %a, %b : (tensor<2x9x16xf32>, tensor<2x9x16xf32>) -> tensor<2x9x16xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$lhs, FloatTensor:$rhs);
  let results = (outs FloatTensor:$result);
}

def Model_CastOp : Model_FwdOp<"cast"> {
  let summary = "Converts a tensor to another float element type (mixed precision)";
  let description = [{
    Round to nearest even when narrowing (f32 -> bf16). Its VJP casts the gradient back to the
    input's type. With `--bf16` the logits are cast to f32 before cross entropy, as Megatron's
    loss computes on `output.float()`.
    ```mlir
    %y = model.cast %x : (tensor<2x9x16xbf16>) -> tensor<2x9x16xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$input);
  let results = (outs FloatTensor:$result);
}

def Model_DropoutOp : Model_FwdOp<"dropout"> {
  let summary = "Dropout with a counter-based mask keyed by (seed, iteration, microbatch, op_id, index)";
  let description = [{
    rng is tensor<3xi64> (seed, iteration, microbatch) or the tensor<4xi64> key of
    `model.rng_offset`, whose last element is added to op_id.
    ```mlir
    %y = model.dropout %x, %rng {p = 1.0e-01 : f64, op_id = 3 : i64} : (tensor<2x9x16xf32>, tensor<3xi64>) -> tensor<2x9x16xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$input, RngTensor:$rng, F64Attr:$p, I64Attr:$op_id);
  let results = (outs FloatTensor:$result);
}

def Model_RngOffsetOp : Model_FwdOp<"rng_offset"> {
  let summary = "A dropout key whose op ids are shifted by `offset`: one per layer call";
  let description = [{
    The key (seed, iteration, microbatch, op_id offset) for the dropout sites of a function
    called once per layer: the caller of layer l passes `offset` = the op ids of the sites before
    it, so each site keeps the op id it would have in a flat model, and the masks do not depend on
    how the model is structured. The offsets of a [4] input add up. No gradient flows through
    a key; its sharding rule replicates it.
    ```mlir
    %key = model.rng_offset %rng {offset = 4 : i64} : (tensor<3xi64>) -> tensor<4xi64>
    ```
  }];
  let arguments = (ins RngTensor:$rng, I64Attr:$offset);
  let results = (outs RngTensor:$result);
}

def Model_CopyToRegionOp : Model_FwdOp<"copy_to_region"> {
  let summary = "Identity forward, all-reduce (sum) of the gradient over mesh axes backward";
  let description = [{
    Megatron's `copy_to_tensor_model_parallel_region` (f) on any mesh axes: the input of a
    column-parallel layer is replicated, each rank's backward produces a partial input gradient,
    and the VJP sums them with `mesh.all_reduce`. It is the conjugate of `mesh.all_reduce`
    (Megatron's g: all-reduce forward, whose VJP is this op). Lowers to no kernel.
    ```mlir
    %y = model.copy_to_region %x on @mesh mesh_axes = [0] : tensor<2x9x16xf32> -> tensor<2x9x16xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$input, FlatSymbolRefAttr:$mesh, DenseI16ArrayAttr:$mesh_axes);
  let results = (outs FloatTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `mesh_axes` `=` $mesh_axes attr-dict `:` type($input) `->` type($result)
  }];
}

def Model_CrossEntropyOp : Model_FwdOp<"cross_entropy"> {
  let summary = "Masked token cross entropy: (loss_sum, num_tokens, lse)";
  let description = [{
    logits [N, V], labels [N] (i32), loss_mask [N]; loss_sum = sum mask * (lse - logit[label]),
    num_tokens = sum mask. Columns at global index >= valid_vocab (padding) are excluded.
    ```mlir
    %l, %n, %lse = model.cross_entropy %logits, %labels, %mask
        : (tensor<18x37xf32>, tensor<18xi32>, tensor<18xf32>) -> (tensor<f32>, tensor<f32>, tensor<18xf32>)
    ```
  }];
  let arguments = (ins FloatTensor:$logits, IdTensor:$labels, FloatTensor:$loss_mask,
                   DefaultValuedAttr<I64Attr, "0">:$vocab_start,
                   DefaultValuedAttr<I64Attr, "-1">:$valid_vocab);
  let results = (outs FloatTensor:$loss_sum, FloatTensor:$num_tokens, FloatTensor:$lse);
}

def Model_BiasAddOp : Model_FwdOp<"bias_add"> {
  let summary = "y = x + bias over the last dim (a row-parallel linear's bias, after the reduction)";
  let description = [{
    Megatron's RowParallelLinear adds its (replicated) bias after the all-reduce of the partial
    products; trainc-shard splits `model.linear %x, %w, %b` into linear, `mesh.all_reduce` and this.
    ```mlir
    %y = model.bias_add %x, %b : (tensor<2x9x16xf32>, tensor<16xf32>) -> tensor<2x9x16xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$input, FloatTensor:$bias);
  let results = (outs FloatTensor:$result);
}

// Vocab-parallel cross entropy (Megatron's VocabParallelCrossEntropy), as trainc-shard emits it
// for logits split by vocabulary: local max -> all-reduce MAX -> local sum-exp and target logit ->
// all-reduce SUM -> ce_combine. The three local ops are not differentiated (no gradient flows into
// them): ce_combine's VJP gives the logits' gradient directly (cross_entropy_grad with the global
// lse), as Megatron's backward, which needs no communication.
def Model_CeLocalMaxOp : Model_Op<"ce_local_max"> {
  let summary = "Row max over this vocabulary shard's valid columns (logits [N, V] -> [N])";
  let arguments = (ins FloatTensor:$logits, DefaultValuedAttr<I64Attr, "0">:$vocab_start,
                   DefaultValuedAttr<I64Attr, "-1">:$valid_vocab);
  let results = (outs FloatTensor:$result);
}
def Model_CeLocalSumExpOp : Model_Op<"ce_local_sumexp"> {
  let summary = "Row sum of exp(logit - max) over this shard's valid columns ([N, V], [N] -> [N])";
  let arguments = (ins FloatTensor:$logits, FloatTensor:$max,
                   DefaultValuedAttr<I64Attr, "0">:$vocab_start,
                   DefaultValuedAttr<I64Attr, "-1">:$valid_vocab);
  let results = (outs FloatTensor:$result);
}
def Model_CeTargetLogitOp : Model_Op<"ce_target_logit"> {
  let summary = "The label's logit when it is a valid column of this shard, else 0 ([N, V], [N] -> [N])";
  let arguments = (ins FloatTensor:$logits, IdTensor:$labels,
                   DefaultValuedAttr<I64Attr, "0">:$vocab_start,
                   DefaultValuedAttr<I64Attr, "-1">:$valid_vocab);
  let results = (outs FloatTensor:$result);
}
def Model_CeCombineOp : Model_Op<"ce_combine", [DeclareOpInterfaceMethods<Model_VJPOpInterface>]> {
  let summary = "(loss_sum, num_tokens, lse) of a vocab-parallel cross entropy from the global "
                "max, sum-exp and target logit";
  let description = [{
    lse = max + log(sumexp), loss_sum = sum mask * (lse - target), num_tokens = sum mask. The
    logits and labels of this rank's shard are operands only for the VJP:
    dlogits = cross_entropy_grad(logits, labels, mask, lse, dloss) with this shard's vocab_start.
    ```mlir
    %l, %n, %lse = model.ce_combine %logits, %labels, %mask, %max, %sumexp, %target {vocab_start = 0 : i64}
        : (tensor<18x32xf32>, tensor<18xi32>, tensor<18xf32>, tensor<18xf32>, tensor<18xf32>, tensor<18xf32>) -> (tensor<f32>, tensor<f32>, tensor<18xf32>)
    ```
  }];
  let arguments = (ins FloatTensor:$logits, IdTensor:$labels, FloatTensor:$loss_mask,
                   FloatTensor:$max, FloatTensor:$sumexp, FloatTensor:$target,
                   DefaultValuedAttr<I64Attr, "0">:$vocab_start,
                   DefaultValuedAttr<I64Attr, "-1">:$valid_vocab);
  let results = (outs FloatTensor:$loss_sum, FloatTensor:$num_tokens, FloatTensor:$lse);
}

//===----------------------------------------------------------------------===//
// Backward ops (emitted by VJP rules)
//===----------------------------------------------------------------------===//

def Model_EmbeddingGradOp : Model_Op<"embedding_grad"> {
  let summary = "Scatter-add of dy rows into a zero [V, H] table gradient";
  let description = [{
    ```mlir
    %dt = model.embedding_grad %ids, %dy : (tensor<2x9xi32>, tensor<2x9x16xf32>) -> tensor<37x16xf32>
    ```
  }];
  let arguments = (ins IdTensor:$ids, FloatTensor:$grad, DefaultValuedAttr<I64Attr, "0">:$vocab_start);
  let results = (outs FloatTensor:$result);
}

def Model_LinearGradInputOp : Model_Op<"linear_grad_input"> {
  let summary = "dx = dy w";
  let description = [{
    ```mlir
    %dx = model.linear_grad_input %dy, %w : (tensor<2x9x48xf32>, tensor<48x16xf32>) -> tensor<2x9x16xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$grad, FloatTensor:$weight);
  let results = (outs FloatTensor:$result);
}

def Model_LinearGradWeightOp : Model_Op<"linear_grad_weight"> {
  let summary = "dw = dy^T x over all rows";
  let description = [{
    ```mlir
    %dw = model.linear_grad_weight %dy, %x : (tensor<2x9x48xf32>, tensor<2x9x16xf32>) -> tensor<48x16xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$grad, FloatTensor:$input);
  let results = (outs FloatTensor:$result);
}

def Model_BiasGradOp : Model_Op<"bias_grad"> {
  let summary = "db = sum of dy over all rows";
  let description = [{
    ```mlir
    %db = model.bias_grad %dy : (tensor<2x9x48xf32>) -> tensor<48xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$grad);
  let results = (outs FloatTensor:$result);
}

def Model_LayerNormGradOp : Model_Op<"layer_norm_grad"> {
  let summary = "dx, dweight, dbias of layer_norm";
  let description = [{
    ```mlir
    %dx, %dg, %db = model.layer_norm_grad %dy, %x, %g, %mean, %rstd : (...) -> (...)
    ```
  }];
  let arguments = (ins FloatTensor:$grad, FloatTensor:$input, FloatTensor:$weight,
                   FloatTensor:$mean, FloatTensor:$rstd);
  let results = (outs FloatTensor:$input_grad, FloatTensor:$weight_grad, FloatTensor:$bias_grad);
}

def Model_RMSNormGradOp : Model_Op<"rms_norm_grad"> {
  let summary = "dx, dweight of rms_norm";
  let description = [{
    ```mlir
    %dx, %dg = model.rms_norm_grad %dy, %x, %g, %rstd : (...) -> (...)
    ```
  }];
  let arguments = (ins FloatTensor:$grad, FloatTensor:$input, FloatTensor:$weight, FloatTensor:$rstd);
  let results = (outs FloatTensor:$input_grad, FloatTensor:$weight_grad);
}

def Model_RopeGradOp : Model_Op<"rope_grad"> {
  let summary = "dx of rope: rotation by the negative angle";
  let description = [{
    ```mlir
    %dx = model.rope_grad %dy, %pos {base = 1.0e+04 : f64} : (tensor<2x9x4x4xf32>, tensor<2x9xi32>) -> tensor<2x9x4x4xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$grad, IdTensor:$positions,
                   DefaultValuedAttr<F64Attr, "10000.0">:$base,
                   DefaultValuedAttr<I64Attr, "0">:$rotary_dim);
  let results = (outs FloatTensor:$result);
}

def Model_AttentionGradOp : Model_Op<"attention_grad", [AttrSizedOperandSegments]> {
  let summary = "dq, dk, dv of attention, recomputing probabilities from the log-sum-exp";
  let description = [{
    With `dropout` > 0 the optional `rng` key, `dropout` and `op_id` are the forward's: the mask
    is regenerated, not stored. The optional `doc_start` is the forward's.
    ```mlir
    %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %lse, %do {causal = true} : (...) -> (...)
    ```
  }];
  let arguments = (ins FloatTensor:$query, FloatTensor:$key, FloatTensor:$value, FloatTensor:$out,
                   FloatTensor:$lse, FloatTensor:$grad, Optional<RngTensor>:$rng,
                   Optional<IdTensor>:$doc_start,
                   DefaultValuedAttr<BoolAttr, "true">:$causal,
                   DefaultValuedAttr<F64Attr, "0.0">:$scale,
                   DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                   DefaultValuedAttr<I64Attr, "0">:$op_id);
  let results = (outs FloatTensor:$query_grad, FloatTensor:$key_grad, FloatTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $out `,` $lse `,` $grad (`,` $rng^)?
    (`doc_start` `(` $doc_start^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
}

def Model_GeluGradOp : Model_Op<"gelu_grad"> {
  let summary = "dx of gelu";
  let description = [{
    ```mlir
    %dx = model.gelu_grad %dy, %x : (tensor<2x9x64xf32>, tensor<2x9x64xf32>) -> tensor<2x9x64xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$grad, FloatTensor:$input,
                   DefaultValuedAttr<BoolAttr, "false">:$approximate);
  let results = (outs FloatTensor:$result);
}

def Model_SwigluGradOp : Model_Op<"swiglu_grad"> {
  let summary = "dx of swiglu";
  let description = [{
    ```mlir
    %dx = model.swiglu_grad %dy, %x : (tensor<2x9x32xf32>, tensor<2x9x64xf32>) -> tensor<2x9x64xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$grad, FloatTensor:$input);
  let results = (outs FloatTensor:$result);
}

def Model_DropoutGradOp : Model_Op<"dropout_grad"> {
  let summary = "dx of dropout: the same regenerated mask applied to dy";
  let description = [{
    ```mlir
    %dx = model.dropout_grad %dy, %rng {p = 1.0e-01 : f64, op_id = 3 : i64} : (tensor<2x9x16xf32>, tensor<3xi64>) -> tensor<2x9x16xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$grad, RngTensor:$rng, F64Attr:$p, I64Attr:$op_id);
  let results = (outs FloatTensor:$result);
}

def Model_CrossEntropyGradOp : Model_Op<"cross_entropy_grad"> {
  let summary = "dlogits = dloss_sum * mask * (softmax - onehot)";
  let description = [{
    ```mlir
    %dl = model.cross_entropy_grad %logits, %labels, %mask, %lse, %dloss
        : (tensor<18x37xf32>, tensor<18xi32>, tensor<18xf32>, tensor<18xf32>, tensor<f32>) -> tensor<18x37xf32>
    ```
  }];
  let arguments = (ins FloatTensor:$logits, IdTensor:$labels, FloatTensor:$loss_mask,
                   FloatTensor:$lse, FloatTensor:$loss_grad,
                   DefaultValuedAttr<I64Attr, "0">:$vocab_start,
                   DefaultValuedAttr<I64Attr, "-1">:$valid_vocab);
  let results = (outs FloatTensor:$result);
}

#endif
