// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// REQUIRES: compiler

// One case per model op verifier message. Shapes: batch 2, seq 5, hidden 8, vocab 11.

// Tests that model.reshape may not change the element type.
func.func @reshape_element_type(%x: tensor<2x5x8xf32>) {
  // expected-error@+1 {{'model.reshape' op changes the element type from 'f32' to 'f64'}}
  %0 = model.reshape %x : (tensor<2x5x8xf32>) -> tensor<10x8xf64>
  return
}

// -----

// Tests that model.reshape keeps the element count.
func.func @reshape_numel(%x: tensor<2x5x8xf32>) {
  // expected-error@+1 {{'model.reshape' op result shape [10, 7] has 70 elements, the input shape [2, 5, 8] has 80}}
  %0 = model.reshape %x : (tensor<2x5x8xf32>) -> tensor<10x7xf32>
  return
}

// -----

// Tests that the embedding table must be [vocab, hidden].
func.func @embedding_table_rank(%t: tensor<11x8x1xf32>, %ids: tensor<2x5xi32>) {
  // expected-error@+1 {{'model.embedding' op table has rank 3, expected 2 ([vocab, hidden])}}
  %0 = model.embedding %t, %ids : (tensor<11x8x1xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  return
}

// -----

// Tests that the embedding result is [ids..., hidden].
func.func @embedding_result_shape(%t: tensor<11x8xf32>, %ids: tensor<2x5xi32>) {
  // expected-error@+1 {{'model.embedding' op result has shape [10, 8], expected [2, 5, 8]}}
  %0 = model.embedding %t, %ids : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<10x8xf32>
  return
}

// -----

// Tests that the embedding result has the table's element type.
func.func @embedding_result_type(%t: tensor<11x8xf32>, %ids: tensor<2x5xi32>) {
  // expected-error@+1 {{'model.embedding' op result has element type 'bf16', expected 'f32'}}
  %0 = model.embedding %t, %ids : (tensor<11x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xbf16>
  return
}

// -----

// Tests that the embedding gradient is a [vocab, hidden] table.
func.func @embedding_grad_rank(%ids: tensor<2x5xi32>, %dy: tensor<2x5x8xf32>) {
  // expected-error@+1 {{'model.embedding_grad' op result has rank 1, expected 2}}
  %0 = model.embedding_grad %ids, %dy : (tensor<2x5xi32>, tensor<2x5x8xf32>) -> tensor<88xf32>
  return
}

// -----

// Tests that the embedding gradient's dy is [ids..., hidden].
func.func @embedding_grad_dy(%ids: tensor<2x5xi32>, %dy: tensor<2x5x4xf32>) {
  // expected-error@+1 {{'model.embedding_grad' op grad has shape [2, 5, 4], expected [2, 5, 8]}}
  %0 = model.embedding_grad %ids, %dy : (tensor<2x5xi32>, tensor<2x5x4xf32>) -> tensor<11x8xf32>
  return
}

// -----

// Tests that the linear weight must be [out_features, in_features].
func.func @linear_weight_rank(%x: tensor<2x5x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{'model.linear' op weight has rank 1, expected 2 ([out_features, in_features])}}
  %0 = model.linear %x, %w : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5xf32>
  return
}

// -----

// Tests that the linear input may not be a scalar.
func.func @linear_input_rank(%x: tensor<f32>, %w: tensor<12x8xf32>) {
  // expected-error@+1 {{'model.linear' op input must have rank >= 1}}
  %0 = model.linear %x, %w : (tensor<f32>, tensor<12x8xf32>) -> tensor<12xf32>
  return
}

// -----

// Tests that the linear input features match the weight's in_features.
func.func @linear_in_features(%x: tensor<2x5x6xf32>, %w: tensor<12x8xf32>) {
  // expected-error@+1 {{'model.linear' op input feature size 6 does not match weight in_features 8}}
  %0 = model.linear %x, %w : (tensor<2x5x6xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  return
}

// -----

// Tests that the linear bias is [out_features].
func.func @linear_bias(%x: tensor<2x5x8xf32>, %w: tensor<12x8xf32>, %b: tensor<8xf32>) {
  // expected-error@+1 {{'model.linear' op bias has shape [8], expected [12]}}
  %0 = model.linear %x, %w, %b : (tensor<2x5x8xf32>, tensor<12x8xf32>, tensor<8xf32>) -> tensor<2x5x12xf32>
  return
}

// -----

// Tests that the linear weight and result share the input's element type.
func.func @linear_element_type(%x: tensor<2x5x8xf32>, %w: tensor<12x8xbf16>) {
  // expected-error@+1 {{'model.linear' op operand has element type 'bf16', expected 'f32'}}
  %0 = model.linear %x, %w : (tensor<2x5x8xf32>, tensor<12x8xbf16>) -> tensor<2x5x12xf32>
  return
}

// -----

// Tests that an f32 result of bf16 operands (a partial sum kept in fp32) has no bias.
func.func @linear_f32_result_bias(%x: tensor<2x5x8xbf16>, %w: tensor<12x8xbf16>, %b: tensor<12xbf16>) {
  // expected-error@+1 {{'model.linear' op result has element type 'f32' with a bias; an 'f32' result of 'bf16' operands is a partial sum without bias}}
  %0 = model.linear %x, %w, %b : (tensor<2x5x8xbf16>, tensor<12x8xbf16>, tensor<12xbf16>) -> tensor<2x5x12xf32>
  return
}

// -----

// Tests that linear_grad_input's result has the grad's element type or f32.
func.func @linear_grad_input_element_type(%g: tensor<2x5x12xbf16>, %w: tensor<12x8xbf16>) {
  // expected-error@+1 {{'model.linear_grad_input' op result has element type 'f16', expected 'bf16' (as grad) or 'f32'}}
  %0 = model.linear_grad_input %g, %w : (tensor<2x5x12xbf16>, tensor<12x8xbf16>) -> tensor<2x5x8xf16>
  return
}

// -----

// Tests that the linear result is [..., out_features].
func.func @linear_result(%x: tensor<2x5x8xf32>, %w: tensor<12x8xf32>) {
  // expected-error@+1 {{'model.linear' op result has shape [2, 5, 8], expected [2, 5, 12]}}
  %0 = model.linear %x, %w : (tensor<2x5x8xf32>, tensor<12x8xf32>) -> tensor<2x5x8xf32>
  return
}

// -----

// Tests that linear_grad_input's dy has out_features columns.
func.func @linear_grad_input_dy(%dy: tensor<2x5x8xf32>, %w: tensor<12x8xf32>) {
  // expected-error@+1 {{'model.linear_grad_input' op grad feature size 8 does not match weight out_features 12}}
  %0 = model.linear_grad_input %dy, %w : (tensor<2x5x8xf32>, tensor<12x8xf32>) -> tensor<2x5x8xf32>
  return
}

// -----

// Tests that linear_grad_input's result is [..., in_features].
func.func @linear_grad_input_result(%dy: tensor<2x5x12xf32>, %w: tensor<12x8xf32>) {
  // expected-error@+1 {{'model.linear_grad_input' op result has shape [2, 5, 12], expected [2, 5, 8]}}
  %0 = model.linear_grad_input %dy, %w : (tensor<2x5x12xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  return
}

// -----

// Tests that linear_grad_weight's dy and x have the same number of rows.
func.func @linear_grad_weight_rows(%dy: tensor<2x5x12xf32>, %x: tensor<2x4x8xf32>) {
  // expected-error@+1 {{'model.linear_grad_weight' op grad has 10 rows, input has 8}}
  %0 = model.linear_grad_weight %dy, %x : (tensor<2x5x12xf32>, tensor<2x4x8xf32>) -> tensor<12x8xf32>
  return
}

// -----

// Tests that linear_grad_weight's result is [out_features, in_features].
func.func @linear_grad_weight_result(%dy: tensor<2x5x12xf32>, %x: tensor<2x5x8xf32>) {
  // expected-error@+1 {{'model.linear_grad_weight' op result has shape [8, 12], expected [12, 8]}}
  %0 = model.linear_grad_weight %dy, %x : (tensor<2x5x12xf32>, tensor<2x5x8xf32>) -> tensor<8x12xf32>
  return
}

// -----

// Tests that bias_grad's result is [out_features].
func.func @bias_grad_result(%dy: tensor<2x5x12xf32>) {
  // expected-error@+1 {{'model.bias_grad' op result has shape [10], expected [12]}}
  %0 = model.bias_grad %dy : (tensor<2x5x12xf32>) -> tensor<10xf32>
  return
}

// -----

// Tests that the layer_norm bias is [hidden].
func.func @layer_norm_bias(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %b: tensor<4xf32>) {
  // expected-error@+1 {{'model.layer_norm' op bias has shape [4], expected [8]}}
  %y, %m, %r = model.layer_norm %x, %g, %b : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<4xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>, tensor<10xf32>)
  return
}

// -----

// Tests that the layer_norm weight is [hidden].
func.func @layer_norm_weight(%x: tensor<2x5x8xf32>, %g: tensor<4xf32>, %b: tensor<8xf32>) {
  // expected-error@+1 {{'model.layer_norm' op weight has shape [4], expected [8]}}
  %y, %m, %r = model.layer_norm %x, %g, %b : (tensor<2x5x8xf32>, tensor<4xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<10xf32>, tensor<10xf32>)
  return
}

// -----

// Tests that the layer_norm mean has one entry per row.
func.func @layer_norm_mean(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) {
  // expected-error@+1 {{'model.layer_norm' op statistics result has shape [2, 5], expected [10]}}
  %y, %m, %r = model.layer_norm %x, %g, %b : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5xf32>, tensor<10xf32>)
  return
}

// -----

// Tests that the layer_norm_grad dx has the input's shape.
func.func @layer_norm_grad_dx(%dy: tensor<2x5x8xf32>, %x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %m: tensor<10xf32>, %r: tensor<10xf32>) {
  // expected-error@+1 {{'model.layer_norm_grad' op result has shape [10, 8], expected [2, 5, 8]}}
  %dx, %dg, %db = model.layer_norm_grad %dy, %x, %g, %m, %r : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<8xf32>, tensor<10xf32>, tensor<10xf32>) -> (tensor<10x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

// Tests that rms_norm's result has the input's shape.
func.func @rms_norm_result(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>) {
  // expected-error@+1 {{'model.rms_norm' op result has shape [2, 5, 4], expected [2, 5, 8]}}
  %y, %r = model.rms_norm %x, %g : (tensor<2x5x8xf32>, tensor<8xf32>) -> (tensor<2x5x4xf32>, tensor<10xf32>)
  return
}

// -----

// Tests that rms_norm's statistics are f32 for bf16 data.
func.func @rms_norm_stats_type(%x: tensor<2x5x8xbf16>, %g: tensor<8xbf16>) {
  // expected-error@+1 {{'model.rms_norm' op statistics result has element type 'bf16', expected 'f32'}}
  %y, %r = model.rms_norm %x, %g : (tensor<2x5x8xbf16>, tensor<8xbf16>) -> (tensor<2x5x8xbf16>, tensor<10xbf16>)
  return
}

// -----

// Tests that rms_norm_grad's weight is [hidden].
func.func @rms_norm_grad_weight(%dy: tensor<2x5x8xf32>, %x: tensor<2x5x8xf32>, %g: tensor<5xf32>, %r: tensor<10xf32>) {
  // expected-error@+1 {{'model.rms_norm_grad' op weight has shape [5], expected [8]}}
  %dx, %dg = model.rms_norm_grad %dy, %x, %g, %r : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<5xf32>, tensor<10xf32>) -> (tensor<2x5x8xf32>, tensor<5xf32>)
  return
}

// -----

// Tests that rope takes [batch, seq, heads, head_dim].
func.func @rope_rank(%x: tensor<2x5x8xf32>, %pos: tensor<2x5xi32>) {
  // expected-error@+1 {{'model.rope' op input has rank 3, expected 4 ([batch, seq, heads, head_dim])}}
  %0 = model.rope %x, %pos : (tensor<2x5x8xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  return
}

// -----

// Tests that rope positions are [batch, seq].
func.func @rope_positions(%x: tensor<2x5x2x4xf32>, %pos: tensor<5xi32>) {
  // expected-error@+1 {{'model.rope' op positions has shape [5], expected [2, 5]}}
  %0 = model.rope %x, %pos : (tensor<2x5x2x4xf32>, tensor<5xi32>) -> tensor<2x5x2x4xf32>
  return
}

// -----

// Tests that rope's result has the input's shape.
func.func @rope_result(%x: tensor<2x5x2x4xf32>, %pos: tensor<2x5xi32>) {
  // expected-error@+1 {{'model.rope' op result has shape [2, 5, 8], expected [2, 5, 2, 4]}}
  %0 = model.rope %x, %pos : (tensor<2x5x2x4xf32>, tensor<2x5xi32>) -> tensor<2x5x8xf32>
  return
}

// -----

// Tests that rope's rotary_dim is even and at most the head dim.
func.func @rope_rotary_dim(%x: tensor<2x5x2x4xf32>, %pos: tensor<2x5xi32>) {
  // expected-error@+1 {{'model.rope' op rotary_dim 3 must be even and at most head_dim 4}}
  %0 = model.rope %x, %pos {rotary_dim = 3 : i64} : (tensor<2x5x2x4xf32>, tensor<2x5xi32>) -> tensor<2x5x2x4xf32>
  return
}

// -----

// Tests that rope_grad checks rotary_dim like rope.
func.func @rope_grad_rotary_dim(%dy: tensor<2x5x2x4xf32>, %pos: tensor<2x5xi32>) {
  // expected-error@+1 {{'model.rope_grad' op rotary_dim 6 must be even and at most head_dim 4}}
  %0 = model.rope_grad %dy, %pos {rotary_dim = 6 : i64} : (tensor<2x5x2x4xf32>, tensor<2x5xi32>) -> tensor<2x5x2x4xf32>
  return
}

// -----

// Tests that attention takes rank-4 query, key and value.
func.func @attention_rank(%q: tensor<2x5x8xf32>, %k: tensor<2x5x2x4xf32>, %v: tensor<2x5x2x4xf32>) {
  // expected-error@+1 {{'model.attention' op query, key and value must have rank 4 ([batch, seq, heads, head_dim]), got shape [2, 5, 8]}}
  %o, %lse = model.attention %q, %k, %v : (tensor<2x5x8xf32>, tensor<2x5x2x4xf32>, tensor<2x5x2x4xf32>) -> (tensor<2x5x8xf32>, tensor<2x2x5xf32>)
  return
}

// -----

// Tests that attention's value has the key's shape.
func.func @attention_value(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x2x4xf32>, %v: tensor<2x5x1x4xf32>) {
  // expected-error@+1 {{'model.attention' op value has shape [2, 5, 1, 4], expected [2, 5, 2, 4]}}
  %o, %lse = model.attention %q, %k, %v : (tensor<2x5x2x4xf32>, tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>) -> (tensor<2x5x2x4xf32>, tensor<2x2x5xf32>)
  return
}

// -----

// Tests that attention's key matches the query in batch, sequence and head_dim.
func.func @attention_key(%q: tensor<2x5x2x4xf32>, %k: tensor<2x4x2x4xf32>, %v: tensor<2x4x2x4xf32>) {
  // expected-error@+1 {{'model.attention' op key shape [2, 4, 2, 4] does not match query shape [2, 5, 2, 4] in batch, sequence or head_dim}}
  %o, %lse = model.attention %q, %k, %v : (tensor<2x5x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> (tensor<2x5x2x4xf32>, tensor<2x2x5xf32>)
  return
}

// -----

// Tests that key/value heads divide the query heads (grouped-query attention).
func.func @attention_groups(%q: tensor<2x5x3x4xf32>, %k: tensor<2x5x2x4xf32>, %v: tensor<2x5x2x4xf32>) {
  // expected-error@+1 {{'model.attention' op query heads 3 is not divisible by key/value heads 2}}
  %o, %lse = model.attention %q, %k, %v : (tensor<2x5x3x4xf32>, tensor<2x5x2x4xf32>, tensor<2x5x2x4xf32>) -> (tensor<2x5x3x4xf32>, tensor<2x3x5xf32>)
  return
}

// -----

// Tests that attention's output has the query's shape.
func.func @attention_result(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x1x4xf32>, %v: tensor<2x5x1x4xf32>) {
  // expected-error@+1 {{'model.attention' op result has shape [2, 5, 1, 4], expected [2, 5, 2, 4]}}
  %o, %lse = model.attention %q, %k, %v : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>) -> (tensor<2x5x1x4xf32>, tensor<2x2x5xf32>)
  return
}

// -----

// Tests that attention's log-sum-exp is [batch, heads, seq].
func.func @attention_lse(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x1x4xf32>, %v: tensor<2x5x1x4xf32>) {
  // expected-error@+1 {{'model.attention' op lse has shape [2, 5, 2], expected [2, 2, 5]}}
  %o, %lse = model.attention %q, %k, %v : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>) -> (tensor<2x5x2x4xf32>, tensor<2x5x2xf32>)
  return
}

// -----

// Tests that attention_grad's dO has the query's shape.
func.func @attention_grad_do(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x1x4xf32>, %v: tensor<2x5x1x4xf32>, %o: tensor<2x5x2x4xf32>, %lse: tensor<2x2x5xf32>, %do: tensor<2x5x1x4xf32>) {
  // expected-error@+1 {{'model.attention_grad' op grad has shape [2, 5, 1, 4], expected [2, 5, 2, 4]}}
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %lse, %do : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x2x4xf32>, tensor<2x2x5xf32>, tensor<2x5x1x4xf32>) -> (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>)
  return
}

// -----

// Tests that attention_grad checks the head grouping like attention.
func.func @attention_grad_groups(%q: tensor<2x5x3x4xf32>, %k: tensor<2x5x2x4xf32>, %v: tensor<2x5x2x4xf32>, %o: tensor<2x5x3x4xf32>, %lse: tensor<2x3x5xf32>, %do: tensor<2x5x3x4xf32>) {
  // expected-error@+1 {{'model.attention_grad' op query heads 3 is not divisible by key/value heads 2}}
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %lse, %do : (tensor<2x5x3x4xf32>, tensor<2x5x2x4xf32>, tensor<2x5x2x4xf32>, tensor<2x5x3x4xf32>, tensor<2x3x5xf32>, tensor<2x5x3x4xf32>) -> (tensor<2x5x3x4xf32>, tensor<2x5x2x4xf32>, tensor<2x5x2x4xf32>)
  return
}

// -----

// Tests that gelu's result has the input's shape.
func.func @gelu_result(%x: tensor<2x5x8xf32>) {
  // expected-error@+1 {{'model.gelu' op result has shape [10, 8], expected [2, 5, 8]}}
  %0 = model.gelu %x : (tensor<2x5x8xf32>) -> tensor<10x8xf32>
  return
}

// -----

// Tests that gelu_grad's dy has the input's shape.
func.func @gelu_grad_dy(%dy: tensor<2x5x4xf32>, %x: tensor<2x5x8xf32>) {
  // expected-error@+1 {{'model.gelu_grad' op grad has shape [2, 5, 4], expected [2, 5, 8]}}
  %0 = model.gelu_grad %dy, %x : (tensor<2x5x4xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return
}

// -----

// Tests that swiglu's input has an even last dim.
func.func @swiglu_odd(%x: tensor<2x5x7xf32>) {
  // expected-error@+1 {{'model.swiglu' op input last dim 7 must be even (two halves)}}
  %0 = model.swiglu %x : (tensor<2x5x7xf32>) -> tensor<2x5x3xf32>
  return
}

// -----

// Tests that swiglu's result is half the input's last dim.
func.func @swiglu_result(%x: tensor<2x5x8xf32>) {
  // expected-error@+1 {{'model.swiglu' op result has shape [2, 5, 8], expected [2, 5, 4]}}
  %0 = model.swiglu %x : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return
}

// -----

// Tests that swiglu_grad's result has the input's shape.
func.func @swiglu_grad_result(%dy: tensor<2x5x4xf32>, %x: tensor<2x5x8xf32>) {
  // expected-error@+1 {{'model.swiglu_grad' op result has shape [2, 5, 4], expected [2, 5, 8]}}
  %0 = model.swiglu_grad %dy, %x : (tensor<2x5x4xf32>, tensor<2x5x8xf32>) -> tensor<2x5x4xf32>
  return
}

// -----

// Tests that model.add's operands have one shape.
func.func @add_rhs(%a: tensor<2x5x8xf32>, %b: tensor<10x8xf32>) {
  // expected-error@+1 {{'model.add' op rhs has shape [10, 8], expected [2, 5, 8]}}
  %0 = model.add %a, %b : (tensor<2x5x8xf32>, tensor<10x8xf32>) -> tensor<2x5x8xf32>
  return
}

// -----

// Tests that model.add's result has the operands' shape.
func.func @add_result(%a: tensor<2x5x8xf32>, %b: tensor<2x5x8xf32>) {
  // expected-error@+1 {{'model.add' op result has shape [80], expected [2, 5, 8]}}
  %0 = model.add %a, %b : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<80xf32>
  return
}

// -----

// Tests that the dropout probability is in [0, 1).
func.func @dropout_p(%x: tensor<2x5x8xf32>, %rng: tensor<3xi64>) {
  // expected-error@+1 {{'model.dropout' op p = 1.000000e+00, expected 0 <= p < 1}}
  %0 = model.dropout %x, %rng {p = 1.0 : f64, op_id = 1 : i64} : (tensor<2x5x8xf32>, tensor<3xi64>) -> tensor<2x5x8xf32>
  return
}

// -----

// Tests that the dropout rng is (seed, iteration, microbatch).
func.func @dropout_rng(%x: tensor<2x5x8xf32>, %rng: tensor<2xi64>) {
  // expected-error@+1 {{'model.dropout' op rng (seed, iteration, microbatch) has shape [2], expected [3]}}
  %0 = model.dropout %x, %rng {p = 0.1 : f64, op_id = 1 : i64} : (tensor<2x5x8xf32>, tensor<2xi64>) -> tensor<2x5x8xf32>
  return
}

// -----

// Tests that rng_offset reads a dropout key and writes a [4] key, with a non-negative offset.
func.func @rng_offset_input(%rng: tensor<5xi64>) {
  // expected-error@+1 {{'model.rng_offset' op rng (seed, iteration, microbatch) has shape [5], expected [3]}}
  %0 = model.rng_offset %rng {offset = 2 : i64} : (tensor<5xi64>) -> tensor<4xi64>
  return
}

// -----

func.func @rng_offset_result(%rng: tensor<3xi64>) {
  // expected-error@+1 {{'model.rng_offset' op result (seed, iteration, microbatch, op_id offset) has shape [3], expected [4]}}
  %0 = model.rng_offset %rng {offset = 2 : i64} : (tensor<3xi64>) -> tensor<3xi64>
  return
}

// -----

func.func @rng_offset_negative(%rng: tensor<3xi64>) {
  // expected-error@+1 {{'model.rng_offset' op offset = -1, expected >= 0}}
  %0 = model.rng_offset %rng {offset = -1 : i64} : (tensor<3xi64>) -> tensor<4xi64>
  return
}

// -----

// Tests that dropout's result has the input's shape.
func.func @dropout_result(%x: tensor<2x5x8xf32>, %rng: tensor<3xi64>) {
  // expected-error@+1 {{'model.dropout' op result has shape [10, 8], expected [2, 5, 8]}}
  %0 = model.dropout %x, %rng {p = 0.1 : f64, op_id = 1 : i64} : (tensor<2x5x8xf32>, tensor<3xi64>) -> tensor<10x8xf32>
  return
}

// -----

// Tests that dropout_grad's result has dy's shape.
func.func @dropout_grad_result(%dy: tensor<2x5x8xf32>, %rng: tensor<3xi64>) {
  // expected-error@+1 {{'model.dropout_grad' op result has shape [2, 5, 4], expected [2, 5, 8]}}
  %0 = model.dropout_grad %dy, %rng {p = 0.1 : f64, op_id = 1 : i64} : (tensor<2x5x8xf32>, tensor<3xi64>) -> tensor<2x5x4xf32>
  return
}

// -----

// Tests that cross_entropy's logits are [tokens, vocab].
func.func @ce_logits_rank(%logits: tensor<2x5x11xf32>, %labels: tensor<10xi32>, %mask: tensor<10xf32>) {
  // expected-error@+1 {{'model.cross_entropy' op logits have rank 3, expected 2 ([tokens, vocab])}}
  %l, %n, %lse = model.cross_entropy %logits, %labels, %mask : (tensor<2x5x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return
}

// -----

// Tests that cross_entropy has one label per token.
func.func @ce_labels(%logits: tensor<10x11xf32>, %labels: tensor<2x5xi32>, %mask: tensor<10xf32>) {
  // expected-error@+1 {{'model.cross_entropy' op labels has shape [2, 5], expected [10]}}
  %l, %n, %lse = model.cross_entropy %logits, %labels, %mask : (tensor<10x11xf32>, tensor<2x5xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return
}

// -----

// Tests that cross_entropy's loss mask is in the statistics type (f32 for bf16 logits).
func.func @ce_mask_type(%logits: tensor<10x11xbf16>, %labels: tensor<10xi32>, %mask: tensor<10xbf16>) {
  // expected-error@+1 {{'model.cross_entropy' op loss_mask has element type 'bf16', expected 'f32'}}
  %l, %n, %lse = model.cross_entropy %logits, %labels, %mask : (tensor<10x11xbf16>, tensor<10xi32>, tensor<10xbf16>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return
}

// -----

// Tests that cross_entropy's loss_sum is a scalar.
func.func @ce_loss_sum(%logits: tensor<10x11xf32>, %labels: tensor<10xi32>, %mask: tensor<10xf32>) {
  // expected-error@+1 {{'model.cross_entropy' op loss_sum has shape [1], expected []}}
  %l, %n, %lse = model.cross_entropy %logits, %labels, %mask : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<1xf32>, tensor<f32>, tensor<10xf32>)
  return
}

// -----

// Tests that cross_entropy's num_tokens is in the statistics type.
func.func @ce_num_tokens(%logits: tensor<10x11xf64>, %labels: tensor<10xi32>, %mask: tensor<10xf64>) {
  // expected-error@+1 {{'model.cross_entropy' op num_tokens has element type 'f32', expected 'f64'}}
  %l, %n, %lse = model.cross_entropy %logits, %labels, %mask : (tensor<10x11xf64>, tensor<10xi32>, tensor<10xf64>) -> (tensor<f64>, tensor<f32>, tensor<10xf64>)
  return
}

// -----

// Tests that cross_entropy's valid_vocab leaves a column after vocab_start.
func.func @ce_valid_vocab(%logits: tensor<10x11xf32>, %labels: tensor<10xi32>, %mask: tensor<10xf32>) {
  // expected-error@+1 {{'model.cross_entropy' op valid_vocab 4 leaves no valid column after vocab_start 4}}
  %l, %n, %lse = model.cross_entropy %logits, %labels, %mask {vocab_start = 4 : i64, valid_vocab = 4 : i64} : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<10xf32>)
  return
}

// -----

// Tests that cross_entropy's lse has one entry per token.
func.func @ce_lse(%logits: tensor<10x11xf32>, %labels: tensor<10xi32>, %mask: tensor<10xf32>) {
  // expected-error@+1 {{'model.cross_entropy' op lse has shape [11], expected [10]}}
  %l, %n, %lse = model.cross_entropy %logits, %labels, %mask : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>) -> (tensor<f32>, tensor<f32>, tensor<11xf32>)
  return
}

// -----

// Tests that cross_entropy_grad's loss gradient is a scalar.
func.func @ce_grad_dloss(%logits: tensor<10x11xf32>, %labels: tensor<10xi32>, %mask: tensor<10xf32>, %lse: tensor<10xf32>, %d: tensor<10xf32>) {
  // expected-error@+1 {{'model.cross_entropy_grad' op loss_grad has shape [10], expected []}}
  %0 = model.cross_entropy_grad %logits, %labels, %mask, %lse, %d : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>) -> tensor<10x11xf32>
  return
}

// -----

// Tests that cross_entropy_grad's result has the logits' shape.
func.func @ce_grad_result(%logits: tensor<10x11xf32>, %labels: tensor<10xi32>, %mask: tensor<10xf32>, %lse: tensor<10xf32>, %d: tensor<f32>) {
  // expected-error@+1 {{'model.cross_entropy_grad' op result has shape [11, 10], expected [10, 11]}}
  %0 = model.cross_entropy_grad %logits, %labels, %mask, %lse, %d : (tensor<10x11xf32>, tensor<10xi32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>) -> tensor<11x10xf32>
  return
}

// -----

// Tests that cross_entropy_grad checks its logits like cross_entropy.
func.func @ce_grad_logits(%logits: tensor<110xf32>, %labels: tensor<10xi32>, %mask: tensor<10xf32>, %lse: tensor<10xf32>, %d: tensor<f32>) {
  // expected-error@+1 {{'model.cross_entropy_grad' op logits have rank 1, expected 2 ([tokens, vocab])}}
  %0 = model.cross_entropy_grad %logits, %labels, %mask, %lse, %d : (tensor<110xf32>, tensor<10xi32>, tensor<10xf32>, tensor<10xf32>, tensor<f32>) -> tensor<110xf32>
  return
}

// -----

// Tests that a parameter declaration names a known initialisation.
// expected-error@+1 {{'model.parameter' op init 'uniform' is not one of normal, ones, zeros}}
model.parameter @w {init = "uniform"} : tensor<4xf32>

// -----

// Tests that a normal initialisation has a positive std.
// expected-error@+1 {{'model.parameter' op init 'normal' needs init_std > 0}}
model.parameter @w {init = "normal"} : tensor<4xf32>

// -----

// Tests that a std goes only with init 'normal'.
// expected-error@+1 {{'model.parameter' op init_std is only meaningful with init 'normal', not 'ones'}}
model.parameter @w {init = "ones", init_std = 0.02 : f64} : tensor<4xf32>

// -----

// Tests that a parameter argument names its declaration by symbol.
// expected-error@+1 {{'func.func' op argument 0 of region 0: 'model.param' must be a symbol reference to a model.parameter (@<name>), not "w"}}
func.func @f(%w: tensor<4xf32> {model.param = "w"}) {
  return
}

// -----

// Tests that attention dropout needs the dropout key.
func.func @attention_dropout_no_key(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x1x4xf32>, %v: tensor<2x5x1x4xf32>) {
  // expected-error@+1 {{'model.attention' op dropout = 1.000000e-01 needs the rng operand (a dropout key)}}
  %o, %lse = model.attention %q, %k, %v {dropout = 0.1 : f64} : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>) -> (tensor<2x5x2x4xf32>, tensor<2x2x5xf32>)
  return
}

// -----

// Tests that attention dropout is a probability below 1.
func.func @attention_dropout_p(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x1x4xf32>, %v: tensor<2x5x1x4xf32>, %rng: tensor<3xi64>) {
  // expected-error@+1 {{'model.attention' op dropout = 1.000000e+00, expected 0 <= dropout < 1}}
  %o, %lse = model.attention %q, %k, %v, %rng {dropout = 1.0 : f64} : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>, tensor<3xi64>) -> (tensor<2x5x2x4xf32>, tensor<2x2x5xf32>)
  return
}

// -----

// Tests that attention_grad's dropout key is a [3] or [4] key.
func.func @attention_grad_dropout_key(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x1x4xf32>, %v: tensor<2x5x1x4xf32>, %o: tensor<2x5x2x4xf32>, %lse: tensor<2x2x5xf32>, %do: tensor<2x5x2x4xf32>, %rng: tensor<5xi64>) {
  // expected-error@+1 {{'model.attention_grad' op rng (seed, iteration, microbatch) has shape [5], expected [3]}}
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %lse, %do, %rng {dropout = 0.1 : f64} : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x2x4xf32>, tensor<2x2x5xf32>, tensor<2x5x2x4xf32>, tensor<5xi64>) -> (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>)
  return
}

// -----

// Tests that doc_start (--reset-attention-mask) is [batch, seq] of the query.
func.func @attention_doc_start_shape(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x1x4xf32>, %v: tensor<2x5x1x4xf32>, %ds: tensor<2x4xi32>) {
  // expected-error@+1 {{'model.attention' op doc_start has shape [2, 4], expected [2, 5]}}
  %o, %lse = model.attention %q, %k, %v doc_start(%ds) : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>, tensor<2x4xi32>) -> (tensor<2x5x2x4xf32>, tensor<2x2x5xf32>)
  return
}

// -----

// Tests that document starts need the causal mask.
func.func @attention_grad_doc_start_causal(%q: tensor<2x5x2x4xf32>, %k: tensor<2x5x1x4xf32>, %v: tensor<2x5x1x4xf32>, %o: tensor<2x5x2x4xf32>, %lse: tensor<2x2x5xf32>, %do: tensor<2x5x2x4xf32>, %ds: tensor<2x5xi32>) {
  // expected-error@+1 {{'model.attention_grad' op doc_start (--reset-attention-mask) needs causal = true}}
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %lse, %do doc_start(%ds) {causal = false} : (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x2x4xf32>, tensor<2x2x5xf32>, tensor<2x5x2x4xf32>, tensor<2x5xi32>) -> (tensor<2x5x2x4xf32>, tensor<2x5x1x4xf32>, tensor<2x5x1x4xf32>)
  return
}
