//===- Passes.td - Memory planning ----------------------------------------===//
#ifndef TRAINC_PASSES_MEMORY
#define TRAINC_PASSES_MEMORY
include "mlir/Pass/PassBase.td"

def MemoryPlanPass : Pass<"trainc-memory-plan", "::mlir::ModuleOp"> {
  let summary = "Assign every rt.buffer a static arena offset by liveness over the call trace";
  let description = [{
    Persistent buffers (parameter, main_grad, master_param, optimizer_state, input, output, scalar)
    are laid out first, each 64-byte aligned, in declaration order. Liveness of the flowing buffers
    (activation, workspace) is taken over the unrolled trace: the rt.entry function, then each
    rt.entry_point function, one after the other, each func.call expanding its callee in place, one
    step per executed op. A buffer is live over one span per execution of a function that touches
    it (directly, through views, or as a call operand); an async rt.collective keeps its operands
    live until the rt.wait on its token. Two flowing buffers share memory only if their spans never
    intersect. Placement is greedy first-fit: buffer groups first (rt.buffer `group`: one
    contiguous block per group, members in declaration order, groups in order of appearance), then
    single buffers, largest first. Sets `offset` on every buffer and `rt.arena_bytes`,
    `rt.persistent_bytes`, `rt.flowing_peak_bytes` (and `rt.group_bytes`, group name -> block
    bytes, when there are groups) on the module. Fails on a flowing buffer no root executes, a
    function declaration, a missing rt.entry, or recursion.

    Before: `rt.buffer @a activation {offset = -1 : i64} : memref<16xf32>`
    After:  `rt.buffer @a activation {offset = 1024 : i64} : memref<16xf32>`
  }];
}

#endif
