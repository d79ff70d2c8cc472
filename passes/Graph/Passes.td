//===- Passes.td - CUDA graph capture regions -----------------------------===//
#ifndef TRAINC_PASSES_GRAPH
#define TRAINC_PASSES_GRAPH
include "mlir/Pass/PassBase.td"

def CudaGraphPass : Pass<"trainc-cuda-graph", "::mlir::ModuleOp"> {
  let summary = "Mark the training iteration as one graph-capture region and verify it";
  let description = [{
    Megatron's `--cuda-graph-impl full_iteration` on rt IR (after trainc-lower-to-rt). The mode is
    the option `impl` when given, else the module attribute `trainc.cuda_graph_impl` (a string
    the driver sets from the flag), else "none", which leaves the module unchanged. Other modes
    ("local", Megatron's per-layer graphs) are refused.

    With "full_iteration" the body of the `rt.entry` function (every microbatch, the bucket
    reductions, gradient finalize, grad norm, clipping, the found-inf/NaN predicate, the
    optimizer step, the parameter all-gathers) becomes one region "iteration":
    `rt.region begin "iteration"` right after the entry's `rt.host_io fill_inputs` (the host
    copies the batch and the per-step scalars lr, weight_decay, step into their static device
    buffers before the region; device work the entry placed before the fill point moves after it
    when it touches no input or scalar buffer), `rt.region end "iteration"` right before the
    final `rt.host_io read_outputs` (or before the return). Then it verifies the region, the
    functions it calls included:
      - no rt.host_io inside (no host callback can run inside a replayed graph; a read_outputs
        inside is a host-read scalar: the host would read loss, grad norm or the found-inf flag
        mid-iteration);
      - no op inside writes a buffer the host writes before each step (an `input`, or a
        `scalar` with the host-written roles lr, weight_decay, step): a replay would overwrite
        the host's value with the captured one, so every varying value must be read from the
        device scalars the host writes before the region;
      - no rt.collective barrier inside (it synchronises the host);
      - no async token is carried from one iteration into the next (`rt.carried_tokens`,
        --overlap-param-gather): its wait would be outside the captured graph;
      - the module has no graph-capture region yet.
    Shapes are static by construction (every rt operand is a statically shaped memref).
    Each error names the offending op (and the call that reaches it).
  }];
  let options = [
    Option<"graphImpl", "impl", "std::string", "\"\"",
           "none or full_iteration (empty: the module's trainc.cuda_graph_impl, else none)">,
  ];
  let dependentDialects = ["::mlir::trainc::rt::RtDialect"];
}

#endif
