// RUN: trainc-opt %s -trainc-cuda-graph=impl=full_iteration | FileCheck %s
// RUN: trainc-opt %s -trainc-cuda-graph | FileCheck %s --check-prefix=NONE
// RUN: trainc-opt %s -trainc-cuda-graph=impl=none | FileCheck %s --check-prefix=NONE
// REQUIRES: compiler

// Tests that trainc-cuda-graph (full_iteration) wraps the rt.entry body in one region: the
// fill_inputs moves before the device work that touches no input or scalar buffer (@grad's
// zero-fill), the region begins right after it and ends right before the final read_outputs;
// calls (microbatches), the optimizer's reads of the host scalars (@lr) and a collective stay
// inside. The eval entry point gets no region. Without the option or the module attribute, and
// with impl=none, the module is unchanged.

rt.buffer @grad main_grad : memref<4xf32>
rt.buffer @w parameter : memref<4xf32>
rt.buffer @lr scalar : memref<f32>
rt.buffer @tokens input : memref<4xf32>
rt.buffer @loss_sum output : memref<f32>
func.func @microbatch(%x: memref<4xf32>, %g: memref<4xf32>) attributes {rt.stage} {
  rt.kernel "add" ins(%g, %x : memref<4xf32>, memref<4xf32>) outs(%g : memref<4xf32>) {in_place = array<i32: 0>}
  return
}
func.func @train_step() attributes {rt.entry} {
  %g = rt.buffer_ref @grad : memref<4xf32>
  rt.kernel "fill" outs(%g : memref<4xf32>)
  rt.host_io fill_inputs "batch"
  %t = rt.buffer_ref @tokens : memref<4xf32>
  call @microbatch(%t, %g) : (memref<4xf32>, memref<4xf32>) -> ()
  rt.collective all_reduce "dp" ins(%g : memref<4xf32>) outs(%g : memref<4xf32>)
  %w = rt.buffer_ref @w : memref<4xf32>
  %lr = rt.buffer_ref @lr : memref<f32>
  rt.kernel "scale_by" ins(%g, %lr : memref<4xf32>, memref<f32>) outs(%w : memref<4xf32>)
  %l = rt.buffer_ref @loss_sum : memref<f32>
  rt.kernel "fill" outs(%l : memref<f32>)
  rt.host_io read_outputs "outputs"
  return
}
func.func @eval_step() attributes {rt.entry_point = "eval_step"} {
  rt.host_io fill_inputs "eval_batch"
  rt.host_io read_outputs "eval_outputs"
  return
}

// CHECK-LABEL: func.func @train_step()
// CHECK-NEXT:    rt.host_io fill_inputs "batch"
// CHECK-NEXT:    rt.region begin "iteration"
// CHECK-NEXT:    rt.buffer_ref @grad
// CHECK-NEXT:    rt.kernel "fill"
// CHECK:         call @microbatch
// CHECK:         rt.collective all_reduce
// CHECK:         rt.kernel "scale_by"
// CHECK:         rt.kernel "fill"
// CHECK-NEXT:    rt.region end "iteration"
// CHECK-NEXT:    rt.host_io read_outputs "outputs"
// CHECK-NEXT:    return
// CHECK-LABEL: func.func @eval_step()
// CHECK-NOT:     rt.region
// NONE-NOT: rt.region
