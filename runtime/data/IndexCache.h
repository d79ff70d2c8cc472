//===- IndexCache.h - GPTDataset indices cached on disk -------------------===//
//
// Megatron caches a GPTDataset's document, sample and shuffle indices (gpt_dataset.py
// _build_document_sample_shuffle_indices) in --data-cache-path, else next to the data in
// PREFIX/cache/GPTDataset_indices/, and reuses them on the next run. trainc does the same with its
// own file format (Megatron's files are named by an MD5 of a JSON description of its Python
// config, which trainc cannot reproduce; see docs/design.md):
//
//   <crc32c of the description, 8 hex>-GPTDataset-<split>-indices.bin
//     "TRGPTIDX", u32 version 1, u32 description length, the description (every input of the
//     indices: the prefix, the .idx size, the sequence count and a CRC32C of the sequence lengths,
//     the split's sequence range, samples, seq_length, seed), i64 num_epochs,
//     separate_final_epoch, tokens_per_epoch, the three array lengths, the arrays (document
//     int32, sample and shuffle int64, little-endian), u32 CRC32C of all bytes before it.
//
// A different input gives a different description, hence another file (a stale cache is never
// read); a file whose description, checksum, sizes or values do not check out is corrupt: it is
// rebuilt and replaced. Files are written to a temporary name and renamed, so concurrent ranks
// never read a partial file.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_DATA_INDEXCACHE_H
#define TRAINC_RUNTIME_DATA_INDEXCACHE_H

#include "runtime/data/GPTDataset.h"

#include "absl/status/statusor.h"

#include <optional>
#include <string>

namespace trainc::rt::data {

/// The description and file of one split's cached indices. `cacheDir` empty: PREFIX/cache/
/// GPTDataset_indices.
struct IndexCacheEntry {
  std::string description, path;
};
IndexCacheEntry gptIndexCacheEntry(const std::string &cacheDir, const IndexedDataset &data,
                                   const std::string &split, int64_t begin, int64_t end,
                                   int64_t numSamples, int64_t seqLength, uint32_t seed);

/// Reads the cached indices of `entry`: nullopt when the file does not exist; DataLoss (naming
/// the file and what is wrong) when it exists but is corrupt: truncated, another format or
/// version, another description, a checksum mismatch, or indices out of range for sequences
/// [begin, end) and `sequenceCount`.
absl::StatusOr<std::optional<GptIndices>> loadGptIndices(const IndexCacheEntry &entry,
                                                         int64_t begin, int64_t end);

/// Writes `indices` to entry.path (directories created; temporary file + rename). Errors
/// (PermissionDenied / Internal, naming the path and the system's reason): the directory or file
/// cannot be written.
absl::Status saveGptIndices(const IndexCacheEntry &entry, const GptIndices &indices);

} // namespace trainc::rt::data

#endif
