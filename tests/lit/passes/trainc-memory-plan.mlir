// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-memory-plan | FileCheck %s
// REQUIRES: compiler

// Tests the arena layout. Persistent buffers come first in declaration order, 64-byte aligned
// (@w: 64 bytes at 0, @g: 16 bytes at 64). A flowing buffer used in several functions (@shared)
// gets its own slot for the whole iteration (128). Then the entry's frame (192): @stage's frame
// lives from the first to the last call, and @s, only used after the calls, shares its memory.
// Inside @stage, @a (live through its view until instruction 4) and @b (live from instruction 5)
// have disjoint live ranges and share one offset; @c is live across both and is placed above them.
// CHECK: module attributes {rt.arena_bytes = 384 : i64, rt.flowing_peak_bytes = 256 : i64, rt.persistent_bytes = 128 : i64}
// CHECK: rt.buffer @w {kind = "parameter", offset = 0 : i64} : memref<16xf32>
// CHECK: rt.buffer @g {kind = "main_grad", offset = 64 : i64} : memref<4xf32>
// CHECK: rt.buffer @shared {kind = "workspace", offset = 128 : i64} : memref<2xf32>
// CHECK: rt.buffer @a {kind = "activation", offset = [[AB:192]] : i64} : memref<32xf32>
// CHECK: rt.buffer @b {kind = "activation", offset = [[AB]] : i64} : memref<32xf32>
// CHECK: rt.buffer @c {kind = "activation", offset = 320 : i64} : memref<8xf32>
// CHECK: rt.buffer @s {kind = "workspace", offset = 192 : i64} : memref<f32>
rt.buffer @w {kind = "parameter"} : memref<16xf32>
rt.buffer @g {kind = "main_grad"} : memref<4xf32>
rt.buffer @shared {kind = "workspace"} : memref<2xf32>
rt.buffer @a {kind = "activation"} : memref<32xf32>
rt.buffer @b {kind = "activation"} : memref<32xf32>
rt.buffer @c {kind = "activation"} : memref<8xf32>
rt.buffer @s {kind = "workspace"} : memref<f32>
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
// CHECK: rt.buffer @a {kind = "activation", offset = 0 : i64} : memref<32xf32>
// CHECK: rt.buffer @b {kind = "activation", offset = 128 : i64} : memref<32xf32>
rt.buffer @a {kind = "activation"} : memref<32xf32>
rt.buffer @b {kind = "activation"} : memref<32xf32>
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
// training entry: their frames start at the same base and the arena holds the larger one.
// CHECK: module attributes {rt.arena_bytes = 192 : i64, rt.flowing_peak_bytes = 128 : i64, rt.persistent_bytes = 64 : i64}
// CHECK: rt.buffer @p {kind = "parameter", offset = 0 : i64} : memref<4xf32>
// CHECK: rt.buffer @x {kind = "activation", offset = 64 : i64} : memref<32xf32>
// CHECK: rt.buffer @y {kind = "activation", offset = 64 : i64} : memref<16xf32>
rt.buffer @p {kind = "parameter"} : memref<4xf32>
rt.buffer @x {kind = "activation"} : memref<32xf32>
rt.buffer @y {kind = "activation"} : memref<16xf32>
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
  rt.buffer @a {kind = "activation"} : memref<4xf32>
  func.func @train_step() {
    return
  }
}

// -----

// Tests that a function called from two functions is refused.
// expected-error@+1 {{trainc-memory-plan: function @leaf is called from 2 functions; the planner supports one caller per function}}
module {
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

// Tests that a buffer of a function the entry never calls is reported.
// expected-error@+1 {{'rt.buffer' op is not reachable from an entry function}}
rt.buffer @a {kind = "activation"} : memref<4xf32>
func.func @unused() attributes {rt.stage} {
  %a = rt.buffer_ref @a : memref<4xf32>
  rt.kernel "fill" outs(%a : memref<4xf32>)
  return
}
func.func @train_step() attributes {rt.entry} {
  return
}
