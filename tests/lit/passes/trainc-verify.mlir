// Each phase's cases are in Inputs/verify-<phase>.mlir (an option applies to every split of a
// file); this file runs them and checks that valid IR of each phase passes unchanged.
// RUN: trainc-opt %S/Inputs/verify-model.mlir -split-input-file -verify-diagnostics -trainc-verify=phase=model
// RUN: trainc-opt %S/Inputs/verify-autodiff.mlir -split-input-file -verify-diagnostics -trainc-verify=phase=autodiff
// RUN: trainc-opt %S/Inputs/verify-sched.mlir -split-input-file -verify-diagnostics -trainc-verify=phase=sched
// RUN: trainc-opt %S/Inputs/verify-rt.mlir -split-input-file -verify-diagnostics -trainc-verify=phase=rt
// RUN: trainc-opt %S/Inputs/verify-memory.mlir -split-input-file -verify-diagnostics -trainc-verify=phase=memory
// RUN: trainc-opt %s -trainc-verify=phase=model | FileCheck %s --check-prefix=MODEL
// RUN: trainc-opt %s -trainc-autodiff -trainc-verify=phase=autodiff | FileCheck %s --check-prefix=AUTODIFF
// RUN: trainc-opt %s -trainc-autodiff -trainc-grad-accumulate -trainc-schedule -trainc-optimizer-expand -trainc-verify=phase=sched | FileCheck %s --check-prefix=SCHED
// RUN: trainc-opt %s -trainc-autodiff -trainc-grad-accumulate -trainc-schedule -trainc-optimizer-expand -trainc-lower-to-rt -trainc-verify | FileCheck %s --check-prefix=RT
// RUN: trainc-opt %s -trainc-compile -trainc-verify=phase=memory | FileCheck %s --check-prefix=MEMORY
// RUN: %not trainc-opt %s -trainc-verify=phase=export 2>&1 | FileCheck %s --check-prefix=PHASE
// REQUIRES: compiler

// Tests that a valid module of each phase passes its check and is left as it is.
// MODEL: func.func @forward(
// MODEL: model.cross_entropy
// AUTODIFF: func.func @forward_backward(
// SCHED: func.func @train_step() attributes {sched.iteration
// RT: func.func @train_step() attributes {rt.entry}
// MEMORY: module attributes {rt.arena_bytes = {{[0-9]+}} : i64

// Tests that an unknown phase is reported.
// PHASE: error: trainc-verify: unknown phase 'export' (expected model, autodiff, sched, rt or memory)

func.func @forward(
    %w: tensor<4x8xf32> {model.param = @w},
    %x: tensor<2x8xf32> {model.input = "x"},
    %labels: tensor<2xi32> {model.input = "labels"},
    %mask: tensor<2xf32> {model.input = "loss_mask"}) -> (tensor<f32>, tensor<f32>) {
  %logits = model.linear %x, %w : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  %loss, %n, %lse = model.cross_entropy %logits, %labels, %mask : (tensor<2x4xf32>, tensor<2xi32>, tensor<2xf32>) -> (tensor<f32>, tensor<f32>, tensor<2xf32>)
  return %loss, %n : tensor<f32>, tensor<f32>
}
