// RUN: trainc-opt %s -verify-diagnostics -trainc-verify=phase=memory
// REQUIRES: compiler
// Regression: trainc-verify phase=memory used to check overlaps only among the buffers of one
// function (and against persistent buffers), so a caller's buffer live across a call could overlap
// a buffer of the callee's frame and the plan was accepted. (trainc-memory-plan itself places them
// apart: @x at 0, @y at 64.)

// Tests that @x, live in @train_step across the call, may not share memory with @stage's @y.
module attributes {rt.arena_bytes = 128 : i64} {
  // expected-error-re@+1 {{'rt.buffer' op overlaps {{.*}}@y}}
  rt.buffer @x activation {offset = 0 : i64} : memref<16xf32>
  rt.buffer @y activation {offset = 0 : i64} : memref<16xf32>
  func.func @stage() {
    %y = rt.buffer_ref @y : memref<16xf32>
    rt.kernel "fill" outs(%y : memref<16xf32>)
    return
  }
  func.func @train_step() attributes {rt.entry} {
    %x = rt.buffer_ref @x : memref<16xf32>
    rt.kernel "fill" outs(%x : memref<16xf32>)
    call @stage() : () -> ()
    rt.kernel "scale" ins(%x : memref<16xf32>) outs(%x : memref<16xf32>)
    return
  }
}
