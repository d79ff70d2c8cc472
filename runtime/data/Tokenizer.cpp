//===- Tokenizer.cpp - Megatron's tokenizers behind one interface ---------===//

#include "runtime/data/Tokenizer.h"

#include "runtime/data/SentencePieceModel.h"

#include "absl/strings/str_cat.h"

#include <nlohmann/json.hpp>
#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace trainc::rt::data {

namespace {

absl::Status readWholeFile(const std::string &path, const std::string &what, std::string &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT)
      return absl::NotFoundError(absl::StrCat(what, " '", path, "' does not exist"));
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " '", path, "'"));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return absl::OkStatus();
}

void appendUtf8(uint32_t cp, std::string &out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

/// Decodes one UTF-8 code point at s[i]; returns its byte length (1 for an invalid byte, whose
/// code point is then reported as -1).
int decodeUtf8(std::string_view s, size_t i, int32_t &cp) {
  uint8_t b = uint8_t(s[i]);
  int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + size_t(len) > s.size()) {
    cp = -1;
    return 1;
  }
  if (len == 1) {
    cp = b;
    return 1;
  }
  uint32_t v = b & (0xFF >> (len + 1));
  for (int k = 1; k < len; ++k) {
    uint8_t c = uint8_t(s[i + size_t(k)]);
    if ((c >> 6) != 2) {
      cp = -1;
      return 1;
    }
    v = (v << 6) | (c & 0x3F);
  }
  static const uint32_t minOf[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < minOf[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
    cp = -1;
    return 1;
  }
  cp = int32_t(v);
  return len;
}

//===----------------------------------------------------------------------===//
// NullTokenizer, ByteTokenizer
//===----------------------------------------------------------------------===//

class NullTokenizer final : public Tokenizer {
public:
  explicit NullTokenizer(int64_t vocab) : vocab_(vocab) {}
  std::string name() const override { return "NullTokenizer"; }
  int64_t vocabSize() const override { return vocab_ + 1; }
  int32_t eod() const override { return int32_t(vocab_); }
  absl::Status tokenize(std::string_view text, std::vector<int32_t> &out) const override {
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && std::strchr(" \t\n\r\f\v", text[i]) && text[i] != '\0')
        ++i;
      size_t b = i;
      while (i < text.size() && !(std::strchr(" \t\n\r\f\v", text[i]) && text[i] != '\0'))
        ++i;
      if (b == i)
        break;
      std::string word(text.substr(b, i - b));
      char *end = nullptr;
      errno = 0;
      long long v = std::strtoll(word.c_str(), &end, 10);
      if (end != word.c_str() + word.size() || errno == ERANGE || v < 0 || v >= vocab_ ||
          !(word[0] == '+' || (word[0] >= '0' && word[0] <= '9')))
        return absl::InvalidArgumentError(
            absl::StrCat("NullTokenizer: '", word, "' is not a token id in [0, ", vocab_, ")"));
      out.push_back(int32_t(v));
    }
    return absl::OkStatus();
  }
  std::string detokenize(const std::vector<int32_t> &ids) const override {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i)
      absl::StrAppend(&s, i ? " " : "", ids[i]);
    return s;
  }

private:
  int64_t vocab_;
};

class ByteTokenizer final : public Tokenizer {
public:
  std::string name() const override { return "ByteTokenizer"; }
  int64_t vocabSize() const override { return 256; }
  int32_t eod() const override { return 0; }
  absl::Status tokenize(std::string_view text, std::vector<int32_t> &out) const override {
    for (char c : text)
      if (c != '\0')
        out.push_back(int32_t(uint8_t(c)));
    return absl::OkStatus();
  }
  std::string detokenize(const std::vector<int32_t> &ids) const override {
    std::string s;
    for (int32_t id : ids)
      if (id > 0 && id < 256)
        s += char(id);
    return s;
  }
};

//===----------------------------------------------------------------------===//
// GPT2BPETokenizer
//===----------------------------------------------------------------------===//

enum class CharClass : uint8_t { Letter, Number, Space, Other };

CharClass classify(int32_t cp) {
  if (cp < 0)
    return CharClass::Other; // an invalid UTF-8 byte
  if (u_isUWhiteSpace(UChar32(cp)))
    return CharClass::Space;
  switch (u_charType(UChar32(cp))) {
  case U_UPPERCASE_LETTER:
  case U_LOWERCASE_LETTER:
  case U_TITLECASE_LETTER:
  case U_MODIFIER_LETTER:
  case U_OTHER_LETTER:
    return CharClass::Letter;
  case U_DECIMAL_DIGIT_NUMBER:
  case U_LETTER_NUMBER:
  case U_OTHER_NUMBER:
    return CharClass::Number;
  default:
    return CharClass::Other;
  }
}

class Gpt2BpeTokenizer : public Tokenizer {
public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> create(const std::string &vocabFile,
                                                           const std::string &mergeFile);
  std::string name() const override { return "GPT2BPETokenizer"; }
  int64_t vocabSize() const override { return int64_t(decoder_.size()); }
  int32_t eod() const override { return eod_; }
  absl::Status tokenize(std::string_view text, std::vector<int32_t> &out) const override {
    return tokenizePlain(text, out);
  }
  std::string detokenize(const std::vector<int32_t> &ids) const override;

protected:
  /// GPT-2's pre-tokenizer and BPE over `text` (no special tokens).
  absl::Status tokenizePlain(std::string_view text, std::vector<int32_t> &out) const;
  /// The bytes of vocabulary token `id` (its byte-level code points mapped back), appended.
  void appendTokenBytes(int32_t id, std::string &bytes) const;
  Gpt2BpeTokenizer() { initByteMaps(); }
  void initByteMaps();
  absl::Status bpe(std::string_view piece, std::vector<int32_t> &out) const;

  std::unordered_map<std::string, int32_t> encoder_;
  std::vector<std::string> decoder_;
  /// "first second" -> rank (the merge's line in merges.txt after the header).
  std::unordered_map<std::string, int32_t> ranks_;
  /// Byte -> its printable code point's UTF-8 (GPT-2's bytes_to_unicode).
  std::array<std::string, 256> byteEncoder_;
  /// Code point (< 512) -> byte, -1 for none.
  std::array<int16_t, 512> byteDecoder_;
  int32_t eod_ = 0;
  /// Names the vocabulary in errors.
  std::string vocabWhat_ = "vocab.json";
  /// Hugging Face's BPE ignore_merges: a pre-token that is a vocabulary entry is emitted whole.
  bool ignoreMerges_ = false;
};

absl::StatusOr<std::unique_ptr<Tokenizer>>
Gpt2BpeTokenizer::create(const std::string &vocabFile, const std::string &mergeFile) {
  std::unique_ptr<Gpt2BpeTokenizer> t(new Gpt2BpeTokenizer());
  std::string text;
  if (absl::Status s = readWholeFile(vocabFile, "--vocab-file", text); !s.ok())
    return s;
  nlohmann::json vocab = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (vocab.is_discarded() || !vocab.is_object())
    return absl::InvalidArgumentError(absl::StrCat(
        "--vocab-file '", vocabFile, "' is not a JSON object of token -> id (GPT-2 vocab.json)"));
  t->decoder_.assign(vocab.size(), std::string());
  std::vector<bool> seen(vocab.size(), false);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= int64_t(vocab.size()))
      return absl::InvalidArgumentError(absl::StrCat(
          "--vocab-file '", vocabFile, "': the id of token '", it.key(), "' is ", it.value().dump(),
          ", expected an integer in [0, ", vocab.size(), ") (the number of entries)"));
    int64_t id = it.value().get<int64_t>();
    if (seen[size_t(id)])
      return absl::InvalidArgumentError(absl::StrCat("--vocab-file '", vocabFile, "': id ", id,
                                                     " is used by two tokens"));
    seen[size_t(id)] = true;
    t->encoder_[it.key()] = int32_t(id);
    t->decoder_[size_t(id)] = it.key();
  }
  auto eod = t->encoder_.find("<|endoftext|>");
  if (eod == t->encoder_.end())
    return absl::InvalidArgumentError(
        absl::StrCat("--vocab-file '", vocabFile, "' has no \"<|endoftext|>\" token (the EOD)"));
  t->eod_ = eod->second;

  if (absl::Status s = readWholeFile(mergeFile, "--merge-file", text); !s.ok())
    return s;
  // Megatron reads merges as text.split('\n')[1:-1]: the first line is a header, the last
  // (after the final newline) is dropped; each line's rank is its position.
  std::vector<std::string_view> lines;
  {
    std::string_view all(text);
    size_t start = 0;
    while (true) {
      size_t nl = all.find('\n', start);
      if (nl == std::string_view::npos) {
        lines.push_back(all.substr(start));
        break;
      }
      lines.push_back(all.substr(start, nl - start));
      start = nl + 1;
    }
  }
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    std::string_view line = lines[i];
    std::vector<std::string_view> parts;
    size_t k = 0;
    while (k < line.size()) {
      while (k < line.size() && std::strchr(" \t\r\f\v", line[k]) && line[k] != '\0')
        ++k;
      size_t b = k;
      while (k < line.size() && !(std::strchr(" \t\r\f\v", line[k]) && line[k] != '\0'))
        ++k;
      if (k > b)
        parts.push_back(line.substr(b, k - b));
    }
    if (parts.size() != 2)
      continue; // Megatron keeps such a tuple, but it never matches a pair.
    t->ranks_[std::string(parts[0]) + " " + std::string(parts[1])] = int32_t(i - 1);
  }
  return std::unique_ptr<Tokenizer>(std::move(t));
}

void Gpt2BpeTokenizer::initByteMaps() {
  // bytes_to_unicode: printable Latin-1 bytes keep their code point, the others map to 256 + n.
  byteDecoder_.fill(-1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = printable ? b : 256 + n++;
    appendUtf8(uint32_t(cp), byteEncoder_[size_t(b)]);
    byteDecoder_[size_t(cp)] = int16_t(b);
  }
}

absl::Status Gpt2BpeTokenizer::bpe(std::string_view piece, std::vector<int32_t> &out) const {
  std::vector<std::string> word;
  word.reserve(piece.size());
  for (char c : piece)
    word.push_back(byteEncoder_[uint8_t(c)]);
  if (ignoreMerges_) {
    std::string whole;
    for (const std::string &w : word)
      whole += w;
    if (auto it = encoder_.find(whole); it != encoder_.end()) {
      out.push_back(it->second);
      return absl::OkStatus();
    }
  }
  std::string key;
  while (word.size() > 1) {
    int32_t best = -1;
    size_t bestAt = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      key.assign(word[i]).append(" ").append(word[i + 1]);
      auto it = ranks_.find(key);
      if (it != ranks_.end() && (best < 0 || it->second < best)) {
        best = it->second;
        bestAt = i;
      }
    }
    if (best < 0)
      break;
    // Merge every occurrence of the best pair, left to right.
    const std::string first = word[bestAt], second = word[bestAt + 1];
    std::vector<std::string> merged;
    merged.reserve(word.size());
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(std::move(word[i]));
        ++i;
      }
    }
    word = std::move(merged);
  }
  for (const std::string &w : word) {
    auto it = encoder_.find(w);
    if (it == encoder_.end())
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": the BPE piece '", w, "' is not in ", vocabWhat_,
                       " (vocab and merges do not match)"));
    out.push_back(it->second);
  }
  return absl::OkStatus();
}

absl::Status Gpt2BpeTokenizer::tokenizePlain(std::string_view text,
                                             std::vector<int32_t> &out) const {
  // GPT-2's pattern, matched by hand on code points:
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  std::vector<size_t> at; // byte offset of each code point, plus the end
  std::vector<int32_t> cps;
  std::vector<CharClass> cls;
  for (size_t i = 0; i < text.size();) {
    int32_t cp;
    int len = decodeUtf8(text, i, cp);
    at.push_back(i);
    cps.push_back(cp);
    cls.push_back(classify(cp));
    i += size_t(len);
  }
  const size_t n = cps.size();
  at.push_back(text.size());
  // Words repeat: a per-thread cache of piece -> ids (cleared when it grows past 2^20 pieces or
  // another tokenizer uses the thread), so workers never share or lock it.
  thread_local std::unordered_map<std::string, std::vector<int32_t>> cache;
  thread_local const Gpt2BpeTokenizer *cacheOwner = nullptr;
  if (cacheOwner != this || cache.size() > (size_t(1) << 20)) {
    cache.clear();
    cacheOwner = this;
  }
  std::string key;
  auto emit = [&](size_t b, size_t e) -> absl::Status {
    key.assign(text.substr(at[b], at[e] - at[b]));
    auto it = cache.find(key);
    if (it == cache.end()) {
      std::vector<int32_t> ids;
      if (absl::Status s = bpe(key, ids); !s.ok())
        return s;
      it = cache.emplace(key, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
    return absl::OkStatus();
  };
  size_t i = 0;
  while (i < n) {
    size_t end = i;
    if (cps[i] == '\'' && i + 1 < n) {
      int32_t c1 = cps[i + 1], c2 = i + 2 < n ? cps[i + 2] : 0;
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        end = i + 2;
      else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        end = i + 3;
    }
    if (end == i) {
      size_t j = i + (cps[i] == ' ' ? 1 : 0);
      if (j < n && cls[j] != CharClass::Space) {
        CharClass c = cls[j];
        end = j;
        while (end < n && cls[end] == c)
          ++end;
      } else {
        size_t k = i;
        while (k < n && cls[k] == CharClass::Space)
          ++k;
        end = k == n ? n : k - 1 > i ? k - 1 : k;
      }
    }
    if (absl::Status s = emit(i, end); !s.ok())
      return s;
    i = end;
  }
  return absl::OkStatus();
}

void Gpt2BpeTokenizer::appendTokenBytes(int32_t id, std::string &bytes) const {
  if (id < 0 || size_t(id) >= decoder_.size())
    return;
  const std::string &tok = decoder_[size_t(id)];
  for (size_t i = 0; i < tok.size();) {
    int32_t cp;
    i += size_t(decodeUtf8(tok, i, cp));
    if (cp >= 0 && cp < 512 && byteDecoder_[size_t(cp)] >= 0)
      bytes += char(byteDecoder_[size_t(cp)]);
  }
}

std::string Gpt2BpeTokenizer::detokenize(const std::vector<int32_t> &ids) const {
  std::string bytes;
  for (int32_t id : ids)
    appendTokenBytes(id, bytes);
  return bytes;
}

//===----------------------------------------------------------------------===//
// HuggingFaceTokenizer (a byte-level BPE tokenizer.json)
//===----------------------------------------------------------------------===//

/// o[key] when o is an object holding a boolean (string) there, else `fallback` (nlohmann's
/// value() would throw on a value of another type).
bool jsonBool(const nlohmann::json &o, const char *key, bool fallback) {
  return o.is_object() && o.contains(key) && o[key].is_boolean() ? o[key].get<bool>() : fallback;
}
std::string jsonString(const nlohmann::json &o, const char *key) {
  return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : "";
}

class HuggingFaceBpeTokenizer final : public Gpt2BpeTokenizer {
public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> create(const std::string &model);
  std::string name() const override { return "HuggingFaceTokenizer"; }
  int64_t vocabSize() const override { return vocabSize_; }
  absl::Status tokenize(std::string_view text, std::vector<int32_t> &out) const override;
  std::string detokenize(const std::vector<int32_t> &ids) const override;

private:
  struct Added {
    std::string content;
    int32_t id;
    bool special;
  };
  /// Added tokens by first byte, longest first (the leftmost-longest match wins).
  std::array<std::vector<Added>, 256> addedByFirst_;
  std::unordered_map<int32_t, Added> addedById_;
  bool addPrefixSpace_ = false;
  /// The post-processor's special tokens around the sequence (TemplateProcessing "single").
  std::vector<int32_t> prefix_, suffix_;
  int64_t vocabSize_ = 0;
};

absl::StatusOr<std::unique_ptr<Tokenizer>>
HuggingFaceBpeTokenizer::create(const std::string &model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = model, dir = fs::path(model).parent_path();
  if (fs::is_directory(model, ec)) {
    file = fs::path(model) / "tokenizer.json";
    dir = model;
  }
  auto bad = [&](const std::string &what) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokenizer-model '", file.string(), "': ", what));
  };
  std::string text;
  if (absl::Status s = readWholeFile(file.string(), "--tokenizer-model", text); !s.ok())
    return s;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return bad("not a JSON object (a Hugging Face tokenizer.json)");
  const nlohmann::json &m = j.contains("model") ? j["model"] : nlohmann::json();
  std::string type = m.is_object() && m.contains("type") && m["type"].is_string()
                         ? m["type"].get<std::string>() : "";
  if (type != "BPE")
    return bad(absl::StrCat("model.type is '", type, "'; trainc reads BPE models only"));
  auto nonNull = [](const nlohmann::json &o, const char *k) {
    return o.contains(k) && !o[k].is_null() && !(o[k].is_boolean() && !o[k].get<bool>()) &&
           !(o[k].is_string() && o[k].get<std::string>().empty());
  };
  for (const char *k : {"dropout", "continuing_subword_prefix", "end_of_word_suffix",
                        "byte_fallback"})
    if (nonNull(m, k))
      return bad(absl::StrCat("model.", k, " = ", m[k].dump(), " is not supported yet (trainc "
                              "reads byte-level BPE models such as GPT-2's)"));
  if (nonNull(j, "normalizer"))
    return bad(absl::StrCat("normalizer ", j["normalizer"].dump().substr(0, 80),
                            " is not supported yet (byte-level BPE without a normalizer only)"));
  const nlohmann::json &pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json();
  if (!pre.is_object() || jsonString(pre, "type") != "ByteLevel" || !jsonBool(pre, "use_regex", true))
    return bad(absl::StrCat("pre_tokenizer ", pre.dump().substr(0, 80),
                            " is not supported yet (expected ByteLevel with use_regex, GPT-2's "
                            "pattern)"));
  std::unique_ptr<HuggingFaceBpeTokenizer> t(new HuggingFaceBpeTokenizer());
  t->vocabWhat_ = "the tokenizer.json vocabulary";
  t->addPrefixSpace_ = jsonBool(pre, "add_prefix_space", false);
  t->ignoreMerges_ = jsonBool(m, "ignore_merges", false);
  if (!m.contains("vocab") || !m["vocab"].is_object())
    return bad("model.vocab is not an object of token -> id");
  int64_t maxId = -1;
  std::unordered_map<int32_t, std::string> byId;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX)
      return bad(absl::StrCat("the id of vocabulary token '", it.key(), "' is ",
                              it.value().dump(), ", expected a non-negative int32"));
    int32_t id = int32_t(it.value().get<int64_t>());
    if (!byId.emplace(id, it.key()).second)
      return bad(absl::StrCat("id ", id, " is used by two vocabulary tokens"));
    t->encoder_[it.key()] = id;
    maxId = std::max<int64_t>(maxId, id);
  }
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array())
      return bad("added_tokens is not a list");
    for (const nlohmann::json &a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() > INT32_MAX ||
          !a.contains("content") || !a["content"].is_string() ||
          a["content"].get<std::string>().empty())
        return bad(absl::StrCat("added token ", a.dump().substr(0, 80),
                                " needs a non-negative integer id and a non-empty content"));
      Added x{a["content"].get<std::string>(), int32_t(a["id"].get<int64_t>()),
              jsonBool(a, "special", false)};
      auto v = byId.find(x.id);
      if (v != byId.end() && v->second != x.content)
        return bad(absl::StrCat("added token '", x.content, "' has id ", x.id,
                                ", which the vocabulary gives to '", v->second, "'"));
      byId.emplace(x.id, x.content);
      maxId = std::max<int64_t>(maxId, x.id);
      t->addedByFirst_[uint8_t(x.content[0])].push_back(x);
      t->addedById_[x.id] = x;
    }
  }
  for (auto &v : t->addedByFirst_)
    std::stable_sort(v.begin(), v.end(), [](const Added &a, const Added &b) {
      return a.content.size() > b.content.size();
    });
  // len(tokenizer) in Hugging Face (Megatron's vocab_size): the distinct tokens; trainc needs
  // them to be the ids [0, n).
  if (maxId + 1 != int64_t(byId.size()))
    return bad(absl::StrCat("the ", byId.size(), " vocabulary and added tokens do not have the "
                            "ids [0, ", byId.size(), ") (largest id ", maxId, ")"));
  t->vocabSize_ = int64_t(byId.size());
  t->decoder_.assign(byId.size(), std::string());
  for (auto &[id, tok] : byId)
    if (!t->addedById_.count(id))
      t->decoder_[size_t(id)] = tok;
  // Merges: "a b" strings (older files) or ["a", "b"] pairs; rank = position.
  if (!m.contains("merges") || !m["merges"].is_array())
    return bad("model.merges is not a list");
  int32_t rank = 0;
  for (const nlohmann::json &x : m["merges"]) {
    std::string a, b;
    if (x.is_string()) {
      std::string v = x.get<std::string>();
      size_t sp = v.find(' ');
      if (sp == std::string::npos || v.find(' ', sp + 1) != std::string::npos)
        return bad(absl::StrCat("merge ", rank, " '", v, "' is not two tokens separated by one "
                                "space"));
      a = v.substr(0, sp);
      b = v.substr(sp + 1);
    } else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string()) {
      a = x[0].get<std::string>();
      b = x[1].get<std::string>();
    } else {
      return bad(absl::StrCat("merge ", rank, " ", x.dump().substr(0, 80),
                              " is neither \"a b\" nor [\"a\", \"b\"]"));
    }
    t->ranks_.emplace(a + " " + b, rank++); // the first occurrence of a pair wins
  }
  // The post-processor: ByteLevel adds nothing to the ids; TemplateProcessing's "single" template
  // puts special tokens around the sequence (a BOS, as Llama's tokenizer.json does).
  if (j.contains("post_processor") && j["post_processor"].is_object()) {
    const nlohmann::json &pp = j["post_processor"];
    std::string ppType = jsonString(pp, "type");
    if (ppType == "TemplateProcessing") {
      bool seenSeq = false;
      if (!pp.contains("single") || !pp["single"].is_array())
        return bad("post_processor TemplateProcessing has no \"single\" list");
      for (const nlohmann::json &item : pp["single"]) {
        if (item.contains("Sequence")) {
          seenSeq = true;
          continue;
        }
        std::string sid = item.is_object() && item.contains("SpecialToken")
                              ? jsonString(item["SpecialToken"], "id") : "";
        const nlohmann::json &st = pp.contains("special_tokens") ? pp["special_tokens"]
                                                                  : nlohmann::json();
        if (sid.empty() || !st.is_object() || !st.contains(sid) || !st[sid].contains("ids") ||
            !st[sid]["ids"].is_array())
          return bad(absl::StrCat("post_processor template item ", item.dump().substr(0, 80),
                                  " names no special token with ids"));
        for (const nlohmann::json &id : st[sid]["ids"]) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
              id.get<int64_t>() >= t->vocabSize_)
            return bad(absl::StrCat("post_processor special token '", sid, "' has id ",
                                    id.dump(), ", outside the vocabulary"));
          (seenSeq ? t->suffix_ : t->prefix_).push_back(int32_t(id.get<int64_t>()));
        }
      }
    } else if (ppType != "ByteLevel") {
      return bad(absl::StrCat("post_processor type '", ppType, "' is not supported yet "
                              "(ByteLevel or TemplateProcessing)"));
    }
  }
  // EOD: Megatron's HuggingFaceTokenizer.eod is the tokenizer's eos_token_id, which
  // tokenizer_config.json's "eos_token" names; without that file a known end-of-text token.
  std::string eos;
  fs::path config = dir / "tokenizer_config.json";
  if (fs::is_regular_file(config, ec)) {
    std::string ctext;
    if (absl::Status s = readWholeFile(config.string(), "tokenizer_config.json", ctext); !s.ok())
      return s;
    nlohmann::json c = nlohmann::json::parse(ctext, nullptr, false);
    if (c.is_discarded() || !c.is_object())
      return absl::InvalidArgumentError(
          absl::StrCat("'", config.string(), "' is not a JSON object"));
    if (c.contains("eos_token")) {
      if (c["eos_token"].is_string())
        eos = c["eos_token"].get<std::string>();
      else if (c["eos_token"].is_object() && c["eos_token"].contains("content") &&
               c["eos_token"]["content"].is_string())
        eos = c["eos_token"]["content"].get<std::string>();
    }
  }
  std::vector<std::string> candidates =
      eos.empty() ? std::vector<std::string>{"<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>"}
                  : std::vector<std::string>{eos};
  bool found = false;
  for (const std::string &c : candidates) {
    for (auto &[id, tok] : byId)
      if (tok == c) {
        t->eod_ = id;
        found = true;
        break;
      }
    if (found)
      break;
  }
  if (!found)
    return bad(eos.empty()
                   ? std::string("no end-of-document token: none of <|endoftext|>, </s>, "
                                 "<|end_of_text|>, <eos> is a token, and there is no "
                                 "tokenizer_config.json with an \"eos_token\" next to it")
                   : absl::StrCat("the eos_token '", eos, "' of '", config.string(),
                                  "' is not a token"));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

absl::Status HuggingFaceBpeTokenizer::tokenize(std::string_view text,
                                               std::vector<int32_t> &out) const {
  out.insert(out.end(), prefix_.begin(), prefix_.end());
  // Added tokens split the text first (leftmost, then longest); the pieces between them go
  // through the ByteLevel pre-tokenizer (with add_prefix_space, a space before a piece that does
  // not start with one) and BPE.
  std::string buf;
  auto plain = [&](std::string_view piece) -> absl::Status {
    if (piece.empty())
      return absl::OkStatus();
    if (addPrefixSpace_ && piece[0] != ' ') {
      buf.assign(" ").append(piece);
      return tokenizePlain(buf, out);
    }
    return tokenizePlain(piece, out);
  };
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const Added *hit = nullptr;
    for (const Added &a : addedByFirst_[uint8_t(text[i])])
      if (text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    if (absl::Status s = plain(text.substr(start, i - start)); !s.ok())
      return s;
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  if (absl::Status s = plain(text.substr(start)); !s.ok())
    return s;
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return absl::OkStatus();
}

std::string HuggingFaceBpeTokenizer::detokenize(const std::vector<int32_t> &ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (auto a = addedById_.find(id); a != addedById_.end()) {
      if (!a->second.special)
        bytes += a->second.content;
      continue;
    }
    appendTokenBytes(id, bytes);
  }
  return bytes;
}

//===----------------------------------------------------------------------===//
// SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer
//===----------------------------------------------------------------------===//

class SentencePieceTokenizer final : public Tokenizer {
public:
  enum class Kind { Megatron, Gpt, Llama2 };
  static absl::StatusOr<std::unique_ptr<Tokenizer>> create(const std::string &model, Kind kind);
  std::string name() const override {
    return kind_ == Kind::Megatron ? "SentencePieceTokenizer"
           : kind_ == Kind::Gpt    ? "GPTSentencePieceTokenizer"
                                   : "Llama2Tokenizer";
  }
  int64_t vocabSize() const override { return vocabSize_; }
  int32_t eod() const override { return eod_; }
  absl::Status tokenize(std::string_view text, std::vector<int32_t> &out) const override;
  std::string detokenize(const std::vector<int32_t> &ids) const override;

private:
  absl::Status encode(std::string_view text, std::vector<int32_t> &out) const;

  Kind kind_ = Kind::Megatron;
  SentencePieceModel sp_;
  /// SentencePieceTokenizer's special tokens in Megatron's order (CLS, SEP, EOD, MASK, the pad,
  /// BOS and EOS pieces), which split the text before encoding.
  std::vector<std::pair<std::string, int32_t>> special_;
  std::unordered_map<int32_t, size_t> specialById_;
  int64_t vocabSize_ = 0;
  int32_t eod_ = 0, bos_ = -1;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> SentencePieceTokenizer::create(const std::string &model,
                                                                          Kind kind) {
  std::string bytes;
  if (absl::Status s = readWholeFile(model, "--tokenizer-model", bytes); !s.ok())
    return s;
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->kind_ = kind;
  if (std::string error; !t->sp_.load(bytes, error))
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokenizer-model '", model, "' is not a SentencePiece model: ", error));
  const int n = t->sp_.pieceSize();
  t->vocabSize_ = n;
  if (kind != Kind::Megatron) {
    // GPTSentencePieceTokenizer and Llama2Tokenizer: the model's own pieces; EOD is its EOS.
    t->eod_ = t->sp_.eosId();
    t->bos_ = t->sp_.bosId();
    if (t->eod_ < 0 || t->eod_ >= n)
      return absl::InvalidArgumentError(absl::StrCat(
          "--tokenizer-model '", model, "' has no EOS piece (eos_id ", t->eod_, "), which ",
          t->name(), " uses as EOD"));
    if (kind == Kind::Llama2 && (t->bos_ < 0 || t->bos_ >= n))
      return absl::InvalidArgumentError(absl::StrCat(
          "--tokenizer-model '", model, "' has no BOS piece, which Llama2Tokenizer prepends"));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  // Megatron's _SentencePieceTokenizer: the special tokens are looked up among the pieces and
  // appended to the vocabulary when missing.
  std::unordered_map<std::string, int32_t> vocab;
  for (int i = 0; i < n; ++i)
    vocab.emplace(t->sp_.idToPiece(i), i);
  auto add = [&](const std::string &tok) {
    auto it = vocab.find(tok);
    if (it == vocab.end())
      it = vocab.emplace(tok, int32_t(t->vocabSize_++)).first;
    if (!t->specialById_.count(it->second)) {
      t->specialById_[it->second] = t->special_.size();
    }
    t->special_.push_back({tok, it->second});
    return it->second;
  };
  auto pieceOr = [&](int id, const char *fallback) {
    return id >= 0 && id < n ? t->sp_.idToPiece(id) : std::string(fallback);
  };
  add("<CLS>");
  add("<SEP>");
  t->eod_ = add("<EOD>");
  add("<MASK>");
  add(pieceOr(t->sp_.padId(), "<PAD>"));
  add(pieceOr(t->sp_.bosId(), "<BOS>"));
  add(pieceOr(t->sp_.eosId(), "<EOS>"));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

absl::Status SentencePieceTokenizer::encode(std::string_view text,
                                            std::vector<int32_t> &out) const {
  if (text.empty())
    return absl::OkStatus();
  std::vector<int> ids;
  if (std::string error; !sp_.encode(text, ids, error))
    return absl::InvalidArgumentError(absl::StrCat(name(), ": ", error));
  out.insert(out.end(), ids.begin(), ids.end());
  return absl::OkStatus();
}

absl::Status SentencePieceTokenizer::tokenize(std::string_view text,
                                              std::vector<int32_t> &out) const {
  if (kind_ == Kind::Llama2)
    out.push_back(bos_);
  if (kind_ != Kind::Megatron)
    return encode(text, out);
  // Megatron: repeatedly the earliest special token in the rest of the text (the first in
  // Megatron's order on a tie) becomes its id; the text before it is encoded.
  size_t idx = 0;
  while (true) {
    size_t best = std::string_view::npos;
    const std::pair<std::string, int32_t> *hit = nullptr;
    for (const auto &sp : special_) {
      size_t at = text.find(sp.first, idx);
      if (at != std::string_view::npos && (best == std::string_view::npos || at < best)) {
        best = at;
        hit = &sp;
      }
    }
    if (!hit)
      break;
    if (absl::Status s = encode(text.substr(idx, best - idx), out); !s.ok())
      return s;
    out.push_back(hit->second);
    idx = best + hit->first.size();
  }
  return encode(text.substr(idx), out);
}

std::string SentencePieceTokenizer::detokenize(const std::vector<int32_t> &ids) const {
  // Runs of the model's ids are decoded together; special tokens (and ids outside the model)
  // give no text.
  std::string text, piece;
  std::vector<int> run;
  auto flush = [&]() {
    if (run.empty())
      return;
    if (sp_.decode(run, piece))
      text += piece;
    run.clear();
  };
  const int n = sp_.pieceSize();
  for (int32_t id : ids) {
    bool special = kind_ == Kind::Megatron ? specialById_.count(id) > 0
                                           : id == eod_ || id == bos_;
    if (special || id < 0 || id >= n) {
      flush();
      continue;
    }
    run.push_back(id);
  }
  flush();
  return text;
}

} // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> createTokenizer(const TokenizerOptions &o) {
  if (o.type == "NullTokenizer") {
    if (o.vocabSize <= 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "NullTokenizer needs --vocab-size > 0 (the number of ids before EOD), got ", o.vocabSize));
    return std::unique_ptr<Tokenizer>(new NullTokenizer(o.vocabSize));
  }
  if (o.type == "ByteTokenizer")
    return std::unique_ptr<Tokenizer>(new ByteTokenizer());
  if (o.type == "GPT2BPETokenizer") {
    if (o.vocabFile.empty() || o.mergeFile.empty())
      return absl::InvalidArgumentError(
          "GPT2BPETokenizer needs --vocab-file (vocab.json) and --merge-file (merges.txt)");
    return Gpt2BpeTokenizer::create(o.vocabFile, o.mergeFile);
  }
  using SpKind = SentencePieceTokenizer::Kind;
  for (auto [type, kind] : {std::pair{"SentencePieceTokenizer", SpKind::Megatron},
                            std::pair{"GPTSentencePieceTokenizer", SpKind::Gpt},
                            std::pair{"Llama2Tokenizer", SpKind::Llama2}})
    if (o.type == type) {
      if (o.tokenizerModel.empty())
        return absl::InvalidArgumentError(
            absl::StrCat(type, " needs --tokenizer-model (a SentencePiece .model file)"));
      return SentencePieceTokenizer::create(o.tokenizerModel, kind);
    }
  if (o.type == "HuggingFaceTokenizer") {
    if (o.tokenizerModel.empty())
      return absl::InvalidArgumentError(
          "HuggingFaceTokenizer needs --tokenizer-model (a directory with tokenizer.json, or "
          "the tokenizer.json file)");
    return HuggingFaceBpeTokenizer::create(o.tokenizerModel);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --tokenizer-type '", o.type,
      "' (expected NullTokenizer, ByteTokenizer, GPT2BPETokenizer, SentencePieceTokenizer, "
      "GPTSentencePieceTokenizer, Llama2Tokenizer or HuggingFaceTokenizer)"));
}

absl::StatusOr<int64_t> paddedVocabSize(int64_t vocabSize, int64_t divisibleBy,
                                        int64_t tensorParallelSize) {
  if (vocabSize <= 0 || divisibleBy <= 0 || tensorParallelSize <= 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "vocabulary padding needs positive sizes, got vocab ", vocabSize,
        ", --make-vocab-size-divisible-by ", divisibleBy, ", tensor parallel ", tensorParallelSize));
  int64_t multiple = divisibleBy * tensorParallelSize;
  return (vocabSize + multiple - 1) / multiple * multiple;
}

absl::Status checkVocabAgainstPlan(const Tokenizer &tokenizer, int64_t planVocabSize,
                                   int64_t divisibleBy, int64_t tensorParallelSize) {
  absl::StatusOr<int64_t> mine = paddedVocabSize(tokenizer.vocabSize(), divisibleBy,
                                                 tensorParallelSize);
  if (!mine.ok())
    return mine.status();
  absl::StatusOr<int64_t> plan = paddedVocabSize(planVocabSize, divisibleBy, tensorParallelSize);
  if (!plan.ok())
    return plan.status();
  if (*mine != *plan)
    return absl::InvalidArgumentError(absl::StrCat(
        tokenizer.name(), "'s vocabulary of ", tokenizer.vocabSize(), " tokens pads to ", *mine,
        " (multiple of ", divisibleBy * tensorParallelSize, "), but the plan's vocabulary of ",
        planVocabSize, " pads to ", *plan, "; compile the plan with --vocab-size ",
        tokenizer.vocabSize()));
  return absl::OkStatus();
}

} // namespace trainc::rt::data
