//===- GptDatasetTest.cpp - Megatron's GPTDataset indices, against numpy --===//

#include "runtime/data/BlendedDataset.h"
#include "runtime/data/MegatronDatasets.h"
#include "runtime/data/GPTDataset.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <random>
#include <sstream>
#include <unistd.h>

using namespace trainc::rt::data;
namespace fs = std::filesystem;

namespace {

std::string tempDir() {
  fs::path dir = fs::temp_directory_path() / ("trainc-gpt-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir.string();
}

/// A dataset of `n` sequences with lengths in [0, maxLen] (a few zero), tokens = position.
std::string writeDataset(const std::string &name, int n, int maxLen, uint32_t seed) {
  std::string prefix = tempDir() + "/" + name;
  auto b = IndexedDatasetBuilder::create(prefix, 8);
  EXPECT_TRUE(b.ok());
  std::mt19937 rng(seed);
  int32_t next = 0;
  for (int i = 0; i < n; ++i) {
    int32_t len = int32_t(rng() % uint32_t(maxLen + 1));
    if (i == n - 1 && len == 0)
      len = 1;
    std::vector<int32_t> toks;
    for (int32_t j = 0; j < len; ++j)
      toks.push_back(next++ % 60000);
    EXPECT_TRUE((*b)->addDocument(toks, {len}).ok());
  }
  EXPECT_TRUE((*b)->finalize().ok());
  return prefix;
}

std::vector<int64_t> readInt64(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<int64_t> v;
  int64_t x;
  while (in.read(reinterpret_cast<char *>(&x), 8))
    v.push_back(x);
  return v;
}

} // namespace

TEST(NumpyRandomState, ShuffleMatchesNumpy) {
  // numpy 1.24: r = np.random.RandomState(1234); a = np.arange(10); r.shuffle(a)
  std::vector<int> a = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  NumpyRandomState r(1234);
  r.shuffle(a);
  EXPECT_EQ(a, (std::vector<int>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3}));
  std::vector<int32_t> b = {0, 1, 2, 3, 4, 5, 6};
  NumpyRandomState r0(0);
  r0.shuffle(b);
  EXPECT_EQ(b, (std::vector<int32_t>{6, 2, 1, 3, 0, 5, 4}));
}

TEST(MegatronSplit, ParseAndRanges) {
  auto w = parseMegatronSplit("969, 30, 1");
  ASSERT_TRUE(w.ok());
  auto r = megatronSplitRanges(*w, 1000);
  EXPECT_EQ(r[0], (std::array<int64_t, 2>{0, 969}));
  EXPECT_EQ(r[1], (std::array<int64_t, 2>{969, 999}));
  EXPECT_EQ(r[2], (std::array<int64_t, 2>{999, 1000}));
  r = megatronSplitRanges(*parseMegatronSplit("98/2"), 25); // 24.5 rounds to even
  EXPECT_EQ(r[0], (std::array<int64_t, 2>{0, 24}));
  EXPECT_EQ(r[2][0], r[2][1]);
  EXPECT_NE(parseMegatronSplit("1,2,3,4").status().message().find("has 4 weights"),
            std::string::npos);
  EXPECT_NE(parseMegatronSplit("none").status().message().find("has 0 weights"),
            std::string::npos);
  EXPECT_NE(parseMegatronSplit("0,0").status().message().find("weights sum to 0"),
            std::string::npos);
}

TEST(GptIndices, HandCheckedSmallCase) {
  // Sequences of 3, 5 and 2 tokens, seq_length 4: 10 tokens, (10 - 1) / 4 = 2 samples.
  std::vector<int32_t> lengths = {3, 5, 2};
  auto g = buildGptIndices(lengths, 0, 3, 0, 4, 1234);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->numEpochs, 1);
  EXPECT_EQ(g->numSamples(), 2);
  ASSERT_EQ(g->documentIndex.size(), 3u);
  // Sample 1 starts 4 tokens into the concatenation of the shuffled documents.
  int64_t pos = 0, off = 4;
  while (off >= lengths[size_t(g->documentIndex[size_t(pos)])])
    off -= lengths[size_t(g->documentIndex[size_t(pos++)])];
  EXPECT_EQ(g->sampleIndex[2], pos);
  EXPECT_EQ(g->sampleIndex[3], off);
  EXPECT_NE(buildGptIndices(lengths, 0, 3, 0, 1, 1).status().message().find("seq_length 1"),
            std::string::npos);
  EXPECT_NE(buildGptIndices(lengths, 2, 4, 0, 4, 1).status().message().find("outside the dataset"),
            std::string::npos);
  EXPECT_NE(buildGptIndices({1, 0}, 0, 2, 0, 4, 1).status().message().find("fewer than 2"),
            std::string::npos);
}

TEST(GptIndices, SamplesAreContiguousWindows) {
  std::string prefix = writeDataset("windows", 50, 30, 5);
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<int32_t> lengths = (*ds)->sequenceLengths();
  const int64_t seq = 16;
  auto g = buildGptIndices(lengths, 0, int64_t(lengths.size()), 300, seq, 42);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_GT(g->numEpochs, 1);
  EXPECT_GE(g->numSamples(), 300);
  // Unshuffled sample k starts at token k * seq of the document-index concatenation.
  std::vector<int32_t> stream;
  for (int32_t d : g->documentIndex) {
    std::vector<int32_t> t(static_cast<size_t>(lengths[size_t(d)]));
    ASSERT_TRUE((*ds)->read(d, 0, lengths[size_t(d)], t.data()).ok());
    stream.insert(stream.end(), t.begin(), t.end());
  }
  std::vector<int32_t> tokens(seq + 1);
  std::vector<bool> seen(size_t(g->numSamples()), false);
  for (int64_t i = 0; i < g->numSamples(); ++i) {
    ASSERT_TRUE(gptSample(**ds, *g, seq, i, tokens.data()).ok());
    int64_t k = g->shuffleIndex[size_t(i)];
    ASSERT_FALSE(seen[size_t(k)]);
    seen[size_t(k)] = true;
    for (int64_t j = 0; j <= seq; ++j)
      ASSERT_EQ(tokens[size_t(j)], stream[size_t(k * seq + j)]) << "sample " << i << " token " << j;
  }
  EXPECT_FALSE(gptSample(**ds, *g, seq, g->numSamples(), tokens.data()).ok());
}

// The comparison with Megatron's algorithms run on numpy (tests/data/megatron_gpt_reference.py):
// document, sample and shuffle index of every split must be identical.
TEST(GptIndices, IdenticalToNumpyReference) {
  struct Case {
    int numSeqs, maxLen;
    std::string split;
    int64_t seq;
    uint32_t seed;
    std::array<int64_t, 3> sizes;
  };
  const std::vector<Case> cases = {
      {40, 30, "969, 30, 1", 8, 1234, {0, 0, 0}},
      {40, 30, "969, 30, 1", 8, 1234, {200, 10, 5}},
      {120, 50, "80,20", 32, 7, {1000, 40, 0}},
      {120, 50, "1", 7, 0, {33, 0, 0}},          // one epoch, partial
      {200, 20, "90/5/5", 2, 99, {5000, 100, 100}},
      {60, 100, "0,1,0", 64, 31337, {0, 500, 0}}, // only a valid split
      {300, 10, "949,50,1", 128, 4294967295u, {77, 3, 1}},
      {25, 40, "1,1,1", 5, 5, {400, 400, 400}},
  };
  int compared = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case &k = cases[c];
    std::string prefix = writeDataset("ref" + std::to_string(c), k.numSeqs, k.maxLen, uint32_t(c + 1));
    std::string out = prefix + ".ref";
    std::ostringstream cmd;
    cmd << TRAINC_PYTHON3 << " " << TRAINC_SOURCE_DIR << "/tests/data/megatron_gpt_reference.py '"
        << prefix << "' '" << k.split << "' " << k.seq << " " << k.seed << " " << k.sizes[0] << " "
        << k.sizes[1] << " " << k.sizes[2] << " '" << out << "'";
    ASSERT_EQ(std::system(cmd.str().c_str()), 0) << cmd.str();
    std::vector<int64_t> ref = readInt64(out);
    auto ds = IndexedDataset::open(prefix);
    ASSERT_TRUE(ds.ok());
    std::vector<int32_t> lengths = (*ds)->sequenceLengths();
    auto ranges = megatronSplitRanges(*parseMegatronSplit(k.split), int64_t(lengths.size()));
    size_t at = 0;
    for (int s = 0; s < 3; ++s) {
      SCOPED_TRACE("case " + std::to_string(c) + " split " + std::to_string(s));
      ASSERT_LE(at + 6, ref.size());
      bool present = ref[at] != 0;
      EXPECT_EQ(present, ranges[size_t(s)][0] != ranges[size_t(s)][1]);
      if (!present) {
        at += 6;
        continue;
      }
      auto g = buildGptIndices(lengths, ranges[size_t(s)][0], ranges[size_t(s)][1],
                               k.sizes[size_t(s)], k.seq, k.seed);
      ASSERT_TRUE(g.ok()) << g.status();
      EXPECT_EQ(g->numEpochs, ref[at + 1]);
      EXPECT_EQ(int64_t(g->separateFinalEpoch), ref[at + 2]);
      int64_t nd = ref[at + 3], ns = ref[at + 4], nsh = ref[at + 5];
      at += 6;
      std::vector<int64_t> d(ref.begin() + int64_t(at), ref.begin() + int64_t(at + size_t(nd)));
      at += size_t(nd);
      std::vector<int64_t> smp(ref.begin() + int64_t(at), ref.begin() + int64_t(at + size_t(2 * ns)));
      at += size_t(2 * ns);
      std::vector<int64_t> sh(ref.begin() + int64_t(at), ref.begin() + int64_t(at + size_t(nsh)));
      at += size_t(nsh);
      EXPECT_EQ(std::vector<int64_t>(g->documentIndex.begin(), g->documentIndex.end()), d);
      EXPECT_EQ(g->sampleIndex, smp);
      EXPECT_EQ(g->shuffleIndex, sh);
      ++compared;
    }
    EXPECT_EQ(at, ref.size());
  }
  EXPECT_GE(compared, 15);
}

// Megatron's blend sizes and blending indices against tests/data/megatron_blend_reference.py
// (numpy and Python floats), on several weight vectors (2 to 12 datasets, so numpy's pairwise
// summation is exercised) and sizes.
TEST(Blending, IdenticalToNumpyReference) {
  struct Case {
    std::vector<double> weights;
    std::array<int64_t, 3> sizes;
  };
  const std::vector<Case> cases = {
      {{0.3, 0.7}, {1000, 40, 8}},
      {{1, 1, 1}, {999, 10, 0}},
      {{0.1, 0.2, 0.3, 0.4}, {12345, 77, 3}},
      {{3e-5, 1.0, 17.25}, {5000, 1, 2}},
      {{5, 1, 1, 1, 1, 1, 1, 1, 1, 2, 3, 0.5}, {20000, 640, 64}},
      {{0.0, 1.0}, {100, 0, 7}},
  };
  int compared = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case &k = cases[c];
    std::string out = (fs::temp_directory_path() /
                       ("trainc-blend-" + std::to_string(::getpid()) + "-" + std::to_string(c)))
                          .string();
    std::ostringstream cmd, w;
    for (size_t i = 0; i < k.weights.size(); ++i)
      w << (i ? "," : "") << std::setprecision(17) << k.weights[i];
    cmd << TRAINC_PYTHON3 << " " << TRAINC_SOURCE_DIR << "/tests/data/megatron_blend_reference.py "
        << w.str() << " " << kMidLevelDatasetSurplus << " " << k.sizes[0] << " " << k.sizes[1]
        << " " << k.sizes[2] << " '" << out << "'";
    ASSERT_EQ(std::system(cmd.str().c_str()), 0) << cmd.str();
    std::vector<int64_t> ref = readInt64(out);
    std::vector<double> norm = normalizeWeights(k.weights);
    size_t at = 0;
    for (int s = 0; s < 3; ++s) {
      SCOPED_TRACE("case " + std::to_string(c) + " split " + std::to_string(s));
      std::vector<int64_t> target = blendSizesPerDataset(norm, k.sizes[size_t(s)], 0.0);
      std::vector<int64_t> buffer =
          blendSizesPerDataset(norm, k.sizes[size_t(s)], kMidLevelDatasetSurplus);
      int64_t size = 0;
      for (int64_t t : target)
        size += t;
      ASSERT_LE(at + 2, ref.size());
      EXPECT_EQ(ref[at], size);
      size_t d = size_t(ref[at + 1]);
      ASSERT_EQ(d, k.weights.size());
      at += 2;
      EXPECT_EQ(std::vector<int64_t>(ref.begin() + int64_t(at), ref.begin() + int64_t(at + d)),
                target);
      at += d;
      EXPECT_EQ(std::vector<int64_t>(ref.begin() + int64_t(at), ref.begin() + int64_t(at + d)),
                buffer);
      at += d;
      BlendingIndices b = buildBlendingIndices(normalizeWeights(norm), ref[at - 2 * d - 2]);
      std::vector<int64_t> di(b.datasetIndex.begin(), b.datasetIndex.end());
      EXPECT_EQ(di, std::vector<int64_t>(ref.begin() + int64_t(at),
                                         ref.begin() + int64_t(at + size_t(size))));
      at += size_t(size);
      EXPECT_EQ(b.datasetSampleIndex, std::vector<int64_t>(ref.begin() + int64_t(at),
                                                           ref.begin() + int64_t(at + size_t(size))));
      at += size_t(size);
      ++compared;
    }
    EXPECT_EQ(at, ref.size());
  }
  EXPECT_EQ(compared, 18);
}

TEST(Blending, ParseBlend) {
  auto b = parseBlend({"0.3", "a", "0.7", "b"});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(b->weights, (std::vector<double>{0.3, 0.7}));
  b = parseBlend({"a", "b"}); // no weights: blended by size
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(b->weights.empty());
  b = parseBlend({"x"});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prefixes.size(), 1u);
  EXPECT_NE(parseBlend({"-1", "a", "2", "b"}).status().message().find(
                "--data-path weight '-1' (of 'a') must be a non-negative finite number"),
            std::string::npos);
  EXPECT_NE(parseBlend({"0", "a", "0", "b"}).status().message().find("weights sum to 0"),
            std::string::npos);
}

// A blended split's sample i is sample datasetSampleIndex[i] of the GPTDataset (built alone with
// the buffer size) of dataset datasetIndex[i].
TEST(Blending, SamplesComeFromThePartsInBlendOrder) {
  std::string a = writeDataset("blendA", 80, 40, 11), b = writeDataset("blendB", 50, 25, 12);
  trainc::rt::control::DataOptions o;
  o.dataPath = {"0.25", a, "0.75", b};
  o.split = "90,10,0";
  o.seqLength = 16;
  o.vocabSize = 60000;
  o.numSamples = {400, 40, 0};
  auto blended = buildIndexedDatasets(o);
  ASSERT_TRUE(blended.ok()) << blended.status();
  ASSERT_TRUE(blended->train && blended->valid);
  EXPECT_FALSE(blended->test);
  std::vector<double> w = normalizeWeights({0.25, 0.75});
  for (int s = 0; s < 2; ++s) {
    const auto &ds = s == 0 ? blended->train : blended->valid;
    int64_t n = o.numSamples[size_t(s)];
    std::vector<int64_t> target = blendSizesPerDataset(w, n, 0.0);
    std::vector<int64_t> buffer = blendSizesPerDataset(w, n, kMidLevelDatasetSurplus);
    EXPECT_EQ(ds->numSamples(), target[0] + target[1]);
    std::vector<std::unique_ptr<trainc::rt::control::Dataset>> parts;
    for (int d = 0; d < 2; ++d) {
      trainc::rt::control::DataOptions one = o;
      one.dataPath = {d == 0 ? a : b};
      one.numSamples = {0, 0, 0};
      one.numSamples[size_t(s)] = buffer[size_t(d)];
      auto alone = buildIndexedDatasets(one);
      ASSERT_TRUE(alone.ok()) << alone.status();
      parts.push_back(std::move(s == 0 ? alone->train : alone->valid));
    }
    BlendingIndices bi = buildBlendingIndices(normalizeWeights(w), ds->numSamples());
    std::vector<int32_t> got(17), want(17);
    for (int64_t i = 0; i < ds->numSamples(); ++i) {
      ASSERT_TRUE(ds->readSample(i, got.data()).ok());
      ASSERT_TRUE(parts[size_t(bi.datasetIndex[size_t(i)])]
                      ->readSample(bi.datasetSampleIndex[size_t(i)], want.data())
                      .ok());
      ASSERT_EQ(got, want) << "split " << s << " sample " << i;
    }
  }
  // Unweighted: weights are the parts' one-epoch sample counts.
  o.dataPath = {a, b};
  auto bySize = buildIndexedDatasets(o);
  ASSERT_TRUE(bySize.ok()) << bySize.status();
  int64_t epochSamples = 0;
  for (const std::string &p : {a, b}) {
    trainc::rt::control::DataOptions one = o;
    one.dataPath = {p};
    one.numSamples = {0, 0, 0};
    epochSamples += (*buildIndexedDatasets(one)).train->numSamples();
  }
  EXPECT_EQ(bySize->train->numSamples(), std::min<int64_t>(400, epochSamples));
  // An empty split of one blended dataset.
  o.split = "100,0,1";
  o.numSamples = {10, 0, 5};
  o.dataPath = {"1", a, "1", writeDataset("blendTiny", 3, 4, 13)};
  auto bad = buildIndexedDatasets(o);
  EXPECT_NE(bad.status().message().find("the train split of '" + tempDir() + "/blendTiny' has"),
            std::string::npos)
      << bad.status();
  o.dataPath = {"1", a, "1", writeDataset("blendTiny2", 3, 200, 13)};
  auto noTest = buildIndexedDatasets(o); // its test split is empty: no test blend
  ASSERT_TRUE(noTest.ok()) << noTest.status();
  EXPECT_TRUE(noTest->train);
  EXPECT_FALSE(noTest->test);
}
