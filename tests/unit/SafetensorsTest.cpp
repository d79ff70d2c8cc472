//===- SafetensorsTest.cpp - The safetensors writer and reader ------------===//

#include "runtime/control/Safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace trainc::rt::control;

namespace {

std::string tmpPath(const std::string &name) {
  std::string dir = ::testing::TempDir() + "/safetensors_test";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

/// Writes a file of an 8-byte size field and `header`, then `data`.
void writeRaw(const std::string &path, const std::string &header, const std::string &data,
              int64_t sizeField = -1) {
  uint64_t n = sizeField < 0 ? header.size() : uint64_t(sizeField);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i)
    f.put(char((n >> (8 * i)) & 0xff));
  f << header << data;
}

std::string openError(const std::string &path) {
  auto f = SafetensorsFile::open(path);
  EXPECT_FALSE(f.ok());
  return f.ok() ? "" : std::string(f.status().message());
}

} // namespace

// Tests that a written file reads back: entries, shapes, offsets, metadata, bytes, and that a
// durable write leaves no temporary file.
TEST(SafetensorsTest, RoundTrip) {
  std::string path = tmpPath("round.safetensors");
  std::vector<NamedTensor> t = {{"a.weight", "F32", {2, 2}, floats({1, 2, 3, 4})},
                                {"b \"quoted\"", "F32", {1}, floats({5})}};
  SafetensorsWriteOptions w;
  w.durable = true;
  absl::StatusOr<uint64_t> bytes = writeSafetensors(path, t, {{"format", "x"}}, w);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(*bytes, std::filesystem::file_size(path));
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata().at("format"), "x");
  ASSERT_EQ((*f)->entries().size(), 2u);
  const SafetensorsFile::Entry *a = (*f)->find("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a->end - a->begin, 16u);
  float x[2];
  ASSERT_TRUE((*f)->read("a.weight", 8, 8, x).ok());
  EXPECT_EQ(x[0], 3);
  EXPECT_EQ(x[1], 4);
  ASSERT_TRUE((*f)->read("b \"quoted\"", 0, 4, x).ok());
  EXPECT_EQ(x[0], 5);
  EXPECT_EQ((*f)->read("a.weight", 12, 8, x).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*f)->read("nope", 0, 4, x).code(), absl::StatusCode::kNotFound);
}

// Tests that every malformed file is refused with a message naming the file and the field.
TEST(SafetensorsTest, RefusesMalformedFiles) {
  std::string p = tmpPath("bad.safetensors");
  EXPECT_NE(openError(tmpPath("absent.safetensors")).find("absent.safetensors: cannot open"),
            std::string::npos);

  std::ofstream(p, std::ios::trunc) << "abc";
  EXPECT_NE(openError(p).find("bad.safetensors: truncated: 3 bytes, shorter than the 8-byte "
                              "header size"),
            std::string::npos);

  writeRaw(p, "{}", "", 100);
  EXPECT_NE(openError(p).find("truncated: the header size field says 100 bytes, the file has 2"),
            std::string::npos);

  writeRaw(p, "not json", "");
  EXPECT_NE(openError(p).find("the header is not a JSON object"), std::string::npos);

  writeRaw(p, R"({"t":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})", "abcd");
  EXPECT_NE(openError(p).find("tensor 't': field dtype 'Q7' is not a safetensors dtype"),
            std::string::npos);

  writeRaw(p, R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "abcd");
  EXPECT_NE(openError(p).find("tensor 't': field shape has an entry that is not a non-negative "
                              "integer"),
            std::string::npos);

  writeRaw(p, R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "abcd");
  EXPECT_NE(openError(p).find("tensor 't': field data_offsets is not [begin, end]"),
            std::string::npos);

  writeRaw(p, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd");
  EXPECT_NE(openError(p).find("tensor 't': field data_offsets spans 4 bytes, but shape [2] of "
                              "F32 needs 8"),
            std::string::npos);

  writeRaw(p, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd");
  EXPECT_NE(openError(p).find("truncated: the header's data_offsets end at byte 8 of the data, "
                              "the file has 4 data bytes"),
            std::string::npos);

  writeRaw(p, R"({"__metadata__":{"k":1}})", "");
  EXPECT_NE(openError(p).find("field __metadata__.k is not a string"), std::string::npos);

  writeRaw(p, R"({"t":{"shape":[1],"data_offsets":[0,4]}})", "abcd");
  EXPECT_NE(openError(p).find("tensor 't': field dtype is missing or not a string"),
            std::string::npos);
}

// Tests that a write into a missing directory names the path.
TEST(SafetensorsTest, WriteErrorsNameThePath) {
  absl::StatusOr<uint64_t> s =
      writeSafetensors(tmpPath("no/such/dir/x.safetensors"), {}, {}, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("cannot write '"), std::string::npos);
  EXPECT_NE(s.status().message().find("no/such/dir/x.safetensors"), std::string::npos);
}

// Tests the write progress hook: called after every piece (size field, header, each tensor) with
// the bytes so far, ending at the file's size, while the data goes to the .tmp file.
TEST(SafetensorsTest, ProgressHookSeesEveryPiece) {
  std::string path = tmpPath("progress.safetensors");
  std::vector<NamedTensor> t = {{"a", "F32", {2}, floats({1, 2})}, {"b", "F32", {1}, floats({3})}};
  std::vector<uint64_t> seen;
  uint64_t total = 0;
  bool tmpExisted = true;
  SafetensorsWriteOptions w;
  w.durable = true;
  w.onProgress = [&](uint64_t written, uint64_t all) {
    seen.push_back(written);
    total = all;
    tmpExisted = tmpExisted && std::filesystem::exists(path + ".tmp") &&
                 std::filesystem::file_size(path + ".tmp") == written;
  };
  absl::StatusOr<uint64_t> bytes = writeSafetensors(path, t, {}, w);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0], 8u);
  EXPECT_EQ(seen.back(), *bytes);
  EXPECT_EQ(total, *bytes);
  EXPECT_TRUE(tmpExisted);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}
