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
//   SentencePieceTokenizer     Megatron's _SentencePieceTokenizer over a SentencePiece .model
//                     (--tokenizer-model; Debian's libsentencepiece): the model's pieces plus the
//                     special tokens <CLS>, <SEP>, <EOD>, <MASK> and the pad/BOS/EOS pieces
//                     (appended in that order when the model lacks them); special tokens in the
//                     text are split out first (the earliest, Megatron's order on ties); EOD is
//                     <EOD>. detokenize drops special tokens (Megatron's writes " <TOK> ").
//   GPTSentencePieceTokenizer  the model's pieces only, EOD = the model's EOS
//   Llama2Tokenizer   as GPTSentencePieceTokenizer, with the BOS prepended to every text
//   HuggingFaceTokenizer  a byte-level BPE tokenizer.json (--tokenizer-model: the file or its
//                     directory): model.type BPE (vocab, merges as "a b" or ["a","b"],
//                     ignore_merges), no normalizer, a ByteLevel pre-tokenizer (GPT-2's pattern,
//                     add_prefix_space), added_tokens split out of the text first (leftmost,
//                     longest), a ByteLevel or TemplateProcessing post-processor (its "single"
//                     special tokens around the ids). Vocabulary = the distinct vocabulary and
//                     added tokens (len(tokenizer)); EOD = tokenizer_config.json's eos_token when
//                     that file is next to tokenizer.json, else the first of <|endoftext|>, </s>,
//                     <|end_of_text|>, <eos> that is a token. detokenize drops special added
//                     tokens (skip_special_tokens). Other models, normalizers and pre-tokenizers
//                     are refused by name.
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
  /// NullTokenizer, ByteTokenizer, GPT2BPETokenizer, SentencePieceTokenizer,
  /// GPTSentencePieceTokenizer, Llama2Tokenizer or HuggingFaceTokenizer.
  std::string type;
  /// GPT2BPETokenizer: vocab.json and merges.txt.
  std::string vocabFile, mergeFile;
  /// NullTokenizer: the number of ids before EOD (Megatron's --vocab-size).
  int64_t vocabSize = 0;
  /// SentencePiece tokenizers: the .model file; HuggingFaceTokenizer: tokenizer.json or its
  /// directory (Megatron's --tokenizer-model).
  std::string tokenizerModel;
};

/// Builds the tokenizer `options.type`. Errors (InvalidArgument unless noted), naming the value: an
/// unknown type (listing the known ones), NullTokenizer without a positive vocab size,
/// GPT2BPETokenizer without --vocab-file or --merge-file, a file that does not exist (NotFound) or
/// cannot be read, a vocab.json that is not a JSON object of string -> non-negative integer, ids
/// that are not unique, no "<|endoftext|>" entry; a SentencePiece or Hugging Face tokenizer
/// without --tokenizer-model, a file that is not a SentencePiece model (naming the library's
/// message), a tokenizer.json that is not a byte-level BPE (naming the unsupported part), ids
/// that are not [0, n), no end-of-document token.
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
