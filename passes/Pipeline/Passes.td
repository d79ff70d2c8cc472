//===- Passes.td - Schedule passes ----------------------------------------===//
#ifndef TRAINC_PASSES_PIPELINE
#define TRAINC_PASSES_PIPELINE
include "mlir/Pass/PassBase.td"

def ScheduleNoPipeliningPass : Pass<"trainc-schedule", "::mlir::ModuleOp"> {
  let summary = "Build the iteration function of a single-stage rank (Megatron's no-pipelining)";
  let description = [{
    Megatron's forward_backward_no_pipelining: for every microbatch, forward then backward of the
    stage function, gradients accumulated; then finalize and the optimizer step. Microbatches call
    the stage function (no cloning), so the program is O(layers + microbatches).

    After (added):
    ```mlir
    func.func @train_step() attributes {sched.iteration, sched.num_microbatches = 2 : i64} {
      sched.zero_grads
      sched.fill_inputs "batch"
      sched.microbatch @forward_backward {index = 0 : i64}
      sched.microbatch @forward_backward {index = 1 : i64}
      sched.finalize_grads {normalization = "per_token"}
      sched.optimizer_step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, clip_grad = 1.0 : f64}
      sched.read_outputs "outputs"
      return
    }
    func.func @eval_step() attributes {sched.iteration, sched.eval, ...} {
      sched.zero_losses
      sched.fill_inputs "eval_batch"
      sched.microbatch @forward_only {index = 0 : i64}
      ...
      sched.read_outputs "eval_outputs"
      return
    }
    ```
  }];
  let options = [
    Option<"stage", "stage", "std::string", "\"forward_backward\"", "The stage function">,
    Option<"entry", "entry", "std::string", "\"train_step\"", "Name of the iteration function">,
    Option<"numMicrobatches", "num-microbatches", "int64_t", "1", "Microbatches per iteration">,
    Option<"beta1", "adam-beta1", "double", "0.9", "Adam beta1">,
    Option<"beta2", "adam-beta2", "double", "0.999", "Adam beta2">,
    Option<"eps", "adam-eps", "double", "1e-8", "Adam epsilon">,
    Option<"clipGrad", "clip-grad", "double", "1.0", "Global grad-norm clip (0 disables)">,
    Option<"eval", "eval", "bool", "true",
           "Also build @eval_step: forward-only microbatches of the forward function (@forward), "
           "summing (loss_sum, num_tokens) for evaluation">,
  ];
  let dependentDialects = ["::mlir::trainc::sched::SchedDialect"];
}

def PipelineSplitPass : Pass<"trainc-pipeline-split", "::mlir::ModuleOp"> {
  let summary = "Keep one pipeline stage's part of the model function";
  let description = [{
    Runs on the model IR, before autodiff, once per pipeline stage (the driver compiles each
    stage's copy of the module separately; ranks of one stage differ only in data). The decoder
    layers (`func.call` with `model.layer_index`) split evenly over the `pp` stages of the plan:
    stage s keeps layers [s L / P, (s + 1) L / P), or with `first-stage-layers` /
    `last-stage-layers` those counts on the first / last stage and the rest evenly over the
    others (Megatron's uneven split); the embedding stays on the first stage, the
    final norm, output layer and loss on the last (Megatron's default split). The activation
    entering stage s > 0 is `mesh.recv` from pp coordinate s - 1; the one leaving stage s < P - 1
    is `mesh.send` to s + 1, and such a stage returns (loss_sum, num_tokens) = (0, 0). Autodiff
    seeds the gradient of a sent value with a `mesh.recv` from its destination, and mesh.recv's
    VJP sends the input gradient back, so the backward's p2p is derived, not placed.
    Parameters the stage does not read are removed from the signature (inputs stay). A parameter
    read on two stages (GPT's tied word embedding: embedding on the first, output layer on the
    last) is listed in `trainc.pipeline_shared`: each stage holds a copy, their gradients are
    summed over the embd group in finalize. The module gets `trainc.pipeline_stage`,
    `trainc.pipeline_size` and `trainc.pipeline_layers` ([first, end) layer).

    With `virtual-stages` V > 1 (interleaved 1F1B; layers divisible by V x P, even split only)
    the stage holds V model chunks: chunk v keeps layer block v P + s of V P blocks (Megatron's
    model chunk order). Each chunk but stage 0's first receives its input from pp coordinate
    (s - 1) mod P and each but stage P - 1's last sends its output to (s + 1) mod P (the last
    stage's chunk v feeds the first stage's chunk v + 1). `trainc.pipeline_layers` lists the
    chunks' [first, end) pairs, `trainc.pipeline_virtual_stages` is V (and
    `trainc.microbatch_group_size_per_vp_stage` the group size when given); trainc-schedule-units
    splits the chunks into units of their own.

    After (stage 1 of 2, tiny model):
    ```mlir
    %t = model.fill {value = 0.0 : f64} : () -> tensor<1x9x16xf32>
    %x = mesh.recv %t on @mesh mesh_axes = [4] source = [0] : (tensor<1x9x16xf32>) -> tensor<1x9x16xf32>
    %1 = call @decoder_layer(%x, ...) {model.layer_index = 1 : i64}
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"forward\"", "The model function">,
    Option<"stage", "stage", "int64_t", "0", "The pipeline stage to keep">,
    Option<"numStages", "num-stages", "int64_t", "1",
           "Pipeline stages (default: the plan's pp)">,
    Option<"firstStageLayers", "first-stage-layers", "int64_t", "0",
           "Layers of the first stage (Megatron's --decoder-first-pipeline-num-layers; 0: even)">,
    Option<"lastStageLayers", "last-stage-layers", "int64_t", "0",
           "Layers of the last stage (--decoder-last-pipeline-num-layers; 0: even)">,
    Option<"virtualStages", "virtual-stages", "int64_t", "1",
           "Model chunks per stage (default: the plan's virtual_stages; Megatron's "
           "--virtual-pipeline-model-parallel-size)">,
    Option<"microbatchGroupSize", "microbatch-group-size", "int64_t", "0",
           "Megatron's --microbatch-group-size-per-vp-stage, recorded for the interleaved "
           "schedule (0: the pipeline size)">,
  ];
  let dependentDialects = ["::mlir::mesh::MeshDialect", "::mlir::trainc::model::ModelDialect"];
}

def ScheduleUnitsPass : Pass<"trainc-schedule-units", "::mlir::ModuleOp"> {
  let summary = "Split stage functions into forward and backward units and order them";
  let description = [{
    Runs last in the schedule phase (after trainc-grad-buckets). Every stage function called by
    `sched.microbatch` in the training iteration is split at its loss seed into a forward unit
    (`<stage>.forward`: the ops before the seed plus the loss accumulation; returns the
    activations the backward reads, its *stash*) and a backward unit (`<stage>.backward`: the
    seed and everything after it; takes the stage's arguments plus the stash, tagged
    `sched.stash`). Reshapes of forward values are re-materialised in the backward instead of
    stashed. Forward units with identical bodies (the `_last` clone's forward is the stage's) are
    shared. The microbatch calls are then replaced by one `sched.forward` / `sched.backward` per
    microbatch, in the order of `schedule`:

    - `no-pipelining` (default): Megatron's forward_backward_no_pipelining, F0 B0 F1 B1 ...,
      one microbatch in flight;
    - `all-forward-first` (for tests): F0 .. Fm-1 then B0 .. Bm-1, m stashes in flight;
    - `1f1b`: Megatron's forward_backward_pipelining_without_interleaving on pipeline stage s of
      P (`trainc.pipeline_stage` / `trainc.pipeline_size`, set by trainc-pipeline-split):
      warmup = min(P - s - 1, m) forwards, then one forward and one backward per step, then the
      remaining backwards; stage s holds warmup + 1 stashes (min(P - s, m)).
    - `interleaved`: Megatron's forward_backward_pipelining_with_interleaving on a stage of V
      model chunks (`trainc.pipeline_virtual_stages`): the stage function is split into a
      forward and a backward unit per chunk (`<stage>.chunk<v>.forward` / `.backward`; every op
      belongs to one chunk; a bucket's gradient sync goes to the end of the backward of the
      lowest chunk holding one of its parameters, which runs after the others in the last
      microbatch), ordered by interleavedOneForwardOneBackward (Passes.h). Megatron's checks
      (m % P == 0, the microbatch group size) are errors with Megatron's message.

    - `zb-h1`: the zero-bubble H1 schedule (Qi et al. 2023, arXiv 2401.10241) on a stage of
      P: each backward unit split by dataflow into `<stage>.backward.input` (B: input
      gradients and their sends) and `.backward.weight` (W: parameter gradients, accumulation,
      gradient syncs), layer backward calls split the same way (splitWeightGradients,
      Passes.h); `sched.backward_input` / `sched.backward_weight` ordered by zeroBubbleH1; the
      three units of a microbatch share one stash slot (`sched.stash_layout`).

    Both give bitwise the same gradients (the same kernels on the same data; accumulation into
    the main grads stays in microbatch order).

    Before: `sched.microbatch @forward_backward {index = 0 : i64}` ...
    After:
    ```mlir
    %0 = sched.forward @forward_backward.forward microbatch 0 chunk 0
    sched.backward @forward_backward.backward(%0) microbatch 0 chunk 0
    %1 = sched.forward @forward_backward.forward microbatch 1 chunk 0
    sched.backward @forward_backward_last.backward(%1) microbatch 1 chunk 0
    ```
  }];
  let options = [
    Option<"schedule", "schedule", "std::string", "\"no-pipelining\"",
           "Unit order: no-pipelining (Megatron's), 1f1b (pipeline stages), interleaved "
           "(model chunks), zb-h1 (zero bubble) or all-forward-first (tests)">,
  ];
  let dependentDialects = ["::mlir::trainc::sched::SchedDialect"];
}

#endif
