//===- Dataset.cpp - Training data: byte tokenizer, splits, samples -------===//

#include "runtime/control/Dataset.h"

#include "runtime/core/Files.h"
#include "runtime/core/Philox.h"
#include "runtime/data/MegatronDatasets.h"
#include "runtime/data/Tokenizer.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

namespace trainc::rt::control {

namespace fs = std::filesystem;

namespace {

// Philox counter word 3 tags, so that the three random streams never share a counter.
constexpr uint32_t kTagDocShuffle = 0x646f6373u;   // "docs"
constexpr uint32_t kTagSampleOrder = 0x6f726472u;  // "ordr"
constexpr uint32_t kTagMockTokens = 0x6d6f636bu;   // "mock"
constexpr int64_t kMockEodPeriod = 97;
constexpr int kFeistelRounds = 8;

/// 64 random bits from Philox4x32-10 keyed by `seed` at counter (c0, c1, c2, c3).
uint64_t philox64(uint64_t seed, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
  uint32_t c[4] = {c0, c1, c2, c3};
  philox4x32(uint32_t(seed), uint32_t(seed >> 32), c);
  return (uint64_t(c[1]) << 32) | c[0];
}

/// The sample order of every epoch: global index -> sample of the unshuffled split. Within epoch e
/// it is a bijection on [0, n) keyed by (seed, split, e): a balanced Feistel network on the smallest
/// even number of bits covering n, with cycle walking back into [0, n). Stateless, so lookups are
/// thread-safe and cost no memory.
class EpochOrder {
public:
  EpochOrder(uint64_t seed, uint32_t split, int64_t n) : seed_(seed), split_(split), n_(n) {
    int bits = 2;
    while (bits < 64 && (uint64_t(1) << bits) < uint64_t(n))
      bits += 2;
    half_ = bits / 2;
    mask_ = (uint64_t(1) << half_) - 1;
  }

  int64_t operator()(int64_t index) const {
    // Euclidean division, so that a (contract-violating) negative index still lands in [0, n).
    int64_t epoch = index / n_, x = index % n_;
    if (x < 0) {
      x += n_;
      --epoch;
    }
    uint64_t y = uint64_t(x);
    do
      y = feistel(y, uint64_t(epoch));
    while (y >= uint64_t(n_));
    return int64_t(y);
  }

private:
  uint64_t feistel(uint64_t x, uint64_t epoch) const {
    uint64_t l = x >> half_, r = x & mask_;
    for (int k = 0; k < kFeistelRounds; ++k) {
      uint64_t f = philox64(seed_, uint32_t(r), uint32_t(k) | (split_ << 8), uint32_t(epoch),
                            kTagSampleOrder ^ uint32_t(epoch >> 32)) &
                   mask_;
      uint64_t t = l ^ f;
      l = r;
      r = t;
    }
    return (l << half_) | r;
  }

  uint64_t seed_;
  uint32_t split_;
  int64_t n_;
  int half_ = 1;
  uint64_t mask_ = 1;
};

/// A split's token stream cut into samples with stride seq (uint8 for byte tokens and EOD,
/// int32 for other tokenizers).
template <typename T> class TokenStreamDataset final : public Dataset {
public:
  TokenStreamDataset(std::vector<T> tokens, int64_t seqLength, uint64_t seed, uint32_t split,
                     int32_t eod)
      : tokens_(std::move(tokens)), seq_(seqLength),
        n_((int64_t(tokens_.size()) - 1) / seqLength), order_(seed, split, n_), eod_(eod) {}

  int64_t numSamples() const override { return n_; }
  int64_t seqLength() const override { return seq_; }
  int32_t eodToken() const override { return eod_; }
  void sample(int64_t index, int32_t *tokens) const override {
    const T *p = tokens_.data() + order_(index) * seq_;
    for (int64_t j = 0; j <= seq_; ++j)
      tokens[j] = int32_t(p[j]);
  }

private:
  std::vector<T> tokens_;
  int64_t seq_, n_;
  EpochOrder order_;
  int32_t eod_;
};

/// Mock data: a virtual stream whose token at position p is EOD when p % 97 == 96 and otherwise
/// uniform in [1, vocab) from Philox keyed by (seed, p, split); nothing is stored.
class MockDataset final : public Dataset {
public:
  MockDataset(int64_t numSamples, int64_t seqLength, int64_t vocabSize, uint64_t seed,
              uint32_t split)
      : n_(numSamples), seq_(seqLength), vocab_(vocabSize), seed_(seed), split_(split),
        order_(seed, split, numSamples) {}

  int64_t numSamples() const override { return n_; }
  int64_t seqLength() const override { return seq_; }
  void sample(int64_t index, int32_t *tokens) const override {
    int64_t start = order_(index) * seq_;
    for (int64_t j = 0; j <= seq_; ++j)
      tokens[j] = token(start + j);
  }

private:
  int32_t token(int64_t p) const {
    if (p % kMockEodPeriod == kMockEodPeriod - 1)
      return kEodToken;
    uint64_t r = philox64(seed_, uint32_t(p), uint32_t(uint64_t(p) >> 32), split_, kTagMockTokens);
    return int32_t(1 + r % uint64_t(vocab_ - 1));
  }

  int64_t n_, seq_, vocab_;
  uint64_t seed_;
  uint32_t split_;
  EpochOrder order_;
};

/// Raw split weights {train, valid, test} (not normalised; missing ones 0).
absl::StatusOr<std::array<double, 3>> parseSplitWeights(const std::string &split) {
  auto bad = [&](const std::string &why) {
    return absl::InvalidArgumentError(absl::StrCat("--split '", split, "' does not parse: ", why));
  };
  std::vector<double> w;
  size_t start = 0;
  while (true) {
    size_t sep = split.find_first_of(",/", start);
    std::string part = split.substr(start, sep == std::string::npos ? std::string::npos
                                                                     : sep - start);
    size_t b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
    part = b == std::string::npos ? std::string() : part.substr(b, e - b + 1);
    if (part.empty())
      return bad(absl::StrCat("weight ", w.size() + 1, " is empty"));
    char *end = nullptr;
    errno = 0;
    double v = std::strtod(part.c_str(), &end);
    if (end != part.c_str() + part.size() || errno == ERANGE || !std::isfinite(v) || v < 0)
      return bad(absl::StrCat("'", part, "' is not a non-negative number"));
    w.push_back(v);
    if (sep == std::string::npos)
      break;
    start = sep + 1;
  }
  if (w.size() > 3)
    return bad(absl::StrCat(w.size(), " weights, at most 3 (train, valid, test)"));
  std::array<double, 3> out = {0.0, 0.0, 0.0};
  std::copy(w.begin(), w.end(), out.begin());
  double sum = out[0] + out[1] + out[2];
  if (!std::isfinite(sum))
    return bad("the weights' sum overflows");
  if (sum <= 0.0)
    return absl::InvalidArgumentError(absl::StrCat("--split '", split, "' weights sum to 0"));
  return out;
}

/// Megatron's contiguous split ranges over `count` elements: split s is [bound[s], bound[s + 1])
/// with bound[s] = round(cumulative weight before s / sum * count), round half-to-even as Python's
/// round() (megatron/core/datasets/blended_megatron_dataset_builder.py, utils.py). Cumulative sums
/// of the raw weights make a split followed only by zero weights end exactly at `count`.
std::array<int64_t, 4> splitBounds(const std::array<double, 3> &w, int64_t count) {
  double sum = w[0] + w[1] + w[2], cum = 0.0;
  std::array<int64_t, 4> bound = {0, 0, 0, count};
  for (int s = 0; s < 3; ++s) {
    cum += w[s];
    bound[s + 1] = std::min(count, int64_t(std::nearbyint(cum / sum * double(count))));
  }
  bound[3] = count;
  return bound;
}

/// All documents of all files: their bytes back to back, and (offset, length) of each.
struct Corpus {
  std::vector<uint8_t> bytes;
  std::vector<std::pair<int64_t, int64_t>> docs;
};

bool isBlankLine(const std::string &text, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    char c = text[i];
    if (c != ' ' && c != '\t' && c != '\r' && c != '\v' && c != '\f')
      return false;
  }
  return true;
}

/// Drops NUL bytes, then appends the file's documents (maximal runs of non-blank lines, without
/// the last line's line break) to the corpus.
void appendDocuments(std::string &text, Corpus &corpus) {
  text.erase(std::remove(text.begin(), text.end(), '\0'), text.end());
  size_t docBegin = std::string::npos, docEnd = 0;
  auto close = [&] {
    if (docBegin == std::string::npos)
      return;
    corpus.docs.emplace_back(int64_t(corpus.bytes.size()), int64_t(docEnd - docBegin));
    corpus.bytes.insert(corpus.bytes.end(), text.begin() + docBegin, text.begin() + docEnd);
    docBegin = std::string::npos;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    size_t lineEnd = nl == std::string::npos ? text.size() : nl;
    if (isBlankLine(text, pos, lineEnd)) {
      close();
    } else {
      if (docBegin == std::string::npos)
        docBegin = pos;
      docEnd = text[lineEnd - 1] == '\r' ? lineEnd - 1 : lineEnd;
    }
    pos = nl == std::string::npos ? text.size() : nl + 1;
  }
  close();
}

/// Expands the data paths into the files to read, in order, each real file once.
absl::StatusOr<std::vector<std::string>> collectFiles(const std::vector<std::string> &paths) {
  std::vector<std::string> files;
  std::set<std::string> seen;
  auto add = [&](const fs::path &p) {
    std::error_code ec;
    fs::path real = fs::canonical(p, ec);
    if (seen.insert(ec ? p.string() : real.string()).second)
      files.push_back(p.string());
  };
  for (const std::string &path : paths) {
    std::error_code ec;
    fs::file_status st = fs::status(path, ec);
    if (st.type() == fs::file_type::not_found || path.empty())
      return absl::NotFoundError(absl::StrCat("data path '", path, "' does not exist"));
    if (ec)
      return absl::InvalidArgumentError(
          absl::StrCat("cannot access data path '", path, "': ", ec.message()));
    if (fs::is_regular_file(st)) {
      add(path);
    } else if (fs::is_directory(st)) {
      std::vector<fs::path> entries;
      fs::directory_iterator it(path, ec);
      for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        std::error_code ec2;
        if (fs::is_regular_file(it->path(), ec2)) // follows symlinks
          entries.push_back(it->path());
      }
      if (ec)
        return absl::InvalidArgumentError(
            absl::StrCat("cannot list data directory '", path, "': ", ec.message()));
      if (entries.empty())
        return absl::InvalidArgumentError(
            absl::StrCat("data directory '", path, "' contains no regular files"));
      std::sort(entries.begin(), entries.end(), [](const fs::path &a, const fs::path &b) {
        return a.filename().string() < b.filename().string();
      });
      for (const fs::path &e : entries)
        add(e);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("data path '", path, "' is neither a regular file nor a directory"));
    }
  }
  return files;
}

absl::Status readFile(const std::string &path, std::string &out) {
  if (absl::Status s = checkRegularFile(path, "data"); !s.ok())
    return s;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::InvalidArgumentError(absl::StrCat("cannot read data file '", path, "'"));
  out.clear();
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0)
    out.append(buf, size_t(in.gcount()));
  if (in.bad())
    return absl::InvalidArgumentError(absl::StrCat("error reading data file '", path, "'"));
  return absl::OkStatus();
}

std::unique_ptr<Dataset> &slot(Datasets &d, int s) {
  return s == 0 ? d.train : s == 1 ? d.valid : d.test;
}

std::string joinPaths(const std::vector<std::string> &paths) {
  std::string out;
  for (const std::string &p : paths)
    absl::StrAppend(&out, out.empty() ? "" : ", ", "'", p, "'");
  return out;
}

} // namespace

absl::StatusOr<std::vector<double>> parseSplit(const std::string &split) {
  absl::StatusOr<std::array<double, 3>> w = parseSplitWeights(split);
  if (!w.ok())
    return w.status();
  double sum = (*w)[0] + (*w)[1] + (*w)[2];
  return std::vector<double>{(*w)[0] / sum, (*w)[1] / sum, (*w)[2] / sum};
}

absl::StatusOr<Datasets> buildDatasets(const DataOptions &options) {
  bool perSplit = !options.splitDataPath[0].empty() || !options.splitDataPath[1].empty() ||
                  !options.splitDataPath[2].empty();
  if (perSplit && !options.mockData) {
    if (!options.dataPath.empty())
      return absl::InvalidArgumentError(
          "give either --data-path or --train-data-path / --valid-data-path / --test-data-path, "
          "not both (as Megatron)");
    return data::buildIndexedDatasets(options);
  }
  if (!options.mockData && options.dataPath.empty())
    return absl::InvalidArgumentError(
        "no training data: give --data-path (files or directories) or --mock-data");
  if (options.seqLength <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("seq_length must be > 0, got ", options.seqLength));
  absl::StatusOr<std::array<double, 3>> weights = parseSplitWeights(options.split);
  if (!weights.ok())
    return weights.status();
  const int64_t seq = options.seqLength;
  Datasets out;

  if (options.mockData) {
    if (options.vocabSize < 2)
      return absl::InvalidArgumentError(absl::StrCat(
          "vocabulary size ", options.vocabSize, " is too small for mock data (need >= 2)"));
    std::array<int64_t, 4> bound = splitBounds(*weights, kMockSamplesPerEpoch);
    for (int s = 0; s < 3; ++s) {
      int64_t n = bound[s + 1] - bound[s];
      if ((*weights)[s] > 0.0 && n > 0)
        slot(out, s) = std::make_unique<MockDataset>(n, seq, options.vocabSize, options.seed,
                                                     uint32_t(s));
    }
    return out;
  }

  if (data::isIndexedDataPath(options.dataPath))
    return data::buildIndexedDatasets(options);

  const data::Tokenizer *tokenizer = options.tokenizer;
  if (tokenizer && tokenizer->vocabSize() > options.vocabSize)
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", tokenizer->name(), "'s vocabulary of ", tokenizer->vocabSize(),
        " tokens is larger than the plan's vocabulary of ", options.vocabSize));
  if (!tokenizer && options.vocabSize < kByteVocabSize)
    return absl::InvalidArgumentError(absl::StrCat(
        "vocabulary size ", options.vocabSize, " is smaller than the byte tokenizer's ",
        kByteVocabSize, " tokens; text data needs a vocabulary of at least ", kByteVocabSize));

  absl::StatusOr<std::vector<std::string>> files = collectFiles(options.dataPath);
  if (!files.ok())
    return files.status();
  Corpus corpus;
  {
    std::string text;
    for (const std::string &f : *files) {
      if (absl::Status st = readFile(f, text); !st.ok())
        return st;
      appendDocuments(text, corpus);
    }
  }
  if (corpus.docs.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("empty corpus: the ", files->size(), " data file(s) under --data-path ",
                     joinPaths(options.dataPath), " contain no text"));

  const int64_t numDocs = int64_t(corpus.docs.size());
  // With a tokenizer, each document's ids (EOD not included); else its bytes are its tokens.
  std::vector<std::vector<int32_t>> docTokens;
  if (tokenizer) {
    docTokens.resize(size_t(numDocs));
    for (int64_t d = 0; d < numDocs; ++d) {
      auto [offset, length] = corpus.docs[size_t(d)];
      std::string_view text(reinterpret_cast<const char *>(corpus.bytes.data()) + offset,
                            size_t(length));
      if (absl::Status st = tokenizer->tokenize(text, docTokens[size_t(d)]); !st.ok())
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizing document ", d, " of the text data: ", st.message()));
    }
  }
  auto docLength = [&](int64_t d) {
    return tokenizer ? int64_t(docTokens[size_t(d)].size()) : corpus.docs[size_t(d)].second;
  };
  std::array<int64_t, 4> bound = splitBounds(*weights, numDocs);
  std::array<std::vector<int64_t>, 3> order;
  std::array<int64_t, 3> numTokens = {0, 0, 0};
  for (int s = 0; s < 3; ++s) {
    if ((*weights)[s] <= 0.0)
      continue;
    std::vector<int64_t> &docs = order[size_t(s)];
    for (int64_t d = bound[s]; d < bound[s + 1]; ++d) {
      docs.push_back(d);
      numTokens[size_t(s)] += docLength(d) + 1;
    }
    if (s == 0 && numTokens[0] < seq + 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "train split has ", numTokens[0], " tokens (", docs.size(), " of ", numDocs,
          " documents, --split '", options.split, "'), fewer than seq_length + 1 = ", seq + 1));
    // Fisher-Yates with Philox keyed by (seed, split): the same on every standard library.
    for (int64_t i = int64_t(docs.size()) - 1; i > 0; --i) {
      uint64_t r = philox64(options.seed, uint32_t(i), uint32_t(uint64_t(i) >> 32), uint32_t(s),
                            kTagDocShuffle);
      std::swap(docs[size_t(i)], docs[size_t(r % uint64_t(i + 1))]);
    }
  }
  for (int s = 0; s < 3; ++s) {
    if (order[size_t(s)].empty() || numTokens[size_t(s)] < seq + 1)
      continue;
    if (tokenizer) {
      std::vector<int32_t> stream;
      stream.reserve(size_t(numTokens[size_t(s)]));
      for (int64_t d : order[size_t(s)]) {
        stream.insert(stream.end(), docTokens[size_t(d)].begin(), docTokens[size_t(d)].end());
        stream.push_back(tokenizer->eod());
      }
      slot(out, s) = std::make_unique<TokenStreamDataset<int32_t>>(
          std::move(stream), seq, options.seed, uint32_t(s), tokenizer->eod());
      continue;
    }
    std::vector<uint8_t> stream;
    stream.reserve(size_t(numTokens[size_t(s)]));
    for (int64_t d : order[size_t(s)]) {
      auto [offset, length] = corpus.docs[size_t(d)];
      stream.insert(stream.end(), corpus.bytes.begin() + offset,
                    corpus.bytes.begin() + offset + length);
      stream.push_back(uint8_t(kEodToken));
    }
    slot(out, s) = std::make_unique<TokenStreamDataset<uint8_t>>(std::move(stream), seq,
                                                                 options.seed, uint32_t(s),
                                                                 kEodToken);
  }
  return out;
}

} // namespace trainc::rt::control
