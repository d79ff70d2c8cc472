// Cases of trainc-verify phase=memory, run by ../trainc-verify.mlir (lit skips Inputs/).

// Tests that the memory phase needs a plan.
// expected-error@+1 {{no rt.arena_bytes (run trainc-memory-plan)}}
module {
  rt.buffer @p {kind = "parameter", offset = 0 : i64} : memref<4xf32>
  func.func @train_step() attributes {rt.entry} {
    return
  }
}

// -----

// Tests that every buffer is inside the arena.
module attributes {rt.arena_bytes = 64 : i64} {
  // expected-error@+1 {{'rt.buffer' op offset 32 + 64 bytes is outside the arena of 64 bytes}}
  rt.buffer @p {kind = "parameter", offset = 32 : i64} : memref<16xf32>
  func.func @train_step() attributes {rt.entry} {
    return
  }
}

// -----

// Tests that an unplanned buffer (offset -1) is reported.
module attributes {rt.arena_bytes = 64 : i64} {
  // expected-error@+1 {{'rt.buffer' op offset -1 + 16 bytes is outside the arena of 64 bytes}}
  rt.buffer @p {kind = "parameter"} : memref<4xf32>
  func.func @train_step() attributes {rt.entry} {
    return
  }
}

// -----

// Tests that a persistent buffer may not share memory with any other buffer.
module attributes {rt.arena_bytes = 128 : i64} {
  // expected-error@+1 {{'rt.buffer' op overlaps buffer @a though it is live for the whole iteration}}
  rt.buffer @p {kind = "parameter", offset = 0 : i64} : memref<16xf32>
  rt.buffer @a {kind = "activation", offset = 32 : i64} : memref<16xf32>
  func.func @train_step() attributes {rt.entry} {
    %a = rt.buffer_ref @a : memref<16xf32>
    rt.kernel "fill" outs(%a : memref<16xf32>)
    return
  }
}

// -----

// Tests that two flowing buffers live at the same time may not overlap.
module attributes {rt.arena_bytes = 128 : i64} {
  // expected-error@+1 {{'rt.buffer' op overlaps @b while both are live in @train_step}}
  rt.buffer @a {kind = "activation", offset = 0 : i64} : memref<16xf32>
  rt.buffer @b {kind = "activation", offset = 32 : i64} : memref<16xf32>
  func.func @train_step() attributes {rt.entry} {
    %a = rt.buffer_ref @a : memref<16xf32>
    %b = rt.buffer_ref @b : memref<16xf32>
    rt.kernel "copy" ins(%a : memref<16xf32>) outs(%b : memref<16xf32>)
    return
  }
}

// -----

// Tests that the liveness errors of the planner are reported by the verifier too.
// expected-error@+1 {{trainc-memory-plan: function @leaf is called from 2 functions; the planner supports one caller per function}}
module attributes {rt.arena_bytes = 0 : i64} {
  func.func @leaf() {
    return
  }
  func.func @mid() {
    call @leaf() : () -> ()
    return
  }
  func.func @train_step() attributes {rt.entry} {
    call @leaf() : () -> ()
    call @mid() : () -> ()
    return
  }
}

// -----

// Tests that a memory-phase check first checks the rt invariants.
func.func @train_step() attributes {rt.entry} {
  // expected-error@+1 {{'model.fill' op phase rt: op above the rt level remains}}
  %0 = model.fill {value = 0.0 : f64} : () -> tensor<f32>
  return
}
