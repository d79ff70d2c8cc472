// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-cuda-graph
// REQUIRES: compiler

// Tests that trainc-cuda-graph reads its mode from the module attribute trainc.cuda_graph_impl
// (set by the driver from --cuda-graph-impl local --cuda-graph-scope full_iteration) and refuses
// a mode it does not implement.

// expected-error@+1 {{trainc-cuda-graph: cuda graph impl 'local' is not supported (expected none or full_iteration; Megatron's 'local' per-layer graphs are not implemented)}}
module attributes {trainc.cuda_graph_impl = "local"} {
  func.func @train_step() attributes {rt.entry} {
    return
  }
}

// -----

// The attribute's full_iteration applies the same checks as the option.
module attributes {trainc.cuda_graph_impl = "full_iteration"} {
  func.func @train_step() attributes {rt.entry} {
    rt.host_io fill_inputs "batch"
    // expected-error@+1 {{trainc-cuda-graph: rt.host_io fill_inputs "again" inside the graph-capture region}}
    rt.host_io fill_inputs "again"
    return
  }
}
