// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-cuda-graph=impl=full_iteration
// REQUIRES: compiler

// One case per refusal of trainc-cuda-graph (full_iteration): host I/O inside the region (in
// the entry and in a callee), a host-read scalar inside it (a read_outputs before device work),
// a write of a host-written buffer (in the entry and through a callee's argument), a barrier,
// carried async tokens, an existing region; then an unsupported mode and the module attribute path.

rt.buffer @g main_grad : memref<4xf32>
func.func @train_step() attributes {rt.entry} {
  rt.host_io fill_inputs "batch"
  %g = rt.buffer_ref @g : memref<4xf32>
  rt.kernel "fill" outs(%g : memref<4xf32>)
  // expected-error@+1 {{trainc-cuda-graph: rt.host_io fill_inputs "batch2" inside the graph-capture region "iteration" of @train_step: no host work runs inside a replayed graph; host I/O must come before the region}}
  rt.host_io fill_inputs "batch2"
  rt.kernel "fill" outs(%g : memref<4xf32>)
  rt.host_io read_outputs "outputs"
  return
}

// -----

rt.buffer @g main_grad : memref<4xf32>
rt.buffer @loss_sum output : memref<f32>
func.func @train_step() attributes {rt.entry} {
  rt.host_io fill_inputs "batch"
  %l = rt.buffer_ref @loss_sum : memref<f32>
  rt.kernel "fill" outs(%l : memref<f32>)
  // expected-error@+1 {{trainc-cuda-graph: rt.host_io read_outputs "found_inf" inside the graph-capture region "iteration" of @train_step: the host would read scalars (loss, grad norm, the found-inf flag) in the middle of a captured iteration; host-read scalars are read after the region}}
  rt.host_io read_outputs "found_inf"
  %g = rt.buffer_ref @g : memref<4xf32>
  rt.kernel "fill" outs(%g : memref<4xf32>)
  rt.host_io read_outputs "outputs"
  return
}

// -----

rt.buffer @g main_grad : memref<4xf32>
func.func @stage(%x: memref<4xf32>) attributes {rt.stage} {
  rt.kernel "fill" outs(%x : memref<4xf32>)
  // expected-error@+1 {{trainc-cuda-graph: rt.host_io read_outputs "loss" inside the graph-capture region "iteration" of @train_step}}
  rt.host_io read_outputs "loss"
  return
}
func.func @train_step() attributes {rt.entry} {
  rt.host_io fill_inputs "batch"
  %g = rt.buffer_ref @g : memref<4xf32>
  // expected-note@+1 {{reached from this call in @train_step}}
  call @stage(%g) : (memref<4xf32>) -> ()
  rt.host_io read_outputs "outputs"
  return
}

// -----

rt.buffer @lr scalar : memref<f32>
func.func @train_step() attributes {rt.entry} {
  rt.host_io fill_inputs "batch"
  %lr = rt.buffer_ref @lr : memref<f32>
  // expected-error@+1 {{trainc-cuda-graph: 'rt.kernel' writes @lr (scalar, written by the host before each step) inside the graph-capture region "iteration" of @train_step: a replay would use the captured value instead of the host's; varying values (lr, step, loss scale, RNG key) must be read from device buffers the host writes before the region}}
  rt.kernel "fill" outs(%lr : memref<f32>) {kernel_attrs = {value = 1.000000e-03 : f64}}
  rt.host_io read_outputs "outputs"
  return
}

// -----

rt.buffer @tokens input : memref<2x4xf32>
func.func @stage(%x: memref<4xf32>) attributes {rt.stage} {
  // expected-error@+1 {{trainc-cuda-graph: 'rt.kernel' writes @tokens (input, written by the host before each step)}}
  rt.kernel "fill" outs(%x : memref<4xf32>)
  return
}
func.func @train_step() attributes {rt.entry} {
  rt.host_io fill_inputs "batch"
  %t = rt.buffer_ref @tokens : memref<2x4xf32>
  %v = rt.view %t [4] : memref<2x4xf32> to memref<4xf32>
  // expected-note@+1 {{reached from this call in @train_step}}
  call @stage(%v) : (memref<4xf32>) -> ()
  rt.host_io read_outputs "outputs"
  return
}

// -----

func.func @train_step() attributes {rt.entry} {
  rt.host_io fill_inputs "batch"
  // expected-error@+1 {{trainc-cuda-graph: rt.collective barrier inside the graph-capture region "iteration" of @train_step: a barrier synchronises the host (the NCCL communicator's is a blocking all-reduce of a host value), which a captured graph cannot do}}
  rt.collective barrier "dp"
  rt.host_io read_outputs "outputs"
  return
}

// -----

// expected-error@+1 {{trainc-cuda-graph: full_iteration graphs with async tokens carried into the next iteration (rt.carried_tokens, --overlap-param-gather) are not supported: their waits would lie outside the captured graph}}
module attributes {rt.carried_tokens = array<i64: 0>} {
  func.func @train_step() attributes {rt.entry} {
    rt.host_io fill_inputs "batch"
    return
  }
}

// -----

func.func @train_step() attributes {rt.entry} {
  rt.host_io fill_inputs "batch"
  // expected-error@+1 {{trainc-cuda-graph: the module already has a graph-capture region}}
  rt.region begin "mine"
  rt.region end "mine"
  return
}
