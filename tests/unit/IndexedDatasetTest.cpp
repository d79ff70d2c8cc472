//===- IndexedDatasetTest.cpp - Megatron .bin/.idx reader and writer ------===//

#include "runtime/data/IndexedDataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace trainc::rt::data;
namespace fs = std::filesystem;

namespace {

std::string tempPrefix(const std::string &name) {
  fs::path dir = fs::temp_directory_path() / ("trainc-idx-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// Writes three documents: {[1 2 3], [4 5]}, {} (empty), {[6 7 8 9]}.
std::string writeSample(const std::string &name, int code) {
  std::string prefix = tempPrefix(name);
  auto b = IndexedDatasetBuilder::create(prefix, code);
  EXPECT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE((*b)->addDocument({1, 2, 3, 4, 5}, {3, 2}).ok());
  EXPECT_TRUE((*b)->addDocument({}, {}).ok());
  EXPECT_TRUE((*b)->addDocument({6, 7, 8, 9}, {4}).ok());
  EXPECT_TRUE((*b)->finalize().ok());
  return prefix;
}

template <typename T> void poke(std::string &s, size_t at, T v) { std::memcpy(&s[at], &v, sizeof(T)); }

/// Expects opening `prefix` after replacing its .idx with `idx` to fail with `message`.
void expectIdxError(const std::string &prefix, const std::string &idx, const std::string &message) {
  std::string orig = slurp(prefix + ".idx");
  spit(prefix + ".idx", idx);
  auto ds = IndexedDataset::open(prefix);
  ASSERT_FALSE(ds.ok()) << "accepted; expected: " << message;
  EXPECT_NE(ds.status().message().find(message), std::string::npos) << ds.status();
  EXPECT_NE(ds.status().message().find(prefix + ".idx"), std::string::npos) << ds.status();
  spit(prefix + ".idx", orig);
}

} // namespace

TEST(IndexedDataset, RoundTripEveryIntegerDtype) {
  for (int code : {1, 2, 3, 4, 5, 8}) {
    std::string prefix = writeSample("rt" + std::to_string(code), code);
    auto ds = IndexedDataset::open(prefix);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ((*ds)->dtypeCode(), code);
    EXPECT_EQ((*ds)->numSequences(), 3);
    EXPECT_EQ((*ds)->numDocuments(), 3);
    EXPECT_EQ((*ds)->sequenceLengths(), (std::vector<int32_t>{3, 2, 4}));
    EXPECT_EQ((*ds)->documentIndex(0), 0);
    EXPECT_EQ((*ds)->documentIndex(1), 2);
    EXPECT_EQ((*ds)->documentIndex(2), 2); // the empty document
    EXPECT_EQ((*ds)->documentIndex(3), 3);
    EXPECT_EQ((*ds)->sequencePointer(2), 5 * dtypeCodeBytes(code));
    std::vector<int32_t> out(4);
    ASSERT_TRUE((*ds)->read(2, 0, 4, out.data()).ok());
    EXPECT_EQ(out, (std::vector<int32_t>{6, 7, 8, 9}));
    ASSERT_TRUE((*ds)->read(0, 1, 2, out.data()).ok());
    EXPECT_EQ(out[0], 2);
    EXPECT_EQ(out[1], 3);
    EXPECT_EQ(fs::file_size(prefix + ".bin"), size_t(9 * dtypeCodeBytes(code)));
    EXPECT_EQ(fs::file_size(prefix + ".idx"), size_t(kIndexHeaderBytes + 12 * 3 + 8 * 4));
  }
}

TEST(IndexedDataset, MegatronDtypeChoice) {
  EXPECT_EQ(optimalDtypeCode(50257), 8);
  EXPECT_EQ(optimalDtypeCode(65499), 8);
  EXPECT_EQ(optimalDtypeCode(65500), 4);
  EXPECT_STREQ(dtypeCodeName(8), "uint16");
  EXPECT_STREQ(dtypeCodeName(6), "float64");
}

TEST(IndexedDataset, ReadErrors) {
  std::string prefix = writeSample("readerr", 4);
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds.ok());
  std::vector<int32_t> out(8);
  absl::Status s = (*ds)->read(3, 0, 1, out.data());
  EXPECT_NE(s.message().find("sequence 3 outside [0, 3)"), std::string::npos) << s;
  s = (*ds)->read(1, 1, 2, out.data());
  EXPECT_NE(s.message().find("tokens [1, 3) outside sequence 1 of 2 tokens"), std::string::npos) << s;
  // A negative token in a signed dtype.
  std::string p2 = tempPrefix("negative");
  auto b = IndexedDatasetBuilder::create(p2, 3);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->addDocument({5, -2}, {2}).ok());
  ASSERT_TRUE((*b)->finalize().ok());
  auto neg = IndexedDataset::open(p2);
  ASSERT_TRUE(neg.ok());
  s = (*neg)->read(0, 0, 2, out.data());
  EXPECT_NE(s.message().find("token 1 of sequence 0 is -2"), std::string::npos) << s;
}

TEST(IndexedDataset, BuilderErrors) {
  EXPECT_NE(IndexedDatasetBuilder::create(tempPrefix("f"), 7).status().message().find(
                "code 7 (float32) is not an integer token dtype"),
            std::string::npos);
  auto b = IndexedDatasetBuilder::create(tempPrefix("b"), 8);
  ASSERT_TRUE(b.ok());
  absl::Status s = (*b)->addDocument({70000}, {1});
  EXPECT_NE(s.message().find("token 70000 does not fit the dtype uint16"), std::string::npos) << s;
  s = (*b)->addDocument({1, 2}, {1});
  EXPECT_NE(s.message().find("sequence lengths sum to 1, but the document has 2 tokens"),
            std::string::npos)
      << s;
  s = (*b)->addDocument({}, {-1, 1});
  EXPECT_NE(s.message().find("sequence length -1 is negative"), std::string::npos) << s;
  auto c = IndexedDatasetBuilder::create("/nonexistent-dir/x", 8);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(IndexedDataset, MissingFiles) {
  auto ds = IndexedDataset::open(tempPrefix("nothing-here"));
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find("nothing-here.idx' does not exist"), std::string::npos);
  std::string prefix = writeSample("nobin", 8);
  fs::remove(prefix + ".bin");
  ds = IndexedDataset::open(prefix);
  EXPECT_NE(ds.status().message().find("nobin.bin' does not exist"), std::string::npos);
}

TEST(IndexedDataset, EveryHeaderAndArrayFieldIsValidated) {
  std::string prefix = writeSample("fields", 8);
  const std::string idx = slurp(prefix + ".idx");
  const size_t lengths = kIndexHeaderBytes, pointers = lengths + 12, docs = pointers + 24;
  std::string m;

  expectIdxError(prefix, idx.substr(0, 20), "header: the file has 20 bytes, fewer than the 34-byte header");
  m = idx; m[0] = 'X';
  expectIdxError(prefix, m, "magic: the file does not start with");
  m = idx; poke<uint64_t>(m, 9, 2);
  expectIdxError(prefix, m, "version: 2, expected 1");
  m = idx; m[17] = 6;
  expectIdxError(prefix, m, "dtype: code 6 (float64) is not an integer token dtype");
  m = idx; m[17] = 9;
  expectIdxError(prefix, m, "dtype: code 9 (unknown)");
  m = idx; poke<uint64_t>(m, 18, uint64_t(1) << 62);
  expectIdxError(prefix, m, "sequence_count: 4611686018427387904 sequences need");
  m = idx; poke<uint64_t>(m, 26, 1000);
  expectIdxError(prefix, m, "document_count: 1000 document indices need");
  m = idx; poke<uint64_t>(m, 26, 2);
  expectIdxError(prefix, m, "size: the file has 102 bytes; sequence_count 3 and document_count 2 give 86");
  m = idx.substr(0, docs); poke<uint64_t>(m, 26, 0);
  expectIdxError(prefix, m, "document_count: 0, expected at least 1");
  m = idx; poke<int32_t>(m, lengths + 4, -1);
  expectIdxError(prefix, m, "sequence_lengths[1]: -1 is negative");
  m = idx; poke<int64_t>(m, pointers + 8, 3);
  expectIdxError(prefix, m, "sequence_pointers[1]: 3 is not a non-negative multiple of the 2-byte dtype uint16");
  m = idx; poke<int64_t>(m, pointers + 16, 12);
  expectIdxError(prefix, m, "sequence_pointers[2]: sequence 2 (4 tokens at byte 12) ends at byte 20, past the end of");
  m = idx; poke<int32_t>(m, lengths + 8, 5);
  expectIdxError(prefix, m, "sequence_pointers[2]: sequence 2 (5 tokens at byte 10) ends at byte 20");
  m = idx; poke<int64_t>(m, docs, 1);
  expectIdxError(prefix, m, "document_indices[0]: 1, expected 0");
  m = idx; poke<int64_t>(m, docs + 16, 1);
  expectIdxError(prefix, m, "document_indices[2]: 1 is smaller than document_indices[1] = 2");
  m = idx; poke<int64_t>(m, docs + 24, 2);
  expectIdxError(prefix, m, "document_indices[3]: 2, expected sequence_count 3");
  // A .bin shorter than the last sequence.
  std::string bin = slurp(prefix + ".bin");
  spit(prefix + ".bin", bin.substr(0, bin.size() - 1));
  auto ds = IndexedDataset::open(prefix);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("past the end of '" + prefix + ".bin' (17 bytes)"),
            std::string::npos)
      << ds.status();
  spit(prefix + ".bin", bin);
  // Multimodal files (one int8 mode per sequence after the document indices) are accepted.
  spit(prefix + ".idx", idx + std::string(3, '\0'));
  EXPECT_TRUE(IndexedDataset::open(prefix).ok());
}
