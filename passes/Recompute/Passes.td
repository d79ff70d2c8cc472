//===- Passes.td - Activation recompute passes ----------------------------===//
#ifndef TRAINC_PASSES_RECOMPUTE
#define TRAINC_PASSES_RECOMPUTE
include "mlir/Pass/PassBase.td"

def RecomputePass : Pass<"trainc-recompute", "::mlir::ModuleOp"> {
  let summary = "Activation recompute: re-run a layer's forward in the backward (Megatron's "
                "full recompute)";
  let description = [{
    Runs after trainc-autodiff on every differentiated function (one that calls the `@f.fwd`
    halves of layers, `model.layer_index`). For each recompute group of layers (the plan's
    `recompute` field or the option: `full:uniform:N` groups N consecutive layers,
    `full:block:N` recomputes each of the first N layers alone; `none` changes nothing):

    - the forward calls the plain layer `@f` (results only, no residuals), tagged
      `model.recompute = "checkpoint"` and `model.recompute_group = g`;
    - right before the group's first backward use (the `@f.bwd` call of its last layer) the
      group's layers are re-run as calls of `@f.fwd` from the group's input, tagged
      `model.recompute = "replay"`, and every backward use of the group's values reads the
      replayed ones.

    So the backward (and the stash trainc-schedule-units computes) reads only the group's
    inputs. The dropout keys are the same SSA values (`model.rng_offset` per layer), so a replay
    draws the same masks. The FLOPs a replay adds per iteration are recorded on the module as
    `trainc.recompute_flops_per_iteration` (hardware FLOPs, not model FLOPs).

    Before:
    ```mlir
    %l0:3 = call @layer.fwd(%x, ...) {model.layer_index = 0 : i64}
    ...
    %b0:3 = call @layer.bwd(%x, ..., %l0#1, %l0#2, %dy) {model.layer_index = 0 : i64}
    ```
    After (`full:uniform:1`):
    ```mlir
    %l0 = call @layer(%x, ...) {model.layer_index = 0 : i64, model.recompute = "checkpoint", model.recompute_group = 0 : i64}
    ...
    %r0:3 = call @layer.fwd(%x, ...) {model.layer_index = 0 : i64, model.recompute = "replay", model.recompute_group = 0 : i64}
    %b0:3 = call @layer.bwd(%x, ..., %r0#1, %r0#2, %dy) {model.layer_index = 0 : i64}
    ```
  }];
  let options = [
    Option<"recompute", "recompute", "std::string", "\"none\"",
           "none, full:uniform:N or full:block:N (the plan's recompute field)">,
  ];
  let dependentDialects = ["::mlir::trainc::model::ModelDialect",
                           "::mlir::func::FuncDialect"];
}

def RecomputeSelectivePass : Pass<"trainc-recompute-selective", "::mlir::ModuleOp"> {
  let summary = "Selective recompute: mark core attention for re-materialisation in the backward";
  let description = [{
    Runs before trainc-autodiff. With recompute = "selective" (the plan's field or the option;
    Megatron's --recompute-activations; "selective:core_attn,mlp" names Megatron's
    --recompute-modules) the ops of each module in every layer function (one with
    `model.layer`) get `model.recompute = "selective"`: core_attn is `model.attention`; mlp is
    linear_fc1 and the ops from it to linear_fc2's input (bias, activation). Autodiff then treats
    them as views: their results are not residuals of `@f.fwd`, and `@f.bwd` re-runs them from
    their inputs (q, k, v and the dropout key; the pre-MLP norm output), which the backward needs
    anyway, right before their first use there. The FLOPs the replays add per microbatch (the tagged ops, once per
    call of their function from the forward function) are recorded as
    `trainc.recompute_flops_per_microbatch`. Any other value changes nothing.
  }];
  let options = [
    Option<"recompute", "recompute", "std::string", "\"none\"",
           "selective tags core attention (the plan's recompute field)">,
    Option<"function", "function", "std::string", "\"forward\"",
           "The forward function whose layer calls count the replayed FLOPs">,
  ];
  let dependentDialects = ["::mlir::trainc::model::ModelDialect",
                           "::mlir::func::FuncDialect"];
}

#endif
