//===- MegatronDatasets.cpp - train/valid/test GPTDatasets from .bin/.idx -===//

#include "runtime/data/MegatronDatasets.h"

#include "runtime/data/GPTDataset.h"
#include "runtime/data/IndexedDataset.h"
#include "runtime/data/Tokenizer.h"

#include "absl/strings/str_cat.h"

#include <filesystem>

namespace trainc::rt::data {

namespace fs = std::filesystem;

namespace {

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class GptDataset final : public control::Dataset {
public:
  GptDataset(std::shared_ptr<const IndexedDataset> data, GptIndices indices, int64_t seq,
             int64_t vocab, int32_t eod, const char *split)
      : data_(std::move(data)), g_(std::move(indices)), seq_(seq), vocab_(vocab), eod_(eod),
        split_(split) {}

  int64_t numSamples() const override { return g_.numSamples(); }
  int64_t seqLength() const override { return seq_; }
  int32_t eodToken() const override { return eod_; }
  void sample(int64_t index, int32_t *tokens) const override {
    if (!readSample(index, tokens).ok())
      std::fill(tokens, tokens + seq_ + 1, 0);
  }
  absl::Status readSample(int64_t index, int32_t *tokens) const override {
    int64_t n = g_.numSamples(), i = index % n;
    if (absl::Status s = gptSample(*data_, g_, seq_, i < 0 ? i + n : i, tokens); !s.ok())
      return s;
    for (int64_t j = 0; j <= seq_; ++j)
      if (tokens[j] >= vocab_)
        return absl::InvalidArgumentError(absl::StrCat(
            "'", data_->prefix(), ".bin': ", split_, " sample ", index, " has token ", tokens[j],
            ", outside the plan's vocabulary of ", vocab_, " (was the data preprocessed with "
            "another tokenizer?)"));
    return absl::OkStatus();
  }

private:
  std::shared_ptr<const IndexedDataset> data_;
  GptIndices g_;
  int64_t seq_, vocab_;
  int32_t eod_;
  const char *split_;
};

} // namespace

bool isIndexedDataPath(const std::vector<std::string> &dataPath) {
  for (const std::string &p : dataPath) {
    std::error_code ec;
    if (fs::is_regular_file(p + ".idx", ec))
      return true;
    if ((endsWith(p, ".idx") || endsWith(p, ".bin")) &&
        fs::is_regular_file(p.substr(0, p.size() - 4) + ".idx", ec))
      return true;
  }
  return false;
}

absl::StatusOr<control::Datasets> buildIndexedDatasets(const control::DataOptions &o) {
  if (o.dataPath.size() != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "--data-path has ", o.dataPath.size(), " entries; with .bin/.idx data trainc reads one "
        "dataset prefix (blending several datasets is not supported yet)"));
  const std::string &prefix = o.dataPath[0];
  if (endsWith(prefix, ".idx") || endsWith(prefix, ".bin"))
    return absl::InvalidArgumentError(absl::StrCat(
        "--data-path '", prefix, "' names a file of an indexed dataset; give its prefix '",
        prefix.substr(0, prefix.size() - 4), "' (without .bin/.idx), as Megatron does"));
  if (o.seqLength <= 0)
    return absl::InvalidArgumentError(absl::StrCat("seq_length must be > 0, got ", o.seqLength));
  if (o.seed > 0xffffffffULL)
    return absl::InvalidArgumentError(absl::StrCat(
        "--seed ", o.seed, " is outside numpy's RandomState range [0, 2^32) that Megatron's "
        "GPTDataset uses"));
  absl::StatusOr<std::array<double, 3>> weights = parseMegatronSplit(o.split);
  if (!weights.ok())
    return weights.status();
  absl::StatusOr<std::unique_ptr<IndexedDataset>> opened = IndexedDataset::open(prefix);
  if (!opened.ok())
    return opened.status();
  std::shared_ptr<const IndexedDataset> data(std::move(*opened));
  std::vector<int32_t> lengths = data->sequenceLengths();
  auto ranges = megatronSplitRanges(*weights, data->numSequences());
  static const char *names[3] = {"train", "valid", "test"};
  control::Datasets out;
  for (int s = 0; s < 3; ++s) {
    auto [begin, end] = ranges[size_t(s)];
    if (begin == end) {
      if (s == 0 && (*weights)[0] > 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "the train split of '", prefix, "' (", data->numSequences(), " sequences, --split '",
            o.split, "') has no sequences"));
      continue;
    }
    int64_t tokens = 0;
    for (int64_t i = begin; i < end; ++i)
      tokens += lengths[size_t(i)];
    if (tokens < o.seqLength + 1) {
      if (s == 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "the train split of '", prefix, "' has ", tokens, " tokens (sequences [", begin, ", ",
            end, "), --split '", o.split, "'), fewer than seq_length + 1 = ", o.seqLength + 1));
      continue;
    }
    absl::StatusOr<GptIndices> g = buildGptIndices(lengths, begin, end, o.numSamples[size_t(s)],
                                                   o.seqLength, uint32_t(o.seed));
    if (!g.ok())
      return g.status();
    auto ds = std::make_unique<GptDataset>(data, std::move(*g), o.seqLength, o.vocabSize,
                                           o.tokenizer ? o.tokenizer->eod() : -1, names[s]);
    (s == 0 ? out.train : s == 1 ? out.valid : out.test) = std::move(ds);
  }
  return out;
}

} // namespace trainc::rt::data
