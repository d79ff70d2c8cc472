//===- Tokenizer.cpp - Megatron's tokenizers behind one interface ---------===//

#include "runtime/data/Tokenizer.h"

#include "absl/strings/str_cat.h"

#include <nlohmann/json.hpp>
#include <unicode/uchar.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
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

class Gpt2BpeTokenizer final : public Tokenizer {
public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> create(const std::string &vocabFile,
                                                           const std::string &mergeFile);
  std::string name() const override { return "GPT2BPETokenizer"; }
  int64_t vocabSize() const override { return int64_t(decoder_.size()); }
  int32_t eod() const override { return eod_; }
  absl::Status tokenize(std::string_view text, std::vector<int32_t> &out) const override;
  std::string detokenize(const std::vector<int32_t> &ids) const override;

private:
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
};

absl::StatusOr<std::unique_ptr<Tokenizer>>
Gpt2BpeTokenizer::create(const std::string &vocabFile, const std::string &mergeFile) {
  std::unique_ptr<Gpt2BpeTokenizer> t(new Gpt2BpeTokenizer());
  // bytes_to_unicode: printable Latin-1 bytes keep their code point, the others map to 256 + n.
  t->byteDecoder_.fill(-1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = printable ? b : 256 + n++;
    appendUtf8(uint32_t(cp), t->byteEncoder_[size_t(b)]);
    t->byteDecoder_[size_t(cp)] = int16_t(b);
  }

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

absl::Status Gpt2BpeTokenizer::bpe(std::string_view piece, std::vector<int32_t> &out) const {
  std::vector<std::string> word;
  word.reserve(piece.size());
  for (char c : piece)
    word.push_back(byteEncoder_[uint8_t(c)]);
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
          absl::StrCat("GPT2BPETokenizer: the BPE piece '", w,
                       "' is not in vocab.json (vocab and merges files do not match)"));
    out.push_back(it->second);
  }
  return absl::OkStatus();
}

absl::Status Gpt2BpeTokenizer::tokenize(std::string_view text, std::vector<int32_t> &out) const {
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

std::string Gpt2BpeTokenizer::detokenize(const std::vector<int32_t> &ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= decoder_.size())
      continue;
    const std::string &tok = decoder_[size_t(id)];
    for (size_t i = 0; i < tok.size();) {
      int32_t cp;
      i += size_t(decodeUtf8(tok, i, cp));
      if (cp >= 0 && cp < 512 && byteDecoder_[size_t(cp)] >= 0)
        bytes += char(byteDecoder_[size_t(cp)]);
    }
  }
  return bytes;
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
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --tokenizer-type '", o.type,
                   "' (expected NullTokenizer, ByteTokenizer or GPT2BPETokenizer)"));
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
