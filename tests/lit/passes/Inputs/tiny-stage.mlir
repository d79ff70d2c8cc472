model.parameter @w {init = "zeros"} : tensor<11x8xf32>
model.parameter @b {init = "zeros", no_weight_decay} : tensor<11xf32>
// A stage function as trainc-grad-accumulate leaves it (per_microbatch normalization), for the
// trainc-schedule and trainc-optimizer-expand option tests (not a test itself: lit skips Inputs/).
func.func @forward_backward(
    %w: tensor<11x8xf32> {model.param = @w},
    %b: tensor<11xf32> {model.param = @b},
    %l: tensor<f32> {model.input = "l"},
    %n: tensor<f32> {model.input = "n"}) attributes {sched.stage} {
  sched.accumulate_loss %l, %n per_microbatch : tensor<f32>, tensor<f32>
  sched.accumulate_grad %w into @w : tensor<11x8xf32>
  sched.accumulate_grad %b into @b : tensor<11xf32>
  return
}
