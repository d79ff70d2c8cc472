// RUN: trainc-opt %s | trainc-opt | FileCheck %s
// REQUIRES: compiler

// Round trip of every rt op.

// Tests that rt.buffer keeps its kind and offset (the default offset -1 is elided).
// CHECK: rt.buffer @w parameter {offset = 0 : i64} : memref<12x8xf32>
// CHECK: rt.buffer @x activation : memref<2x5x8xf32>
// CHECK: rt.buffer @y activation {offset = 512 : i64} : memref<2x5x12xf32>
// CHECK: rt.buffer @g main_grad {offset = 1024 : i64} : memref<96xf32>
// CHECK: rt.buffer @loss output : memref<f32>
rt.buffer @w parameter {offset = 0 : i64} : memref<12x8xf32>
rt.buffer @x activation : memref<2x5x8xf32>
rt.buffer @y activation {offset = 512 : i64} : memref<2x5x12xf32>
rt.buffer @g main_grad {offset = 1024 : i64} : memref<96xf32>
rt.buffer @loss output : memref<f32>

// Tests that rt.buffer_ref, rt.view and rt.kernel (with kernel_attrs and in_place) round-trip.
// CHECK-LABEL: func.func @kernels
// CHECK: %[[W:.+]] = rt.buffer_ref @w : memref<12x8xf32>
// CHECK: %[[X:.+]] = rt.buffer_ref @x : memref<2x5x8xf32>
// CHECK: %[[Y:.+]] = rt.buffer_ref @y : memref<2x5x12xf32>
// CHECK: %[[X2:.+]] = rt.view %[[X]][0] : memref<2x5x8xf32> to memref<10x8xf32>
// CHECK: %[[Y2:.+]] = rt.view %[[Y]][0] : memref<2x5x12xf32> to memref<10x12xf32>
// CHECK: %[[ROW:.+]] = rt.view %[[X]][8] : memref<2x5x8xf32> to memref<8xf32>
// CHECK: rt.kernel "fill" outs(%[[Y]] : memref<2x5x12xf32>) {kernel_attrs = {value = 2.000000e+00 : f64}}
// CHECK: rt.kernel "matmul" ins(%[[X2]], %[[W]] : memref<10x8xf32>, memref<12x8xf32>) outs(%[[Y2]] : memref<10x12xf32>) {kernel_attrs = {trans_b = 1 : i64}}
// CHECK: rt.kernel "add" ins(%[[X]], %[[X]] : memref<2x5x8xf32>, memref<2x5x8xf32>) outs(%[[X]] : memref<2x5x8xf32>) {in_place = array<i32: 0>}
// CHECK: rt.kernel "scale" ins(%[[ROW]] : memref<8xf32>) outs(%[[ROW]] : memref<8xf32>) {in_place = array<i32: -1>, kernel_attrs = {alpha = 5.000000e-01 : f64}}
func.func @kernels() {
  %w = rt.buffer_ref @w : memref<12x8xf32>
  %x = rt.buffer_ref @x : memref<2x5x8xf32>
  %y = rt.buffer_ref @y : memref<2x5x12xf32>
  %x2 = rt.view %x [0] : memref<2x5x8xf32> to memref<10x8xf32>
  %y2 = rt.view %y [0] : memref<2x5x12xf32> to memref<10x12xf32>
  %row = rt.view %x [8] : memref<2x5x8xf32> to memref<8xf32>
  rt.kernel "fill" outs(%y : memref<2x5x12xf32>) {kernel_attrs = {value = 2.0 : f64}}
  rt.kernel "matmul" ins(%x2, %w : memref<10x8xf32>, memref<12x8xf32>) outs(%y2 : memref<10x12xf32>) {kernel_attrs = {trans_b = 1 : i64}}
  rt.kernel "add" ins(%x, %x : memref<2x5x8xf32>, memref<2x5x8xf32>) outs(%x : memref<2x5x8xf32>) {in_place = array<i32: 0>}
  rt.kernel "scale" ins(%row : memref<8xf32>) outs(%row : memref<8xf32>) {kernel_attrs = {alpha = 0.5 : f64}, in_place = array<i32: -1>}
  return
}

// Tests that rt.collective (every kind; sync, and async with a token; the default op "sum" is
// elided), rt.wait, rt.host_io and rt.region round-trip.
// CHECK-LABEL: func.func @control
// CHECK: %[[G:.+]] = rt.buffer_ref @g : memref<96xf32>
// CHECK: rt.region begin "iteration"
// CHECK: rt.host_io fill_inputs "batch"
// CHECK: rt.collective all_reduce "dp" ins(%[[G]] : memref<96xf32>) outs(%[[G]] : memref<96xf32>){{$}}
// CHECK: rt.collective all_reduce "tp" ins(%[[G]] : memref<96xf32>) outs(%[[G]] : memref<96xf32>) {op = #rt<reduce_op max>, token = 3 : i64}
// CHECK: rt.wait 3
// CHECK: rt.collective reduce_scatter "dp" ins(%[[G]] : memref<96xf32>) outs(%[[G]] : memref<96xf32>) {op = #rt<reduce_op min>}
// CHECK: rt.collective all_gather "dp" ins(%[[G]] : memref<96xf32>) outs(%[[G]] : memref<96xf32>)
// CHECK: rt.collective broadcast "pp" ins(%[[G]] : memref<96xf32>) outs(%[[G]] : memref<96xf32>)
// CHECK: rt.collective barrier "world"{{$}}
// CHECK: rt.host_io read_outputs "outputs"
// CHECK: rt.region end "iteration"
func.func @control() attributes {rt.entry} {
  %g = rt.buffer_ref @g : memref<96xf32>
  rt.region begin "iteration"
  rt.host_io fill_inputs "batch"
  rt.collective all_reduce "dp" ins(%g : memref<96xf32>) outs(%g : memref<96xf32>) {}
  rt.collective all_reduce "tp" ins(%g : memref<96xf32>) outs(%g : memref<96xf32>) {op = #rt<reduce_op max>, token = 3 : i64}
  rt.wait 3
  rt.collective reduce_scatter "dp" ins(%g : memref<96xf32>) outs(%g : memref<96xf32>) {op = #rt<reduce_op min>}
  rt.collective all_gather "dp" ins(%g : memref<96xf32>) outs(%g : memref<96xf32>)
  rt.collective broadcast "pp" ins(%g : memref<96xf32>) outs(%g : memref<96xf32>)
  rt.collective barrier "world"
  rt.host_io read_outputs "outputs"
  rt.region end "iteration"
  return
}
