//===- IndexedDataset.h - Megatron's .bin/.idx token files ----------------===//
//
// Reader and writer of Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py),
// the format tools/preprocess_data.py writes and GPTDataset reads:
//
//   PREFIX.bin  the tokens of every sequence back to back, little-endian, one dtype
//   PREFIX.idx  9 bytes "MMIDIDX\0\0", uint64 version (1), uint8 dtype code,
//               uint64 sequence_count S, uint64 document_count D,
//               int32 sequence_lengths[S] (tokens), int64 sequence_pointers[S] (bytes into .bin),
//               int64 document_indices[D] (document d is sequences [di[d], di[d+1]); di[0] = 0,
//               di[D-1] = S), and for multimodal data int8 sequence_modes[S].
//
// Dtype codes (Megatron's DType): 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
// 7 float32, 8 uint16. Token files use the integer codes; 6 and 7 are refused.
//
// Both files are memory-mapped read-only. `open` validates every header field and every entry of
// the three arrays against the two file sizes before anything is read through them, so a
// truncated or inconsistent pair is an error naming the file and the field, never an
// out-of-bounds read.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_DATA_INDEXEDDATASET_H
#define TRAINC_RUNTIME_DATA_INDEXEDDATASET_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace trainc::rt::data {

/// Bytes of the index header before sequence_lengths: magic 9, version 8, dtype 1, counts 8 + 8.
constexpr int64_t kIndexHeaderBytes = 34;

/// Bytes per element of a Megatron dtype code; 0 for an unknown code.
int dtypeCodeBytes(int code);
/// "uint16" etc. for a Megatron dtype code; "unknown" otherwise.
const char *dtypeCodeName(int code);
/// The dtype code Megatron's preprocess picks for a tokenizer of `vocabSize` tokens
/// (DType.optimal_dtype): 8 (uint16) below 65500 tokens, else 4 (int32).
int optimalDtypeCode(int64_t vocabSize);

/// A read-only, memory-mapped .bin/.idx pair. Thread-safe after `open`.
class IndexedDataset {
public:
  /// Maps PREFIX.idx and PREFIX.bin and validates them. Errors (InvalidArgument unless noted), each
  /// naming the file and the field: a file that is missing (NotFound) or cannot be mapped, an
  /// index shorter than its header, a wrong magic, a version other than 1, a dtype code that is
  /// not an integer type, sequence_count / document_count that disagree with the index's size, a
  /// negative sequence length, document_indices that do not start at 0, decrease or do not end
  /// at sequence_count, a sequence pointer that is negative, not a multiple of the dtype size, or
  /// whose sequence ends past the end of the .bin file.
  static absl::StatusOr<std::unique_ptr<IndexedDataset>> open(const std::string &prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset &) = delete;
  IndexedDataset &operator=(const IndexedDataset &) = delete;

  const std::string &prefix() const { return prefix_; }
  int dtypeCode() const { return dtypeCode_; }
  int64_t numSequences() const { return numSequences_; }
  /// Documents (document_count - 1).
  int64_t numDocuments() const { return numDocIndices_ - 1; }
  /// Tokens of sequence `i` in [0, numSequences()).
  int32_t sequenceLength(int64_t i) const;
  /// Byte offset of sequence `i` in the .bin file.
  int64_t sequencePointer(int64_t i) const;
  /// document_indices[d], d in [0, numDocuments()].
  int64_t documentIndex(int64_t d) const;
  /// All sequence lengths (copied out of the map; 4 bytes per sequence).
  std::vector<int32_t> sequenceLengths() const;

  /// Writes tokens [offset, offset + length) of sequence `seq` to `out` as int32. Errors
  /// (OutOfRange): seq outside [0, numSequences()), a range outside the sequence, a token value
  /// outside [0, 2^31) (naming the sequence, position and value).
  absl::Status read(int64_t seq, int64_t offset, int64_t length, int32_t *out) const;

private:
  IndexedDataset() = default;
  std::string prefix_;
  int dtypeCode_ = 0, dtypeBytes_ = 0;
  int64_t numSequences_ = 0, numDocIndices_ = 0;
  const uint8_t *idx_ = nullptr, *bin_ = nullptr;
  size_t idxBytes_ = 0, binBytes_ = 0;
};

/// Writes PREFIX.bin while documents are added and PREFIX.idx at `finalize`, as Megatron's
/// IndexedDatasetBuilder: one sequence per entry of `lengths`, document boundaries after each
/// addDocument, pointers contiguous.
class IndexedDatasetBuilder {
public:
  /// Opens PREFIX.bin for writing. Errors: an unknown or non-integer dtype code, a file that cannot
  /// be created (PermissionDenied, naming it).
  static absl::StatusOr<std::unique_ptr<IndexedDatasetBuilder>> create(const std::string &prefix,
                                                                       int dtypeCode);
  ~IndexedDatasetBuilder();

  /// Appends a document: `tokens` is the concatenation of its sequences, `lengths` their token
  /// counts (sum = tokens.size(); empty for an empty document). Errors (InvalidArgument): lengths
  /// that do not sum to tokens.size() or are negative, a token that does not fit the dtype (naming
  /// the value and the dtype); a failed write (DataLoss).
  absl::Status addDocument(const std::vector<int32_t> &tokens, const std::vector<int32_t> &lengths);
  /// Closes the .bin and writes the .idx. Errors: a failed write or close (DataLoss).
  absl::Status finalize();

  int64_t numSequences() const { return int64_t(lengths_.size()); }
  int64_t numDocuments() const { return int64_t(docIndices_.size()) - 1; }

private:
  IndexedDatasetBuilder() = default;
  std::string prefix_;
  int dtypeCode_ = 0, dtypeBytes_ = 0;
  std::FILE *bin_ = nullptr;
  int64_t binBytes_ = 0;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_, docIndices_ = {0};
  std::vector<uint8_t> scratch_;
};

} // namespace trainc::rt::data

#endif
