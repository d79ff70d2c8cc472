//===- Safetensors.h - Write and read safetensors files -------------------===//
//
// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header size N, N bytes of JSON header ({"name": {"dtype", "shape", "data_offsets": [begin,
// end]}, ..., optionally "__metadata__": {string: string}}), then the raw little-endian tensor
// bytes; data_offsets count bytes from the end of the header. Used by --dump-dir (weights) and by
// checkpoints (one file per rank).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CONTROL_SAFETENSORS_H
#define TRAINC_RUNTIME_CONTROL_SAFETENSORS_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace trainc::rt::control {

/// One tensor to write: dtype "F32" or "F64" (any safetensors dtype name is written as given),
/// shape in elements, bytes = numel(shape) x the dtype's size, little-endian.
struct NamedTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

/// How writeSafetensors writes.
struct SafetensorsWriteOptions {
  /// Write `path`.tmp, fsync it, rename it to `path` and fsync the directory: a crash leaves
  /// either the old file or the complete new one, never a partial file under `path`.
  bool durable = false;
  /// Called after each piece of the file (the 8-byte size, the header, every tensor) is written
  /// to `path`.tmp with the bytes written so far and the file's total; a test hook (checkpoints
  /// use it to stall an asynchronous write half-way). May be empty.
  std::function<void(uint64_t written, uint64_t total)> onProgress;
};

/// Writes `tensors` (in order, data contiguous) and `metadata` (the "__metadata__" entry, omitted
/// when empty) to `path`. Returns the number of bytes written. Errors name the path:
/// PermissionDenied when it cannot be created, DataLoss on a short write or a failed fsync or
/// rename.
absl::StatusOr<uint64_t> writeSafetensors(const std::string &path,
                                          const std::vector<NamedTensor> &tensors,
                                          const std::map<std::string, std::string> &metadata = {},
                                          const SafetensorsWriteOptions &options = {});

/// A safetensors file opened for reading: the header parsed and checked against the file's size.
class SafetensorsFile {
public:
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0; // bytes, from the start of the data section
  };

  /// Opens `path` and parses its header. Errors (each names the path, and the tensor and the
  /// field where one is at fault): NotFound when the file cannot be opened; DataLoss when it is
  /// shorter than its 8-byte size field or its header, when the header is not a JSON object of
  /// entries with "dtype" (a string), "shape" (non-negative integers) and "data_offsets" (two
  /// integers, begin <= end), when an entry's byte count differs from numel(shape) x the dtype's
  /// size (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL), or when the data section is
  /// shorter than the largest end offset ("truncated").
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string &path);
  ~SafetensorsFile();

  const std::string &path() const { return path_; }
  /// The entry named `name`, or null.
  const Entry *find(const std::string &name) const;
  const std::map<std::string, Entry> &entries() const { return entries_; }
  const std::map<std::string, std::string> &metadata() const { return metadata_; }
  uint64_t fileBytes() const { return fileBytes_; }

  /// Reads bytes [offset, offset + bytes) of tensor `name`'s data into `dst`. Errors: NotFound
  /// for an unknown tensor, OutOfRange for a range outside it, DataLoss on a short read.
  absl::Status read(const std::string &name, uint64_t offset, uint64_t bytes, void *dst) const;

private:
  SafetensorsFile() = default;
  std::string path_;
  int fd_ = -1;
  uint64_t fileBytes_ = 0, dataStart_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// The size in bytes of a safetensors dtype ("F32" -> 4), or 0 for an unknown name.
int safetensorsDtypeSize(const std::string &dtype);

/// Creates `path` with `contents` durably: writes `path`.tmp, fsyncs it, renames it to `path`
/// and fsyncs the directory. Errors name the path (PermissionDenied, DataLoss).
absl::Status writeFileDurably(const std::string &path, const std::string &contents);

/// fsyncs directory `dir` (so that renames inside it survive a crash). Errors name it.
absl::Status syncDirectory(const std::string &dir);

} // namespace trainc::rt::control

#endif
