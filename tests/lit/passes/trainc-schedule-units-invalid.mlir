// RUN: trainc-opt %s -split-input-file -verify-diagnostics -trainc-schedule="eval=false num-microbatches=2" -trainc-schedule-units
// REQUIRES: compiler

model.parameter @w {init = "zeros"} : tensor<4xf32>
// Tests that a forward op may not read a value of the backward (the loss accumulation reads the
// seed here).
func.func @forward_backward(%w: tensor<4xf32> {model.param = @w},
                            %n: tensor<f32> {model.input = "n"}) attributes {sched.stage} {
  %seed = model.fill {model.loss_seed, value = 1.0 : f64} : () -> tensor<f32>
  // expected-error@+1 {{'sched.accumulate_loss' op is in the forward of @forward_backward but reads a value of its backward}}
  sched.accumulate_loss %seed, %n per_token : tensor<f32>, tensor<f32>
  sched.accumulate_grad %w into @w : tensor<4xf32>
  return
}
