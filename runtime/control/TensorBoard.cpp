//===- TensorBoard.cpp - TensorBoard event files of scalar summaries --------===//

#include "runtime/control/TensorBoard.h"

#include "runtime/core/Crc32c.h"
#include "runtime/schema/tensorboard.pb.h"

#include "absl/strings/str_cat.h"

#include <chrono>
#include <filesystem>
#include <unistd.h>

namespace trainc::rt::control {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i)
    s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}
std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i)
    s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}

} // namespace

uint32_t maskedCrc32c(const std::string &data) {
  uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::create(
    const std::string &dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create --tensorboard-dir '", dir, "': ", ec.message()));
  char host[256] = "localhost";
  (void)::gethostname(host, sizeof(host) - 1);
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter());
  w->path_ = absl::StrCat(dir, "/events.out.tfevents.", int64_t(now()), ".", host, ".",
                          ::getpid());
  if (absl::Status s = w->file_.open(w->path_); !s.ok())
    return s;
  tensorboard::Event first;
  first.set_wall_time(now());
  first.set_file_version("brain.Event:2");
  if (absl::Status s = w->writeRecord(first.SerializeAsString()); !s.ok())
    return s;
  return w;
}

absl::Status TensorBoardWriter::writeRecord(const std::string &data) {
  std::string len = le64(data.size());
  return file_.write(absl::StrCat(len, le32(maskedCrc32c(len)), data, le32(maskedCrc32c(data))));
}

absl::Status TensorBoardWriter::addScalar(const std::string &tag, double value, int64_t step) {
  tensorboard::Event e;
  e.set_wall_time(now());
  e.set_step(step);
  tensorboard::SummaryValue *v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(float(value));
  return writeRecord(e.SerializeAsString());
}

} // namespace trainc::rt::control
