//===- LrSchedule.h - Megatron's learning-rate schedule on the samples axis ===//
//
// Megatron-LM's OptimizerParamScheduler.get_lr (megatron/core/optimizer_param_scheduler.py), in
// samples: linear warmup from 0 to max_lr over warmup_samples, then decay to min_lr over
// decay_samples (counted from 0, warmup included) by the style's coefficient:
//   linear:  1 - r          cosine: (cos(pi r) + 1) / 2          constant: 1 (max_lr, no decay)
//   inverse-square-root: max_lr * sqrt(warmup) / sqrt(max(samples, 1)), floored at min_lr
// with r = (samples - warmup) / (decay - warmup); lr = min_lr + coeff (max_lr - min_lr), and
// min_lr after decay_samples. The scheduler advances by the global batch size on every successful
// step only (a skipped step leaves the learning rate where it was).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CONTROL_LRSCHEDULE_H
#define TRAINC_RUNTIME_CONTROL_LRSCHEDULE_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <string>

namespace trainc::rt::control {

class LrSchedule {
public:
  /// Errors: an unknown style, a negative rate or count, min_lr > max_lr, or decay_samples not
  /// larger than warmup_samples for a decaying style.
  static absl::StatusOr<LrSchedule> create(double maxLr, double minLr, int64_t warmupSamples,
                                           int64_t decaySamples, const std::string &style);
  /// The learning rate after `samples` consumed samples (of successful steps).
  double lr(int64_t samples) const;

private:
  double maxLr = 0, minLr = 0;
  int64_t warmup = 0, decay = 0;
  std::string style;
};

/// Megatron's weight-decay increment (OptimizerParamScheduler.get_wd), in samples: `end` once
/// `samples` > `incrSamples` (the run's training samples); otherwise start + coeff (end -
/// start) with r = samples / incrSamples and coeff = r (linear), (cos(pi (1 - r)) + 1) / 2
/// (cosine), or end throughout for "constant" (where start == end). Weight decay is
/// dimensionless (AdamW's decoupled factor). Like the learning rate it advances on successful
/// steps only. `style` must be "constant", "linear" or "cosine" (parseRunOptions checks it).
double weightDecayAt(double start, double end, int64_t incrSamples, const std::string &style,
                     int64_t samples);

} // namespace trainc::rt::control

#endif
