// REQUIRES: compiler
// Tests trainc-pipeline-split with virtual stages and trainc-schedule-units' interleaved split on
// a four-layer Llama (the model IR of trainc compile --pipeline-model-parallel-size 2
// --virtual-pipeline-model-parallel-size 2 --global-batch-size 4): each stage keeps two model
// chunks, chunk v of stage s holding layer v P + s; the chunks' p2p follows Megatron (the last
// stage's chunk 0 feeds the first stage's chunk 1); the schedule phase gives each chunk a
// forward and a backward unit in Megatron's interleaved order. And each diagnostic.

// RUN: trainc-opt %S/Inputs/pipeline-model-vpp.mlir --trainc-pipeline-split=stage=0 | FileCheck %s --check-prefix=S0
// S0: trainc.pipeline_layers = array<i64: 0, 1, 2, 3>, trainc.pipeline_size = 2 : i64, trainc.pipeline_stage = 0 : i64, trainc.pipeline_virtual_stages = 2 : i64
// S0-NOT: model.parameter @decoder.layers.1.
// S0-NOT: model.parameter @decoder.layers.3.
// S0-NOT: model.parameter @output_layer.weight
// S0: func.func @forward(
// S0: model.embedding
// S0-NEXT: %[[H0:.*]] = call @decoder_layer({{.*}}) {model.layer_index = 0 : i64}
// S0-NEXT: mesh.send %[[H0]] on @mesh mesh_axes = [4] destination = [1]
// S0-NEXT: %[[T:.*]] = model.fill {value = 0.000000e+00 : f64} : () -> tensor<1x9x16xf32>
// S0-NEXT: %[[X:.*]] = mesh.recv %[[T]] on @mesh mesh_axes = [4] source = [1]
// S0-NEXT: %[[H2:.*]] = call @decoder_layer(%[[X]], {{.*}}) {model.layer_index = 2 : i64}
// S0-NEXT: mesh.send %[[H2]] on @mesh mesh_axes = [4] destination = [1]
// S0-NOT: model.cross_entropy
// S0: return

// RUN: trainc-opt %S/Inputs/pipeline-model-vpp.mlir --trainc-pipeline-split=stage=1 | FileCheck %s --check-prefix=S1
// S1: trainc.pipeline_layers = array<i64: 1, 2, 3, 4>
// S1-NOT: model.embedding
// S1: mesh.recv %{{.*}} on @mesh mesh_axes = [4] source = [0]
// S1-NEXT: call @decoder_layer({{.*}}) {model.layer_index = 1 : i64}
// S1-NEXT: mesh.send %{{.*}} on @mesh mesh_axes = [4] destination = [0]
// S1: mesh.recv %{{.*}} on @mesh mesh_axes = [4] source = [0]
// S1-NEXT: call @decoder_layer({{.*}}) {model.layer_index = 3 : i64}
// S1-NOT: mesh.send
// S1: model.cross_entropy

// Stage 1's units: chunk 0 (layer 1) receives its output's gradient from stage 0 (its chunk 1)
// and sends its input's gradient back; chunk 1 ends in the loss. Megatron's order for m = 4:
// warmup (P - 1 - 1) * 2 + (V - 1) * P = 2 forwards.
// RUN: trainc-opt %S/Inputs/pipeline-model-vpp.mlir --trainc-pipeline-split=stage=1 | trainc-opt -trainc-phase-autodiff | trainc-opt -trainc-phase-schedule | FileCheck %s --check-prefix=UNITS
// UNITS: func.func @forward_backward.chunk0.forward(
// UNITS: mesh.recv %{{.*}} source = [0]
// UNITS-NEXT: call @decoder_layer.fwd({{.*}}model.layer_index = 1
// UNITS-NEXT: mesh.send %{{.*}} destination = [0]
// UNITS: func.func @forward_backward.chunk0.backward(
// UNITS: mesh.recv %{{.*}} source = [0]
// UNITS-NEXT: call @decoder_layer.bwd({{.*}}model.layer_index = 1
// UNITS: sched.accumulate_grad %{{.*}} into @decoder.layers.1.input_layernorm.weight
// UNITS-NEXT: mesh.send %{{.*}} destination = [0]
// UNITS: func.func @forward_backward.chunk1.forward(
// UNITS: call @decoder_layer.fwd({{.*}}model.layer_index = 3
// UNITS: model.cross_entropy
// UNITS: sched.accumulate_loss
// UNITS: func.func @forward_backward.chunk1.backward(
// UNITS: model.loss_seed
// UNITS: func.func @train_step() attributes {{{.*}}sched.schedule = "interleaved"}
// UNITS: sched.forward @forward_backward.chunk0.forward microbatch 0 chunk 0
// UNITS-NEXT: sched.forward @forward_backward.chunk0.forward microbatch 1 chunk 0
// UNITS-NEXT: sched.forward @forward_backward.chunk1.forward microbatch 0 chunk 1
// UNITS-NEXT: sched.backward @forward_backward.chunk1.backward(%{{.*}}) microbatch 0 chunk 1
// UNITS-NEXT: sched.forward @forward_backward.chunk1.forward microbatch 1 chunk 1
// UNITS-NEXT: sched.backward @forward_backward.chunk1.backward(%{{.*}}) microbatch 1 chunk 1
// UNITS-NEXT: sched.forward @forward_backward.chunk0.forward microbatch 2 chunk 0
// UNITS-NEXT: sched.backward @forward_backward.chunk0.backward(%{{.*}}) microbatch 0 chunk 0
// UNITS: sched.backward @forward_backward.chunk0.backward(%{{.*}}) microbatch 3 chunk 0
// UNITS-NEXT: sched.reduce_losses

// Diagnostics.
// RUN: trainc-opt %S/Inputs/pipeline-model-vpp.mlir --trainc-pipeline-split=stage=0 | trainc-opt -trainc-phase-autodiff | %not trainc-opt -trainc-phase-schedule=schedule=1f1b 2>&1 | FileCheck %s --check-prefix=ONEF
// ONEF: error: trainc-schedule-units: schedule '1f1b' with 2 model chunk(s) per pipeline stage (use 'interleaved')
// RUN: %not trainc-opt %S/Inputs/pipeline-model.mlir '--trainc-pipeline-split=stage=0 virtual-stages=2' 2>&1 | FileCheck %s --check-prefix=FEW
// FEW: error: 'func.func' op has 2 decoder layers, which do not split into 2 model chunks on each of 2 pipeline stages (num_layers must be divisible by pipeline_model_parallel_size x virtual_pipeline_model_parallel_size, with pipeline_model_parallel_size > 1)
// RUN: %not trainc-opt %S/Inputs/pipeline-model-vpp.mlir '--trainc-pipeline-split=stage=0 first-stage-layers=1' 2>&1 | FileCheck %s --check-prefix=UNEVEN
// UNEVEN: error: trainc-pipeline-split: virtual-stages 2 cannot be combined with first-stage-layers / last-stage-layers
// The plan names the interleaved schedule only with model chunks.
// RUN: sed -e 's/virtual_stages = 2/virtual_stages = 1/' %S/Inputs/pipeline-model-vpp.mlir | %not trainc-opt 2>&1 | FileCheck %s --check-prefix=PLAN
// PLAN: error: #sched.plan: schedule = "interleaved" with virtual_stages = 1 (interleaved runs more than one model chunk per stage)
