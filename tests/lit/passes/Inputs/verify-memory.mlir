// Cases of trainc-verify phase=memory, run by ../trainc-verify.mlir (lit skips Inputs/).

// Tests that the memory phase needs a plan.
// expected-error@+1 {{no rt.arena_bytes (run trainc-memory-plan)}}
module {
  rt.buffer @p parameter {offset = 0 : i64} : memref<4xf32>
  func.func @train_step() attributes {rt.entry} {
    return
  }
}

// -----

// Tests that every buffer is inside the arena.
module attributes {rt.arena_bytes = 64 : i64} {
  // expected-error@+1 {{'rt.buffer' op offset 32 + 64 bytes is outside the arena of 64 bytes}}
  rt.buffer @p parameter {offset = 32 : i64} : memref<16xf32>
  func.func @train_step() attributes {rt.entry} {
    return
  }
}

// -----

// Tests that an unplanned buffer (offset -1) is reported.
module attributes {rt.arena_bytes = 64 : i64} {
  // expected-error@+1 {{'rt.buffer' op offset -1 + 16 bytes is outside the arena of 64 bytes}}
  rt.buffer @p parameter : memref<4xf32>
  func.func @train_step() attributes {rt.entry} {
    return
  }
}

// -----

// Tests that a persistent buffer may not share memory with any other buffer.
module attributes {rt.arena_bytes = 128 : i64} {
  // expected-error@+1 {{'rt.buffer' op overlaps buffer @a though it is live for the whole iteration}}
  rt.buffer @p parameter {offset = 0 : i64} : memref<16xf32>
  rt.buffer @a activation {offset = 32 : i64} : memref<16xf32>
  func.func @train_step() attributes {rt.entry} {
    %a = rt.buffer_ref @a : memref<16xf32>
    rt.kernel "fill" outs(%a : memref<16xf32>)
    return
  }
}

// -----

// Tests that two flowing buffers live at the same time may not overlap.
module attributes {rt.arena_bytes = 128 : i64} {
  // expected-error@+1 {{'rt.buffer' op overlaps @b while both are live (trace step 1 in @train_step)}}
  rt.buffer @a activation {offset = 0 : i64} : memref<16xf32>
  rt.buffer @b activation {offset = 32 : i64} : memref<16xf32>
  func.func @train_step() attributes {rt.entry} {
    %a = rt.buffer_ref @a : memref<16xf32>
    %b = rt.buffer_ref @b : memref<16xf32>
    rt.kernel "copy" ins(%a : memref<16xf32>) outs(%b : memref<16xf32>)
    return
  }
}

// -----

// Tests that the liveness errors of the planner are reported by the verifier too.
module attributes {rt.arena_bytes = 0 : i64} {
  // expected-error@+1 {{'func.func' op @train_step calls itself; the memory planner needs an acyclic call graph}}
  func.func @train_step() attributes {rt.entry} {
    call @train_step() : () -> ()
    return
  }
}

// -----

// Tests that liveness is per call on the trace: @x of @f (called at steps 0-2 and 7-9) may share
// memory with @y, used between the calls (3-4), but not with @z, live across the second call
// (5-10).
module attributes {rt.arena_bytes = 64 : i64} {
  // expected-error@+1 {{'rt.buffer' op overlaps @z while both are live (trace step 7 in @f)}}
  rt.buffer @x activation {offset = 0 : i64} : memref<16xf32>
  rt.buffer @y activation {offset = 0 : i64} : memref<16xf32>
  rt.buffer @z activation {offset = 0 : i64} : memref<16xf32>
  func.func @f() {
    %x = rt.buffer_ref @x : memref<16xf32>
    rt.kernel "fill" outs(%x : memref<16xf32>)
    return
  }
  func.func @train_step() attributes {rt.entry} {
    call @f() : () -> ()
    %y = rt.buffer_ref @y : memref<16xf32>
    rt.kernel "fill" outs(%y : memref<16xf32>)
    %z = rt.buffer_ref @z : memref<16xf32>
    rt.kernel "fill" outs(%z : memref<16xf32>)
    call @f() : () -> ()
    rt.kernel "scale" ins(%z : memref<16xf32>) outs(%z : memref<16xf32>)
    return
  }
}

// -----

// Tests that the same program with @z elsewhere passes (@x and @y still share memory).
module attributes {rt.arena_bytes = 128 : i64} {
  rt.buffer @x activation {offset = 0 : i64} : memref<16xf32>
  rt.buffer @y activation {offset = 0 : i64} : memref<16xf32>
  rt.buffer @z activation {offset = 64 : i64} : memref<16xf32>
  func.func @f() {
    %x = rt.buffer_ref @x : memref<16xf32>
    rt.kernel "fill" outs(%x : memref<16xf32>)
    return
  }
  func.func @train_step() attributes {rt.entry} {
    call @f() : () -> ()
    %y = rt.buffer_ref @y : memref<16xf32>
    rt.kernel "fill" outs(%y : memref<16xf32>)
    %z = rt.buffer_ref @z : memref<16xf32>
    rt.kernel "fill" outs(%z : memref<16xf32>)
    call @f() : () -> ()
    rt.kernel "scale" ins(%z : memref<16xf32>) outs(%z : memref<16xf32>)
    return
  }
}

// -----

// Tests that an async collective's operand stays live until the wait: @t, written before the
// wait, may not share @g's memory.
module attributes {rt.arena_bytes = 128 : i64} {
  // expected-error@+1 {{'rt.buffer' op overlaps @t while both are live (trace step 3 in @train_step)}}
  rt.buffer @g activation {offset = 0 : i64} : memref<16xf32>
  rt.buffer @t activation {offset = 0 : i64} : memref<16xf32>
  func.func @train_step() attributes {rt.entry} {
    %g = rt.buffer_ref @g : memref<16xf32>
    rt.kernel "fill" outs(%g : memref<16xf32>)
    rt.collective all_reduce "dp" ins(%g : memref<16xf32>) outs(%g : memref<16xf32>) {token = 0 : i64}
    %t = rt.buffer_ref @t : memref<16xf32>
    rt.kernel "fill" outs(%t : memref<16xf32>)
    rt.wait 0
    return
  }
}

// -----

// Tests that two persistent buffers may not share memory either.
module attributes {rt.arena_bytes = 128 : i64} {
  // expected-error@+1 {{'rt.buffer' op overlaps buffer @q though it is live for the whole iteration}}
  rt.buffer @p parameter {offset = 0 : i64} : memref<16xf32>
  rt.buffer @q optimizer_state {offset = 0 : i64} : memref<4xf32>
  func.func @train_step() attributes {rt.entry} {
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
