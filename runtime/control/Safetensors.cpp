//===- Safetensors.cpp - Write and read safetensors files -----------------===//

#include "runtime/control/Safetensors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace trainc::rt::control {

namespace {

std::string errnoText() { return std::strerror(errno); }

/// JSON string escaping for names and metadata values.
std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      out += {'\\', c};
    else if (u < 0x20)
      absl::StrAppend(&out, "\\u00", u < 16 ? "0" : "", absl::Hex(u));
    else
      out += c;
  }
  return out + "\"";
}

absl::Status writeAll(int fd, const char *data, size_t n, const std::string &path) {
  while (n > 0) {
    ssize_t k = ::write(fd, data, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return absl::DataLossError(absl::StrCat("short write to '", path, "': ", errnoText()));
    data += k;
    n -= size_t(k);
  }
  return absl::OkStatus();
}

std::string parentDir(const std::string &path) {
  std::string p = std::filesystem::path(path).parent_path().string();
  return p.empty() ? "." : p;
}

/// Writes the pieces to `path` through `path`.tmp and a rename (never through a symlink at
/// `path`), fsyncing file and directory when durable.
absl::Status writePieces(const std::string &path, const std::vector<std::string_view> &pieces,
                         bool durable,
                         const std::function<void(uint64_t, uint64_t)> &onProgress = {}) {
  std::string target = path + ".tmp";
  ::unlink(target.c_str());
  int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::PermissionDeniedError(absl::StrCat("cannot write '", target, "': ", errnoText()));
  absl::Status s = absl::OkStatus();
  uint64_t total = 0, written = 0;
  for (std::string_view p : pieces)
    total += p.size();
  for (std::string_view p : pieces)
    if (s.ok()) {
      s = writeAll(fd, p.data(), p.size(), target);
      written += p.size();
      if (s.ok() && onProgress)
        onProgress(written, total);
    }
  if (s.ok() && durable && ::fsync(fd) != 0)
    s = absl::DataLossError(absl::StrCat("fsync of '", target, "' failed: ", errnoText()));
  if (::close(fd) != 0 && s.ok())
    s = absl::DataLossError(absl::StrCat("closing '", target, "' failed: ", errnoText()));
  if (!s.ok()) {
    ::unlink(target.c_str());
    return s;
  }
  if (::rename(target.c_str(), path.c_str()) != 0)
    return absl::DataLossError(
        absl::StrCat("cannot rename '", target, "' to '", path, "': ", errnoText()));
  return durable ? syncDirectory(parentDir(path)) : absl::OkStatus();
}

} // namespace

int safetensorsDtypeSize(const std::string &d) {
  if (d == "F64" || d == "I64" || d == "U64")
    return 8;
  if (d == "F32" || d == "I32" || d == "U32")
    return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16")
    return 2;
  if (d == "I8" || d == "U8" || d == "BOOL")
    return 1;
  return 0;
}

absl::Status syncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return absl::DataLossError(absl::StrCat("cannot open directory '", dir, "': ", errnoText()));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0)
    return absl::DataLossError(absl::StrCat("fsync of directory '", dir, "' failed: ", errnoText()));
  return absl::OkStatus();
}

absl::Status writeFileDurably(const std::string &path, const std::string &contents) {
  return writePieces(path, {contents}, true);
}

absl::StatusOr<uint64_t> writeSafetensors(const std::string &path,
                                          const std::vector<NamedTensor> &tensors,
                                          const std::map<std::string, std::string> &metadata,
                                          const SafetensorsWriteOptions &options) {
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it)
      absl::StrAppend(&header, it == metadata.begin() ? "" : ",", jsonString(it->first), ":",
                      jsonString(it->second));
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const NamedTensor &t : tensors) {
    absl::StrAppend(&header, first ? "" : ",", jsonString(t.name), ":{\"dtype\":\"", t.dtype,
                    "\",\"shape\":[", absl::StrJoin(t.shape, ","), "],\"data_offsets\":[",
                    offset, ",", offset + t.bytes.size(), "]}");
    offset += t.bytes.size();
    first = false;
  }
  header += "}";
  while (header.size() % 8)
    header += ' ';
  char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    len[i] = char((n >> (8 * i)) & 0xff);
  std::vector<std::string_view> pieces = {std::string_view(len, 8), header};
  for (const NamedTensor &t : tensors)
    pieces.push_back(t.bytes);
  if (absl::Status s = writePieces(path, pieces, options.durable, options.onProgress); !s.ok())
    return s;
  return 8 + n + offset;
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0)
    ::close(fd_);
}

const SafetensorsFile::Entry *SafetensorsFile::find(const std::string &name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string &path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", errnoText()));
  struct stat st {};
  if (::fstat(f->fd_, &st) != 0)
    return absl::DataLossError(absl::StrCat(path, ": cannot stat: ", errnoText()));
  f->fileBytes_ = uint64_t(st.st_size);
  auto bad = [&](const std::string &what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  if (f->fileBytes_ < 8)
    return bad(absl::StrCat("truncated: ", f->fileBytes_,
                            " bytes, shorter than the 8-byte header size"));
  unsigned char len[8];
  if (::pread(f->fd_, len, 8, 0) != 8)
    return bad("cannot read the header size");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(len[i]) << (8 * i);
  if (n > f->fileBytes_ - 8)
    return bad(absl::StrCat("truncated: the header size field says ", n, " bytes, the file has ",
                            f->fileBytes_ - 8, " after it"));
  std::string header(n, '\0');
  if (n && ::pread(f->fd_, header.data(), n, 8) != ssize_t(n))
    return bad("cannot read the header");
  f->dataStart_ = 8 + n;
  google::protobuf::Struct json;
  if (auto s = google::protobuf::util::JsonStringToMessage(header, &json); !s.ok())
    return bad(absl::StrCat("the header is not a JSON object: ", s.ToString()));
  auto integer = [](const google::protobuf::Value &v, int64_t &out) {
    if (v.kind_case() != google::protobuf::Value::kNumberValue)
      return false;
    double d = v.number_value();
    if (!(d >= 0) || d > 9007199254740992.0 || std::floor(d) != d)
      return false;
    out = int64_t(d);
    return true;
  };
  uint64_t maxEnd = 0;
  for (const auto &[name, value] : json.fields()) {
    if (name == "__metadata__") {
      if (value.kind_case() != google::protobuf::Value::kStructValue)
        return bad("field __metadata__ is not an object");
      for (const auto &[k, v] : value.struct_value().fields()) {
        if (v.kind_case() != google::protobuf::Value::kStringValue)
          return bad(absl::StrCat("field __metadata__.", k, " is not a string"));
        f->metadata_[k] = v.string_value();
      }
      continue;
    }
    std::string where = absl::StrCat("tensor '", name, "'");
    if (value.kind_case() != google::protobuf::Value::kStructValue)
      return bad(absl::StrCat(where, " is not an object"));
    const auto &fields = value.struct_value().fields();
    Entry e;
    auto dt = fields.find("dtype");
    if (dt == fields.end() || dt->second.kind_case() != google::protobuf::Value::kStringValue)
      return bad(absl::StrCat(where, ": field dtype is missing or not a string"));
    e.dtype = dt->second.string_value();
    int esize = safetensorsDtypeSize(e.dtype);
    if (esize == 0)
      return bad(absl::StrCat(where, ": field dtype '", e.dtype, "' is not a safetensors dtype"));
    auto sh = fields.find("shape");
    if (sh == fields.end() || sh->second.kind_case() != google::protobuf::Value::kListValue)
      return bad(absl::StrCat(where, ": field shape is missing or not a list"));
    uint64_t numel = 1;
    for (const google::protobuf::Value &d : sh->second.list_value().values()) {
      int64_t x;
      if (!integer(d, x))
        return bad(absl::StrCat(where, ": field shape has an entry that is not a non-negative "
                                       "integer"));
      e.shape.push_back(x);
      numel *= uint64_t(x);
    }
    auto off = fields.find("data_offsets");
    int64_t b = 0, en = 0;
    if (off == fields.end() || off->second.kind_case() != google::protobuf::Value::kListValue ||
        off->second.list_value().values_size() != 2 ||
        !integer(off->second.list_value().values(0), b) ||
        !integer(off->second.list_value().values(1), en) || b > en)
      return bad(absl::StrCat(where, ": field data_offsets is not [begin, end] with begin <= end"));
    e.begin = uint64_t(b);
    e.end = uint64_t(en);
    if (e.end - e.begin != numel * uint64_t(esize))
      return bad(absl::StrCat(where, ": field data_offsets spans ", e.end - e.begin,
                              " bytes, but shape [", absl::StrJoin(e.shape, ", "), "] of ",
                              e.dtype, " needs ", numel * uint64_t(esize)));
    maxEnd = std::max(maxEnd, e.end);
    f->entries_[name] = std::move(e);
  }
  if (f->fileBytes_ - f->dataStart_ < maxEnd)
    return bad(absl::StrCat("truncated: the header's data_offsets end at byte ", maxEnd,
                            " of the data, the file has ", f->fileBytes_ - f->dataStart_,
                            " data bytes"));
  return f;
}

absl::Status SafetensorsFile::read(const std::string &name, uint64_t offset, uint64_t bytes,
                                   void *dst) const {
  const Entry *e = find(name);
  if (!e)
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", name, "'"));
  if (offset > e->end - e->begin || bytes > e->end - e->begin - offset)
    return absl::OutOfRangeError(absl::StrCat(path_, ": tensor '", name, "': bytes [", offset,
                                              ", ", offset + bytes, ") are outside its ",
                                              e->end - e->begin, " bytes"));
  char *p = static_cast<char *>(dst);
  uint64_t pos = dataStart_ + e->begin + offset;
  while (bytes > 0) {
    ssize_t k = ::pread(fd_, p, bytes, off_t(pos));
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return absl::DataLossError(absl::StrCat(path_, ": short read of tensor '", name, "'"));
    p += k;
    pos += uint64_t(k);
    bytes -= uint64_t(k);
  }
  return absl::OkStatus();
}

} // namespace trainc::rt::control
