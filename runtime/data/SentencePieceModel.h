//===- SentencePieceModel.h - Debian's libsentencepiece behind std types --===//
//
// A thin wrapper of sentencepiece::SentencePieceProcessor (Debian's libsentencepiece-dev) for the
// SentencePiece tokenizers (Tokenizer.cpp). It exists because sentencepiece_processor.h declares
// its own `namespace absl { using std::string_view; }`, which clashes with the real Abseil: only
// SentencePieceModel.cpp includes it, and it includes no Abseil header.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_DATA_SENTENCEPIECEMODEL_H
#define TRAINC_RUNTIME_DATA_SENTENCEPIECEMODEL_H

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trainc::rt::data {

class SentencePieceModel {
public:
  SentencePieceModel();
  ~SentencePieceModel();
  /// Loads a serialized ModelProto (the bytes of a .model file). Returns false and sets `error`
  /// to the library's message when the bytes are not a model.
  bool load(const std::string &bytes, std::string &error);
  /// The number of pieces; ids are [0, pieceSize()).
  int pieceSize() const;
  std::string idToPiece(int id) const;
  /// The model's pad/BOS/EOS ids (-1: none).
  int padId() const;
  int bosId() const;
  int eosId() const;
  /// EncodeAsIds of `text` appended to `out`; false with `error` on a library error.
  bool encode(std::string_view text, std::vector<int> &out, std::string &error) const;
  /// DecodeIds of `ids`; false on a library error (an id outside the model).
  bool decode(const std::vector<int> &ids, std::string &text) const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace trainc::rt::data

#endif
