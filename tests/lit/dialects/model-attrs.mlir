// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// REQUIRES: compiler

// The model dialect's discardable attributes are declared once, on the dialect, and verified
// there (structured-IR issue, item 5): one case per message, and one module using each of them.

// Tests that every model.* attribute of the dialect is accepted where it belongs.
module attributes {model.sequence_parallel} {
  func.func private @layer(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> attributes {model.layer = "decoder.layers", model.derivative = "forward"} {
    return %x : tensor<2x5x8xf32>
  }
  func.func @f(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
    %0 = call @layer(%x) {model.layer_index = 0 : i64, model.recompute = "checkpoint", model.recompute_group = 0 : i64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
    %1 = model.reshape %0 {model.rank_offsets = {vocab_start = array<i64: 0, 32>}, model.global_seq = 10 : i64, model.global_heads = 4 : i64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
    return %1 : tensor<2x5x8xf32>
  }
}

// -----

// expected-error@+1 {{'func.func' op attribute 'model.derivative' must be "forward" or "backward" on a func.func, not "sideways"}}
func.func private @bad_derivative() attributes {model.derivative = "sideways"}

// -----

func.func @bad_layer_index(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  // expected-error@+1 {{'model.reshape' op attribute 'model.layer_index' must be a non-negative i64 integer, not -1 : i64}}
  %0 = model.reshape %x {model.layer_index = -1 : i64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return %0 : tensor<2x5x8xf32>
}

// -----

func.func @bad_layer(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  // expected-error@+1 {{'model.reshape' op attribute 'model.layer' must be a string on a func.func, not "decoder.layers"}}
  %0 = model.reshape %x {model.layer = "decoder.layers"} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return %0 : tensor<2x5x8xf32>
}

// -----

func.func @bad_recompute(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  // expected-error@+1 {{'model.reshape' op attribute 'model.recompute' must be "selective", "checkpoint" or "replay", not "full"}}
  %0 = model.reshape %x {model.recompute = "full"} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return %0 : tensor<2x5x8xf32>
}

// -----

func.func @bad_global_heads(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  // expected-error@+1 {{'model.reshape' op attribute 'model.global_heads' must be a positive i64 integer, not 0 : i64}}
  %0 = model.reshape %x {model.global_heads = 0 : i64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return %0 : tensor<2x5x8xf32>
}

// -----

func.func @bad_loss_seed(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  // expected-error@+1 {{'model.reshape' op attribute 'model.loss_seed' must be a unit attribute, not true}}
  %0 = model.reshape %x {model.loss_seed = true} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return %0 : tensor<2x5x8xf32>
}

// -----

func.func @bad_rank_offsets(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  // expected-error@+1 {{'model.reshape' op attribute 'model.rank_offsets' must be a dictionary of {attribute = array<i64: mesh axis, stride>} entries, not {vocab_start = array<i64: 32>}}}
  %0 = model.reshape %x {model.rank_offsets = {vocab_start = array<i64: 32>}} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return %0 : tensor<2x5x8xf32>
}

// -----

// expected-error@+1 {{'func.func' op attribute 'model.sequence_parallel' must be a unit attribute on the module, not unit}}
func.func private @bad_sequence_parallel() attributes {model.sequence_parallel}

// -----

// expected-error@+1 {{'func.func' op has unknown attribute 'model.layers' of the model dialect (model.layer, model.derivative, model.layer_index, model.recompute_group, model.loss_seed, model.recompute, model.global_heads, model.global_seq, model.rank_offsets, model.sequence_parallel)}}
func.func private @unknown() attributes {model.layers = "decoder.layers"}
