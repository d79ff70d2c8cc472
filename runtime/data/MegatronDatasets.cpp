//===- MegatronDatasets.cpp - train/valid/test GPTDatasets from .bin/.idx -===//

#include "runtime/data/MegatronDatasets.h"

#include "runtime/data/BlendedDataset.h"
#include "runtime/data/GPTDataset.h"
#include "runtime/data/IndexCache.h"
#include "runtime/data/IndexedDataset.h"
#include "runtime/data/Tokenizer.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <filesystem>
#include <optional>

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

namespace {

const char *kSplitNames[3] = {"train", "valid", "test"};

/// One --data-path dataset: its files and its split ranges.
struct Source {
  std::string prefix;
  std::shared_ptr<const IndexedDataset> data;
  std::vector<int32_t> lengths;
  std::array<std::array<int64_t, 2>, 3> ranges;
};

absl::StatusOr<Source> openSource(const std::string &prefix, const std::array<double, 3> &weights) {
  if (endsWith(prefix, ".idx") || endsWith(prefix, ".bin"))
    return absl::InvalidArgumentError(absl::StrCat(
        "--data-path '", prefix, "' names a file of an indexed dataset; give its prefix '",
        prefix.substr(0, prefix.size() - 4), "' (without .bin/.idx), as Megatron does"));
  absl::StatusOr<std::unique_ptr<IndexedDataset>> opened = IndexedDataset::open(prefix);
  if (!opened.ok())
    return opened.status();
  Source src;
  src.prefix = prefix;
  src.data = std::shared_ptr<const IndexedDataset>(std::move(*opened));
  src.lengths = src.data->sequenceLengths();
  src.ranges = megatronSplitRanges(weights, src.data->numSequences());
  return src;
}

/// Split `s` of `src` as a GPTDataset of `numSamples` samples (0: one epoch); null when the split
/// is empty or (valid/test) has fewer tokens than one sample.
absl::StatusOr<std::unique_ptr<GptDataset>> buildSplit(const Source &src, int s,
                                                       int64_t numSamples,
                                                       const control::DataOptions &o,
                                                       const std::array<double, 3> &weights,
                                                       std::vector<std::string> &notes) {
  auto [begin, end] = src.ranges[size_t(s)];
  if (begin == end) {
    if (s == 0 && weights[0] > 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "the train split of '", src.prefix, "' (", src.data->numSequences(),
          " sequences, --split '", o.split, "') has no sequences"));
    return std::unique_ptr<GptDataset>();
  }
  int64_t tokens = 0;
  for (int64_t i = begin; i < end; ++i)
    tokens += src.lengths[size_t(i)];
  if (tokens < o.seqLength + 1) {
    if (s == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "the train split of '", src.prefix, "' has ", tokens, " tokens (sequences [", begin,
          ", ", end, "), --split '", o.split, "'), fewer than seq_length + 1 = ",
          o.seqLength + 1));
    return std::unique_ptr<GptDataset>();
  }
  // The indices from the cache when it holds them for exactly these inputs; else built and
  // saved (a corrupt file is rebuilt and replaced).
  IndexCacheEntry entry = gptIndexCacheEntry(o.dataCachePath, *src.data, kSplitNames[s], begin,
                                             end, numSamples, o.seqLength, uint32_t(o.seed));
  absl::StatusOr<std::optional<GptIndices>> cached = loadGptIndices(entry, begin, end);
  if (cached.ok() && cached->has_value()) {
    notes.push_back(absl::StrCat("GPTDataset ", kSplitNames[s], " indices of '", src.prefix,
                                 "': loaded from cache '", entry.path, "'"));
    return std::make_unique<GptDataset>(src.data, std::move(**cached), o.seqLength, o.vocabSize,
                                        o.tokenizer ? o.tokenizer->eod() : -1, kSplitNames[s]);
  }
  absl::StatusOr<GptIndices> g =
      buildGptIndices(src.lengths, begin, end, numSamples, o.seqLength, uint32_t(o.seed));
  if (!g.ok())
    return g.status();
  std::string what = cached.ok() ? "built and saved to cache"
                                 : absl::StrCat(cached.status().message(), "; rebuilt and saved to");
  if (absl::Status w = saveGptIndices(entry, *g); !w.ok())
    notes.push_back(absl::StrCat("GPTDataset ", kSplitNames[s], " indices of '", src.prefix,
                                 "': built in memory (", w.message(),
                                 "; --data-cache-path names a writable directory)"));
  else
    notes.push_back(absl::StrCat("GPTDataset ", kSplitNames[s], " indices of '", src.prefix,
                                 "': ", what, " '", entry.path, "'"));
  return std::make_unique<GptDataset>(src.data, std::move(*g), o.seqLength, o.vocabSize,
                                      o.tokenizer ? o.tokenizer->eod() : -1, kSplitNames[s]);
}

/// Megatron's BlendedDataset over one split's GPTDatasets.
class BlendedGptDataset final : public control::Dataset {
public:
  BlendedGptDataset(std::vector<std::unique_ptr<GptDataset>> parts, BlendingIndices indices,
                    int64_t seq, int32_t eod)
      : parts_(std::move(parts)), b_(std::move(indices)), seq_(seq), eod_(eod) {}
  int64_t numSamples() const override { return int64_t(b_.datasetIndex.size()); }
  int64_t seqLength() const override { return seq_; }
  int32_t eodToken() const override { return eod_; }
  void sample(int64_t index, int32_t *tokens) const override {
    if (!readSample(index, tokens).ok())
      std::fill(tokens, tokens + seq_ + 1, 0);
  }
  absl::Status readSample(int64_t index, int32_t *tokens) const override {
    int64_t n = numSamples(), i = index % n;
    if (i < 0)
      i += n;
    return parts_[size_t(b_.datasetIndex[size_t(i)])]->readSample(
        b_.datasetSampleIndex[size_t(i)], tokens);
  }

private:
  std::vector<std::unique_ptr<GptDataset>> parts_;
  BlendingIndices b_;
  int64_t seq_;
  int32_t eod_;
};

} // namespace

namespace {

/// Split `s` of the blend `prefixes` / `blendWeights` (empty: by size): one prefix without weight
/// is its GPTDataset, else Megatron's BlendedDataset of the prefixes' GPTDatasets. `splitWeights`
/// are the --split weights the sources' ranges come from (per-split blends: all in split s).
absl::StatusOr<std::unique_ptr<control::Dataset>>
buildBlendSplit(const std::vector<Source> &sources, const std::vector<double> &blendWeights,
                int s, const control::DataOptions &o, const std::array<double, 3> &splitWeights,
                std::vector<std::string> &notes) {
  int64_t n = o.numSamples[size_t(s)];
  if (sources.size() == 1 && blendWeights.empty()) {
    absl::StatusOr<std::unique_ptr<GptDataset>> ds =
        buildSplit(sources[0], s, n, o, splitWeights, notes);
    if (!ds.ok())
      return ds.status();
    return std::unique_ptr<control::Dataset>(std::move(*ds));
  }
  // blended_megatron_dataset_builder.py: with weights, dataset d's split holds the target
  // ceil(N * w_d) plus the mid-level surplus and the blend sum_d ceil(N * w_d); without, every
  // split one epoch, weighted by its sample count, and the blend min(N, their sum).
  if (splitWeights[size_t(s)] == 0 || (n == 0 && s > 0))
    return std::unique_ptr<control::Dataset>(); // no such split, or none of it is read
  std::vector<double> w = blendWeights.empty() ? std::vector<double>()
                                               : normalizeWeights(blendWeights);
  std::vector<int64_t> target, buffer;
  if (!w.empty()) {
    target = blendSizesPerDataset(w, n, 0.0);
    buffer = blendSizesPerDataset(w, n, kMidLevelDatasetSurplus);
  }
  std::vector<std::unique_ptr<GptDataset>> parts;
  std::vector<double> sizes;
  for (size_t d = 0; d < sources.size(); ++d) {
    absl::StatusOr<std::unique_ptr<GptDataset>> ds =
        buildSplit(sources[d], s, w.empty() ? 0 : buffer[d], o, splitWeights, notes);
    if (!ds.ok())
      return ds.status();
    // A valid/test split that some dataset cannot fill is not built (as for one dataset);
    // buildSplit already refused such a train split.
    if (!*ds)
      return std::unique_ptr<control::Dataset>();
    sizes.push_back(double((*ds)->numSamples()));
    parts.push_back(std::move(*ds));
  }
  int64_t size = 0;
  if (!w.empty()) {
    for (int64_t t : target)
      size += t;
  } else {
    for (double x : sizes)
      size += int64_t(x);
    if (n > 0)
      size = std::min(size, n);
  }
  // BlendedDataset normalises the weights again (for bitwise equality with Megatron-LM).
  BlendingIndices b = buildBlendingIndices(normalizeWeights(w.empty() ? sizes : w), size);
  std::vector<int64_t> used(parts.size(), 0);
  for (int64_t i = 0; i < size; ++i)
    used[size_t(b.datasetIndex[size_t(i)])] = b.datasetSampleIndex[size_t(i)] + 1;
  for (size_t d = 0; d < parts.size(); ++d)
    if (used[d] > parts[d]->numSamples())
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", kSplitNames[s], " blend takes ", used[d], " samples of '", sources[d].prefix,
          "', which has ", parts[d]->numSamples(), " (Megatron would fail with an IndexError)"));
  return std::unique_ptr<control::Dataset>(std::make_unique<BlendedGptDataset>(
      std::move(parts), std::move(b), o.seqLength, o.tokenizer ? o.tokenizer->eod() : -1));
}

} // namespace

absl::StatusOr<control::Datasets> buildIndexedDatasets(const control::DataOptions &o) {
  if (o.seqLength <= 0)
    return absl::InvalidArgumentError(absl::StrCat("seq_length must be > 0, got ", o.seqLength));
  if (o.seed > 0xffffffffULL)
    return absl::InvalidArgumentError(absl::StrCat(
        "--seed ", o.seed, " is outside numpy's RandomState range [0, 2^32) that Megatron's "
        "GPTDataset uses"));
  control::Datasets out;
  auto slot = [&](int s) -> std::unique_ptr<control::Dataset> & {
    return s == 0 ? out.train : s == 1 ? out.valid : out.test;
  };
  bool perSplit = !o.splitDataPath[0].empty() || !o.splitDataPath[1].empty() ||
                  !o.splitDataPath[2].empty();
  if (perSplit) {
    // Megatron's blend_per_split: split s reads all sequences of its own datasets.
    static const char *flags[3] = {"--train-data-path", "--valid-data-path", "--test-data-path"};
    if (o.splitDataPath[0].empty())
      return absl::InvalidArgumentError(
          "--valid-data-path / --test-data-path need --train-data-path too");
    for (int s = 0; s < 3; ++s) {
      if (o.splitDataPath[size_t(s)].empty())
        continue;
      absl::StatusOr<Blend> blend = parseBlend(o.splitDataPath[size_t(s)]);
      if (!blend.ok())
        return absl::InvalidArgumentError(absl::StrCat(flags[s], ": ", blend.status().message()));
      std::array<double, 3> only = {0, 0, 0};
      only[size_t(s)] = 1;
      std::vector<Source> sources;
      for (const std::string &prefix : blend->prefixes) {
        absl::StatusOr<Source> src = openSource(prefix, only);
        if (!src.ok())
          return src.status();
        sources.push_back(std::move(*src));
      }
      absl::StatusOr<std::unique_ptr<control::Dataset>> ds =
          buildBlendSplit(sources, blend->weights, s, o, only, out.notes);
      if (!ds.ok())
        return ds.status();
      slot(s) = std::move(*ds);
    }
    return out;
  }
  absl::StatusOr<std::array<double, 3>> weights = parseMegatronSplit(o.split);
  if (!weights.ok())
    return weights.status();
  absl::StatusOr<Blend> blend = parseBlend(o.dataPath);
  if (!blend.ok())
    return blend.status();
  std::vector<Source> sources;
  for (const std::string &prefix : blend->prefixes) {
    absl::StatusOr<Source> src = openSource(prefix, *weights);
    if (!src.ok())
      return src.status();
    sources.push_back(std::move(*src));
  }
  for (int s = 0; s < 3; ++s) {
    absl::StatusOr<std::unique_ptr<control::Dataset>> ds =
        buildBlendSplit(sources, blend->weights, s, o, *weights, out.notes);
    if (!ds.ok())
      return ds.status();
    slot(s) = std::move(*ds);
  }
  if (!out.train && (*weights)[0] > 0)
    return absl::InvalidArgumentError("the train blend is empty");
  return out;
}

} // namespace trainc::rt::data
