//===- Passes.td - Memory planning ----------------------------------------===//
#ifndef TRAINC_PASSES_MEMORY
#define TRAINC_PASSES_MEMORY
include "mlir/Pass/PassBase.td"

def MemoryPlanPass : Pass<"trainc-memory-plan", "::mlir::ModuleOp"> {
  let summary = "Assign every rt.buffer a static arena offset by liveness over the linear schedule";
  let description = [{
    Persistent buffers (parameter, main_grad, master_param, optimizer_state, input, output, scalar)
    are laid out first, each 64-byte aligned, in declaration order. Flowing buffers (activation,
    workspace) live from the first to the last instruction of their function that touches them;
    two flowing buffers share memory only if their live ranges do not intersect. A function's
    flowing buffers form a frame; a callee's frame is live in its caller from the first to the last
    call. Placement is greedy first-fit, largest first. Sets `offset` on every buffer and
    `rt.arena_bytes`, `rt.persistent_bytes`, `rt.flowing_peak_bytes` on the module.

    Before: `rt.buffer @a {kind = "activation", offset = -1 : i64} : memref<16xf32>`
    After:  `rt.buffer @a {kind = "activation", offset = 1024 : i64} : memref<16xf32>`
  }];
}

#endif
