//===- Dataset.h - Training data: byte tokenizer, splits, samples ---------===//
//
// The control plane's data pipeline, after Megatron's GPTDataset over a BlendedMegatronDatasetBuilder
// split (megatron/core/datasets/gpt_dataset.py, blended_megatron_dataset_builder.py, utils.py):
//
//   files -> bytes (NUL dropped) -> documents (separated by one or more blank lines)
//         -> train/valid/test by contiguous document ranges (--split weights, normalised)
//         -> per split: documents shuffled with the seed, concatenated, each followed by EOD
//         -> samples of seq_length + 1 tokens with stride seq_length
//         -> per epoch: sample order shuffled with (seed, split, epoch).
//
// Everything depends only on the files' bytes, the options and the seed: the shuffles use Philox4x32
// (runtime/core/Philox.h) keyed explicitly, never std::random_device or a library distribution, so
// the sample order is the same on every machine and standard library. Sample lookup is stateless
// (the per-epoch order is a keyed bijection, not a stored permutation), so `sample` is thread-safe
// and memory stays one uint8 token stream per split (text) or O(1) (mock data).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CONTROL_DATASET_H
#define TRAINC_RUNTIME_CONTROL_DATASET_H

#include "absl/status/statusor.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trainc::rt::data {
class Tokenizer;
}

namespace trainc::rt::control {

/// Byte-level tokenizer: byte b (1..255) -> token b; the end-of-document token is 0 (the NUL byte
/// never occurs in text; a NUL byte in the input is dropped). Vocabulary size 256.
constexpr int32_t kEodToken = 0;
constexpr int64_t kByteVocabSize = 256;

/// Samples per epoch of mock data, over all three splits together (divided by the split weights
/// like documents are). Mock tokens are computed on demand, so the size costs no memory.
constexpr int64_t kMockSamplesPerEpoch = int64_t(1) << 20;

/// One split's samples: sample i is seq_length + 1 consecutive tokens (inputs = [0, seq), labels =
/// [1, seq + 1)), as Megatron's GPTDataset builds them over a token stream spanning documents.
class Dataset {
public:
  virtual ~Dataset() = default;
  /// Samples in one epoch.
  virtual int64_t numSamples() const = 0;
  /// Writes the seq_length + 1 tokens of global sample `index` (any index >= 0; index / numSamples()
  /// is the epoch, each epoch with its own deterministic shuffle of sample order). Thread-safe.
  virtual void sample(int64_t index, int32_t *tokens) const = 0;
  /// Like `sample`, but reports what the data can get wrong at read time (a .bin/.idx sample with
  /// a token outside the plan's vocabulary). Thread-safe.
  virtual absl::Status readSample(int64_t index, int32_t *tokens) const {
    sample(index, tokens);
    return absl::OkStatus();
  }
  virtual int64_t seqLength() const = 0;
  /// The end-of-document token id in the samples, -1 when unknown (.bin/.idx data read without a
  /// tokenizer).
  virtual int32_t eodToken() const { return kEodToken; }
};

struct DataOptions {
  /// Files or directories (a directory: every regular file in it, sorted by name, symlinks resolved
  /// and duplicates (same real path, over the whole list) read once).
  std::vector<std::string> dataPath;
  /// Uniform random tokens in [1, vocabSize) with EOD every 97 tokens (deterministic by seed);
  /// takes precedence over dataPath, like Megatron's --mock-data.
  bool mockData = false;
  /// Megatron's --split: train, valid, test weights (comma or slash separated, spaces allowed; one
  /// to three non-negative numbers, missing ones 0; normalised by their sum).
  std::string split = "969, 30, 1";
  int64_t seqLength = 0;
  uint64_t seed = 1234;
  /// The model's (unpadded) vocabulary; must be >= 256 for text data, >= 2 for mock data.
  int64_t vocabSize = kByteVocabSize;
  /// Text data: the tokenizer (not owned; null = the byte tokenizer); its vocabulary must not
  /// exceed vocabSize. .bin/.idx data: its EOD is the samples' eodToken() (null: unknown).
  const data::Tokenizer *tokenizer = nullptr;
  /// .bin/.idx data: the samples each split must hold (train, valid, test; Megatron's
  /// train_valid_test_num_samples), which sets the number of epochs; 0 = one epoch.
  std::array<int64_t, 3> numSamples = {0, 0, 0};
  /// .bin/.idx data: Megatron's --data-cache-path, where the GPTDataset indices are cached
  /// (runtime/data/IndexCache.h); empty: PREFIX/cache/GPTDataset_indices next to the data.
  std::string dataCachePath;
  /// .bin/.idx data: Megatron's --train-data-path / --valid-data-path / --test-data-path, a blend
  /// per split (each dataset wholly in that split, --split ignored); used instead of dataPath
  /// when any is given.
  std::array<std::vector<std::string>, 3> splitDataPath;
};

/// A split with weight 0 or too few tokens for one sample is null.
struct Datasets {
  std::unique_ptr<Dataset> train, valid, test;
  /// What the build did that a user should see (index caches loaded, written, rebuilt or not
  /// writable), one line each, for the log.
  std::vector<std::string> notes;
};

/// Normalised split weights {train, valid, test} (summing to 1) parsed from a --split string such
/// as "969, 30, 1" or "98/2". Errors (InvalidArgument, naming the string): a part that is not a
/// non-negative finite number, more than three parts, weights summing to 0.
absl::StatusOr<std::vector<double>> parseSplit(const std::string &split);

/// A --data-path entry P with a file P.idx makes the data Megatron's indexed dataset P.bin/P.idx:
/// the datasets are then runtime/data/MegatronDatasets.h's buildIndexedDatasets (Megatron's
/// GPTDataset / BlendedDataset order), as they are when options.splitDataPath is given (an error
/// together with dataPath); everything below is about raw text.
///
/// Reads and tokenizes the data (with options.tokenizer, else bytes), splits documents (separated by one or more blank lines; a line of
/// only spaces, tabs or CR is blank; a file boundary also ends a document; a document keeps its
/// inner line breaks but not its last line's) into train/valid/test by the split weights (Megatron
/// assigns contiguous ranges of documents, in file order, to the splits by the normalised weights:
/// split s gets documents [round(c_s * D), round(c_{s+1} * D)) where c_s is the cumulative weight
/// before s and round is half-to-even, as Python's), shuffles each split's document order with the
/// seed, concatenates documents each followed by EOD, and cuts samples of seq_length + 1 tokens with
/// stride seq_length (the last token of sample i is the first of sample i + 1; a split of T tokens
/// has (T - 1) / seq_length samples per epoch).
///
/// Errors (InvalidArgument unless noted), each naming the value: neither --data-path nor
/// --mock-data, seq_length <= 0, a split string that does not parse or sums to 0, a vocabulary
/// smaller than 256 with text data (smaller than 2 with mock data), a data path that does not exist
/// (NotFound), a data path that is neither a file nor a directory, a directory with no regular
/// files, a file that cannot be read, data files that contain no text ("empty corpus"), a train
/// split (weight > 0) with fewer than seq_length + 1 tokens.
absl::StatusOr<Datasets> buildDatasets(const DataOptions &options);

} // namespace trainc::rt::control

#endif
