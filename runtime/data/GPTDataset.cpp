//===- GPTDataset.cpp - Megatron's GPTDataset sample order over .bin/.idx -===//

#include "runtime/data/GPTDataset.h"

#include "absl/strings/str_cat.h"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace trainc::rt::data {

uint64_t NumpyRandomState::interval(uint64_t max) {
  if (max == 0)
    return 0;
  uint64_t mask = max;
  for (int s = 1; s <= 32; s *= 2)
    mask |= mask >> s;
  uint64_t value;
  if (max <= 0xffffffffULL) {
    while ((value = (uint64_t(mt_()) & mask)) > max) {
    }
  } else {
    while (true) {
      uint64_t hi = mt_(), lo = mt_();
      value = ((hi << 32) | lo) & mask;
      if (value <= max)
        break;
    }
  }
  return value;
}

absl::StatusOr<std::array<double, 3>> parseMegatronSplit(const std::string &split) {
  std::vector<double> w;
  for (size_t i = 0; i < split.size();) {
    if ((split[i] >= '0' && split[i] <= '9') || split[i] == '.') {
      size_t b = i;
      while (i < split.size() && ((split[i] >= '0' && split[i] <= '9') || split[i] == '.'))
        ++i;
      std::string part = split.substr(b, i - b);
      char *end = nullptr;
      double v = std::strtod(part.c_str(), &end);
      if (end != part.c_str() + part.size() || !std::isfinite(v))
        return absl::InvalidArgumentError(
            absl::StrCat("--split '", split, "': '", part, "' is not a number"));
      w.push_back(v);
    } else {
      ++i;
    }
  }
  if (w.empty() || w.size() > 3)
    return absl::InvalidArgumentError(absl::StrCat(
        "--split '", split, "' has ", w.size(), " weights, expected 1 to 3 (train, valid, test)"));
  std::array<double, 3> out = {0, 0, 0};
  double sum = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    out[i] = w[i];
    sum += w[i];
  }
  if (!(sum > 0) || !std::isfinite(sum))
    return absl::InvalidArgumentError(absl::StrCat("--split '", split, "' weights sum to ", sum));
  for (double &v : out)
    v /= sum;
  return out;
}

std::array<std::array<int64_t, 2>, 3> megatronSplitRanges(const std::array<double, 3> &w,
                                                          int64_t numElements) {
  std::array<std::array<int64_t, 2>, 3> r;
  double c = 0.0;
  for (int s = 0; s < 3; ++s) {
    double next = c + w[size_t(s)];
    r[size_t(s)] = {int64_t(std::nearbyint(c * double(numElements))),
                    int64_t(std::nearbyint(next * double(numElements)))};
    if (w[size_t(s)] == 0.0)
      r[size_t(s)][1] = r[size_t(s)][0];
    c = next;
  }
  return r;
}

namespace {

/// _build_document_index without the separate last epoch: `docs` repeated `epochs` times,
/// shuffled once.
std::vector<int32_t> documentIndexOnce(int64_t begin, int64_t end, int64_t epochs,
                                       NumpyRandomState &rng) {
  std::vector<int32_t> out;
  out.reserve(size_t((end - begin) * epochs));
  for (int64_t e = 0; e < epochs; ++e)
    for (int64_t d = begin; d < end; ++d)
      out.push_back(int32_t(d));
  rng.shuffle(out);
  return out;
}

} // namespace

absl::StatusOr<GptIndices> buildGptIndices(const std::vector<int32_t> &lengths, int64_t begin,
                                           int64_t end, int64_t numSamples, int64_t seqLength,
                                           uint32_t seed) {
  constexpr int64_t kExtra = 1; // add_extra_token_to_sequence
  if (seqLength < 2 || seqLength > std::numeric_limits<int32_t>::max() - 1)
    return absl::InvalidArgumentError(
        absl::StrCat("GPTDataset: seq_length ", seqLength, " must be in [2, 2^31 - 1)"));
  if (begin < 0 || end < begin || end > int64_t(lengths.size()))
    return absl::InvalidArgumentError(absl::StrCat("GPTDataset: sequence range [", begin, ", ", end,
                                                   ") outside the dataset's ", lengths.size(),
                                                   " sequences"));
  if (end > std::numeric_limits<int32_t>::max() || numSamples < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "GPTDataset: ", end, " sequences or ", numSamples, " samples out of Megatron's range"));
  GptIndices g;
  for (int64_t i = begin; i < end; ++i)
    g.tokensPerEpoch += lengths[size_t(i)];
  if (g.tokensPerEpoch < 2)
    return absl::InvalidArgumentError(absl::StrCat("GPTDataset: the split's ", end - begin,
                                                   " sequences hold ", g.tokensPerEpoch,
                                                   " tokens, fewer than 2"));
  const int64_t T = g.tokensPerEpoch;
  // _get_num_epochs.
  g.numEpochs = 1;
  if (numSamples > 0) {
    int64_t requested = numSamples * seqLength + kExtra, tokens = T;
    while (tokens < requested) {
      ++g.numEpochs;
      tokens += T;
    }
  }
  int64_t samplesSansFinal = 0;
  if (g.numEpochs > 1) {
    samplesSansFinal = ((g.numEpochs - 1) * T - kExtra) / seqLength;
    int64_t fromFinal = numSamples - samplesSansFinal;
    int64_t perEpoch = (T - kExtra) / seqLength;
    // int(0.80 * num_samples_per_epoch), in double as Python computes it.
    g.separateFinalEpoch = fromFinal < int64_t(0.80 * double(perEpoch));
  }
  NumpyRandomState rng(seed);
  if (!g.separateFinalEpoch) {
    g.documentIndex = documentIndexOnce(begin, end, g.numEpochs, rng);
  } else {
    g.documentIndex = documentIndexOnce(begin, end, g.numEpochs - 1, rng);
    std::vector<int32_t> last = documentIndexOnce(begin, end, 1, rng);
    g.documentIndex.insert(g.documentIndex.end(), last.begin(), last.end());
  }
  // helpers.cpp build_sample_idx with drop_last_partial_sequence.
  const int64_t numSamplesBuilt = (g.numEpochs * T - kExtra) / seqLength;
  g.sampleIndex.assign(size_t(2 * (numSamplesBuilt + 1)), 0);
  int64_t docPos = 0, docOffset = 0;
  const int64_t lastPos = int64_t(g.documentIndex.size()) - 1;
  for (int64_t s = 1; s <= numSamplesBuilt; ++s) {
    int64_t remaining = seqLength + kExtra;
    while (remaining != 0) {
      int64_t docLength = lengths[size_t(g.documentIndex[size_t(docPos)])] - docOffset;
      remaining -= docLength;
      if (remaining <= 0) {
        docOffset += remaining + docLength - kExtra;
        remaining = 0;
      } else {
        if (docPos == lastPos) { // unreachable when the last partial sample is dropped
          docOffset = lengths[size_t(g.documentIndex[size_t(docPos)])] - kExtra;
          break;
        }
        ++docPos;
        docOffset = 0;
      }
    }
    g.sampleIndex[size_t(2 * s)] = docPos;
    g.sampleIndex[size_t(2 * s + 1)] = docOffset;
  }
  // _build_shuffle_index.
  auto range = [&](int64_t b, int64_t e) {
    std::vector<int64_t> v;
    v.reserve(size_t(e - b));
    for (int64_t i = b; i < e; ++i)
      v.push_back(i);
    rng.shuffle(v);
    return v;
  };
  int64_t first = g.separateFinalEpoch ? samplesSansFinal : numSamplesBuilt;
  g.shuffleIndex = range(0, first);
  if (first != numSamplesBuilt) {
    std::vector<int64_t> last = range(first, numSamplesBuilt);
    g.shuffleIndex.insert(g.shuffleIndex.end(), last.begin(), last.end());
  }
  return g;
}

absl::Status gptSample(const IndexedDataset &data, const GptIndices &g, int64_t seqLength,
                       int64_t index, int32_t *tokens) {
  if (index < 0 || index >= g.numSamples())
    return absl::OutOfRangeError(absl::StrCat("GPTDataset: sample ", index, " outside [0, ",
                                              g.numSamples(), ")"));
  int64_t i = g.shuffleIndex[size_t(index)];
  int64_t begDoc = g.sampleIndex[size_t(2 * i)], begOff = g.sampleIndex[size_t(2 * i + 1)];
  int64_t endDoc = g.sampleIndex[size_t(2 * i + 2)], endOff = g.sampleIndex[size_t(2 * i + 3)];
  int64_t written = 0;
  for (int64_t d = begDoc; d <= endDoc; ++d) {
    int64_t seq = g.documentIndex[size_t(d)];
    int64_t off = d == begDoc ? begOff : 0;
    int64_t stop = d == endDoc ? endOff + 1 : data.sequenceLength(seq);
    int64_t n = stop - off;
    if (written + n > seqLength + 1)
      return absl::InternalError(absl::StrCat("GPTDataset: sample ", index, " overflows"));
    if (absl::Status s = data.read(seq, off, n, tokens + written); !s.ok())
      return s;
    written += n;
  }
  if (written != seqLength + 1)
    return absl::InternalError(absl::StrCat("GPTDataset: sample ", index, " has ", written,
                                            " tokens, expected ", seqLength + 1));
  return absl::OkStatus();
}

} // namespace trainc::rt::data
