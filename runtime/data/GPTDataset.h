//===- GPTDataset.h - Megatron's GPTDataset sample order over .bin/.idx ---===//
//
// Megatron-LM's GPTDataset (megatron/core/datasets/gpt_dataset.py, helpers.cpp build_sample_idx)
// over one indexed dataset, reproducing its sample order exactly:
//
//   split     the dataset's sequences are split into contiguous train/valid/test ranges by the
//             normalised --split weights (blended_megatron_dataset_builder.py: bounds
//             round(cumsum(w) * S), round half to even; GPT splits by sequence, not document)
//   epochs    enough epochs over the split's tokens for num_samples samples of seq_length + 1
//             tokens (one epoch when num_samples is 0)
//   document  index: the split's sequence ids repeated per epoch and shuffled with numpy's
//             RandomState(seed); when the last epoch would contribute fewer than 80% of an
//             epoch's samples it is shuffled separately (the separate-last-epoch rule)
//   sample    index: (position in the document index, token offset) where each sample starts;
//             consecutive samples overlap by one token; the last partial sample is dropped
//   shuffle   index: a permutation of the samples (first the samples before the separate last
//             epoch, then that epoch's samples, each range shuffled on its own)
//
// numpy's RandomState(seed) is MT19937 seeded with init_genrand(seed) (identical to
// std::mt19937(seed)); RandomState.shuffle is Fisher-Yates from the end, drawing j in [0, i] by
// masked rejection sampling of 32-bit outputs (64-bit above 2^32 - 1).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_DATA_GPTDATASET_H
#define TRAINC_RUNTIME_DATA_GPTDATASET_H

#include "runtime/data/IndexedDataset.h"

#include "absl/status/statusor.h"

#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace trainc::rt::data {

/// numpy.random.RandomState(seed): the same 32-bit stream and the same shuffle.
class NumpyRandomState {
public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}
  /// numpy's random_interval(max): uniform in [0, max].
  uint64_t interval(uint64_t max);
  /// RandomState.shuffle of a 1-D array.
  template <typename T> void shuffle(std::vector<T> &x) {
    for (size_t i = x.size(); i-- > 1;)
      std::swap(x[i], x[size_t(interval(i))]);
  }

private:
  std::mt19937 mt_;
};

/// Megatron's --split parsed and normalised as parse_and_normalize_split does: the numbers in the
/// string ("[.0-9]+"), missing ones 0, divided by their sum. Errors (InvalidArgument, naming the
/// string): more than 3 numbers, none, a sum of 0.
absl::StatusOr<std::array<double, 3>> parseMegatronSplit(const std::string &split);

/// The [begin, end) element range of each split (train, valid, test) over `numElements`, as
/// Megatron's builder computes it from the normalised weights: begin = round(c_s * n), end =
/// round(c_{s+1} * n), c the running sum of the weights (Python float addition), round half to
/// even. A split of weight 0 has begin == end.
std::array<std::array<int64_t, 2>, 3> megatronSplitRanges(const std::array<double, 3> &weights,
                                                          int64_t numElements);

/// The three indices of one GPTDataset split.
struct GptIndices {
  int64_t numEpochs = 0;
  bool separateFinalEpoch = false;
  int64_t tokensPerEpoch = 0;
  /// Sequence ids, numEpochs x (end - begin) of them (numpy int32 in Megatron).
  std::vector<int32_t> documentIndex;
  /// (document-index position, offset) of sample i at [2i, 2i + 1], numSamples + 1 pairs.
  std::vector<int64_t> sampleIndex;
  /// Permutation of [0, numSamples).
  std::vector<int64_t> shuffleIndex;
  int64_t numSamples() const { return int64_t(shuffleIndex.size()); }
};

/// Builds Megatron's document, sample and shuffle indices for sequences [begin, end) of a dataset
/// with per-sequence token counts `sequenceLengths`, `numSamples` requested samples (0: one epoch,
/// Megatron's num_samples=None), samples of seqLength + 1 tokens, RandomState(seed).
/// Errors (InvalidArgument): seqLength < 2 (Megatron asserts seq_length > 1), a range outside
/// the lengths, a split with fewer than 2 tokens, more than 2^31 - 1 sequences or tokens per
/// sample offset (Megatron's int32 indices).
absl::StatusOr<GptIndices> buildGptIndices(const std::vector<int32_t> &sequenceLengths,
                                           int64_t begin, int64_t end, int64_t numSamples,
                                           int64_t seqLength, uint32_t seed);

/// Copies sample `index` (the index-th in shuffled order, index in [0, numSamples())) of
/// seqLength + 1 tokens out of `data` as GPTDataset._query_document_sample_shuffle_indices does.
/// Errors: read errors of IndexedDataset::read.
absl::Status gptSample(const IndexedDataset &data, const GptIndices &indices, int64_t seqLength,
                       int64_t index, int32_t *tokens);

} // namespace trainc::rt::data

#endif
