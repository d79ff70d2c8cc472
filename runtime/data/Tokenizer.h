//===- Tokenizer.h - Megatron's tokenizers behind one interface -----------===//
//
// The tokenizers of Megatron-LM's --tokenizer-type (megatron/training/tokenizer/tokenizer.py,
// gpt2_tokenization.py) that tools/preprocess_data and trainrun's raw-text path share:
//
//   NullTokenizer     text is whitespace-separated integer ids; --vocab-size V gives ids [0, V),
//                     EOD = V, vocabulary V + 1 (Megatron's _NullTokenizer)
//   ByteTokenizer     trainc's own: byte b (1..255) -> id b, EOD 0 (NUL bytes are dropped),
//                     vocabulary 256
//   GPT2BPETokenizer  byte-level BPE from vocab.json + merges.txt (--vocab-file, --merge-file):
//                     GPT-2's pre-tokenizer pattern, bytes mapped to printable code points,
//                     merges applied lowest rank first; EOD is "<|endoftext|>"; vocabulary =
//                     the entries of vocab.json
//
// Ids are int32. A tokenizer is immutable after creation and thread-safe.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_DATA_TOKENIZER_H
#define TRAINC_RUNTIME_DATA_TOKENIZER_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trainc::rt::data {

class Tokenizer {
public:
  virtual ~Tokenizer() = default;
  /// Megatron's --tokenizer-type name.
  virtual std::string name() const = 0;
  /// Appends the ids of `text` (UTF-8 bytes; invalid UTF-8 is tokenized byte by byte) to `out`.
  /// Errors (InvalidArgument): NullTokenizer: a word that is not an integer in [0, vocab);
  /// GPT2BPETokenizer: a BPE piece missing from vocab.json (an inconsistent vocab/merges pair).
  virtual absl::Status tokenize(std::string_view text, std::vector<int32_t> &out) const = 0;
  /// The text of `ids` (ids outside the vocabulary, and EOD, give no text).
  virtual std::string detokenize(const std::vector<int32_t> &ids) const = 0;
  /// The tokenizer's (unpadded) vocabulary size; ids are in [0, vocabSize()).
  virtual int64_t vocabSize() const = 0;
  /// The end-of-document id that preprocess --append-eod appends.
  virtual int32_t eod() const = 0;
};

struct TokenizerOptions {
  /// NullTokenizer, ByteTokenizer or GPT2BPETokenizer.
  std::string type;
  /// GPT2BPETokenizer: vocab.json and merges.txt.
  std::string vocabFile, mergeFile;
  /// NullTokenizer: the number of ids before EOD (Megatron's --vocab-size).
  int64_t vocabSize = 0;
};

/// Builds the tokenizer `options.type`. Errors (InvalidArgument unless noted), naming the value: an
/// unknown type (listing the known ones), NullTokenizer without a positive vocab size,
/// GPT2BPETokenizer without --vocab-file or --merge-file, a file that does not exist (NotFound) or
/// cannot be read, a vocab.json that is not a JSON object of string -> non-negative integer, ids
/// that are not unique, no "<|endoftext|>" entry.
absl::StatusOr<std::unique_ptr<Tokenizer>> createTokenizer(const TokenizerOptions &options);

/// Megatron's _vocab_size_with_padding: `vocabSize` rounded up to a multiple of
/// divisibleBy * tensorParallelSize. Errors (InvalidArgument): a non-positive argument.
absl::StatusOr<int64_t> paddedVocabSize(int64_t vocabSize, int64_t divisibleBy,
                                        int64_t tensorParallelSize);

/// Checks that the tokenizer's padded vocabulary equals the plan's (both padded with
/// `divisibleBy` x `tensorParallelSize`, as Megatron pads). Errors (InvalidArgument), naming both
/// sizes and the tokenizer.
absl::Status checkVocabAgainstPlan(const Tokenizer &tokenizer, int64_t planVocabSize,
                                   int64_t divisibleBy, int64_t tensorParallelSize);

} // namespace trainc::rt::data

#endif
