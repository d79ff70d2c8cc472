//===- LrSchedule.cpp -----------------------------------------------------===//

#include "runtime/control/LrSchedule.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>

namespace trainc::rt::control {

absl::StatusOr<LrSchedule> LrSchedule::create(double maxLr, double minLr, int64_t warmupSamples,
                                              int64_t decaySamples, const std::string &style) {
  if (style != "linear" && style != "cosine" && style != "constant" &&
      style != "inverse-square-root")
    return absl::InvalidArgumentError(absl::StrCat(
        "--lr-decay-style '", style,
        "' is not one of constant, linear, cosine, inverse-square-root"));
  if (!(maxLr >= 0) || !(minLr >= 0))
    return absl::InvalidArgumentError(
        absl::StrCat("learning rates must be >= 0 (--lr ", maxLr, ", --min-lr ", minLr, ")"));
  if (minLr > maxLr)
    return absl::InvalidArgumentError(
        absl::StrCat("--min-lr ", minLr, " is larger than --lr ", maxLr));
  if (warmupSamples < 0 || decaySamples < 0)
    return absl::InvalidArgumentError("warmup and decay lengths must be >= 0");
  if (style != "constant" && style != "inverse-square-root" && decaySamples <= warmupSamples)
    return absl::InvalidArgumentError(absl::StrCat(
        "the decay length (", decaySamples, " samples) must exceed the warmup (", warmupSamples,
        " samples) for --lr-decay-style ", style));
  LrSchedule s;
  s.maxLr = maxLr;
  s.minLr = minLr;
  s.warmup = warmupSamples;
  s.decay = decaySamples;
  s.style = style;
  return s;
}

double LrSchedule::lr(int64_t samples) const {
  if (warmup > 0 && samples <= warmup)
    return maxLr * double(samples) / double(warmup);
  if (style == "constant")
    return maxLr;
  if (style == "inverse-square-root") {
    double w = double(std::max<int64_t>(warmup, 1));
    return std::max(minLr, maxLr * std::sqrt(w) / std::sqrt(double(std::max<int64_t>(samples, 1))));
  }
  if (samples > decay)
    return minLr;
  double r = double(samples - warmup) / double(decay - warmup);
  double coeff = style == "linear" ? 1.0 - r : 0.5 * (std::cos(M_PI * r) + 1.0);
  return minLr + coeff * (maxLr - minLr);
}

double weightDecayAt(double start, double end, int64_t incrSamples, const std::string &style,
                     int64_t samples) {
  if (samples > incrSamples || style == "constant" || incrSamples <= 0)
    return end;
  double r = double(samples) / double(incrSamples);
  double coeff = style == "linear" ? r : 0.5 * (std::cos(M_PI * (1.0 - r)) + 1.0);
  return start + coeff * (end - start);
}

} // namespace trainc::rt::control
