//===- IndexedDataset.cpp - Megatron's .bin/.idx token files --------------===//

#include "runtime/data/IndexedDataset.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace trainc::rt::data {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

template <typename T> T load(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool isIntegerCode(int code) { return code >= 1 && code <= 5 ? true : code == 8; }

/// Maps `path` read-only. A zero-length file maps to (nullptr, 0).
absl::Status mapFile(const std::string &path, const uint8_t *&data, size_t &bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (fstat then refuses it).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT)
      return absl::NotFoundError(absl::StrCat("indexed dataset file '", path, "' does not exist"));
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open indexed dataset file '", path, "': ", std::strerror(e)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("indexed dataset file '", path, "' is not a regular file"));
  }
  bytes = size_t(st.st_size);
  data = nullptr;
  if (bytes > 0) {
    void *p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat("cannot map indexed dataset file '", path, "': ", std::strerror(e)));
    }
    data = static_cast<const uint8_t *>(p);
  }
  ::close(fd);
  return absl::OkStatus();
}

} // namespace

int dtypeCodeBytes(int code) {
  switch (code) {
  case 1: case 2: return 1;
  case 3: case 8: return 2;
  case 4: case 7: return 4;
  case 5: case 6: return 8;
  default: return 0;
  }
}

const char *dtypeCodeName(int code) {
  static const char *names[] = {"unknown", "uint8",   "int8",    "int16", "int32",
                                "int64",   "float64", "float32", "uint16"};
  return code >= 1 && code <= 8 ? names[code] : names[0];
}

int optimalDtypeCode(int64_t vocabSize) { return vocabSize < 65500 ? 8 : 4; }

IndexedDataset::~IndexedDataset() {
  if (idx_)
    ::munmap(const_cast<uint8_t *>(idx_), idxBytes_);
  if (bin_)
    ::munmap(const_cast<uint8_t *>(bin_), binBytes_);
}

absl::StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::open(const std::string &prefix) {
  std::unique_ptr<IndexedDataset> ds(new IndexedDataset());
  ds->prefix_ = prefix;
  const std::string idxPath = prefix + ".idx", binPath = prefix + ".bin";
  if (absl::Status s = mapFile(idxPath, ds->idx_, ds->idxBytes_); !s.ok())
    return s;
  if (absl::Status s = mapFile(binPath, ds->bin_, ds->binBytes_); !s.ok())
    return s;
  auto bad = [&](const std::string &field, const std::string &why) {
    return absl::InvalidArgumentError(
        absl::StrCat("indexed dataset index '", idxPath, "': ", field, ": ", why));
  };
  const uint8_t *p = ds->idx_;
  const uint64_t n = ds->idxBytes_;
  if (n < uint64_t(kIndexHeaderBytes))
    return bad("header", absl::StrCat("the file has ", n, " bytes, fewer than the ",
                                      kIndexHeaderBytes, "-byte header"));
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0)
    return bad("magic", "the file does not start with \"MMIDIDX\\0\\0\" (not a Megatron index)");
  uint64_t version = load<uint64_t>(p + 9);
  if (version != 1)
    return bad("version", absl::StrCat(version, ", expected 1"));
  int code = p[17];
  if (!isIntegerCode(code))
    return bad("dtype", absl::StrCat("code ", code, " (", dtypeCodeName(code),
                                     ") is not an integer token dtype (1-5 or 8)"));
  ds->dtypeCode_ = code;
  ds->dtypeBytes_ = dtypeCodeBytes(code);
  uint64_t seqCount = load<uint64_t>(p + 18), docCount = load<uint64_t>(p + 26);
  uint64_t room = n - uint64_t(kIndexHeaderBytes);
  if (seqCount > room / 12)
    return bad("sequence_count", absl::StrCat(seqCount, " sequences need ", seqCount, " x 12 bytes",
                                              " of lengths and pointers; the file has ", room,
                                              " bytes after the header"));
  uint64_t afterSeq = room - seqCount * 12;
  if (docCount > afterSeq / 8)
    return bad("document_count",
               absl::StrCat(docCount, " document indices need ", docCount, " x 8 bytes; the file has ",
                            afterSeq, " bytes after the sequence arrays"));
  uint64_t extra = afterSeq - docCount * 8;
  if (extra != 0 && extra != seqCount)
    return bad("size", absl::StrCat("the file has ", n, " bytes; sequence_count ", seqCount,
                                    " and document_count ", docCount, " give ",
                                    n - extra, " (or ", n - extra + seqCount,
                                    " with multimodal sequence modes)"));
  if (docCount == 0)
    return bad("document_count", "0, expected at least 1 (document_indices starts with 0)");
  ds->numSequences_ = int64_t(seqCount);
  ds->numDocIndices_ = int64_t(docCount);

  for (int64_t i = 0; i < ds->numSequences_; ++i) {
    int32_t len = ds->sequenceLength(i);
    if (len < 0)
      return bad(absl::StrCat("sequence_lengths[", i, "]"), absl::StrCat(len, " is negative"));
    int64_t ptr = ds->sequencePointer(i);
    if (ptr < 0 || ptr % ds->dtypeBytes_ != 0)
      return bad(absl::StrCat("sequence_pointers[", i, "]"),
                 absl::StrCat(ptr, " is not a non-negative multiple of the ", ds->dtypeBytes_,
                              "-byte dtype ", dtypeCodeName(code)));
    uint64_t end = uint64_t(ptr) + uint64_t(len) * uint64_t(ds->dtypeBytes_);
    if (end > ds->binBytes_)
      return bad(absl::StrCat("sequence_pointers[", i, "]"),
                 absl::StrCat("sequence ", i, " (", len, " tokens at byte ", ptr, ") ends at byte ",
                              end, ", past the end of '", binPath, "' (", ds->binBytes_, " bytes)"));
  }
  int64_t prev = 0;
  for (int64_t d = 0; d < ds->numDocIndices_; ++d) {
    int64_t v = ds->documentIndex(d);
    if (d == 0 && v != 0)
      return bad("document_indices[0]", absl::StrCat(v, ", expected 0"));
    if (v < prev)
      return bad(absl::StrCat("document_indices[", d, "]"),
                 absl::StrCat(v, " is smaller than document_indices[", d - 1, "] = ", prev));
    prev = v;
  }
  if (prev != ds->numSequences_)
    return bad(absl::StrCat("document_indices[", ds->numDocIndices_ - 1, "]"),
               absl::StrCat(prev, ", expected sequence_count ", ds->numSequences_));
  return ds;
}

int32_t IndexedDataset::sequenceLength(int64_t i) const {
  return load<int32_t>(idx_ + kIndexHeaderBytes + 4 * i);
}

int64_t IndexedDataset::sequencePointer(int64_t i) const {
  return load<int64_t>(idx_ + kIndexHeaderBytes + 4 * numSequences_ + 8 * i);
}

int64_t IndexedDataset::documentIndex(int64_t d) const {
  return load<int64_t>(idx_ + kIndexHeaderBytes + 12 * numSequences_ + 8 * d);
}

std::vector<int32_t> IndexedDataset::sequenceLengths() const {
  std::vector<int32_t> out(static_cast<size_t>(numSequences_));
  if (numSequences_ > 0)
    std::memcpy(out.data(), idx_ + kIndexHeaderBytes, size_t(numSequences_) * 4);
  return out;
}

absl::Status IndexedDataset::read(int64_t seq, int64_t offset, int64_t length,
                                  int32_t *out) const {
  if (seq < 0 || seq >= numSequences_)
    return absl::OutOfRangeError(absl::StrCat("'", prefix_, "': sequence ", seq, " outside [0, ",
                                              numSequences_, ")"));
  int64_t len = sequenceLength(seq);
  if (offset < 0 || length < 0 || offset > len || length > len - offset)
    return absl::OutOfRangeError(absl::StrCat("'", prefix_, "': tokens [", offset, ", ",
                                              offset + length, ") outside sequence ", seq, " of ",
                                              len, " tokens"));
  const uint8_t *p = bin_ + sequencePointer(seq) + offset * dtypeBytes_;
  auto check = [&](int64_t v, int64_t j) -> absl::Status {
    if (v < 0 || v > std::numeric_limits<int32_t>::max())
      return absl::OutOfRangeError(absl::StrCat("'", prefix_, ".bin': token ", offset + j,
                                                " of sequence ", seq, " is ", v,
                                                ", outside [0, 2^31)"));
    return absl::OkStatus();
  };
  switch (dtypeCode_) {
  case 1:
    for (int64_t j = 0; j < length; ++j)
      out[j] = p[j];
    break;
  case 8:
    for (int64_t j = 0; j < length; ++j)
      out[j] = load<uint16_t>(p + 2 * j);
    break;
  case 2:
    for (int64_t j = 0; j < length; ++j) {
      int64_t v = int8_t(p[j]);
      if (absl::Status s = check(v, j); !s.ok())
        return s;
      out[j] = int32_t(v);
    }
    break;
  case 3:
    for (int64_t j = 0; j < length; ++j) {
      int64_t v = load<int16_t>(p + 2 * j);
      if (absl::Status s = check(v, j); !s.ok())
        return s;
      out[j] = int32_t(v);
    }
    break;
  case 4:
    for (int64_t j = 0; j < length; ++j) {
      int64_t v = load<int32_t>(p + 4 * j);
      if (absl::Status s = check(v, j); !s.ok())
        return s;
      out[j] = int32_t(v);
    }
    break;
  case 5:
    for (int64_t j = 0; j < length; ++j) {
      int64_t v = load<int64_t>(p + 8 * j);
      if (absl::Status s = check(v, j); !s.ok())
        return s;
      out[j] = int32_t(v);
    }
    break;
  default:
    return absl::InternalError("unvalidated dtype code");
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// IndexedDatasetBuilder
//===----------------------------------------------------------------------===//

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (bin_)
    std::fclose(bin_);
}

absl::StatusOr<std::unique_ptr<IndexedDatasetBuilder>>
IndexedDatasetBuilder::create(const std::string &prefix, int dtypeCode) {
  if (!isIntegerCode(dtypeCode))
    return absl::InvalidArgumentError(absl::StrCat("dtype code ", dtypeCode, " (",
                                                   dtypeCodeName(dtypeCode),
                                                   ") is not an integer token dtype (1-5 or 8)"));
  std::unique_ptr<IndexedDatasetBuilder> b(new IndexedDatasetBuilder());
  b->prefix_ = prefix;
  b->dtypeCode_ = dtypeCode;
  b->dtypeBytes_ = dtypeCodeBytes(dtypeCode);
  std::string path = prefix + ".bin";
  b->bin_ = std::fopen(path.c_str(), "wb");
  if (!b->bin_)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create '", path, "': ", std::strerror(errno)));
  return b;
}

absl::Status IndexedDatasetBuilder::addDocument(const std::vector<int32_t> &tokens,
                                                const std::vector<int32_t> &lengths) {
  int64_t sum = 0;
  for (int32_t l : lengths) {
    if (l < 0)
      return absl::InvalidArgumentError(absl::StrCat("sequence length ", l, " is negative"));
    sum += l;
  }
  if (sum != int64_t(tokens.size()))
    return absl::InvalidArgumentError(absl::StrCat("sequence lengths sum to ", sum, ", but the document has ",
                                                   tokens.size(), " tokens"));
  int64_t lo = 0, hi = std::numeric_limits<int32_t>::max();
  switch (dtypeCode_) {
  case 1: hi = 255; break;
  case 2: lo = -128; hi = 127; break;
  case 3: lo = -32768; hi = 32767; break;
  case 8: hi = 65535; break;
  case 4: case 5: lo = std::numeric_limits<int32_t>::min(); break;
  }
  scratch_.resize(tokens.size() * size_t(dtypeBytes_));
  uint8_t *q = scratch_.data();
  for (size_t j = 0; j < tokens.size(); ++j) {
    int64_t v = tokens[j];
    if (v < lo || v > hi)
      return absl::InvalidArgumentError(absl::StrCat("token ", v, " does not fit the dtype ",
                                                     dtypeCodeName(dtypeCode_), " of '", prefix_,
                                                     ".bin'"));
    switch (dtypeBytes_) {
    case 1: { uint8_t x = uint8_t(v); std::memcpy(q + j, &x, 1); break; }
    case 2: { uint16_t x = uint16_t(v); std::memcpy(q + 2 * j, &x, 2); break; }
    case 4: { int32_t x = int32_t(v); std::memcpy(q + 4 * j, &x, 4); break; }
    case 8: { int64_t x = v; std::memcpy(q + 8 * j, &x, 8); break; }
    }
  }
  if (!scratch_.empty() && std::fwrite(scratch_.data(), 1, scratch_.size(), bin_) != scratch_.size())
    return absl::DataLossError(absl::StrCat("write to '", prefix_, ".bin' failed: ", std::strerror(errno)));
  for (int32_t l : lengths) {
    pointers_.push_back(binBytes_);
    lengths_.push_back(l);
    binBytes_ += int64_t(l) * dtypeBytes_;
  }
  docIndices_.push_back(int64_t(lengths_.size()));
  return absl::OkStatus();
}

absl::Status IndexedDatasetBuilder::finalize() {
  if (!bin_)
    return absl::FailedPreconditionError(absl::StrCat("'", prefix_, "' was finalized already"));
  int rc = std::fclose(bin_);
  bin_ = nullptr;
  if (rc != 0)
    return absl::DataLossError(absl::StrCat("closing '", prefix_, ".bin' failed: ", std::strerror(errno)));
  std::string path = prefix_ + ".idx";
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return absl::PermissionDeniedError(absl::StrCat("cannot create '", path, "': ", std::strerror(errno)));
  std::string head(kMagic, sizeof(kMagic));
  auto put = [&](const void *v, size_t k) { head.append(static_cast<const char *>(v), k); };
  uint64_t version = 1, s = lengths_.size(), d = docIndices_.size();
  uint8_t code = uint8_t(dtypeCode_);
  put(&version, 8);
  put(&code, 1);
  put(&s, 8);
  put(&d, 8);
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
  ok = ok && (s == 0 || std::fwrite(lengths_.data(), 4, s, f) == s);
  ok = ok && (s == 0 || std::fwrite(pointers_.data(), 8, s, f) == s);
  ok = ok && std::fwrite(docIndices_.data(), 8, d, f) == d;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok)
    return absl::DataLossError(absl::StrCat("write to '", path, "' failed: ", std::strerror(errno)));
  return absl::OkStatus();
}

} // namespace trainc::rt::data
