//===- SentencePieceModel.cpp - Debian's libsentencepiece behind std types -===//
//
// Calls libsentencepiece through the module libtrainc_sentencepiece.so (SentencePieceShim.cpp),
// loaded on first use with dlopen(RTLD_LOCAL | RTLD_DEEPBIND): see the shim for why.

#include "runtime/data/SentencePieceModel.h"

#include <dlfcn.h>

#include <mutex>

#ifndef TRAINC_SENTENCEPIECE_MODULE
#error "TRAINC_SENTENCEPIECE_MODULE (the path of libtrainc_sentencepiece.so) must be defined"
#endif

namespace trainc::rt::data {

namespace {

struct Api {
  void *(*load)(const std::string *, std::string *) = nullptr;
  void (*free)(void *) = nullptr;
  int (*getInt)(const void *, int) = nullptr;
  void (*piece)(const void *, int, std::string *) = nullptr;
  bool (*encode)(const void *, const char *, size_t, std::vector<int> *, std::string *) = nullptr;
  bool (*decode)(const void *, const std::vector<int> *, std::string *) = nullptr;
  std::string error;
};

/// The module's entry points, loaded once: TRAINC_SENTENCEPIECE_MODULE from the environment
/// when set (a relocated build), else the build's path.
const Api &api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    const char *env = std::getenv("TRAINC_SENTENCEPIECE_MODULE");
    std::string path = env && *env ? env : TRAINC_SENTENCEPIECE_MODULE;
    void *h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
      const char *e = ::dlerror();
      a.error = "cannot load the SentencePiece module '" + path + "': " + (e ? e : "?") +
                " (set TRAINC_SENTENCEPIECE_MODULE to libtrainc_sentencepiece.so of the build)";
      return;
    }
    a.load = reinterpret_cast<decltype(a.load)>(::dlsym(h, "trainc_spm_load"));
    a.free = reinterpret_cast<decltype(a.free)>(::dlsym(h, "trainc_spm_free"));
    a.getInt = reinterpret_cast<decltype(a.getInt)>(::dlsym(h, "trainc_spm_int"));
    a.piece = reinterpret_cast<decltype(a.piece)>(::dlsym(h, "trainc_spm_piece"));
    a.encode = reinterpret_cast<decltype(a.encode)>(::dlsym(h, "trainc_spm_encode"));
    a.decode = reinterpret_cast<decltype(a.decode)>(::dlsym(h, "trainc_spm_decode"));
    if (!a.load || !a.free || !a.getInt || !a.piece || !a.encode || !a.decode) {
      a.error = "the SentencePiece module '" + path + "' lacks the trainc_spm_* entry points";
      a.load = nullptr;
    }
  });
  return a;
}

} // namespace

struct SentencePieceModel::Impl {
  void *processor = nullptr;
  ~Impl() {
    if (processor)
      api().free(processor);
  }
};

SentencePieceModel::SentencePieceModel() : impl_(std::make_unique<Impl>()) {}
SentencePieceModel::~SentencePieceModel() = default;

bool SentencePieceModel::load(const std::string &bytes, std::string &error) {
  const Api &a = api();
  if (!a.load) {
    error = a.error;
    return false;
  }
  impl_->processor = a.load(&bytes, &error);
  return impl_->processor != nullptr;
}

int SentencePieceModel::pieceSize() const { return api().getInt(impl_->processor, 0); }
int SentencePieceModel::padId() const { return api().getInt(impl_->processor, 1); }
int SentencePieceModel::bosId() const { return api().getInt(impl_->processor, 2); }
int SentencePieceModel::eosId() const { return api().getInt(impl_->processor, 3); }

std::string SentencePieceModel::idToPiece(int id) const {
  std::string out;
  api().piece(impl_->processor, id, &out);
  return out;
}

bool SentencePieceModel::encode(std::string_view text, std::vector<int> &out,
                                std::string &error) const {
  return api().encode(impl_->processor, text.data(), text.size(), &out, &error);
}

bool SentencePieceModel::decode(const std::vector<int> &ids, std::string &text) const {
  return api().decode(impl_->processor, &ids, &text);
}

} // namespace trainc::rt::data
