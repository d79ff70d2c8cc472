//===- BlendedDataset.cpp - Megatron's blending of several GPTDatasets ----===//

#include "runtime/data/BlendedDataset.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace trainc::rt::data {

namespace {

/// numpy's pairwise_sum for float64 (numpy/core/src/umath/loops_utils.h.src): below 8 elements a
/// plain loop, up to the block size of 128 eight running sums combined pairwise, above that the
/// halves recursively (split at a multiple of 8).
double numpyPairwiseSum(const double *a, size_t n) {
  if (n < 8) {
    double res = 0.;
    for (size_t i = 0; i < n; ++i)
      res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (size_t j = 0; j < 8; ++j)
      r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (size_t j = 0; j < 8; ++j)
        r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i)
      res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return numpyPairwiseSum(a, n2) + numpyPairwiseSum(a + n2, n - n2);
}

} // namespace

std::vector<double> normalizeWeights(const std::vector<double> &weights) {
  double sum = numpyPairwiseSum(weights.data(), weights.size());
  std::vector<double> out(weights.size());
  for (size_t i = 0; i < weights.size(); ++i)
    out[i] = weights[i] / sum;
  return out;
}

std::vector<int64_t> blendSizesPerDataset(const std::vector<double> &weights, int64_t target,
                                          double surplus) {
  std::vector<int64_t> out;
  for (double w : weights)
    out.push_back(int64_t(std::ceil(std::ceil(double(target) * w) * (1.0 + surplus))));
  return out;
}

BlendingIndices buildBlendingIndices(const std::vector<double> &weights, int64_t size) {
  BlendingIndices b;
  b.datasetIndex.resize(size_t(size));
  b.datasetSampleIndex.resize(size_t(size));
  std::vector<int64_t> used(weights.size(), 0);
  for (int64_t s = 0; s < size; ++s) {
    double x = std::max(double(s), 1.0);
    size_t best = 0;
    double bestError = weights[0] * x - double(used[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      double e = weights[d] * x - double(used[d]);
      if (e > bestError) {
        bestError = e;
        best = d;
      }
    }
    b.datasetIndex[size_t(s)] = int16_t(best);
    b.datasetSampleIndex[size_t(s)] = used[best]++;
  }
  return b;
}

absl::StatusOr<Blend> parseBlend(const std::vector<std::string> &dataPath) {
  Blend b;
  bool weighted = dataPath.size() % 2 == 0 && !dataPath.empty();
  std::vector<double> w;
  for (size_t i = 0; weighted && i < dataPath.size(); i += 2) {
    const std::string &s = dataPath[i];
    char *end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size())
      weighted = false;
    else
      w.push_back(v);
  }
  if (!weighted) {
    b.prefixes = dataPath;
  } else {
    for (size_t i = 0; i < dataPath.size(); i += 2) {
      double v = w[i / 2];
      if (!std::isfinite(v) || v < 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "--data-path weight '", dataPath[i], "' (of '", dataPath[i + 1],
            "') must be a non-negative finite number"));
      b.prefixes.push_back(dataPath[i + 1]);
    }
    b.weights = w;
    double sum = 0;
    for (double v : w)
      sum += v;
    if (sum <= 0)
      return absl::InvalidArgumentError("--data-path weights sum to 0");
  }
  if (b.prefixes.size() > 32766)
    return absl::InvalidArgumentError(absl::StrCat(
        "--data-path names ", b.prefixes.size(), " datasets; Megatron's blend holds at most "
        "32766 (an int16 dataset index)"));
  return b;
}

} // namespace trainc::rt::data
