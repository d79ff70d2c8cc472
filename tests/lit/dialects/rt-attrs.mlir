// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// REQUIRES: compiler

// The rt dialect's discardable attributes are declared once, on the dialect, and verified there
// (structured-IR issue, item 5): one module using each of them, then one case per message.

// Tests that every rt.* attribute is accepted where it belongs.
module attributes {rt.arena_bytes = 128 : i64, rt.persistent_bytes = 64 : i64, rt.flowing_peak_bytes = 64 : i64, rt.stash_slots = 1 : i64, rt.group_bytes = {"stash.0" = 64 : i64}, rt.carried_tokens = array<i64: 0, 1>, rt.schedule = "no-pipelining"} {
  func.func private @layer(%x: memref<4xf32> {rt.input = "tokens"}, %s: memref<4xf32> {rt.stash = 0 : i64}, %y: memref<4xf32> {rt.result = 0 : i64, rt.accumulate}) attributes {rt.function, rt.layer = "decoder.layers"}
  func.func private @stage() attributes {rt.stage}
  func.func private @eval() attributes {rt.entry_point = "eval_step"}
  func.func @train(%x: memref<4xf32>) attributes {rt.entry} {
    call @stage() {rt.unit = "F0", rt.layer_index = 0 : i64, rt.shard_segments = array<i64: 0, 4, 1>} : () -> ()
    return
  }
}

// -----

// expected-error@+1 {{'builtin.module' op attribute 'rt.arena_bytes' must be a non-negative i64 integer, not -1 : i64}}
module attributes {rt.arena_bytes = -1 : i64} {}

// -----

// expected-error@+1 {{'builtin.module' op attribute 'rt.group_bytes' must be a dictionary of {group = bytes} (non-negative i64 integers), not {stash.0 = "64"}}}
module attributes {rt.group_bytes = {"stash.0" = "64"}} {}

// -----

// expected-error@+1 {{'builtin.module' op attribute 'rt.carried_tokens' must be an array<i64> of token numbers, not [0, 1]}}
module attributes {rt.carried_tokens = [0, 1]} {}

// -----

func.func private @stage()
func.func @bad_segments() {
  // expected-error@+1 {{'func.call' op attribute 'rt.shard_segments' must be an array<i64> of (begin, end, decay) triples, not array<i64: 0, 4>}}
  call @stage() {rt.shard_segments = array<i64: 0, 4>} : () -> ()
  return
}

// -----

func.func private @stage()
func.func @bad_unit() {
  // expected-error@+1 {{'func.call' op attribute 'rt.unit' must be a string, not 3 : i64}}
  call @stage() {rt.unit = 3 : i64} : () -> ()
  return
}

// -----

// expected-error@+1 {{'builtin.module' op attribute 'rt.entry' must be a unit attribute on a func.func, not unit}}
module attributes {rt.entry} {}

// -----

// expected-error@+1 {{'func.func' op attribute 'rt.layer' must be a string on a func.func, not 1 : i64}}
func.func private @bad_layer() attributes {rt.layer = 1 : i64}

// -----

// expected-error@+1 {{'func.func' op has unknown attribute 'rt.entrypoint' of the rt dialect (rt.arena_bytes, rt.persistent_bytes, rt.flowing_peak_bytes, rt.stash_slots, rt.stash_b_slots, rt.group_bytes, rt.carried_tokens, rt.schedule, rt.stage, rt.function, rt.entry, rt.entry_point, rt.layer, rt.unit, rt.unit_flops, rt.layer_index, rt.shard_segments, rt.p2p_stash_recvs)}}
func.func private @unknown() attributes {rt.entrypoint = "eval_step"}

// -----

// expected-error@+1 {{'func.func' op argument 0: 'rt.stash' must be a non-negative i64 integer, not -2 : i64}}
func.func private @bad_stash(%s: memref<4xf32> {rt.stash = -2 : i64})

// -----

// expected-error@+1 {{'func.func' op argument 0: 'rt.input' must be a string (the model.input), not 0 : i64}}
func.func private @bad_input(%s: memref<4xf32> {rt.input = 0 : i64})

// -----

// expected-error@+1 {{'func.func' op argument 0 has unknown attribute 'rt.output' of the rt dialect (rt.input, rt.stash, rt.result, rt.accumulate, rt.p2p, rt.p2p_group, rt.p2p_peer)}}
func.func private @bad_arg(%s: memref<4xf32> {rt.output = 0 : i64})
