// RUN: rm -rf %t && trainc compile --preset tiny-llama --seq-length 8 --hidden-dropout 0.1 --tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 2 --global-batch-size 2 --dump-ir-dir %t/llama -o %t/llama-plan > /dev/null
// RUN: trainc-opt %t/llama/0-model.mlir -trainc-shard | FileCheck %s --check-prefix=LLAMA
// RUN: FileCheck %s --check-prefix=COUNT < %t/llama/1-autodiff.mlir
// RUN: trainc compile --preset tiny-gpt --seq-length 8 --hidden-dropout 0.1 --tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 2 --global-batch-size 2 --dump-ir-dir %t/gpt -o %t/gpt-plan > /dev/null
// RUN: trainc-opt %t/gpt/0-model.mlir -trainc-shard | FileCheck %s --check-prefix=GPT
// RUN: FileCheck %s --check-prefix=GPTCOUNT < %t/gpt/1-autodiff.mlir
// The pass option overrides the module's model.sequence_parallel: off gives the TP plan.
// RUN: trainc-opt %t/llama/0-model.mlir -trainc-shard=sequence-parallel=false | FileCheck %s --check-prefix=OFF
// The lowering: a sequence shard of [2, 8, h] is strided, so each gather/scatter is one
// collective per sample on contiguous views (2 per op at micro-batch size 2).
// RUN: FileCheck %s --check-prefix=RT < %t/llama/3-lower.mlir
// RUN: trainc inspect %t/llama-plan --ranks | FileCheck %s --check-prefix=INSPECT
// RUN: FileCheck %s --check-prefix=GPTRT < %t/gpt/3-lower.mlir
// RUN: trainc-opt %S/Inputs/shard-sp-invalid.mlir -split-input-file -verify-diagnostics -trainc-shard="tp=2 sequence-parallel=true" -o /dev/null
// REQUIRES: compiler

// Tests trainc-shard with --sequence-parallel (Megatron's SP, module attribute
// model.sequence_parallel): a layer's hidden state is a sequence shard [b, s/tp, h]; norms,
// dropout and residual adds run on it; mesh.all_gather along the sequence (gather_axis = 1)
// precedes the column-parallel blocks (one for q/k/v, one for fc1, one for the output layer),
// mesh.reduce_scatter along it follows the row-parallel ones and the vocab-parallel embedding;
// replicated parameters used on a shard (norm weights, row-parallel biases) get
// model.copy_to_region, whose VJP all-reduces their partial gradient. Autodiff then derives
// the conjugates (COUNT): per layer 2 all-gathers + 2 reduce-scatters forward, 2 reduce-scatters
// + 2 all-gathers backward, plus one gradient all-reduce per replicated parameter on a shard and
// the 2 all-gathers that re-gather the saved shards for the weight gradients (Megatron's SP
// backward; mesh.all_gather is recomputed rather than saved, model::isCheaperToRecompute).

// LLAMA-LABEL: func.func private @decoder_layer(%arg0: tensor<2x4x16xf32>
// LLAMA-DAG: %[[W2:.*]] = model.copy_to_region %arg6 on @mesh mesh_axes = [0] : tensor<16xf32>
// LLAMA-DAG: %[[W1:.*]] = model.copy_to_region %arg1 on @mesh mesh_axes = [0] : tensor<16xf32>
// LLAMA: %[[H:.*]], %{{.*}} = model.rms_norm %arg0, %[[W1]] : (tensor<2x4x16xf32>, tensor<16xf32>) -> (tensor<2x4x16xf32>, tensor<8xf32>)
// LLAMA-NEXT: %[[G:.*]] = mesh.all_gather %[[H]] on @mesh mesh_axes = [0] gather_axis = 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
// LLAMA-NEXT: model.linear %[[G]], %arg2
// LLAMA: model.linear %[[G]], %arg3
// LLAMA: model.linear %[[G]], %arg4
// LLAMA: %[[P:.*]] = model.linear %{{.*}}, %arg5 : (tensor<2x8x8xf32>, tensor<16x8xf32>) -> tensor<2x8x16xf32>
// LLAMA-NEXT: %[[RS:.*]] = mesh.reduce_scatter %[[P]] on @mesh mesh_axes = [0] scatter_axis = 1 : tensor<2x8x16xf32> -> tensor<2x4x16xf32>
// The dropout mask of the shard is keyed by its global positions.
// LLAMA-NEXT: %[[D:.*]] = model.dropout %[[RS]], %{{.*}} {model.global_seq = 8 : i64, model.rank_offsets = {seq_start = array<i64: 0, 4>}
// LLAMA-NEXT: %[[X:.*]] = model.add %arg0, %[[D]] : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// LLAMA-NEXT: %[[H2:.*]], %{{.*}} = model.rms_norm %[[X]], %[[W2]]
// LLAMA-NEXT: mesh.all_gather %[[H2]] on @mesh mesh_axes = [0] gather_axis = 1
// LLAMA: mesh.reduce_scatter
// LLAMA: return %{{.*}} : tensor<2x4x16xf32>
// LLAMA-LABEL: func.func @forward(
// LLAMA: %[[FW:.*]] = model.copy_to_region %{{.*}} : tensor<16xf32>
// LLAMA: %[[E:.*]] = model.embedding
// LLAMA-NEXT: %[[ES:.*]] = mesh.reduce_scatter %[[E]] on @mesh mesh_axes = [0] scatter_axis = 1 : tensor<2x8x16xf32> -> tensor<2x4x16xf32>
// LLAMA-NEXT: model.dropout %[[ES]], %{{.*}} {model.global_seq = 8 : i64, model.rank_offsets = {seq_start = array<i64: 0, 4>}
// LLAMA: call @decoder_layer({{.*}}) {{.*}}: (tensor<2x4x16xf32>,
// LLAMA: %[[HF:.*]], %{{.*}} = model.rms_norm %{{.*}}, %[[FW]]
// LLAMA-NEXT: %[[GF:.*]] = mesh.all_gather %[[HF]] on @mesh mesh_axes = [0] gather_axis = 1
// LLAMA-NEXT: model.linear %[[GF]]

// COUNT-LABEL: func.func private @decoder_layer.fwd(
// COUNT-NOT: mesh.all_reduce
// COUNT: mesh.all_gather
// COUNT-NOT: mesh.all_reduce
// COUNT: mesh.reduce_scatter
// COUNT-NOT: mesh.all_reduce
// COUNT: mesh.all_gather
// COUNT-NOT: mesh.all_reduce
// COUNT: mesh.reduce_scatter
// COUNT-NOT: mesh.{{all_gather|reduce_scatter|all_reduce}}
// COUNT: return
// COUNT-LABEL: func.func private @decoder_layer.bwd(
// The inputs of qkv and fc1 gathered again from the saved shards for the weight gradients (as
// Megatron's backward: the forward saves only the shards), then the 2 + 2 conjugates.
// COUNT-COUNT-2: mesh.all_gather %arg{{[0-9]+}} on @mesh mesh_axes = [0] gather_axis = 1 : tensor<2x4x16xf32>
// COUNT-NOT: mesh.all_reduce
// COUNT-COUNT-4: mesh.{{all_gather|reduce_scatter}}
// COUNT-NOT: mesh.{{all_gather|reduce_scatter}}
// The two RMSNorm weights' gradients (replicated, partial on the shard).
// COUNT-COUNT-2: mesh.all_reduce %weight_grad{{.*}} : tensor<16xf32>
// COUNT-NOT: mesh.
// COUNT: return

// GPT: model.parameter @embedding.position_embeddings.weight {{.*}} : tensor<9x16xf32>
// GPT-LABEL: func.func private @decoder_layer(%arg0: tensor<2x4x16xf32>
// The row-parallel bias is added on the shard, after the reduce-scatter.
// GPT: %[[RS:.*]] = mesh.reduce_scatter
// GPT-NEXT: model.bias_add %[[RS]], %{{.*}} : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// GPT-LABEL: func.func @forward(
// GPT: %[[WE:.*]] = model.embedding %arg0
// GPT-NEXT: %[[WS:.*]] = mesh.reduce_scatter %[[WE]] on @mesh mesh_axes = [0] scatter_axis = 1
// The replicated position embeddings: this rank's chunk (mesh.all_slice; its VJP gathers).
// GPT-NEXT: %[[PE:.*]] = model.embedding %arg1
// GPT-NEXT: %[[PS:.*]] = mesh.all_slice %[[PE]] on @mesh mesh_axes = [0] slice_axis = 1 : tensor<2x8x16xf32> -> tensor<2x4x16xf32>
// GPT-NEXT: model.add %[[WS]], %[[PS]]

// Per layer backward: 2 re-gathers, 2 + 2 conjugates, then the gradient all-reduces of the 2 LayerNorms'
// weights and biases and of the 2 row-parallel biases.
// GPTCOUNT-LABEL: func.func private @decoder_layer.bwd(
// GPTCOUNT-COUNT-6: mesh.{{all_gather|reduce_scatter}}
// GPTCOUNT-COUNT-6: mesh.all_reduce {{.*}} : tensor<16xf32> -> tensor<16xf32>
// GPTCOUNT-NOT: mesh.
// GPTCOUNT: return
// GPTCOUNT-LABEL: func.func @forward_backward(
// GPTCOUNT: mesh.all_slice
// GPTCOUNT: mesh.all_gather %{{.*}} gather_axis = 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>

// OFF-LABEL: func.func private @decoder_layer(%arg0: tensor<2x8x16xf32>
// OFF-NOT: mesh.all_gather
// OFF-NOT: mesh.reduce_scatter
// OFF: mesh.all_reduce

// RT-LABEL: func.func @decoder_layer.fwd(
// RT: %[[V0:.*]] = rt.view %[[N:.*]][0] : memref<2x4x16xf32> to memref<64xf32>
// RT: %[[O0:.*]] = rt.view %[[G:.*]][0] : memref<2x8x16xf32> to memref<128xf32>
// RT-NEXT: rt.collective  all_gather "tp" ins(%[[V0]] : memref<64xf32>) outs(%[[O0]] : memref<128xf32>)
// RT-NEXT: %[[V1:.*]] = rt.view %[[N]][64] : memref<2x4x16xf32> to memref<64xf32>
// RT-NEXT: %[[O1:.*]] = rt.view %[[G]][128] : memref<2x8x16xf32> to memref<128xf32>
// RT-NEXT: rt.collective  all_gather "tp" ins(%[[V1]] : memref<64xf32>) outs(%[[O1]] : memref<128xf32>)
// RT: rt.collective  reduce_scatter "tp" ins(%{{.*}} : memref<128xf32>) outs(%{{.*}} : memref<64xf32>)
// RT-NEXT: rt.view %{{.*}}[128] : memref<2x8x16xf32> to memref<128xf32>
// RT-NEXT: rt.view %{{.*}}[64] : memref<2x4x16xf32> to memref<64xf32>
// RT-NEXT: rt.collective  reduce_scatter "tp"
// The dropout on the shard: the kernel's seq_start (rank 0's; the export adds 4 per tp rank).
// RT: rt.kernel "dropout" {{.*}} {kernel_attrs = {op_id = 2 : i64, p = 1.000000e-01 : f64, seq_length = 8 : i64, seq_start = 0 : i64}, model.rank_offsets = {seq_start = array<i64: 0, 4>}}

// INSPECT: decoder_layer.fwd: tp all_gather x4 tp reduce_scatter(sum) x4
// INSPECT-NEXT: decoder_layer.bwd: tp all_gather x8 tp all_reduce(sum) x2 tp reduce_scatter(sum) x4

// GPT's mesh.all_slice lowers to one copy per sample from a view at this rank's chunk (the tp
// coordinate times 4 positions x 16, specialised per rank at export).
// GPTRT-LABEL: func.func @forward_backward.forward(
// GPTRT: rt.kernel "embedding" ins(%{{.*}} : memref<9x16xf32>, memref<2x8xi32>) outs(%[[E:.*]] : memref<2x8x16xf32>)
// GPTRT-NEXT: %[[S0:.*]] = rt.view %[[E]][0] {axis = "tp", axis_stride = 64 : i64} : memref<2x8x16xf32> to memref<64xf32>
// GPTRT: rt.kernel "copy" ins(%[[S0]] : memref<64xf32>)
// GPTRT: %[[S1:.*]] = rt.view %[[E]][128] {axis = "tp", axis_stride = 64 : i64} : memref<2x8x16xf32> to memref<64xf32>
// GPTRT: rt.kernel "copy" ins(%[[S1]] : memref<64xf32>)
