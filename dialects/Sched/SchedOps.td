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
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/SymbolInterfaces.td"

def Sched_Dialect : Dialect {
  let name = "sched";
  let summary = "The training iteration: microbatch calls, gradient accumulation, optimizer step";
  let cppNamespace = "::mlir::trainc::sched";
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  // The discardable attributes of the dialect, each checked once here: on functions
  // sched.stage, sched.iteration, sched.eval, sched.first_microbatch, sched.last_microbatch
  // (unit), sched.num_microbatches (positive integer), sched.schedule (string), sched.unit
  // ("forward" | "backward"); on the module sched.plan (#sched.plan); on arguments sched.stash
  // (non-negative integer). Any other sched.* name is an error.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  // Loads the trainc dialect, which verifies the trainc.* module attributes.
  let dependentDialects = ["::mlir::trainc::top::TraincDialect"];
}

class Sched_Op<string mnemonic, list<Trait> traits = []> : Op<Sched_Dialect, mnemonic, traits>;

def Sched_PlanAttr : AttrDef<Sched_Dialect, "Plan"> {
  let mnemonic = "plan";
  let summary = "The one plan of a compile: model shape, parallel layout, batch, optimizer";
  let description = [{
    Set once by the frontends (Megatron flags, a Hugging Face config.json, a preset, or written in
    a `.mlir` input) as the module attribute `sched.plan`; passes read it, and a pass option given
    explicitly (trainc-opt) overrides the field it names. Names follow Megatron's flags. The
    verifier checks the fields against each other (e.g. global_batch_size = micro_batch_size x dp
    x num_microbatches) and names the fields in its message; the parser names a missing field.
    ```mlir
    module attributes {sched.plan = #sched.plan<num_layers = 2, hidden_size = 16, ...>} { ... }
    ```
  }];
  let parameters = (ins
    "int64_t":$num_layers, "int64_t":$hidden_size, "int64_t":$num_attention_heads,
    "int64_t":$num_query_groups, "int64_t":$ffn_hidden_size, "int64_t":$seq_length,
    "int64_t":$padded_vocab_size,
    "int64_t":$tp, "int64_t":$cp, "int64_t":$ep, "int64_t":$dp, "int64_t":$pp,
    "int64_t":$virtual_stages,
    "int64_t":$micro_batch_size, "int64_t":$global_batch_size, "int64_t":$num_microbatches,
    StringRefParameter<"fp32, fp64 (gradient checks), bf16 or fp16">:$params_dtype,
    StringRefParameter<"adam">:$optimizer,
    "::mlir::FloatAttr":$adam_beta1, "::mlir::FloatAttr":$adam_beta2,
    "::mlir::FloatAttr":$adam_eps, "::mlir::FloatAttr":$clip_grad,
    "::mlir::FloatAttr":$weight_decay,
    StringRefParameter<"per_token or per_microbatch">:$loss_mode,
    "int64_t":$bucket_size, "::mlir::BoolAttr":$distributed_optimizer,
    "::mlir::BoolAttr":$overlap_param_gather,
    StringRefParameter<"no-pipelining (all-forward-first for tests)">:$schedule,
    StringRefParameter<"none, selective, full:uniform:N or full:block:N">:$recompute
  );
  // Fields as `name = value` in any order; the parser names a missing, unknown, repeated or
  // mistyped field.
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The fields in print order, each as an IntegerAttr (i64), FloatAttr (f64), BoolAttr or
    /// StringAttr.
    ::llvm::SmallVector<std::pair<::llvm::StringRef, ::mlir::Attribute>> getFields() const;
    /// A plan from every field by name (kinds as getFields gives them); null after an error
    /// through `emitError` when a field is missing, mistyped or the plan is inconsistent.
    static PlanAttr fromFields(::mlir::MLIRContext *ctx,
                               const ::llvm::StringMap<::mlir::Attribute> &fields,
                               ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError);
    /// This plan with field `name` set to `value`. Setting micro_batch_size, dp or
    /// num_microbatches also sets global_batch_size to their product. Null after an error.
    PlanAttr withField(::llvm::StringRef name, ::mlir::Attribute value,
                       ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError) const;
  }];
}

def Sched_NormalizationCases : I32EnumAttr<"Normalization",
    "loss normalisation: per_token (exact global per-token mean; Megatron's "
    "--calculate-per-token-loss) or per_microbatch (Megatron's legacy mean of microbatch means)",
    [I32EnumAttrCase<"per_token", 0>, I32EnumAttrCase<"per_microbatch", 1>]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::trainc::sched";
}
def Sched_NormalizationAttr
    : EnumAttr<Sched_Dialect, Sched_NormalizationCases, "normalization">;

def Sched_StashType : TypeDef<Sched_Dialect, "Stash"> {
  let mnemonic = "stash";
  let summary = "The activations one forward unit saved for its backward unit (a handle)";
  let description = [{
    The value produced by `sched.forward` and consumed by the matching `sched.backward`. The
    tensors it stands for are the results of the forward unit's function (equal to the trailing
    `sched.stash` arguments of the backward unit's function); lowering binds each live stash to
    one set of activation buffers (a stash slot).
  }];
}

def Sched_TokenType : TypeDef<Sched_Dialect, "Token"> {
  let mnemonic = "token";
  let summary = "An asynchronous collective in flight; the wait that consumes it completes it";
  let description = [{
    Produced by `sched.grad_sync_start` and `sched.param_gather_start`, consumed by the matching
    wait. Tokens leave a stage function as its results (`sched.microbatch` / `sched.backward`
    results) and enter one as arguments (`sched.microbatch` / `sched.forward` operands). The
    training iteration's token arguments are its token results of the previous iteration (the
    all-gathers that `--overlap-param-gather` leaves in flight across the step boundary); an
    iteration that has not run yet leaves nothing in flight. Lowering gives each start its
    runtime token number and each wait the number of the start its token comes from.
  }];
}

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
    The callee is a stage function whose arguments are parameters (model.param), per-microbatch
    inputs (model.input) and the tokens it waits on (`waits`, its trailing arguments);
    parameters bind to the persistent buffers and inputs to the buffers of microbatch `index`.
    Its results are the tokens of the collectives it starts. Calling, not cloning, keeps
    programs O(layers + microbatches).
    ```mlir
    sched.microbatch @forward_backward {index = 1 : i64}
    %t = sched.microbatch @forward_backward_last {index = 2 : i64} -> !sched.token
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, I64Attr:$index,
                   Variadic<Sched_TokenType>:$waits);
  let results = (outs Variadic<Sched_TokenType>:$tokens);
  let assemblyFormat = "$callee (`(` $waits^ `)`)? attr-dict (`->` type($tokens)^)?";
}

def Sched_ForwardOp : Sched_Op<"forward", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The forward unit of `chunk` on `microbatch`; its stash feeds the backward unit";
  let description = [{
    The callee (a stage function split by trainc-schedule-units) takes the stage's parameters
    (model.param) and the microbatch's inputs (model.input) and returns the activations its
    backward needs; it accumulates (loss_sum, num_tokens). The result is a handle to them.
    ```mlir
    %s0 = sched.forward @forward_backward.forward microbatch 0 chunk 0
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, I64Attr:$microbatch, I64Attr:$chunk,
                   Variadic<Sched_TokenType>:$waits);
  let results = (outs Sched_StashType:$stash);
  let assemblyFormat = [{
    $callee (`(` $waits^ `)`)? `microbatch` $microbatch `chunk` $chunk attr-dict
  }];
}

def Sched_BackwardOp : Sched_Op<"backward", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The backward unit of `chunk` on `microbatch`: consumes its forward's stash";
  let description = [{
    The callee takes the parameters, the microbatch's inputs and the stash tensors of the
    matching `sched.forward` (arguments tagged `sched.stash`), and accumulates the parameter
    gradients into the main grads. Each stash is consumed exactly once, by the unit of the same
    microbatch and chunk.
    ```mlir
    sched.backward @forward_backward.backward(%s0) microbatch 0 chunk 0
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, Sched_StashType:$stash, I64Attr:$microbatch,
                       I64Attr:$chunk);
  let results = (outs Variadic<Sched_TokenType>:$tokens);
  let assemblyFormat = [{
    $callee `(` $stash `)` `microbatch` $microbatch `chunk` $chunk attr-dict
    (`->` type($tokens)^)?
  }];
  let hasVerifier = 1;
}

def Sched_BackwardInputOp : Sched_Op<"backward_input",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "ZB-H1's B unit: the input gradients of `chunk` on `microbatch`";
  let description = [{
    The zero-bubble schedule's split backward (Qi et al. 2023, arXiv 2401.10241): the callee
    computes the gradients that flow to the previous stage (and sends them) from the parameters,
    the inputs and the stash of the matching `sched.forward` (arguments tagged `sched.stash`),
    and returns the values its weight-gradient unit needs (the B -> W stash). The result is a
    handle to the forward's stash and those values together, consumed once by
    `sched.backward_weight` of the same microbatch and chunk.
    ```mlir
    %b0 = sched.backward_input @forward_backward.backward.input(%s0) microbatch 0 chunk 0
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, Sched_StashType:$stash, I64Attr:$microbatch,
                       I64Attr:$chunk);
  let results = (outs Sched_StashType:$weightStash);
  let assemblyFormat = [{
    $callee `(` $stash `)` `microbatch` $microbatch `chunk` $chunk attr-dict
  }];
  let hasVerifier = 1;
}

def Sched_BackwardWeightOp : Sched_Op<"backward_weight",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "ZB-H1's W unit: the parameter gradients of `chunk` on `microbatch`";
  let description = [{
    The callee takes the parameters, the inputs, the forward's stash and the values of the
    matching `sched.backward_input` (all tagged `sched.stash`, in that order), accumulates the
    parameter gradients into the main grads and starts the gradient syncs; its results are those
    syncs' tokens.
    ```mlir
    sched.backward_weight @forward_backward.backward.weight(%b0) microbatch 0 chunk 0
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, Sched_StashType:$stash, I64Attr:$microbatch,
                       I64Attr:$chunk);
  let results = (outs Variadic<Sched_TokenType>:$tokens);
  let assemblyFormat = [{
    $callee `(` $stash `)` `microbatch` $microbatch `chunk` $chunk attr-dict
    (`->` type($tokens)^)?
  }];
  let hasVerifier = 1;
}

def Sched_AccumulateGradOp : Sched_Op<"accumulate_grad",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Add a microbatch's parameter gradient into the fp32 main_grad of `param`";
  let description = [{
    `param` is the parameter's `model.parameter` symbol; the gradient has its shape.
    ```mlir
    sched.accumulate_grad %dw into @output_layer.weight : tensor<37x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$grad, FlatSymbolRefAttr:$param);
  let assemblyFormat = "$grad `into` $param attr-dict `:` type($grad)";
}

def Sched_AccumulateLossOp : Sched_Op<"accumulate_loss"> {
  let summary = "Add a microbatch's (loss_sum, num_tokens) into the iteration's loss outputs";
  let description = [{
    Both normalizations add the sums (the logged loss is Megatron's Sigma loss / Sigma tokens in
    either mode); "per_microbatch" (Megatron's legacy mode) differs only in its gradient seed.
    ```mlir
    sched.accumulate_loss %l, %n per_token : tensor<f32>, tensor<f32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$loss_sum, AnyRankedTensor:$num_tokens,
                   Sched_NormalizationAttr:$normalization);
  let assemblyFormat = [{
    $loss_sum `,` $num_tokens $normalization attr-dict `:` type($loss_sum) `,` type($num_tokens)
  }];
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
    sched.finalize_grads per_token
    ```
  }];
  let arguments = (ins Sched_NormalizationAttr:$normalization);
  let assemblyFormat = "$normalization attr-dict";
  
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

def Sched_AdamWOp : Sched_Op<"adamw", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "AdamW update of one parameter, predicated on update_successful";
  let description = [{
    `param` is the parameter's `model.parameter` symbol; its main_grad and its Adam states
    (exp_avg, exp_avg_sq) are the ones lowering allocates for that parameter.
    ```mlir
    sched.adamw @output_layer.weight {decay = true, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64}
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, BoolAttr:$decay, F64Attr:$beta1, F64Attr:$beta2,
                   F64Attr:$eps);
  let assemblyFormat = "$param attr-dict";
}

//===----------------------------------------------------------------------===//
// Data parallelism (Megatron's DistributedDataParallel, _ParamAndGradBuffer, DistributedOptimizer)
//===----------------------------------------------------------------------===//

def Sched_GradBufferOp : Sched_Op<"grad_buffer", [Symbol, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Layout of the contiguous main-grad buffer: parameter ranges and buckets";
  let description = [{
    One fp32 buffer holds every parameter's main_grad. `params[i]` occupies elements
    [offsets[i], offsets[i] + numel(param)); parameters are placed in the order their gradients
    become final in backward (Megatron: reverse order of use); each is a `model.parameter` symbol. `bucket_bounds` has one more entry
    than there are buckets: bucket b is [bucket_bounds[b], bucket_bounds[b+1]). With the
    distributed optimizer every bucket's size is a multiple of `dp` and DP rank r owns the shard
    [start + r * size / dp, start + (r + 1) * size / dp) of each bucket; padding elements belong to
    no parameter. `numel` is the padded total.
    ```mlir
    sched.grad_buffer @main_grad {params = [@b, @a], offsets = array<i64: 0, 6>, sizes = array<i64: 6, 10>, numel = 16 : i64,
                       bucket_bounds = array<i64: 0, 6, 16>, dp = 2 : i64, distributed_optimizer}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, FlatSymbolRefArrayAttr:$params, DenseI64ArrayAttr:$offsets, DenseI64ArrayAttr:$sizes,
                   I64Attr:$numel, DenseI64ArrayAttr:$bucket_bounds, I64Attr:$dp,
                   UnitAttr:$distributed_optimizer, UnitAttr:$overlap_param_gather);
  let assemblyFormat = "$sym_name attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumBuckets() { return int64_t(getBucketBounds().size()) - 1; }
  }];
}

class Sched_AsyncStartOp<string mnemonic, string what>
    : Sched_Op<mnemonic, [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Start " # what # " (async; the token's wait completes it)";
  let arguments = (ins FlatSymbolRefAttr:$buffer, I64Attr:$bucket);
  let results = (outs Sched_TokenType:$token);
  let assemblyFormat = "$buffer `bucket` $bucket attr-dict";
}

class Sched_AsyncWaitOp<string mnemonic, string what> : Sched_Op<mnemonic> {
  let summary = "Wait for " # what # " that `token` stands for";
  let arguments = (ins Sched_TokenType:$token);
  let assemblyFormat = "$token attr-dict";
}

def Sched_GradSyncStartOp
    : Sched_AsyncStartOp<"grad_sync_start", "the data-parallel reduction of one gradient bucket"> {
  let description = [{
    Bucket `bucket` of the main-grad buffer `buffer` (a sched.grad_buffer). Plain DP all-reduces
    (sum) the bucket; the distributed optimizer reduce-scatters it so that each DP rank holds
    the reduced values of its shard. Placed right after the op that writes the bucket's last
    gradient contribution in the last microbatch.
    ```mlir
    %t = sched.grad_sync_start @main_grad bucket 0
    ```
  }];
}

def Sched_GradSyncWaitOp : Sched_AsyncWaitOp<"grad_sync_wait", "a bucket's gradient reduction"> {
  let description = [{
    ```mlir
    sched.grad_sync_wait %t
    ```
  }];
}

def Sched_ParamGatherStartOp
    : Sched_AsyncStartOp<"param_gather_start",
                         "the all-gather of one bucket of updated parameters (distributed optimizer)"> {
  let description = [{
    ```mlir
    %t = sched.param_gather_start @main_grad bucket 0
    ```
  }];
}

def Sched_ParamGatherWaitOp
    : Sched_AsyncWaitOp<"param_gather_wait", "a bucket's parameter all-gather"> {
  let description = [{
    ```mlir
    sched.param_gather_wait %t
    ```
  }];
}

def Sched_ReduceLossesOp : Sched_Op<"reduce_losses"> {
  let summary = "All-reduce (loss_sum, num_tokens) over the data-parallel group (sum)";
  let description = [{
    After it every DP rank holds the global batch's loss sum and token count, which the per-token
    normalisation and the log use.
    ```mlir
    sched.reduce_losses
    ```
  }];
  let assemblyFormat = "attr-dict";
}


//===----------------------------------------------------------------------===//
// Tensor parallelism: asynchronous collectives (trainc-tp-comm-overlap)
//===----------------------------------------------------------------------===//

def Sched_CollectiveWaitOp
    : Sched_Op<"collective_wait", [AllTypesMatch<["input", "result"]>]> {
  let summary = "Wait for an asynchronous tensor collective; its result is the completed value";
  let description = [{
    `input` is the result of a mesh.all_reduce / reduce_scatter / all_gather marked
    `sched.async` (started asynchronously where it stands, on the communication stream); this op
    completes it, and its result is the collective's value. Users of the collective read this
    result, so every op between the collective and the wait runs while it is in flight
    (Megatron's LinearWithGradAccumulationAndAsyncCommunication: the input-gradient all-reduce
    overlaps the weight-gradient GEMM). Placed by trainc-tp-comm-overlap; lowering gives the
    collective runtime tokens and this op an rt.wait per token.
    ```mlir
    %r = mesh.all_reduce %dx on @mesh mesh_axes = [0] {sched.async} : tensor<2x9x16xf32> -> tensor<2x9x16xf32>
    %dw = model.linear_grad_weight %dy, %x : (tensor<2x9x32xf32>, tensor<2x9x16xf32>) -> tensor<32x16xf32>
    %dx_total = sched.collective_wait %r : tensor<2x9x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}
#endif
