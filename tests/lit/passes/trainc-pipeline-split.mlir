// REQUIRES: compiler
// Tests trainc-pipeline-split on a two-layer Llama (the model IR of trainc compile with
// --pipeline-model-parallel-size 2): stage 0 keeps the embedding and layer 0 and sends its output
// to pp coordinate 1, returning zero loss and tokens; stage 1 receives it, keeps layer 1, the
// final norm, the output layer and the loss. Unused parameters leave the signature; the inputs
// stay. And each diagnostic.

// RUN: trainc-opt %S/Inputs/pipeline-model.mlir --trainc-pipeline-split=stage=0 | FileCheck %s --check-prefix=S0
// S0: module attributes {{{.*}}trainc.pipeline_layers = array<i64: 0, 1>, trainc.pipeline_size = 2 : i64, trainc.pipeline_stage = 0 : i64
// S0-NOT: model.parameter @decoder.layers.1.
// S0-NOT: model.parameter @output_layer.weight
// S0: func.func @forward(%arg0: tensor<128x16xf32> {model.param = @embedding.word_embeddings.weight}
// S0-NOT: decoder.layers.1.
// S0-SAME: {model.input = "tokens"}, {{.*}}{model.input = "labels"}, {{.*}}{model.input = "loss_mask"})
// S0: model.embedding
// S0: %[[H:.*]] = call @decoder_layer({{.*}}) {model.layer_index = 0 : i64}
// S0-NEXT: mesh.send %[[H]] on @mesh mesh_axes = [4] destination = [1] : (tensor<1x9x16xf32>) -> tensor<1x9x16xf32>
// S0-NEXT: %[[L:.*]] = model.fill {value = 0.000000e+00 : f64} : () -> tensor<f32>
// S0-NEXT: %[[N:.*]] = model.fill {value = 0.000000e+00 : f64} : () -> tensor<f32>
// S0-NEXT: return %[[L]], %[[N]]

// RUN: trainc-opt %S/Inputs/pipeline-model.mlir --trainc-pipeline-split=stage=1 | FileCheck %s --check-prefix=S1
// S1: trainc.pipeline_layers = array<i64: 1, 2>, trainc.pipeline_size = 2 : i64, trainc.pipeline_stage = 1 : i64
// S1-NOT: model.parameter @embedding.word_embeddings.weight
// S1: func.func @forward(%arg0: tensor<16xf32> {model.param = @decoder.layers.1.input_layernorm.weight}
// S1-NOT: model.embedding
// S1: %[[T:.*]] = model.fill {value = 0.000000e+00 : f64} : () -> tensor<1x9x16xf32>
// S1-NEXT: %[[X:.*]] = mesh.recv %[[T]] on @mesh mesh_axes = [4] source = [0]
// S1-NEXT: call @decoder_layer(%[[X]], {{.*}}) {model.layer_index = 1 : i64}
// S1: model.cross_entropy
// S1: return %loss_sum, %num_tokens

// Autodiff then derives the backward's transfers: stage 0 receives its output's gradient from
// stage 1 right after the seed; stage 1 sends its input's gradient back to stage 0.
// RUN: trainc-opt %S/Inputs/pipeline-model.mlir --trainc-pipeline-split=stage=0 --trainc-autodiff | FileCheck %s --check-prefix=AD0
// AD0: func.func @forward_backward(
// AD0: model.fill {model.loss_seed, value = 1.000000e+00 : f64}
// AD0-NEXT: model.fill {value = 0.000000e+00 : f64} : () -> tensor<1x9x16xf32>
// AD0-NEXT: mesh.recv %{{.*}} on @mesh mesh_axes = [4] source = [1]
// RUN: trainc-opt %S/Inputs/pipeline-model.mlir --trainc-pipeline-split=stage=1 --trainc-autodiff | FileCheck %s --check-prefix=AD1
// AD1: func.func @forward_backward(
// AD1: model.loss_seed
// AD1: call @decoder_layer.bwd
// AD1: mesh.send %{{.*}} on @mesh mesh_axes = [4] destination = [0]

// RUN: %not trainc-opt %S/Inputs/pipeline-model.mlir --trainc-pipeline-split=stage=2 2>&1 | FileCheck %s --check-prefix=STAGE
// STAGE: error: trainc-pipeline-split: stage 2 is not one of the 2 pipeline stages (0 to 1)
// RUN: %not trainc-opt %S/Inputs/pipeline-model.mlir '--trainc-pipeline-split=stage=0 num-stages=4' 2>&1 | FileCheck %s --check-prefix=FOUR
// FOUR: error: 'func.func' op has 2 decoder layers, which do not split into 4 pipeline stages of at least one layer evenly (num_layers must be divisible by pipeline_model_parallel_size)
// RUN: %not trainc-opt %S/Inputs/pipeline-model.mlir '--trainc-pipeline-split=stage=0 num-stages=1' 2>&1 | FileCheck %s --check-prefix=MESH
// MESH: error: trainc-pipeline-split: the mesh's pp axis has 2 coordinates, the plan 1 stages
// RUN: %not trainc-opt %S/Inputs/pipeline-model.mlir '--trainc-pipeline-split=stage=0 first-stage-layers=2' 2>&1 | FileCheck %s --check-prefix=UNEVEN
// UNEVEN: error: 'func.func' op has 2 decoder layers, which do not split into 2 pipeline stages of at least one layer with first-stage-layers 2 and last-stage-layers 0 (the other stages split the rest evenly)
