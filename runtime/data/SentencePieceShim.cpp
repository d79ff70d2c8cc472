//===- SentencePieceShim.cpp - libsentencepiece in its own symbol scope ---===//
//
// Built as the module libtrainc_sentencepiece.so, which alone links Debian's libsentencepiece.
// That library carries its own copy of protobuf-lite and exports its symbols, which clash with the
// system libprotobuf the runtime links (the program schema): linked into one executable, the
// static initialisers of one protobuf run against the other's and crash at start-up. The runtime
// therefore loads this module with dlopen(RTLD_LOCAL | RTLD_DEEPBIND) (SentencePieceModel.cpp),
// so that libsentencepiece binds to its own protobuf, and calls these C entry points. No Abseil
// header may be included here: sentencepiece_processor.h declares its own namespace absl.
//
//===----------------------------------------------------------------------===//

#include <sentencepiece_processor.h>

#include <string>
#include <vector>

using Processor = sentencepiece::SentencePieceProcessor;

extern "C" {

/// A processor loaded from the serialized model `bytes`, or null with `error` set.
__attribute__((visibility("default"))) void *trainc_spm_load(const std::string *bytes,
                                                              std::string *error) {
  auto *p = new Processor();
  sentencepiece::util::Status s = p->LoadFromSerializedProto(*bytes);
  if (!s.ok()) {
    *error = s.ToString();
    delete p;
    return nullptr;
  }
  return p;
}

__attribute__((visibility("default"))) void trainc_spm_free(void *p) {
  delete static_cast<Processor *>(p);
}

/// which: 0 piece size, 1 pad id, 2 BOS id, 3 EOS id.
__attribute__((visibility("default"))) int trainc_spm_int(const void *p, int which) {
  const auto *sp = static_cast<const Processor *>(p);
  switch (which) {
  case 0: return sp->GetPieceSize();
  case 1: return sp->pad_id();
  case 2: return sp->bos_id();
  default: return sp->eos_id();
  }
}

__attribute__((visibility("default"))) void trainc_spm_piece(const void *p, int id,
                                                              std::string *out) {
  *out = static_cast<const Processor *>(p)->IdToPiece(id);
}

/// EncodeAsIds of [text, text + size) appended to `out`; false with `error` on a library error.
__attribute__((visibility("default"))) bool trainc_spm_encode(const void *p, const char *text,
                                                               size_t size, std::vector<int> *out,
                                                               std::string *error) {
  std::vector<int> ids;
  sentencepiece::util::Status s =
      static_cast<const Processor *>(p)->Encode(std::string(text, size), &ids);
  if (!s.ok()) {
    *error = s.ToString();
    return false;
  }
  out->insert(out->end(), ids.begin(), ids.end());
  return true;
}

__attribute__((visibility("default"))) bool trainc_spm_decode(const void *p,
                                                               const std::vector<int> *ids,
                                                               std::string *text) {
  return static_cast<const Processor *>(p)->Decode(*ids, text).ok();
}

} // extern "C"
