//===- BlendedDataset.h - Megatron's blending of several GPTDatasets ------===//
//
// Megatron-LM's BlendedDataset (megatron/core/datasets/blended_dataset.py, helpers.cpp
// build_blending_indices, blended_megatron_dataset_builder.py _get_size_per_split_per_dataset):
// for `--data-path W1 P1 W2 P2 ...` each split draws its samples from the datasets' splits in
// proportion to the normalised weights:
//
//   sizes     dataset d builds ceil(ceil(N * w_d) * (1 + surplus)) samples of the split (the
//             mid-level surplus, 0.005), the blend has sum_d ceil(N * w_d) samples
//   indices   sample i of the blend goes to the dataset with the largest error
//             w_d * max(i, 1) - (samples given to d so far) (the first on ties) and takes that
//             dataset's next sample
//
// Without weights (`--data-path P1 P2`) the weights are the datasets' one-epoch sample counts and
// the blend has min(N, their sum) samples.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_DATA_BLENDEDDATASET_H
#define TRAINC_RUNTIME_DATA_BLENDEDDATASET_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace trainc::rt::data {

/// Megatron's mid_level_dataset_surplus default.
constexpr double kMidLevelDatasetSurplus = 0.005;

/// Megatron's utils.normalize: w / numpy.sum(w) in float64 (numpy's pairwise summation, which
/// for fewer than 8 weights is the plain left-to-right sum).
std::vector<double> normalizeWeights(const std::vector<double> &weights);

/// _get_size_per_split_per_dataset for one split: ceil(ceil(target * w_d) * (1 + surplus)) per
/// dataset (Python float arithmetic), for normalised weights.
std::vector<int64_t> blendSizesPerDataset(const std::vector<double> &weights, int64_t target,
                                          double surplus);

/// helpers.cpp build_blending_indices over `size` samples: the dataset (int16, as Megatron's
/// dataset_index) and the index within it (int64) of each blended sample.
struct BlendingIndices {
  std::vector<int16_t> datasetIndex;
  std::vector<int64_t> datasetSampleIndex;
};
BlendingIndices buildBlendingIndices(const std::vector<double> &weights, int64_t size);

/// A --data-path list as Megatron's get_blend_from_list reads it: an even number of entries whose
/// even-position entries all parse as numbers is (weight, prefix) pairs; otherwise every entry is
/// a prefix and `weights` stays empty. Errors (InvalidArgument, naming the entry): a negative or
/// non-finite weight, weights summing to 0, more than 32766 datasets (Megatron's int16 index).
struct Blend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;
};
absl::StatusOr<Blend> parseBlend(const std::vector<std::string> &dataPath);

} // namespace trainc::rt::data

#endif
