//===- DatasetTest.cpp - Training data pipeline of the control plane ------===//
//
// Byte tokenization and document splitting, sample layout (stride seq_length, one token of
// overlap, labels = inputs shifted by one), Megatron's contiguous document splits, determinism by
// seed, per-epoch reshuffles, directory reading, mock data, and every error message.
//
//===----------------------------------------------------------------------===//

#include "runtime/control/Dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace trainc::rt::control;
namespace fs = std::filesystem;

namespace {

using Tokens = std::vector<int32_t>;

/// A fresh directory under gtest's temp dir, named after the running test.
class DatasetTest : public ::testing::Test {
protected:
  void SetUp() override {
    const ::testing::TestInfo *info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("trainc_dataset_") + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

  /// Writes `bytes` to `name` under the test directory and returns its path.
  std::string write(const std::string &name, const std::string &bytes) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    return p.string();
  }
  std::string path(const std::string &name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

Tokens sampleAt(const Dataset &d, int64_t index) {
  Tokens t(size_t(d.seqLength() + 1), -1);
  d.sample(index, t.data());
  return t;
}

/// The samples of epoch `epoch`, in global order.
std::vector<Tokens> epochSamples(const Dataset &d, int64_t epoch) {
  std::vector<Tokens> out;
  for (int64_t i = 0; i < d.numSamples(); ++i)
    out.push_back(sampleAt(d, epoch * d.numSamples() + i));
  return out;
}

Tokens tokensOf(const std::string &s) {
  Tokens t;
  for (char c : s)
    t.push_back(int32_t(uint8_t(c)));
  return t;
}

/// Splits a token stream at EOD into documents (the stream must end with EOD); sorted, since the
/// document order within a split is shuffled.
std::vector<Tokens> documentsOf(const Tokens &stream) {
  EXPECT_FALSE(stream.empty());
  EXPECT_EQ(stream.back(), kEodToken);
  std::vector<Tokens> docs(1);
  for (size_t i = 0; i + 1 < stream.size(); ++i) {
    if (stream[i] == kEodToken)
      docs.emplace_back();
    else
      docs.back().push_back(stream[i]);
  }
  std::sort(docs.begin(), docs.end());
  return docs;
}

/// A train-only dataset whose single sample is the whole split stream (seq = tokens - 1).
Tokens wholeStream(const std::vector<std::string> &paths, int64_t numTokens) {
  DataOptions o;
  o.dataPath = paths;
  o.split = "1";
  o.seqLength = numTokens - 1;
  absl::StatusOr<Datasets> ds = buildDatasets(o);
  EXPECT_TRUE(ds.ok()) << ds.status();
  if (!ds.ok())
    return {};
  EXPECT_EQ(ds->train->numSamples(), 1);
  EXPECT_EQ(ds->valid, nullptr);
  EXPECT_EQ(ds->test, nullptr);
  return sampleAt(*ds->train, 0);
}

/// Bytes 33..(33 + n - 1): n distinct printable, non-whitespace bytes (n <= 223).
std::string distinctBytes(int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s.push_back(char(33 + i));
  return s;
}

std::string errorOf(const DataOptions &o) {
  absl::StatusOr<Datasets> ds = buildDatasets(o);
  return ds.ok() ? "" : std::string(ds.status().message());
}

//===----------------------------------------------------------------------===//
// Tokenization and documents
//===----------------------------------------------------------------------===//

TEST_F(DatasetTest, TokenizesBytesAndSplitsDocumentsAtBlankLines) {
  // NULs dropped; one or more blank (or whitespace-only) lines separate documents; inner line
  // breaks stay, the last line's break (LF or CRLF) does not; high bytes map to themselves.
  std::string text = std::string("ab\nc\0d\n\n \t\n\n", 12) + "\xc3\xa9\xff\n" + "x\r\ny\r\n\r\nz";
  std::string f = write("a.txt", text);
  // Documents: "ab\ncd" (5 bytes); "\xc3\xa9\xff\nx\r\ny" (8), ended by the blank CRLF line;
  // "z" (1). Tokens: 5 + 8 + 1 + 3 EOD = 17.
  Tokens stream = wholeStream({f}, 17);
  ASSERT_EQ(stream.size(), 17u);
  std::vector<Tokens> expected = {tokensOf("ab\ncd"), tokensOf("\xc3\xa9\xff\nx\r\ny"),
                                  tokensOf("z")};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(documentsOf(stream), expected);
  EXPECT_EQ(std::count(stream.begin(), stream.end(), kEodToken), 3);
}

TEST_F(DatasetTest, FileBoundaryEndsADocument) {
  std::string a = write("a.txt", "abc"), b = write("b.txt", "def\n");
  Tokens stream = wholeStream({a, b}, 8);
  std::vector<Tokens> expected = {tokensOf("abc"), tokensOf("def")};
  EXPECT_EQ(documentsOf(stream), expected);
}

//===----------------------------------------------------------------------===//
// Sample layout
//===----------------------------------------------------------------------===//

TEST_F(DatasetTest, SamplesOverlapByOneTokenAndLabelsAreShiftedInputs) {
  // One document of 58 distinct bytes: the stream is those bytes then EOD (59 tokens), so every
  // token identifies its stream position. seq 4: (59 - 1) / 4 = 14 samples.
  std::string doc = distinctBytes(58);
  Tokens stream = tokensOf(doc);
  stream.push_back(kEodToken);
  DataOptions o;
  o.dataPath = {write("doc.txt", doc)};
  o.split = "1, 0, 0";
  o.seqLength = 4;
  absl::StatusOr<Datasets> ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Dataset &d = *ds->train;
  EXPECT_EQ(d.seqLength(), 4);
  ASSERT_EQ(d.numSamples(), 14);
  std::map<int64_t, Tokens> byStart;
  for (const Tokens &s : epochSamples(d, 0)) {
    ASSERT_EQ(s.size(), 5u);
    int64_t start = std::find(stream.begin(), stream.end(), s[0]) - stream.begin();
    EXPECT_EQ(start % 4, 0) << "samples start at multiples of seq_length";
    // inputs = s[0, seq), labels = s[1, seq + 1): label j is the stream token after input j.
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_EQ(s[size_t(j)], stream[size_t(start + j)]);
      EXPECT_EQ(s[size_t(j + 1)], stream[size_t(start + j + 1)]);
    }
    byStart[start] = s;
  }
  ASSERT_EQ(byStart.size(), 14u);
  EXPECT_EQ(byStart.begin()->first, 0);
  EXPECT_EQ(byStart.rbegin()->first, 52);
  for (int64_t k = 0; k + 1 < 14; ++k)
    EXPECT_EQ(byStart[k * 4].back(), byStart[(k + 1) * 4].front()) << "sample " << k;
}

//===----------------------------------------------------------------------===//
// Splits
//===----------------------------------------------------------------------===//

TEST(DatasetSplit, ParsesAndNormalisesWeights) {
  absl::StatusOr<std::vector<double>> w = parseSplit("969, 30, 1");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_DOUBLE_EQ((*w)[0], 0.969);
  EXPECT_DOUBLE_EQ((*w)[1], 0.030);
  EXPECT_DOUBLE_EQ((*w)[2], 0.001);
  w = parseSplit("98/2");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*w, (std::vector<double>{0.98, 0.02, 0.0}));
  w = parseSplit(" 1 ");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*w, (std::vector<double>{1.0, 0.0, 0.0}));
}

/// The documents (single distinct bytes) of a split built with seq 1: the samples whose label is
/// EOD have the document as input.
std::set<int32_t> singleByteDocs(const Dataset &d) {
  EXPECT_EQ(d.seqLength(), 1);
  std::set<int32_t> docs;
  for (const Tokens &s : epochSamples(d, 0))
    if (s[1] == kEodToken)
      docs.insert(s[0]);
  return docs;
}

TEST_F(DatasetTest, SplitsAssignContiguousDocumentRangesByWeight) {
  // 100 one-byte documents (bytes 33..132), one per paragraph.
  std::string text;
  for (int i = 0; i < 100; ++i)
    text += std::string(1, char(33 + i)) + "\n\n";
  DataOptions o;
  o.dataPath = {write("docs.txt", text)};
  o.split = "80, 10, 10";
  o.seqLength = 1;
  absl::StatusOr<Datasets> ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_NE(ds->valid, nullptr);
  ASSERT_NE(ds->test, nullptr);
  auto range = [](int lo, int hi) {
    std::set<int32_t> s;
    for (int i = lo; i < hi; ++i)
      s.insert(33 + i);
    return s;
  };
  EXPECT_EQ(singleByteDocs(*ds->train), range(0, 80));
  EXPECT_EQ(singleByteDocs(*ds->valid), range(80, 90));
  EXPECT_EQ(singleByteDocs(*ds->test), range(90, 100));
  // 2 tokens per document, 2n - 1 samples of seq 1.
  EXPECT_EQ(ds->train->numSamples(), 159);
  EXPECT_EQ(ds->valid->numSamples(), 19);

  // Slash separated, missing test weight: test is null.
  o.split = "98 / 2";
  ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(singleByteDocs(*ds->train), range(0, 98));
  EXPECT_EQ(singleByteDocs(*ds->valid), range(98, 100));
  EXPECT_EQ(ds->test, nullptr);

  // Too few tokens for one sample: valid (20 tokens) and test are null, train (160) is not.
  o.split = "80, 10, 10";
  o.seqLength = 50;
  ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->train->numSamples(), 159 / 50);
  EXPECT_EQ(ds->valid, nullptr);
  EXPECT_EQ(ds->test, nullptr);

  // Split boundaries round half-to-even (Python's round, as Megatron): 5 documents at "1, 1" put
  // round(2.5) = 2 in train and 3 in valid.
  o.dataPath = {write("five.txt", "!\n\n\"\n\n#\n\n$\n\n%")};
  o.split = "1, 1";
  o.seqLength = 1;
  ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(singleByteDocs(*ds->train), range(0, 2));
  EXPECT_EQ(singleByteDocs(*ds->valid), range(2, 5));
}

//===----------------------------------------------------------------------===//
// Determinism and epochs
//===----------------------------------------------------------------------===//

TEST_F(DatasetTest, SameSeedSameSamplesOtherSeedOtherOrder) {
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "document " + std::to_string(i) + " with some words in it\n\n";
  DataOptions o;
  o.dataPath = {write("docs.txt", text)};
  o.split = "1";
  o.seqLength = 16;
  absl::StatusOr<Datasets> a = buildDatasets(o), b = buildDatasets(o);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->train->numSamples(), b->train->numSamples());
  for (int64_t e = 0; e < 3; ++e)
    EXPECT_EQ(epochSamples(*a->train, e), epochSamples(*b->train, e)) << "epoch " << e;

  o.seed = 4321;
  absl::StatusOr<Datasets> c = buildDatasets(o);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->train->numSamples(), a->train->numSamples());
  EXPECT_NE(epochSamples(*c->train, 0), epochSamples(*a->train, 0));
}

TEST_F(DatasetTest, EachEpochIsAnotherPermutationOfTheSamples) {
  // 200 distinct bytes + EOD, seq 2: 100 distinct samples.
  DataOptions o;
  o.dataPath = {write("doc.txt", distinctBytes(200))};
  o.split = "1";
  o.seqLength = 2;
  absl::StatusOr<Datasets> ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Dataset &d = *ds->train;
  ASSERT_EQ(d.numSamples(), 100);
  std::vector<std::vector<Tokens>> epochs;
  for (int64_t e = 0; e < 4; ++e)
    epochs.push_back(epochSamples(d, e));
  std::set<Tokens> all(epochs[0].begin(), epochs[0].end());
  EXPECT_EQ(all.size(), 100u) << "every sample once in epoch 0";
  for (int64_t e = 1; e < 4; ++e) {
    EXPECT_EQ(std::set<Tokens>(epochs[size_t(e)].begin(), epochs[size_t(e)].end()), all)
        << "every sample once in epoch " << e;
    EXPECT_NE(epochs[size_t(e)], epochs[0]) << "epoch " << e << " has its own order";
  }
  // Epoch 0 is shuffled too (not the stream order).
  std::vector<Tokens> sorted = epochs[0];
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(epochs[0], sorted);
  // A single-sample split: every epoch is that sample.
  o.seqLength = 200;
  ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->train->numSamples(), 1);
  EXPECT_EQ(sampleAt(*ds->train, 0), sampleAt(*ds->train, 5));
}

//===----------------------------------------------------------------------===//
// Files and directories
//===----------------------------------------------------------------------===//

TEST_F(DatasetTest, DirectoryReadsRegularFilesOnceSortedByName) {
  std::string a = write("data/b.txt", "alpha");
  write("data/a.txt", "beta");
  write("data/sub/ignored.txt", "gamma");
  fs::create_symlink(fs::path(a), path("data/z-link.txt")); // same real file as b.txt
  fs::create_symlink(path("data/sub"), path("data/dirlink")); // a directory: skipped
  // Listing b.txt again explicitly reads it once too.
  Tokens stream = wholeStream({path("data"), a}, 11);
  std::vector<Tokens> expected = {tokensOf("alpha"), tokensOf("beta")};
  EXPECT_EQ(documentsOf(stream), expected);

  // Sorted by name: a.txt ("beta") is document 0, b.txt ("alpha") document 1.
  DataOptions o;
  o.dataPath = {path("data")};
  o.split = "1, 1";
  o.seqLength = 4;
  absl::StatusOr<Datasets> ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->train->numSamples(), 1);
  ASSERT_EQ(ds->valid->numSamples(), 1);
  EXPECT_EQ(sampleAt(*ds->train, 0), (Tokens{'b', 'e', 't', 'a', kEodToken}));
  EXPECT_EQ(sampleAt(*ds->valid, 0), (Tokens{'a', 'l', 'p', 'h', 'a'}));
}

TEST(DatasetCorpus, CommonLicensesGiveManyTrainSamples) {
  const std::string dir = "/usr/share/common-licenses";
  if (!fs::is_directory(dir))
    GTEST_SKIP() << dir << " is absent";
  DataOptions o;
  o.dataPath = {dir};
  o.seqLength = 128;
  absl::StatusOr<Datasets> ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_NE(ds->train, nullptr);
  EXPECT_GT(ds->train->numSamples(), 1000);
  Tokens s = sampleAt(*ds->train, 12345);
  for (int32_t t : s) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, kByteVocabSize);
  }
}

//===----------------------------------------------------------------------===//
// Mock data
//===----------------------------------------------------------------------===//

TEST(DatasetMock, UniformTokensWithEodEvery97) {
  DataOptions o;
  o.mockData = true;
  o.dataPath = {"/this/path/is/not/read"}; // --mock-data takes precedence
  o.seqLength = 300;
  o.vocabSize = 1000;
  absl::StatusOr<Datasets> ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_NE(ds->train, nullptr);
  ASSERT_NE(ds->valid, nullptr);
  ASSERT_NE(ds->test, nullptr);
  EXPECT_EQ(ds->train->numSamples() + ds->valid->numSamples() + ds->test->numSamples(),
            kMockSamplesPerEpoch);
  std::set<int32_t> seen;
  for (int64_t i = 0; i < 50; ++i) {
    Tokens s = sampleAt(*ds->train, i * 7919);
    std::vector<size_t> eods;
    for (size_t j = 0; j < s.size(); ++j) {
      EXPECT_GE(s[j], 0);
      EXPECT_LT(s[j], 1000);
      if (s[j] == kEodToken)
        eods.push_back(j);
      else
        seen.insert(s[j]);
    }
    ASSERT_GE(eods.size(), 3u) << "301 tokens hold 3 or 4 EODs";
    for (size_t k = 1; k < eods.size(); ++k)
      EXPECT_EQ(eods[k] - eods[k - 1], 97u);
  }
  EXPECT_GT(seen.size(), 900u) << "tokens cover the vocabulary";
  EXPECT_EQ(*seen.begin(), 1);

  absl::StatusOr<Datasets> again = buildDatasets(o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(sampleAt(*again->train, 123), sampleAt(*ds->train, 123));
  EXPECT_EQ(sampleAt(*again->valid, 9), sampleAt(*ds->valid, 9));
  EXPECT_NE(sampleAt(*ds->train, 9), sampleAt(*ds->valid, 9));
  o.seed = 99;
  absl::StatusOr<Datasets> other = buildDatasets(o);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(sampleAt(*other->train, 123), sampleAt(*ds->train, 123));

  // Split weights apply to mock samples; a zero weight gives a null split.
  o.split = "1, 1, 0";
  o.vocabSize = 2;
  ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->train->numSamples(), kMockSamplesPerEpoch / 2);
  EXPECT_EQ(ds->test, nullptr);
  for (int32_t t : sampleAt(*ds->train, 0))
    EXPECT_TRUE(t == 0 || t == 1) << t;
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST_F(DatasetTest, ErrorNoData) {
  DataOptions o;
  o.seqLength = 8;
  absl::StatusOr<Datasets> ds = buildDatasets(o);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(errorOf(o), "no training data: give --data-path (files or directories) or --mock-data");
}

TEST_F(DatasetTest, ErrorSeqLength) {
  DataOptions o;
  o.mockData = true;
  EXPECT_EQ(errorOf(o), "seq_length must be > 0, got 0");
  o.seqLength = -3;
  EXPECT_EQ(errorOf(o), "seq_length must be > 0, got -3");
}

TEST_F(DatasetTest, ErrorSplitDoesNotParse) {
  DataOptions o;
  o.mockData = true;
  o.seqLength = 8;
  o.split = "98, x";
  EXPECT_EQ(errorOf(o), "--split '98, x' does not parse: 'x' is not a non-negative number");
  o.split = "98,-2";
  EXPECT_EQ(errorOf(o), "--split '98,-2' does not parse: '-2' is not a non-negative number");
  o.split = "98,,2";
  EXPECT_EQ(errorOf(o), "--split '98,,2' does not parse: weight 2 is empty");
  o.split = "";
  EXPECT_EQ(errorOf(o), "--split '' does not parse: weight 1 is empty");
  o.split = "1/2/3/4";
  EXPECT_EQ(errorOf(o), "--split '1/2/3/4' does not parse: 4 weights, at most 3 (train, valid, test)");
  o.split = "1e308, 1e308";
  EXPECT_EQ(errorOf(o), "--split '1e308, 1e308' does not parse: the weights' sum overflows");
  EXPECT_EQ(parseSplit("a").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DatasetTest, ErrorSplitSumsToZero) {
  DataOptions o;
  o.mockData = true;
  o.seqLength = 8;
  o.split = "0, 0 ,0";
  EXPECT_EQ(errorOf(o), "--split '0, 0 ,0' weights sum to 0");
}

TEST_F(DatasetTest, ErrorVocabularyTooSmall) {
  DataOptions o;
  o.dataPath = {write("a.txt", "hello")};
  o.seqLength = 2;
  o.vocabSize = 100;
  EXPECT_EQ(errorOf(o), "vocabulary size 100 is smaller than the byte tokenizer's 256 tokens; text "
                        "data needs a vocabulary of at least 256");
  o.mockData = true;
  o.vocabSize = 1;
  EXPECT_EQ(errorOf(o), "vocabulary size 1 is too small for mock data (need >= 2)");
}

TEST_F(DatasetTest, ErrorDataPathDoesNotExist) {
  DataOptions o;
  o.dataPath = {write("a.txt", "hello"), path("missing.txt")};
  o.seqLength = 2;
  absl::StatusOr<Datasets> ds = buildDatasets(o);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(errorOf(o), "data path '" + path("missing.txt") + "' does not exist");
  // A dangling symlink does not exist either.
  fs::create_symlink(path("gone.txt"), path("dangling.txt"));
  o.dataPath = {path("dangling.txt")};
  EXPECT_EQ(errorOf(o), "data path '" + path("dangling.txt") + "' does not exist");
}

TEST_F(DatasetTest, ErrorDataPathNotFileOrDirectory) {
  if (!fs::is_character_file("/dev/null"))
    GTEST_SKIP() << "/dev/null is not a character device here";
  DataOptions o;
  o.dataPath = {"/dev/null"};
  o.seqLength = 2;
  EXPECT_EQ(errorOf(o), "data path '/dev/null' is neither a regular file nor a directory");
}

TEST_F(DatasetTest, ErrorDirectoryWithoutRegularFiles) {
  fs::create_directories(path("empty/sub"));
  DataOptions o;
  o.dataPath = {path("empty")};
  o.seqLength = 2;
  EXPECT_EQ(errorOf(o), "data directory '" + path("empty") + "' contains no regular files");
}

TEST_F(DatasetTest, ErrorUnreadableFile) {
  std::string f = write("secret.txt", "hello");
  fs::permissions(f, fs::perms::none);
  if (std::ifstream(f).good())
    GTEST_SKIP() << "permissions are not enforced for this user (root)";
  DataOptions o;
  o.dataPath = {f};
  o.seqLength = 2;
  EXPECT_EQ(errorOf(o), "cannot read data file '" + f + "'");
}

TEST_F(DatasetTest, ErrorEmptyCorpus) {
  DataOptions o;
  o.dataPath = {write("blank.txt", std::string("\n\n  \t\n\0\0\n", 9)), write("empty.txt", "")};
  o.seqLength = 2;
  EXPECT_EQ(errorOf(o), "empty corpus: the 2 data file(s) under --data-path '" + o.dataPath[0] +
                            "', '" + o.dataPath[1] + "' contain no text");
}

TEST_F(DatasetTest, ErrorTrainSplitTooSmall) {
  DataOptions o;
  o.dataPath = {write("a.txt", "hello")};
  o.seqLength = 100;
  EXPECT_EQ(errorOf(o), "train split has 6 tokens (1 of 1 documents, --split '969, 30, 1'), fewer "
                        "than seq_length + 1 = 101");
  // A train weight of 0 is not an error: train is null (evaluation-only data).
  o.split = "0, 1";
  o.seqLength = 2;
  absl::StatusOr<Datasets> ds = buildDatasets(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->train, nullptr);
  ASSERT_NE(ds->valid, nullptr);
  EXPECT_EQ(ds->valid->numSamples(), 2);
}

} // namespace

// Megatron takes either --data-path or the per-split paths; the library refuses both at once.
TEST(DatasetPerSplit, DataPathAndPerSplitPathsAreExclusive) {
  DataOptions o;
  o.seqLength = 8;
  o.dataPath = {"a"};
  o.splitDataPath[0] = {"b"};
  absl::Status s = buildDatasets(o).status();
  EXPECT_NE(s.message().find("give either --data-path or --train-data-path / --valid-data-path / "
                             "--test-data-path, not both"),
            std::string::npos)
      << s;
  o.dataPath.clear();
  o.splitDataPath[0].clear();
  o.splitDataPath[1] = {"b"};
  s = buildDatasets(o).status();
  EXPECT_NE(s.message().find("need --train-data-path too"), std::string::npos) << s;
}
