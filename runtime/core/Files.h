//===- Files.h - Output files written safely, input files checked first ------===//
//
// The faults issue, item 5: outputs are written atomically (a temporary in the same directory,
// renamed over the target, so a reader never sees half a file and a pre-existing symlink at the
// target is replaced, not followed); a write error (a full disk) is reported at once with the
// path and errno; an input that is not a regular file (a FIFO, /dev/zero, a directory) is refused
// before it is opened, instead of blocking or reading without end.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_FILES_H
#define TRAINC_RUNTIME_CORE_FILES_H

#include "absl/status/status.h"

#include <string>
#include <string_view>

namespace trainc::rt {

/// Checks that `path` names a regular file (following symlinks). Errors: NotFound "cannot read
/// <what> file 'P': No such file or directory"; InvalidArgument "<what> file 'P' is a
/// directory|FIFO|device|socket, not a regular file".
absl::Status checkRegularFile(const std::string &path, std::string_view what);

/// Replaces `path` by a file holding `contents`: writes `path`.tmp.<pid> (created exclusively,
/// never through a symlink), fsyncs it when `durable`, renames it to `path` (and fsyncs the
/// directory when `durable`). On any error the temporary is removed and the old file is intact.
/// Errors name the path and errno: "cannot write 'P': No space left on device".
absl::Status writeFileAtomically(const std::string &path, std::string_view contents,
                                 bool durable = false);

/// A file written as the run goes (losses, batches): created or truncated without following a
/// symlink at `path`; every write is checked, so a full disk stops the run at the iteration that
/// hit it, with the path and errno.
class OutputFile {
public:
  OutputFile() = default;
  ~OutputFile();
  OutputFile(const OutputFile &) = delete;
  OutputFile &operator=(const OutputFile &) = delete;

  /// Errors: "cannot create 'P': <errno text>" ("Too many levels of symbolic links" for a
  /// symlink).
  absl::Status open(const std::string &path);
  bool isOpen() const { return fd_ >= 0; }
  /// Appends `data`. Errors: "cannot write 'P': <errno text>".
  absl::Status write(std::string_view data);
  /// Closes (reporting a deferred write error). Idempotent.
  absl::Status close();

private:
  int fd_ = -1;
  std::string path_;
};

} // namespace trainc::rt

#endif
