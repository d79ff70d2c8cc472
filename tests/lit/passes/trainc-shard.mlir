// RUN: rm -rf %t && trainc compile --preset tiny-llama --tensor-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 2 --dump-ir-dir %t/llama -o %t/llama-plan > /dev/null
// RUN: trainc-opt %t/llama/0-model.mlir -trainc-shard | FileCheck %s --check-prefix=LLAMA
// RUN: FileCheck %s --check-prefix=COUNT < %t/llama/1-autodiff.mlir
// RUN: trainc compile --preset tiny-gpt --tensor-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 2 --dump-ir-dir %t/gpt -o %t/gpt-plan > /dev/null
// RUN: trainc-opt %t/gpt/0-model.mlir -trainc-shard | FileCheck %s --check-prefix=GPT
// RUN: trainc-opt %t/gpt/0-model.mlir -trainc-shard -trainc-autodiff | FileCheck %s --check-prefix=GPTBWD
// RUN: trainc-opt %t/llama/0-model.mlir -trainc-shard=tp=1 | FileCheck %s --check-prefix=TP1
// RUN: trainc compile --preset tiny-llama --tensor-model-parallel-size 2 --attention-dropout 0.1 --micro-batch-size 2 --global-batch-size 2 --dump-ir-dir %t/attn -o %t/attn-plan > /dev/null
// RUN: FileCheck %s --check-prefix=ATTN < %t/attn/3-lower.mlir
// RUN: trainc-opt %S/Inputs/shard-invalid.mlir -split-input-file -verify-diagnostics -trainc-shard=tp=3 -o /dev/null
// RUN: trainc inspect %t/llama-plan --ranks | FileCheck %s --check-prefix=INSPECT
// REQUIRES: compiler

// Tests trainc-shard (tensor parallelism at the model level, before autodiff): Megatron's layouts
// on tiny-llama (GQA, SwiGLU, untied output layer) and tiny-gpt (biases, tied embeddings), the
// collectives it inserts, and (COUNT) that autodiff differentiates them: per layer 2 all-reduces
// forward (after linear_proj and fc2) and 2 backward (the input gradients of the two
// copy_to_region, q/k/v sharing one), as Megatron without sequence parallelism.

// LLAMA: model.parameter @embedding.word_embeddings.weight {global_shape = array<i64: 256, 16>, {{.*}}split_axis = 0 : i64, split_dim = 0 : i64} : tensor<128x16xf32>
// LLAMA: model.parameter @decoder.layers.0.input_layernorm.weight {init = "ones", no_weight_decay} : tensor<16xf32>
// LLAMA: model.parameter @decoder.layers.0.self_attention.linear_q.weight {global_shape = array<i64: 16, 16>, {{.*}}split_dim = 0 : i64} : tensor<8x16xf32>
// LLAMA: model.parameter @decoder.layers.0.self_attention.linear_k.weight {global_shape = array<i64: 8, 16>, {{.*}}split_dim = 0 : i64} : tensor<4x16xf32>
// LLAMA: model.parameter @decoder.layers.0.self_attention.linear_proj.weight {global_shape = array<i64: 16, 16>, {{.*}}split_dim = 1 : i64} : tensor<16x8xf32>
// SwiGLU's fc1 [64, 16] as [2, 32, 16] split along the 32: each rank's gate and up chunks.
// LLAMA: model.parameter @decoder.layers.0.mlp.linear_fc1.weight {global_shape = array<i64: 2, 32, 16>, {{.*}}split_dim = 1 : i64} : tensor<32x16xf32>
// LLAMA: model.parameter @decoder.layers.0.mlp.linear_fc2.weight {global_shape = array<i64: 16, 32>, {{.*}}split_dim = 1 : i64} : tensor<16x16xf32>
// LLAMA: model.parameter @output_layer.weight {global_shape = array<i64: 256, 16>, {{.*}}split_dim = 0 : i64} : tensor<128x16xf32>
// LLAMA-LABEL: func.func private @decoder_layer(
// LLAMA: %[[H:.*]], %{{.*}} = model.rms_norm %arg0
// LLAMA-NEXT: %[[C:.*]] = model.copy_to_region %[[H]] on @mesh mesh_axes = [0]
// LLAMA-NEXT: model.linear %[[C]], %arg2 : (tensor<2x9x16xf32>, tensor<8x16xf32>) -> tensor<2x9x8xf32>
// LLAMA-NEXT: model.reshape %{{.*}} : (tensor<2x9x8xf32>) -> tensor<2x9x2x4xf32>
// LLAMA-NEXT: model.linear %[[C]], %arg3 : (tensor<2x9x16xf32>, tensor<4x16xf32>) -> tensor<2x9x4xf32>
// LLAMA-NEXT: model.reshape %{{.*}} : (tensor<2x9x4xf32>) -> tensor<2x9x1x4xf32>
// LLAMA-NEXT: model.linear %[[C]], %arg4
// LLAMA: model.attention {{.*}} : (tensor<2x9x2x4xf32>, tensor<2x9x1x4xf32>, tensor<2x9x1x4xf32>) -> (tensor<2x9x2x4xf32>, tensor<2x2x9xf32>)
// LLAMA-NEXT: model.reshape %{{.*}} : (tensor<2x9x2x4xf32>) -> tensor<2x9x8xf32>
// LLAMA-NEXT: %[[P:.*]] = model.linear %{{.*}}, %arg5 : (tensor<2x9x8xf32>, tensor<16x8xf32>) -> tensor<2x9x16xf32>
// LLAMA-NEXT: %[[R:.*]] = mesh.all_reduce %[[P]] on @mesh mesh_axes = [0] : tensor<2x9x16xf32> -> tensor<2x9x16xf32>
// LLAMA-NEXT: model.add %arg0, %[[R]]
// LLAMA: model.copy_to_region
// LLAMA-NEXT: model.linear {{.*}} -> tensor<2x9x32xf32>
// LLAMA-NEXT: model.swiglu %{{.*}} : (tensor<2x9x32xf32>) -> tensor<2x9x16xf32>
// LLAMA-NEXT: model.linear %{{.*}}, %arg8 : (tensor<2x9x16xf32>, tensor<16x16xf32>) -> tensor<2x9x16xf32>
// LLAMA-NEXT: mesh.all_reduce
// LLAMA-LABEL: func.func @forward(
// LLAMA: %[[E:.*]] = model.embedding %arg0, %{{.*}} {model.rank_offsets = {vocab_start = array<i64: 0, 128>}} : (tensor<128x16xf32>, tensor<2x9xi32>) -> tensor<2x9x16xf32>
// LLAMA-NEXT: mesh.all_reduce %[[E]] on @mesh mesh_axes = [0]
// LLAMA: model.copy_to_region
// LLAMA-NEXT: model.linear {{.*}} : (tensor<2x9x16xf32>, tensor<128x16xf32>) -> tensor<2x9x128xf32>
// LLAMA-NEXT: %[[L:.*]] = model.reshape %{{.*}} : (tensor<2x9x128xf32>) -> tensor<18x128xf32>
// LLAMA: %[[M:.*]] = model.ce_local_max %[[L]] {model.rank_offsets = {vocab_start = array<i64: 0, 128>}, valid_vocab = 37 : i64}
// LLAMA-NEXT: %[[MAX:.*]] = mesh.all_reduce %[[M]] on @mesh mesh_axes = [0] reduction = <max>
// LLAMA-NEXT: %[[S:.*]] = model.ce_local_sumexp %[[L]], %[[MAX]]
// LLAMA-NEXT: %[[T:.*]] = model.ce_target_logit %[[L]]
// LLAMA-NEXT: %[[SS:.*]] = mesh.all_reduce %[[S]]
// LLAMA-NEXT: %[[TT:.*]] = mesh.all_reduce %[[T]]
// LLAMA-NEXT: model.ce_combine %[[L]], %{{.*}}, %{{.*}}, %[[MAX]], %[[SS]], %[[TT]] {model.rank_offsets = {vocab_start = array<i64: 0, 128>}, valid_vocab = 37 : i64}

// The rank programs: per layer call 2 tp all-reduces forward and 2 backward; the loss's max
// and sums; the output layer's copy_to_region in the backward.
// INSPECT: parameters: 19, 14 of them slices of a global tensor
// INSPECT: collectives of rank 0 (per function call, by group):
// INSPECT-NEXT: decoder_layer.fwd: tp all_reduce(sum) x2
// INSPECT-NEXT: decoder_layer.bwd: tp all_reduce(sum) x2
// INSPECT: forward_backward.forward: tp all_reduce(max) x1 tp all_reduce(sum) x3
// INSPECT-NEXT: forward_backward.backward: tp all_reduce(sum) x1

// COUNT-LABEL: func.func private @decoder_layer.fwd(
// COUNT-COUNT-2: mesh.all_reduce
// COUNT-NOT: mesh.all_reduce
// COUNT: return
// COUNT-LABEL: func.func private @decoder_layer.bwd(
// COUNT-NOT: reduce_scatter
// COUNT-COUNT-2: mesh.all_reduce
// COUNT-NOT: mesh.all_reduce
// COUNT: return

// GPT: model.parameter @decoder.layers.0.self_attention.linear_q.bias {global_shape = array<i64: 16>, {{.*}}split_dim = 0 : i64} : tensor<8xf32>
// GPT: model.parameter @decoder.layers.0.self_attention.linear_proj.bias {init = "zeros", no_weight_decay} : tensor<16xf32>
// GPT: model.parameter @decoder.layers.0.mlp.linear_fc1.bias {global_shape = array<i64: 64>, {{.*}}split_dim = 0 : i64} : tensor<32xf32>
// GPT-NOT: @output_layer.weight
// GPT-LABEL: func.func private @decoder_layer(
// Row-parallel bias: added after the reduction.
// GPT: %[[P:.*]] = model.linear %{{.*}}, %{{.*}} : (tensor<2x9x8xf32>, tensor<16x8xf32>) -> tensor<2x9x16xf32>
// GPT-NEXT: %[[R:.*]] = mesh.all_reduce %[[P]]
// GPT-NEXT: model.bias_add %[[R]], %{{.*}} : (tensor<2x9x16xf32>, tensor<16xf32>) -> tensor<2x9x16xf32>
// GPT: model.linear %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x9x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<2x9x32xf32>
// GPT-NEXT: model.gelu %{{.*}} : (tensor<2x9x32xf32>) -> tensor<2x9x32xf32>
// Tied embeddings: the word embeddings' shard is the output layer's.
// GPT-LABEL: func.func @forward(
// GPT: model.embedding %arg0, {{.*}} : (tensor<128x16xf32>, tensor<2x9xi32>)
// GPT: model.linear %{{.*}}, %arg0 : (tensor<2x9x16xf32>, tensor<128x16xf32>) -> tensor<2x9x128xf32>

// The tied table's gradient sums its two uses; the embedding's backward keeps its shard's offset.
// GPTBWD: model.cross_entropy_grad {{.*}}model.rank_offsets = {vocab_start = array<i64: 0, 128>}
// GPTBWD: model.embedding_grad {{.*}}model.rank_offsets = {vocab_start = array<i64: 0, 128>}

// Attention dropout on a head shard: 2 of the 4 heads, the shard's first head per tp rank.
// ATTN: rt.kernel "attention_dropout" {{.*}}head_start = 0 : i64, num_heads = 4 : i64{{.*}}model.rank_offsets = {head_start = array<i64: 0, 2>}
// ATTN: rt.kernel "attention_dropout_backward" {{.*}}head_start = 0 : i64, num_heads = 4 : i64{{.*}}model.rank_offsets = {head_start = array<i64: 0, 2>}

// TP1-NOT: global_shape
// TP1-NOT: mesh.all_reduce
// TP1-NOT: copy_to_region
