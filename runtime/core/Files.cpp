//===- Files.cpp - Output files written safely, input files checked first ----===//

#include "runtime/core/Files.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace trainc::rt {
namespace {

std::string errnoText(int e) { return std::strerror(e); }

/// Writes all of `data` to `fd`; 0 or the errno of the failure.
int writeAll(int fd, const char *data, size_t n) {
  while (n > 0) {
    ssize_t k = ::write(fd, data, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return k < 0 ? errno : EIO;
    data += k;
    n -= size_t(k);
  }
  return 0;
}

std::string directoryOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace

absl::Status checkRegularFile(const std::string &path, std::string_view what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    int e = errno;
    std::string msg = absl::StrCat("cannot read ", std::string(what), " file '", path, "': ", errnoText(e));
    return e == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  const char *kind = S_ISDIR(st.st_mode)                          ? "a directory"
                     : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                  : nullptr;
  if (kind)
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " file '", path, "' is ", kind, ", not a regular file"));
  return absl::OkStatus();
}

absl::Status writeFileAtomically(const std::string &path, std::string_view contents,
                                 bool durable) {
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  ::unlink(tmp.c_str()); // a leftover of a killed run with the same pid
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write '", path, "': ", errnoText(errno)));
  int e = writeAll(fd, contents.data(), contents.size());
  if (!e && durable && ::fsync(fd) != 0)
    e = errno;
  if (::close(fd) != 0 && !e)
    e = errno;
  if (!e && ::rename(tmp.c_str(), path.c_str()) != 0)
    e = errno;
  if (e) {
    ::unlink(tmp.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("cannot write '", path, "': ", errnoText(e)));
  }
  if (durable) {
    int dfd = ::open(directoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }
  return absl::OkStatus();
}

OutputFile::~OutputFile() { (void)close(); }

absl::Status OutputFile::open(const std::string &path) {
  (void)close();
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create '", path, "': ", errnoText(errno)));
  return absl::OkStatus();
}

absl::Status OutputFile::write(std::string_view data) {
  if (fd_ < 0)
    return absl::FailedPreconditionError(absl::StrCat("'", path_, "' is not open"));
  if (int e = writeAll(fd_, data.data(), data.size()))
    return absl::ResourceExhaustedError(absl::StrCat("cannot write '", path_, "': ", errnoText(e)));
  return absl::OkStatus();
}

absl::Status OutputFile::close() {
  if (fd_ < 0)
    return absl::OkStatus();
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot write '", path_, "': ", errnoText(errno)));
  return absl::OkStatus();
}

} // namespace trainc::rt
