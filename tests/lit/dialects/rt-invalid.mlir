// RUN: trainc-opt %s -split-input-file -verify-diagnostics
// REQUIRES: compiler

// One case per rt op verifier message, including the paths of rt.kernel's check against the
// runtime kernel table (runtime/core/KernelSignatures.cpp).

// Tests that rt.buffer's kind is one of the buffer kinds.
// expected-error@+2 {{expected ::mlir::trainc::rt::BufferKind to be one of: parameter, main_grad, master_param, optimizer_state, activation, input, output, scalar, workspace}}
// expected-error@+1 {{failed to parse Rt_BufferKindAttr}}
rt.buffer @b temporary : memref<8xf32>

// -----

// Tests that rt.buffer's offset is -1 (unplanned) or a byte offset.
// expected-error@+1 {{'rt.buffer' op offset -5 is negative}}
rt.buffer @b activation {offset = -5 : i64} : memref<8xf32>

// -----

// Tests that only flowing buffers (activation, workspace) belong to a buffer group.
// expected-error@+1 {{'rt.buffer' op group 'stash.0' on a parameter buffer (only activation and workspace buffers are grouped)}}
rt.buffer @b parameter {group = "stash.0"} : memref<8xf32>

// -----

// Tests that rt.buffer_ref names an existing buffer.
func.func @f() {
  // expected-error@+1 {{'rt.buffer_ref' op @missing is not an rt.buffer}}
  %0 = rt.buffer_ref @missing : memref<8xf32>
  return
}

// -----

// Tests that rt.buffer_ref names an rt.buffer, not another symbol.
func.func @f() {
  // expected-error@+1 {{'rt.buffer_ref' op @f is not an rt.buffer}}
  %0 = rt.buffer_ref @f : memref<8xf32>
  return
}

// -----

// Tests that rt.buffer_ref has the buffer's type.
rt.buffer @b activation : memref<8xf32>
func.func @f() {
  // expected-error@+1 {{'rt.buffer_ref' op type 'memref<2x4xf32>' differs from buffer @b of type 'memref<8xf32>'}}
  %0 = rt.buffer_ref @b : memref<2x4xf32>
  return
}

// -----

// Tests that rt.view keeps the element type.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.view' op changes the element type from 'f32' to 'f64'}}
  %0 = rt.view %a [0] : memref<8xf32> to memref<8xf64>
  return
}

// -----

// Tests that rt.view stays inside its source.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.view' op offset 4 + 8 elements exceeds the source of 8 elements}}
  %0 = rt.view %a [4] : memref<8xf32> to memref<2x4xf32>
  return
}

// -----

// Tests that rt.kernel names a kernel of the runtime's table.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.kernel' op unknown kernel 'softmax'}}
  rt.kernel "softmax" ins(%a : memref<8xf32>) outs(%a : memref<8xf32>)
  return
}

// -----

// Tests that rt.kernel has the kernel's operand counts.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.kernel' op kernel 'add' takes 2 inputs and 1 outputs, got 1 and 1}}
  rt.kernel "add" ins(%a : memref<8xf32>) outs(%a : memref<8xf32>)
  return
}

// -----

// Tests that rt.kernel's attributes are the kernel's. (The name is printed with extra double quotes
// today, see tests/lit/xfail/kernel-attr-name-quoting.mlir; this case pins the rest.)
func.func @f(%a: memref<8xf32>) {
  // expected-error-re@+1 {{'rt.kernel' op kernel 'fill' has no attribute '{{"?}}alpha{{"?}}'}}
  rt.kernel "fill" outs(%a : memref<8xf32>) {kernel_attrs = {alpha = 1.0 : f64}}
  return
}

// -----

// Tests that rt.kernel's attributes are numbers.
func.func @f(%a: memref<8xf32>) {
  // expected-error-re@+1 {{'rt.kernel' op attribute '{{"?}}value{{"?}}' must be an integer or a float}}
  rt.kernel "fill" outs(%a : memref<8xf32>) {kernel_attrs = {value = "one"}}
  return
}

// -----

// Tests that a list attribute is refused where the kernel takes a number.
func.func @f(%a: memref<8xf32>) {
  // expected-error-re@+1 {{'rt.kernel' op attribute '{{"?}}value{{"?}}' must be an integer or a float}}
  rt.kernel "fill" outs(%a : memref<8xf32>) {kernel_attrs = {value = array<i64: 1>}}
  return
}

// -----

// Tests that adamw's segments are a list of integers.
func.func @f(%a: memref<8xf32>, %s: memref<f32>) {
  // expected-error@+1 {{'rt.kernel' op attribute 'segments' must be an array<i64>}}
  rt.kernel "adamw" ins(%a, %a, %a, %a, %s, %s, %s, %s, %s : memref<8xf32>, memref<8xf32>, memref<8xf32>, memref<8xf32>, memref<f32>, memref<f32>, memref<f32>, memref<f32>, memref<f32>) outs(%a, %a, %a : memref<8xf32>, memref<8xf32>, memref<8xf32>) {kernel_attrs = {segments = 3 : i64}, in_place = array<i32: 0, 2, 3>}
  return
}

// -----

// Tests that adamw's segments stay inside the operands (the runtime's verifier).
func.func @f(%a: memref<8xf32>, %s: memref<f32>) {
  // expected-error@+1 {{'rt.kernel' op kernel 'adamw' attribute segments: segment 0 [2, 9) is reversed, out of order or outside the 8 elements}}
  rt.kernel "adamw" ins(%a, %a, %a, %a, %s, %s, %s, %s, %s : memref<8xf32>, memref<8xf32>, memref<8xf32>, memref<8xf32>, memref<f32>, memref<f32>, memref<f32>, memref<f32>, memref<f32>) outs(%a, %a, %a : memref<8xf32>, memref<8xf32>, memref<8xf32>) {kernel_attrs = {segments = array<i64: 2, 9, 1>}, in_place = array<i32: 0, 2, 3>}
  return
}

// -----

// Tests that a rank-dependent view names a mesh axis.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.view' op axis 'data' is not a mesh axis (tp, cp, ep, dp, pp)}}
  %0 = rt.view %a [0] {axis = "data", axis_stride = 4 : i64} : memref<8xf32> to memref<4xf32>
  return
}

// -----

// Tests that a rank-dependent view has a positive stride.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.view' op axis_stride 0 on axis 'dp': expected > 0}}
  %0 = rt.view %a [0] {axis = "dp"} : memref<8xf32> to memref<4xf32>
  return
}

// -----

// Tests that a stride needs an axis.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.view' op axis_stride 4 without an axis}}
  %0 = rt.view %a [0] {axis_stride = 4 : i64} : memref<8xf32> to memref<4xf32>
  return
}

// -----

// Tests that the runtime signature check reports a matmul contraction mismatch.
func.func @f(%a: memref<10x8xf32>, %w: memref<12x6xf32>, %y: memref<10x12xf32>) {
  // expected-error@+1 {{'rt.kernel' op kernel 'matmul' input 1: shape [12, 6], expected contraction dim 8 (from input 0 shape [10, 8])}}
  rt.kernel "matmul" ins(%a, %w : memref<10x8xf32>, memref<12x6xf32>) outs(%y : memref<10x12xf32>) {kernel_attrs = {trans_b = 1 : i64}}
  return
}

// -----

// Tests that the runtime signature check reports a dtype mismatch.
func.func @f(%a: memref<8xf32>, %b: memref<8xf64>) {
  // expected-error@+1 {{'rt.kernel' op kernel 'add' input 1: dtype f64, expected f32 (as input 0)}}
  rt.kernel "add" ins(%a, %b : memref<8xf32>, memref<8xf64>) outs(%a : memref<8xf32>)
  return
}

// -----

// Tests that the runtime signature check reports an integer tensor where a float is expected.
func.func @f(%a: memref<8xi32>, %y: memref<8xi32>) {
  // expected-error@+1 {{'rt.kernel' op kernel 'scale' input 0: dtype i32, expected f32, f64, bf16 or f16}}
  rt.kernel "scale" ins(%a : memref<8xi32>) outs(%y : memref<8xi32>)
  return
}

// -----

// Tests that the runtime signature check reports a bad attribute value.
func.func @f(%x: memref<10x8xf32>, %g: memref<8xf32>, %y: memref<10x8xf32>, %r: memref<10xf32>) {
  // expected-error@+1 {{'rt.kernel' op kernel 'rms_norm' attribute eps: expected > 0}}
  rt.kernel "rms_norm" ins(%x, %g : memref<10x8xf32>, memref<8xf32>) outs(%y, %r : memref<10x8xf32>, memref<10xf32>) {kernel_attrs = {eps = 0.0 : f64}}
  return
}

// -----

// Tests that in_place has one entry per output.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.kernel' op in_place has 2 entries, expected 1}}
  rt.kernel "add" ins(%a, %a : memref<8xf32>, memref<8xf32>) outs(%a : memref<8xf32>) {in_place = array<i32: 0, 1>}
  return
}

// -----

// Tests that in_place entries are -1 or an input index.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.kernel' op in_place entry 2 is not -1 or an input index}}
  rt.kernel "add" ins(%a, %a : memref<8xf32>, memref<8xf32>) outs(%a : memref<8xf32>) {in_place = array<i32: 2>}
  return
}

// -----

// Tests that rt.collective's kind is a known collective.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+2 {{expected ::mlir::trainc::rt::CollectiveKind to be one of: all_reduce, reduce_scatter, all_gather, broadcast, barrier}}
  // expected-error@+1 {{failed to parse Rt_CollectiveKindAttr}}
  rt.collective all_to_all "dp" ins(%a : memref<8xf32>) outs(%a : memref<8xf32>)
  return
}

// -----

// Tests that a collective other than barrier takes one input and one output.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.collective' op 'all_reduce' takes 1 input and 1 output}}
  rt.collective all_reduce "dp" ins(%a : memref<8xf32>)
  return
}

// -----

// Tests that a barrier takes no operands.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.collective' op 'barrier' takes 0 input and 0 output}}
  rt.collective barrier "world" ins(%a : memref<8xf32>) outs(%a : memref<8xf32>)
  return
}

// -----

// Tests that rt.collective's reduce op is sum, max or min.
func.func @f(%a: memref<8xf32>) {
  // expected-error@+1 {{'rt.collective' op attribute 'op' failed to satisfy constraint: the reduction of a collective}}
  rt.collective all_reduce "dp" ins(%a : memref<8xf32>) outs(%a : memref<8xf32>) {op = "prod"}
  return
}

// -----

// Tests that rt.host_io is fill_inputs or read_outputs.
func.func @f() {
  // expected-error@+2 {{expected ::mlir::trainc::rt::HostIOKind to be one of: fill_inputs, read_outputs}}
  // expected-error@+1 {{failed to parse Rt_HostIOKindAttr}}
  rt.host_io print "batch"
  return
}

// -----

// Tests that rt.region is begin or end.
func.func @f() {
  // expected-error@+2 {{expected ::mlir::trainc::rt::RegionKind to be one of: begin, end}}
  // expected-error@+1 {{failed to parse Rt_RegionKindAttr}}
  rt.region middle "iteration"
  return
}
