// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-memory-plan | FileCheck %s
// REQUIRES: compiler

// Tests the arena layout over the unrolled trace (train_step steps 0-3, then @stage at steps 4-14
// and 15-25, then 26-28). Persistent buffers come first in declaration order, 64-byte aligned
// (@w: 64 bytes at 0, @g: 16 bytes at 64). Flowing buffers go above them (128), largest first.
// @a (live through its view: steps 5-8 and 16-19) and @b (9-10 and 20-21) have disjoint live
// ranges and share one offset; @c is live across both (4-11, 15-22) and is placed above them.
// @shared, used in both functions (2-3, 12-13, 23-24), and @s, only used after the calls, are
// never live with @a or @b and share their memory.
// CHECK: module attributes {rt.arena_bytes = 320 : i64, rt.flowing_peak_bytes = 192 : i64, rt.persistent_bytes = 128 : i64}
// CHECK: rt.buffer @w parameter {offset = 0 : i64} : memref<16xf32>
// CHECK: rt.buffer @g main_grad {offset = 64 : i64} : memref<4xf32>
// CHECK: rt.buffer @shared workspace {offset = [[AB:128]] : i64} : memref<2xf32>
// CHECK: rt.buffer @a activation {offset = [[AB]] : i64} : memref<32xf32>
// CHECK: rt.buffer @b activation {offset = [[AB]] : i64} : memref<32xf32>
// CHECK: rt.buffer @c activation {offset = 256 : i64} : memref<8xf32>
// CHECK: rt.buffer @s workspace {offset = [[AB]] : i64} : memref<f32>
rt.buffer @w parameter : memref<16xf32>
rt.buffer @g main_grad : memref<4xf32>
rt.buffer @shared workspace : memref<2xf32>
rt.buffer @a activation : memref<32xf32>
rt.buffer @b activation : memref<32xf32>
rt.buffer @c activation : memref<8xf32>
rt.buffer @s workspace : memref<f32>
func.func @stage() attributes {rt.stage} {
  %c = rt.buffer_ref @c : memref<8xf32>
  %a = rt.buffer_ref @a : memref<32xf32>
  %av = rt.view %a [0] : memref<32xf32> to memref<2x16xf32>
  rt.kernel "fill" outs(%a : memref<32xf32>)
  rt.kernel "fill" outs(%av : memref<2x16xf32>)
  %b = rt.buffer_ref @b : memref<32xf32>
  rt.kernel "fill" outs(%b : memref<32xf32>)
  rt.kernel "fill" outs(%c : memref<8xf32>)
  %sh = rt.buffer_ref @shared : memref<2xf32>
  rt.kernel "fill" outs(%sh : memref<2xf32>)
  return
}
func.func @train_step() attributes {rt.entry} {
  %g = rt.buffer_ref @g : memref<4xf32>
  rt.kernel "fill" outs(%g : memref<4xf32>)
  %sh = rt.buffer_ref @shared : memref<2xf32>
  rt.kernel "fill" outs(%sh : memref<2xf32>)
  call @stage() : () -> ()
  call @stage() : () -> ()
  %s = rt.buffer_ref @s : memref<f32>
  rt.kernel "fill" outs(%s : memref<f32>)
  return
}

// -----

// Tests that a view keeps its source buffer live: @a is last used through its view after @b is
// written, so the two may not share memory.
// CHECK: module attributes {rt.arena_bytes = 256 : i64, rt.flowing_peak_bytes = 256 : i64, rt.persistent_bytes = 0 : i64}
// CHECK: rt.buffer @a activation {offset = 0 : i64} : memref<32xf32>
// CHECK: rt.buffer @b activation {offset = 128 : i64} : memref<32xf32>
rt.buffer @a activation : memref<32xf32>
rt.buffer @b activation : memref<32xf32>
func.func @train_step() attributes {rt.entry} {
  %a = rt.buffer_ref @a : memref<32xf32>
  %av = rt.view %a [0] : memref<32xf32> to memref<2x16xf32>
  rt.kernel "fill" outs(%a : memref<32xf32>)
  %b = rt.buffer_ref @b : memref<32xf32>
  rt.kernel "fill" outs(%b : memref<32xf32>)
  rt.kernel "fill" outs(%av : memref<2x16xf32>)
  return
}

// -----

// Tests that entry points (rt.entry_point, the evaluation step) never run at the same time as the
// training entry: they follow it on the trace, so their buffers share memory.
// CHECK: module attributes {rt.arena_bytes = 192 : i64, rt.flowing_peak_bytes = 128 : i64, rt.persistent_bytes = 64 : i64}
// CHECK: rt.buffer @p parameter {offset = 0 : i64} : memref<4xf32>
// CHECK: rt.buffer @x activation {offset = 64 : i64} : memref<32xf32>
// CHECK: rt.buffer @y activation {offset = 64 : i64} : memref<16xf32>
rt.buffer @p parameter : memref<4xf32>
rt.buffer @x activation : memref<32xf32>
rt.buffer @y activation : memref<16xf32>
func.func @train_step() attributes {rt.entry} {
  %x = rt.buffer_ref @x : memref<32xf32>
  rt.kernel "fill" outs(%x : memref<32xf32>)
  return
}
func.func @eval_step() attributes {rt.entry_point = "eval_step"} {
  %y = rt.buffer_ref @y : memref<16xf32>
  rt.kernel "fill" outs(%y : memref<16xf32>)
  return
}

// -----

// Tests that the plan needs an entry function.
// expected-error@+1 {{trainc-memory-plan: no entry function (rt.entry)}}
module {
  rt.buffer @a activation : memref<4xf32>
  func.func @train_step() {
    return
  }
}

// -----

// Tests that a function called from two functions is planned per call: @leaf runs at steps 0-2
// (from @train_step) and 7-9 (from @mid), so @l is live at 0-1 and 7-8. @e (3-4) shares @l's
// memory; @m is live across @mid's call of @leaf (5-10) and goes above @l.
// CHECK: module attributes {rt.arena_bytes = 256 : i64, rt.flowing_peak_bytes = 256 : i64, rt.persistent_bytes = 0 : i64}
// CHECK: rt.buffer @e activation {offset = 0 : i64} : memref<64xf32>
// CHECK: rt.buffer @l activation {offset = 0 : i64} : memref<32xf32>
// CHECK: rt.buffer @m activation {offset = 128 : i64} : memref<16xf32>
module {
  rt.buffer @e activation : memref<64xf32>
  rt.buffer @l activation : memref<32xf32>
  rt.buffer @m activation : memref<16xf32>
  func.func @leaf() {
    %l = rt.buffer_ref @l : memref<32xf32>
    rt.kernel "fill" outs(%l : memref<32xf32>)
    return
  }
  func.func @mid() {
    %m = rt.buffer_ref @m : memref<16xf32>
    rt.kernel "fill" outs(%m : memref<16xf32>)
    call @leaf() : () -> ()
    rt.kernel "scale" ins(%m : memref<16xf32>) outs(%m : memref<16xf32>)
    return
  }
  func.func @train_step() attributes {rt.entry} {
    call @leaf() : () -> ()
    %e = rt.buffer_ref @e : memref<64xf32>
    rt.kernel "fill" outs(%e : memref<64xf32>)
    call @mid() : () -> ()
    return
  }
}

// -----

// Tests that a buffer of a function called twice is live once per call, not from the first call
// to the last: @x (steps 2-3 and 7-8) leaves its memory to @y, used between the calls (5-6). @z
// is live across both calls (0-10) and goes above them.
// CHECK: module attributes {rt.arena_bytes = 192 : i64, rt.flowing_peak_bytes = 192 : i64, rt.persistent_bytes = 0 : i64}
// CHECK: rt.buffer @x activation {offset = 0 : i64} : memref<32xf32>
// CHECK: rt.buffer @y activation {offset = 0 : i64} : memref<16xf32>
// CHECK: rt.buffer @z activation {offset = 128 : i64} : memref<8xf32>
module {
  rt.buffer @x activation : memref<32xf32>
  rt.buffer @y activation : memref<16xf32>
  rt.buffer @z activation : memref<8xf32>
  func.func @f() {
    %x = rt.buffer_ref @x : memref<32xf32>
    rt.kernel "fill" outs(%x : memref<32xf32>)
    return
  }
  func.func @train_step() attributes {rt.entry} {
    %z = rt.buffer_ref @z : memref<8xf32>
    rt.kernel "fill" outs(%z : memref<8xf32>)
    call @f() : () -> ()
    %y = rt.buffer_ref @y : memref<16xf32>
    rt.kernel "fill" outs(%y : memref<16xf32>)
    call @f() : () -> ()
    rt.kernel "scale" ins(%z : memref<8xf32>) outs(%z : memref<8xf32>)
    return
  }
}

// -----

// Tests buffer groups with two microbatches in flight (forward 0, forward 1, backward 0,
// backward 1): each group is one block, its members in declaration order at aligned offsets
// (stash.0: @s0a at 0, @s0b at 64, 128 bytes; stash.1: @s1a at 0, @s1b at 64, 128 bytes). Groups
// are placed before the ungrouped buffers whatever their size, so the two live groups lie back
// to back at 0 and 128 and @big, live throughout, goes above them.
// CHECK: module attributes {rt.arena_bytes = 1280 : i64, rt.flowing_peak_bytes = 1280 : i64, rt.group_bytes = {stash.0 = 128 : i64, stash.1 = 128 : i64}, rt.persistent_bytes = 0 : i64}
// CHECK: rt.buffer @big activation {offset = 256 : i64} : memref<256xf32>
// CHECK: rt.buffer @s0a activation {group = "stash.0", offset = 0 : i64} : memref<4xf32>
// CHECK: rt.buffer @s1a activation {group = "stash.1", offset = 128 : i64} : memref<8xf32>
// CHECK: rt.buffer @s0b activation {group = "stash.0", offset = 64 : i64} : memref<16xf32>
// CHECK: rt.buffer @s1b activation {group = "stash.1", offset = 192 : i64} : memref<2xf32>
module {
  rt.buffer @big activation : memref<256xf32>
  rt.buffer @s0a activation {group = "stash.0"} : memref<4xf32>
  rt.buffer @s1a activation {group = "stash.1"} : memref<8xf32>
  rt.buffer @s0b activation {group = "stash.0"} : memref<16xf32>
  rt.buffer @s1b activation {group = "stash.1"} : memref<2xf32>
  func.func @train_step() attributes {rt.entry} {
    %big = rt.buffer_ref @big : memref<256xf32>
    rt.kernel "fill" outs(%big : memref<256xf32>)
    %a0 = rt.buffer_ref @s0a : memref<4xf32>
    %b0 = rt.buffer_ref @s0b : memref<16xf32>
    rt.kernel "fill" outs(%a0 : memref<4xf32>)
    rt.kernel "fill" outs(%b0 : memref<16xf32>)
    %a1 = rt.buffer_ref @s1a : memref<8xf32>
    %b1 = rt.buffer_ref @s1b : memref<2xf32>
    rt.kernel "fill" outs(%a1 : memref<8xf32>)
    rt.kernel "fill" outs(%b1 : memref<2xf32>)
    rt.kernel "scale" ins(%a0 : memref<4xf32>) outs(%a0 : memref<4xf32>)
    rt.kernel "scale" ins(%b0 : memref<16xf32>) outs(%b0 : memref<16xf32>)
    rt.kernel "scale" ins(%a1 : memref<8xf32>) outs(%a1 : memref<8xf32>)
    rt.kernel "scale" ins(%b1 : memref<2xf32>) outs(%b1 : memref<2xf32>)
    rt.kernel "scale" ins(%big : memref<256xf32>) outs(%big : memref<256xf32>)
    return
  }
}

// -----

// Tests the same groups with one microbatch in flight (forward 0, backward 0, forward 1,
// backward 1): the groups are never live together and share one block; the arena is one group
// size (128 bytes) smaller.
// CHECK: module attributes {rt.arena_bytes = 1152 : i64, rt.flowing_peak_bytes = 1152 : i64, rt.group_bytes = {stash.0 = 128 : i64, stash.1 = 128 : i64}, rt.persistent_bytes = 0 : i64}
// CHECK: rt.buffer @big activation {offset = 128 : i64} : memref<256xf32>
// CHECK: rt.buffer @s0a activation {group = "stash.0", offset = 0 : i64} : memref<4xf32>
// CHECK: rt.buffer @s1a activation {group = "stash.1", offset = 0 : i64} : memref<8xf32>
// CHECK: rt.buffer @s0b activation {group = "stash.0", offset = 64 : i64} : memref<16xf32>
// CHECK: rt.buffer @s1b activation {group = "stash.1", offset = 64 : i64} : memref<2xf32>
module {
  rt.buffer @big activation : memref<256xf32>
  rt.buffer @s0a activation {group = "stash.0"} : memref<4xf32>
  rt.buffer @s1a activation {group = "stash.1"} : memref<8xf32>
  rt.buffer @s0b activation {group = "stash.0"} : memref<16xf32>
  rt.buffer @s1b activation {group = "stash.1"} : memref<2xf32>
  func.func @train_step() attributes {rt.entry} {
    %big = rt.buffer_ref @big : memref<256xf32>
    rt.kernel "fill" outs(%big : memref<256xf32>)
    %a0 = rt.buffer_ref @s0a : memref<4xf32>
    %b0 = rt.buffer_ref @s0b : memref<16xf32>
    rt.kernel "fill" outs(%a0 : memref<4xf32>)
    rt.kernel "fill" outs(%b0 : memref<16xf32>)
    rt.kernel "scale" ins(%a0 : memref<4xf32>) outs(%a0 : memref<4xf32>)
    rt.kernel "scale" ins(%b0 : memref<16xf32>) outs(%b0 : memref<16xf32>)
    %a1 = rt.buffer_ref @s1a : memref<8xf32>
    %b1 = rt.buffer_ref @s1b : memref<2xf32>
    rt.kernel "fill" outs(%a1 : memref<8xf32>)
    rt.kernel "fill" outs(%b1 : memref<2xf32>)
    rt.kernel "scale" ins(%a1 : memref<8xf32>) outs(%a1 : memref<8xf32>)
    rt.kernel "scale" ins(%b1 : memref<2xf32>) outs(%b1 : memref<2xf32>)
    rt.kernel "scale" ins(%big : memref<256xf32>) outs(%big : memref<256xf32>)
    return
  }
}

// -----

// Tests that an async collective keeps its operands live until the wait on its token, also when
// it is issued in a callee on an argument: @g is live from its ref (step 0) to the rt.wait (6),
// so @t, written while the reduction runs (4-5), may not share its memory; @u (7-8) may.
// CHECK: module attributes {rt.arena_bytes = 128 : i64, rt.flowing_peak_bytes = 128 : i64, rt.persistent_bytes = 0 : i64}
// CHECK: rt.buffer @g activation {offset = 0 : i64} : memref<16xf32>
// CHECK: rt.buffer @t activation {offset = 64 : i64} : memref<16xf32>
// CHECK: rt.buffer @u activation {offset = 0 : i64} : memref<16xf32>
module {
  rt.buffer @g activation : memref<16xf32>
  rt.buffer @t activation : memref<16xf32>
  rt.buffer @u activation : memref<16xf32>
  func.func @reduce(%x: memref<16xf32>) {
    rt.collective all_reduce "dp" ins(%x : memref<16xf32>) outs(%x : memref<16xf32>) {token = 0 : i64}
    return
  }
  func.func @train_step() attributes {rt.entry} {
    %g = rt.buffer_ref @g : memref<16xf32>
    rt.kernel "fill" outs(%g : memref<16xf32>)
    call @reduce(%g) : (memref<16xf32>) -> ()
    %t = rt.buffer_ref @t : memref<16xf32>
    rt.kernel "fill" outs(%t : memref<16xf32>)
    rt.wait 0
    %u = rt.buffer_ref @u : memref<16xf32>
    rt.kernel "fill" outs(%u : memref<16xf32>)
    return
  }
}

// -----

// Tests that recursion is refused (the trace would not end).
module {
  // expected-error@+1 {{'func.func' op @f calls itself; the memory planner needs an acyclic call graph}}
  func.func @f() {
    call @f() : () -> ()
    return
  }
  func.func @train_step() attributes {rt.entry} {
    call @f() : () -> ()
    return
  }
}

// -----

// Tests that a buffer of a function the entry never calls is reported.
// expected-error@+1 {{'rt.buffer' op is not reachable from an entry function}}
rt.buffer @a activation : memref<4xf32>
func.func @unused() attributes {rt.stage} {
  %a = rt.buffer_ref @a : memref<4xf32>
  rt.kernel "fill" outs(%a : memref<4xf32>)
  return
}
func.func @train_step() attributes {rt.entry} {
  return
}
