//===- IndexCache.cpp - GPTDataset indices cached on disk -----------------===//

#include "runtime/data/IndexCache.h"

#include "runtime/core/Crc32c.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <unistd.h>

namespace trainc::rt::data {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'R', 'G', 'P', 'T', 'I', 'D', 'X'};
constexpr uint32_t kVersion = 1;

template <typename T> void put(std::string &out, T v) {
  out.append(reinterpret_cast<const char *>(&v), sizeof(T));
}

} // namespace

IndexCacheEntry gptIndexCacheEntry(const std::string &cacheDir, const IndexedDataset &data,
                                   const std::string &split, int64_t begin, int64_t end,
                                   int64_t numSamples, int64_t seqLength, uint32_t seed) {
  std::error_code ec;
  fs::path prefix = fs::absolute(data.prefix(), ec);
  std::vector<int32_t> lengths = data.sequenceLengths();
  uint32_t lengthsCrc = crc32c(std::string_view(reinterpret_cast<const char *>(lengths.data()),
                                                lengths.size() * sizeof(int32_t)));
  uintmax_t idxBytes = fs::file_size(data.prefix() + ".idx", ec);
  IndexCacheEntry e;
  e.description = absl::StrCat(
      "trainc GPTDataset indices v", kVersion, "\nprefix: ", prefix.string(),
      "\nidx_bytes: ", ec ? 0 : idxBytes, "\nsequences: ", lengths.size(),
      "\nsequence_lengths_crc32c: ", absl::Hex(lengthsCrc, absl::kZeroPad8), "\nsplit: ", split,
      "\nsequence_range: ", begin, " ", end, "\nnum_samples: ", numSamples,
      "\nseq_length: ", seqLength, "\nseed: ", seed, "\n");
  fs::path dir = cacheDir.empty() ? fs::path(data.prefix()) / "cache" / "GPTDataset_indices"
                                  : fs::path(cacheDir);
  e.path = (dir / absl::StrCat(absl::Hex(crc32c(e.description), absl::kZeroPad8),
                               "-GPTDataset-", split, "-indices.bin"))
               .string();
  return e;
}

absl::StatusOr<std::optional<GptIndices>> loadGptIndices(const IndexCacheEntry &e, int64_t begin,
                                                         int64_t end) {
  std::ifstream in(e.path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT)
      return std::optional<GptIndices>();
    return absl::DataLossError(absl::StrCat("index cache '", e.path, "' cannot be read: ",
                                            std::strerror(errno)));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  auto corrupt = [&](const std::string &why) {
    return absl::DataLossError(absl::StrCat("index cache '", e.path, "' is corrupt: ", why));
  };
  size_t at = 0;
  auto get = [&](auto &v) {
    if (at + sizeof(v) > bytes.size())
      return false;
    std::memcpy(&v, bytes.data() + at, sizeof(v));
    at += sizeof(v);
    return true;
  };
  if (bytes.size() < 20 + 4 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    return corrupt("not a trainc index cache (bad magic or truncated)");
  at = 8;
  uint32_t version = 0, descLen = 0;
  get(version);
  get(descLen);
  if (version != kVersion)
    return corrupt(absl::StrCat("version ", version, ", expected ", kVersion));
  uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  if (crc32c(std::string_view(bytes.data(), bytes.size() - 4)) != stored)
    return corrupt("checksum mismatch (truncated or modified)");
  if (at + descLen > bytes.size() - 4 ||
      std::string_view(bytes.data() + at, descLen) != e.description)
    return corrupt("its description differs from this run's inputs");
  at += descLen;
  GptIndices g;
  int64_t sep = 0, nDoc = 0, nSample = 0, nShuffle = 0;
  if (!get(g.numEpochs) || !get(sep) || !get(g.tokensPerEpoch) || !get(nDoc) || !get(nSample) ||
      !get(nShuffle))
    return corrupt("truncated header");
  g.separateFinalEpoch = sep != 0;
  if (nDoc < 0 || nSample < 2 || nSample % 2 || nShuffle < 0 || nSample / 2 != nShuffle + 1 ||
      uint64_t(nDoc) * 4 + uint64_t(nSample) * 8 + uint64_t(nShuffle) * 8 != bytes.size() - 4 - at)
    return corrupt(absl::StrCat("array lengths ", nDoc, "/", nSample, "/", nShuffle,
                                " do not match the file size ", bytes.size()));
  g.documentIndex.resize(size_t(nDoc));
  g.sampleIndex.resize(size_t(nSample));
  g.shuffleIndex.resize(size_t(nShuffle));
  std::memcpy(g.documentIndex.data(), bytes.data() + at, size_t(nDoc) * 4);
  at += size_t(nDoc) * 4;
  std::memcpy(g.sampleIndex.data(), bytes.data() + at, size_t(nSample) * 8);
  at += size_t(nSample) * 8;
  std::memcpy(g.shuffleIndex.data(), bytes.data() + at, size_t(nShuffle) * 8);
  for (int32_t d : g.documentIndex)
    if (d < begin || d >= end)
      return corrupt(absl::StrCat("document index entry ", d, " outside [", begin, ", ", end, ")"));
  for (int64_t i = 0; i < nSample; i += 2)
    if (g.sampleIndex[size_t(i)] < 0 || g.sampleIndex[size_t(i)] >= nDoc ||
        g.sampleIndex[size_t(i) + 1] < 0)
      return corrupt(absl::StrCat("sample index entry ", i / 2, " (", g.sampleIndex[size_t(i)],
                                  ", ", g.sampleIndex[size_t(i) + 1], ") out of range"));
  for (int64_t v : g.shuffleIndex)
    if (v < 0 || v >= nShuffle)
      return corrupt(absl::StrCat("shuffle index entry ", v, " outside [0, ", nShuffle, ")"));
  return std::optional<GptIndices>(std::move(g));
}

absl::Status saveGptIndices(const IndexCacheEntry &e, const GptIndices &g) {
  std::string out(kMagic, 8);
  put(out, kVersion);
  put(out, uint32_t(e.description.size()));
  out += e.description;
  put(out, g.numEpochs);
  put(out, int64_t(g.separateFinalEpoch));
  put(out, g.tokensPerEpoch);
  put(out, int64_t(g.documentIndex.size()));
  put(out, int64_t(g.sampleIndex.size()));
  put(out, int64_t(g.shuffleIndex.size()));
  out.append(reinterpret_cast<const char *>(g.documentIndex.data()), g.documentIndex.size() * 4);
  out.append(reinterpret_cast<const char *>(g.sampleIndex.data()), g.sampleIndex.size() * 8);
  out.append(reinterpret_cast<const char *>(g.shuffleIndex.data()), g.shuffleIndex.size() * 8);
  put(out, crc32c(out));
  fs::path path(e.path);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec)
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create the index cache directory '", path.parent_path().string(),
        "': ", ec.message()));
  std::string tmp = absl::StrCat(e.path, ".tmp.", ::getpid(), ".", std::random_device()());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f.write(out.data(), std::streamsize(out.size())) || !f.flush()) {
      std::string why = std::strerror(errno);
      fs::remove(tmp, ec);
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write the index cache '", tmp, "': ", why));
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return absl::InternalError(
        absl::StrCat("cannot rename '", tmp, "' to '", e.path, "': ", ec.message()));
  }
  return absl::OkStatus();
}

} // namespace trainc::rt::data
