//===- TensorBoard.h - TensorBoard event files of scalar summaries ----------===//
//
// Megatron's training_log writes scalars through torch.utils.tensorboard's SummaryWriter; this
// writes the same files: `events.out.tfevents.<seconds>.<host>` in TFRecord framing (u64 length,
// masked CRC32C of the length, the serialized Event, masked CRC32C of it; masked(c) =
// ((c >> 15) | (c << 17)) + 0xa282ead8), the first record carrying file_version "brain.Event:2".
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CONTROL_TENSORBOARD_H
#define TRAINC_RUNTIME_CONTROL_TENSORBOARD_H

#include "runtime/core/Files.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <string>

namespace trainc::rt::control {

class TensorBoardWriter {
public:
  /// Creates `dir` if needed and a new event file in it. Errors name the directory or file.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> create(const std::string &dir);

  /// Appends one scalar summary (`tag`, `value` as float, at `step`). Errors: the write failed
  /// (the path and errno).
  absl::Status addScalar(const std::string &tag, double value, int64_t step);
  /// The event file's path.
  const std::string &path() const { return path_; }

private:
  TensorBoardWriter() = default;
  absl::Status writeRecord(const std::string &data);
  OutputFile file_;
  std::string path_;
};

/// TFRecord's masked CRC32C of `data` (exposed for tests).
uint32_t maskedCrc32c(const std::string &data);

} // namespace trainc::rt::control

#endif
