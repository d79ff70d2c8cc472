//===- Program.cpp - Program file I/O and the validator ------------------===//

#include "runtime/core/Program.h"

#include "runtime/core/Files.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "runtime/core/Backend.h"
#include "runtime/core/Crc32c.h"
#include "runtime/core/Resolve.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

namespace trainc::rt {

schema::ScalarRole scalarRoleOfName(std::string_view name) {
  static const std::pair<std::string_view, schema::ScalarRole> roles[] = {
      {"lr", schema::LR},
      {"weight_decay", schema::WEIGHT_DECAY},
      {"step", schema::STEP},
      {"loss_sum", schema::LOSS_SUM},
      {"num_tokens", schema::NUM_TOKENS},
      {"grad_norm", schema::GRAD_NORM},
      {"update_successful", schema::UPDATE_SUCCESSFUL},
      {"loss_scale", schema::LOSS_SCALE},
      {"loss_scale_growth_tracker", schema::LOSS_SCALE_GROWTH_TRACKER},
      {"loss_scale_hysteresis_tracker", schema::LOSS_SCALE_HYSTERESIS_TRACKER}};
  for (auto [n, role] : roles)
    if (name == n)
      return role;
  return schema::SCALAR_ROLE_UNSPECIFIED;
}

schema::BufferKind scalarRoleKind(schema::ScalarRole role) {
  return role == schema::LR || role == schema::WEIGHT_DECAY || role == schema::STEP ||
                 role == schema::LOSS_SCALE || role == schema::LOSS_SCALE_GROWTH_TRACKER ||
                 role == schema::LOSS_SCALE_HYSTERESIS_TRACKER
             ? schema::SCALAR
             : schema::OUTPUT;
}

//===----------------------------------------------------------------------===//
// File format
//===----------------------------------------------------------------------===//

namespace {
void putLE(std::string &s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    s.push_back(char((v >> (8 * i)) & 0xff));
}
uint64_t getLE(std::string_view s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t(uint8_t(s[at + i])) << (8 * i);
  return v;
}
std::string hex32(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", unsigned(v));
  return buf;
}
std::string supportedVersions() {
  return kMinFileFormatVersion == kFormatVersion
             ? absl::StrCat("version ", kFormatVersion)
             : absl::StrCat("versions ", kMinFileFormatVersion, " to ", kFormatVersion);
}
} // namespace

std::string serializeProgram(const schema::Program &program) {
  // Deterministic: map fields (metadata, entry points) in key order, so that one plan compiled
  // twice gives the same bytes and the same checksum.
  auto serialize = [](const schema::Program &p) {
    std::string payload;
    {
      google::protobuf::io::StringOutputStream sos(&payload);
      google::protobuf::io::CodedOutputStream cos(&sos);
      cos.SetSerializationDeterministic(true);
      p.SerializeToCodedStream(&cos);
    }
    return payload;
  };
  uint32_t version = program.format_version();
  std::string payload;
  if (version == 0) {
    schema::Program copy = program;
    copy.set_format_version(version = kFormatVersion);
    payload = serialize(copy);
  } else {
    payload = serialize(program);
  }
  std::string out(kProgramMagic, 8);
  putLE(out, version, 4);
  putLE(out, crc32c(payload), 4);
  putLE(out, payload.size(), 8);
  out += payload;
  return out;
}

absl::Status writeProgramFile(const schema::Program &program, const std::string &path) {
  return writeFileAtomically(path, serializeProgram(program));
}

absl::StatusOr<schema::Program> parseProgram(std::string_view bytes) {
  if (bytes.size() < kProgramHeaderSize)
    return absl::DataLossError(absl::StrCat("program truncated: ", bytes.size(),
                                            " bytes, shorter than the ", kProgramHeaderSize,
                                            "-byte header"));
  if (bytes.substr(0, 8) != std::string_view(kProgramMagic, 8))
    return absl::InvalidArgumentError(
        "not a trainc program: the file does not start with the magic \"TRAINCPG\"");
  uint32_t version = uint32_t(getLE(bytes, 8, 4));
  if (version > kFormatVersion)
    return absl::InvalidArgumentError(
        absl::StrCat("program format version ", version, " is not supported: this runtime reads ",
                     supportedVersions(), " (recompile the plan with a matching trainc)"));
  if (version < kMinFileFormatVersion)
    return absl::InvalidArgumentError(absl::StrCat(
        "program format version ", version, " is not supported: this runtime reads ",
        supportedVersions(), ", and files before version ", kMinFileFormatVersion,
        " have no payload checksum (recompile the plan with trainc compile)"));
  uint64_t size = getLE(bytes, 16, 8);
  uint64_t have = bytes.size() - kProgramHeaderSize;
  if (have < size)
    return absl::DataLossError(absl::StrCat("program truncated: header says ", size,
                                            " payload bytes, the file has ", have));
  if (have > size)
    return absl::DataLossError(absl::StrCat("program has ", have - size,
                                            " trailing bytes after the ", size,
                                            "-byte payload"));
  uint32_t stored = uint32_t(getLE(bytes, 12, 4));
  uint32_t computed = crc32c(bytes.substr(kProgramHeaderSize));
  if (computed != stored)
    return absl::DataLossError(absl::StrCat("payload checksum ", hex32(computed),
                                            " does not match the header's ", hex32(stored),
                                            " (the file is corrupted)"));
  schema::Program p;
  if (!p.ParseFromArray(bytes.data() + kProgramHeaderSize, int(size)))
    return absl::DataLossError("program payload is not a valid schema.Program message");
  if (p.format_version() != version)
    return absl::InvalidArgumentError(absl::StrCat("program header version ", version,
                                                   " differs from its format_version ",
                                                   p.format_version()));
  return p;
}

absl::StatusOr<schema::Program> readProgramFile(const std::string &path) {
  if (absl::Status s = checkRegularFile(path, "program"); !s.ok())
    return s;
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return absl::NotFoundError(absl::StrCat("cannot open program file '", path, "'"));
  std::stringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<schema::Program> p = parseProgram(ss.str());
  if (!p.ok())
    return absl::Status(p.status().code(), absl::StrCat(path, ": ", p.status().message()));
  return p;
}

//===----------------------------------------------------------------------===//
// Operand and attribute decoding
//===----------------------------------------------------------------------===//

std::string resolveOperand(const schema::Program &p, const schema::Function &fn,
                           const schema::Operand &op, ResolvedOperand &out) {
  DType dtype;
  const google::protobuf::RepeatedField<int64_t> *baseShape;
  std::string baseName;
  switch (op.base_case()) {
  case schema::Operand::kBuffer:
    if (op.buffer() >= uint32_t(p.buffers_size()))
      return absl::StrCat("buffer index ", op.buffer(), " is outside the buffer table (",
                          p.buffers_size(), " buffers)");
    out.isArg = false;
    out.base = op.buffer();
    dtype = toDType(p.buffers(op.buffer()).dtype());
    baseShape = &p.buffers(op.buffer()).shape();
    baseName = absl::StrCat("buffer '", p.buffers(op.buffer()).name(), "'");
    break;
  case schema::Operand::kArg:
    if (op.arg() >= uint32_t(fn.args_size()))
      return absl::StrCat("argument index ", op.arg(), " is outside the function's ",
                          fn.args_size(), " arguments");
    out.isArg = true;
    out.base = op.arg();
    dtype = toDType(fn.args(op.arg()).dtype());
    baseShape = &fn.args(op.arg()).shape();
    baseName = absl::StrCat("argument '", fn.args(op.arg()).name(), "'");
    break;
  default:
    return "operand names neither a buffer nor an argument";
  }
  TensorView base;
  if (!makeView(dtype, baseShape->data(), baseShape->size(), base))
    return absl::StrCat(baseName, " has an invalid shape");
  if (op.whole()) {
    out.elemOffset = 0;
    out.view = base;
    return "";
  }
  if (!makeView(dtype, op.shape().data(), op.shape().size(), out.view))
    return absl::StrCat("invalid operand shape ", shapeString(op.shape().data(), op.shape().size()),
                        " (rank <= ", kMaxRank, ", dims >= 0, at most 2^50 elements)");
  out.elemOffset = op.offset();
  if (op.offset() > uint64_t(base.numel) || uint64_t(out.view.numel) > base.numel - op.offset())
    return absl::StrCat("offset ", op.offset(), " + ", out.view.numel, " elements (shape ",
                        out.view.shapeString(), ") exceeds ", baseName, " of ", base.numel,
                        " elements");
  return "";
}

std::string decodeAttrs(const KernelSignature &sig,
                        const google::protobuf::RepeatedPtrField<schema::Attr> &attrs,
                        Attrs &out) {
  size_t n = sig.attrs.size();
  out.scalars.assign(n, 0);
  out.lists.assign(n, {});
  std::vector<bool> seen(n, false);
  for (size_t k = 0; k < n; ++k)
    out.scalars[k] = sig.attrs[k].defaultValue;
  for (const schema::Attr &a : attrs) {
    int k = attrIndex(sig, a.name());
    if (k < 0) {
      std::string known;
      for (const AttrSpec &s : sig.attrs)
        known += absl::StrCat(known.empty() ? "" : ", ", s.name);
      return absl::StrCat("unknown attribute '", a.name(), "' (kernel '", sig.name,
                          "' takes: ", known.empty() ? "none" : known, ")");
    }
    if (seen[k])
      return absl::StrCat("attribute '", a.name(), "' given twice");
    seen[k] = true;
    const AttrSpec &s = sig.attrs[k];
    const schema::AttrValue &v = a.value();
    switch (s.type) {
    case AttrType::Int:
      if (v.value_case() == schema::AttrValue::kI)
        out.scalars[k] = double(v.i());
      else
        return absl::StrCat("attribute '", a.name(), "': expected an integer");
      break;
    case AttrType::Float:
      if (v.value_case() == schema::AttrValue::kF)
        out.scalars[k] = v.f();
      else if (v.value_case() == schema::AttrValue::kI)
        out.scalars[k] = double(v.i());
      else
        return absl::StrCat("attribute '", a.name(), "': expected a number");
      break;
    case AttrType::Ints:
      if (v.value_case() != schema::AttrValue::kInts)
        return absl::StrCat("attribute '", a.name(), "': expected a list of integers");
      out.lists[k].assign(v.ints().values().begin(), v.ints().values().end());
      break;
    }
  }
  for (size_t k = 0; k < n; ++k)
    if (sig.attrs[k].required && !seen[k])
      return absl::StrCat("missing required attribute '", sig.attrs[k].name, "'");
  return "";
}

std::string describeInstruction(const schema::Program &p, int function, int index) {
  std::string s;
  if (function >= 0 && function < p.functions_size())
    s = absl::StrCat("function '", p.functions(function).name(), "' instruction ", index);
  else
    s = absl::StrCat("function #", function, " instruction ", index);
  if (function >= 0 && function < p.functions_size() && index >= 0 &&
      index < p.functions(function).body_size()) {
    uint32_t loc = p.functions(function).body(index).loc();
    if (loc < uint32_t(p.locations_size())) {
      const schema::Location &l = p.locations(loc);
      absl::StrAppend(&s, " (loc ", l.file().empty() ? "?" : l.file(), ":", l.line(), ":",
                      l.column(), l.op().empty() ? "" : " ", l.op(), ")");
    }
  }
  return s;
}

std::optional<MatmulDims> matmulDims(const schema::Program &p, int function,
                                     const schema::KernelCall &call) {
  const KernelSignature *sig = findKernelSignature("matmul");
  if (call.kernel() != "matmul" || call.inputs_size() < 2 || function < 0 ||
      function >= p.functions_size() || !sig)
    return std::nullopt;
  const schema::Function &fn = p.functions(function);
  ResolvedOperand a, b;
  Attrs attrs;
  if (!resolveOperand(p, fn, call.inputs(0), a).empty() ||
      !resolveOperand(p, fn, call.inputs(1), b).empty() || a.view.rank < 2 || b.view.rank < 2 ||
      !decodeAttrs(*sig, call.attrs(), attrs).empty())
    return std::nullopt;
  // Attribute order of the signature: trans_a, trans_b, alpha, beta.
  MatmulDims d;
  d.transA = attrs.i(0) != 0;
  d.transB = attrs.i(1) != 0;
  d.accumulate = attrs.f(3) != 0;
  d.m = a.view.dim(d.transA ? -1 : -2);
  d.k = a.view.dim(d.transA ? -2 : -1);
  d.n = b.view.dim(d.transB ? -2 : -1);
  for (int i = 0; i + 2 < a.view.rank; ++i)
    d.batch *= a.view.dims[i];
  d.flops = 2.0 * double(d.batch) * double(d.m) * double(d.n) * double(d.k);
  return d;
}

//===----------------------------------------------------------------------===//
// Validator
//===----------------------------------------------------------------------===//

namespace {

/// An absolute byte range in the arena.
struct Range {
  uint64_t begin = 0, end = 0;
  bool overlaps(const Range &o) const { return begin < o.end && o.begin < end && begin != end && o.begin != o.end; }
  bool operator==(const Range &o) const { return begin == o.begin && end == o.end; }
};

class Validator {
public:
  Validator(const schema::Program &p, const Backend *backend) : p(p), backend(backend) {}

  absl::Status run();

private:
  absl::Status err(int fn, int idx, const std::string &m) {
    return absl::InvalidArgumentError(absl::StrCat(describeInstruction(p, fn, idx), ": ", m));
  }
  absl::Status top(const std::string &m) { return absl::InvalidArgumentError(m); }

  absl::Status checkHeader();
  absl::Status checkBuffers();
  absl::Status checkPlan();
  absl::Status checkParameters();
  absl::Status checkFunctionsStatic();
  absl::Status checkInstructionStatic(int fn, int idx);
  absl::Status checkCallGraph(int root);
  absl::Status simulate(int fn, const std::vector<Range> &argRanges, std::string path, int depth);

  int groupSize(uint32_t g) const { return p.groups(g).ranks_size(); }
  Range absRange(const ResolvedOperand &r, const std::vector<Range> &args) const {
    uint64_t esz = dtypeSize(r.view.dtype);
    uint64_t base = r.isArg ? args[r.base].begin : p.buffers(r.base).offset();
    uint64_t b = base + r.elemOffset * esz;
    return {b, b + uint64_t(r.view.numel) * esz};
  }

  const schema::Program &p;
  const Backend *backend;
  // Resolved operands per function and instruction (inputs then outputs) for the simulation.
  std::vector<std::vector<std::vector<ResolvedOperand>>> resolved;
  std::vector<bool> tokenPending;
  int captureDepth = 0;
  uint64_t steps = 0;
};

absl::Status Validator::checkHeader() {
  if (p.format_version() == 0 || p.format_version() > kFormatVersion)
    return top(absl::StrCat("format_version ", p.format_version(),
                            " is not supported: this runtime reads versions 1 to ",
                            kFormatVersion));
  const schema::Mesh &m = p.mesh();
  if (m.axis_names_size() != m.axis_sizes_size())
    return top(absl::StrCat("mesh: ", m.axis_names_size(), " axis names but ",
                            m.axis_sizes_size(), " axis sizes"));
  int64_t world = 1;
  for (int i = 0; i < m.axis_sizes_size(); ++i) {
    if (m.axis_sizes(i) <= 0 || m.axis_sizes(i) > (1 << 20))
      return top(absl::StrCat("mesh: axis '", m.axis_names(i), "' has size ", m.axis_sizes(i),
                              ", expected 1 to 2^20"));
    world *= m.axis_sizes(i);
    if (world > (1 << 24))
      return top("mesh: more than 2^24 ranks");
  }
  if (m.world_size() != world)
    return top(absl::StrCat("mesh: world_size ", m.world_size(),
                            " differs from the product of the axis sizes ", world));
  if (m.rank() < 0 || m.rank() >= world)
    return top(absl::StrCat("mesh: rank ", m.rank(), " is outside the mesh of ", world,
                            " ranks"));
  if (m.coords_size() != m.axis_sizes_size())
    return top(absl::StrCat("mesh: ", m.coords_size(), " coordinates for ", m.axis_sizes_size(),
                            " axes"));
  int64_t r = 0, stride = 1;
  for (int i = 0; i < m.coords_size(); ++i) {
    if (m.coords(i) < 0 || m.coords(i) >= m.axis_sizes(i))
      return top(absl::StrCat("mesh: coordinate ", m.coords(i), " on axis '", m.axis_names(i),
                              "' is outside [0, ", m.axis_sizes(i), ")"));
    r += m.coords(i) * stride;
    stride *= m.axis_sizes(i);
  }
  if (r != m.rank())
    return top(absl::StrCat("mesh: coordinates give rank ", r, " but rank is ", m.rank()));
  for (int g = 0; g < p.groups_size(); ++g) {
    const schema::CommGroup &grp = p.groups(g);
    if (grp.ranks_size() == 0)
      return top(absl::StrCat("communicator group ", g, " '", grp.name(), "' has no ranks"));
    std::vector<int64_t> sorted(grp.ranks().begin(), grp.ranks().end());
    bool self = false;
    for (int64_t x : sorted) {
      if (x < 0 || x >= world)
        return top(absl::StrCat("communicator group ", g, " '", grp.name(), "' names rank ", x,
                                ", outside the mesh of ", world, " ranks"));
      self |= x == m.rank();
    }
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return top(absl::StrCat("communicator group ", g, " '", grp.name(),
                              "' lists a rank twice"));
    if (!self)
      return top(absl::StrCat("communicator group ", g, " '", grp.name(),
                              "' does not contain this rank ", m.rank()));
  }
  if (p.num_tokens() > (1u << 20) || p.num_events() > (1u << 20))
    return top("num_tokens and num_events must be at most 2^20");
  return absl::OkStatus();
}

absl::Status Validator::checkBuffers() {
  for (int i = 0; i < p.buffers_size(); ++i) {
    const schema::Buffer &b = p.buffers(i);
    std::string what = absl::StrCat("buffer ", i, " '", b.name(), "'");
    DType t = toDType(b.dtype());
    if (t == DType::Invalid)
      return top(absl::StrCat(what, ": dtype ", int(b.dtype()), " is not a valid dtype"));
    if (b.kind() <= schema::BUFFER_KIND_UNSPECIFIED || b.kind() > schema::WORKSPACE)
      return top(absl::StrCat(what, ": kind ", int(b.kind()), " is not a valid buffer kind"));
    TensorView v;
    if (!makeView(t, b.shape().data(), b.shape().size(), v))
      return top(absl::StrCat(what, ": invalid shape ",
                              shapeString(b.shape().data(), std::min(b.shape_size(), kMaxRank)),
                              " (rank <= 6, dims >= 0, at most 2^50 elements)"));
    if (b.byte_size() != v.bytes())
      return top(absl::StrCat(what, ": byte_size ", b.byte_size(), " differs from ",
                              v.bytes(), " (", v.numel, " x ", dtypeName(t), " for shape ",
                              v.shapeString(), ")"));
    if (b.offset() % dtypeSize(t) != 0)
      return top(absl::StrCat(what, ": offset ", b.offset(), " is not a multiple of the ",
                              dtypeSize(t), "-byte element size"));
    if (b.offset() > p.arena_bytes() || b.byte_size() > p.arena_bytes() - b.offset())
      return top(absl::StrCat(what, ": offset ", b.offset(), " + ", b.byte_size(),
                              " bytes is outside the arena of ", p.arena_bytes(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Validator::checkPlan() {
  if (!p.has_plan()) {
    for (int i = 0; i < p.buffers_size(); ++i)
      if (p.buffers(i).has_host_input())
        return top(absl::StrCat("buffer ", i, " '", p.buffers(i).name(),
                                "': host_input is set but the program has no plan (Program.plan)"));
    return absl::OkStatus();
  }
  const schema::PlanInfo &plan = p.plan();
  for (auto [field, value] : {std::pair<const char *, uint64_t>{"micro_batch_size",
                                                                plan.micro_batch_size()},
                              {"num_microbatches", plan.num_microbatches()},
                              {"global_batch_size", plan.global_batch_size()},
                              {"seq_length", plan.seq_length()},
                              {"vocab_size", plan.vocab_size()}})
    if (value == 0)
      return top(absl::StrCat("plan: ", field, " is 0, expected a positive value"));
  int64_t dp = 1;
  for (int a = 0; a < p.mesh().axis_names_size(); ++a)
    if (p.mesh().axis_names(a) == "dp")
      dp = p.mesh().axis_sizes(a);
  // mbs x m < 2^64 (two u32); dp <= 2^20 (checkHeader).
  uint64_t perRank = uint64_t(plan.micro_batch_size()) * plan.num_microbatches();
  if (perRank > UINT64_MAX / uint64_t(dp) || perRank * uint64_t(dp) != plan.global_batch_size())
    return top(absl::StrCat("plan: global_batch_size ", plan.global_batch_size(),
                            " differs from micro_batch_size ", plan.micro_batch_size(),
                            " x num_microbatches ", plan.num_microbatches(),
                            " x the DP size ", dp, " (mesh axis 'dp')"));
  const int64_t rows = plan.micro_batch_size(), seq = plan.seq_length();
  // Per role: the microbatches seen and the buffer holding each.
  std::map<int, std::map<uint32_t, int>> seen;
  std::map<int, int> scalarRoles; // role -> buffer
  for (int i = 0; i < p.buffers_size(); ++i) {
    const schema::Buffer &b = p.buffers(i);
    std::string what = absl::StrCat("buffer ", i, " '", b.name(), "'");
    if (schema::ScalarRole role = b.scalar_role(); role != schema::SCALAR_ROLE_UNSPECIFIED) {
      if (!schema::ScalarRole_IsValid(role))
        return top(absl::StrCat(what, ": scalar_role ", int(role),
                                " is not a valid scalar role (expected LR .. LOSS_SCALE_HYSTERESIS_TRACKER)"));
      const schema::BufferKind want = scalarRoleKind(role);
      if (b.kind() != want)
        return top(absl::StrCat(what, ": scalar_role ", schema::ScalarRole_Name(role),
                                " is set on a buffer of kind ", schema::BufferKind_Name(b.kind()),
                                ", expected ", schema::BufferKind_Name(want)));
      int64_t elements = 1; // shapes were checked against the arena before the plan
      for (int64_t d : b.shape())
        elements *= d;
      if (elements != 1)
        return top(absl::StrCat(what, ": scalar_role ", schema::ScalarRole_Name(role),
                                " needs one element, the buffer has ", elements));
      auto [at, fresh] = scalarRoles.try_emplace(int(role), i);
      if (!fresh)
        return top(absl::StrCat(what, ": scalar_role ", schema::ScalarRole_Name(role),
                                " is also buffer ", at->second, " '",
                                p.buffers(at->second).name(), "'"));
    }
    if (!b.has_host_input()) {
      if (b.kind() == schema::INPUT)
        return top(absl::StrCat(what, ": an INPUT buffer needs host_input (its role and "
                                      "microbatch) in a program with a plan"));
      continue;
    }
    if (b.kind() != schema::INPUT)
      return top(absl::StrCat(what, ": host_input is set on a buffer of kind ",
                              schema::BufferKind_Name(b.kind()), ", expected INPUT"));
    const schema::HostInput &h = b.host_input();
    if (h.role() <= schema::INPUT_ROLE_UNSPECIFIED || h.role() > schema::DOC_START)
      return top(absl::StrCat(what, ": host_input.role ", int(h.role()),
                              " is not a valid input role (expected TOKENS, POSITION_IDS, LABELS, "
                              "LOSS_MASK, RNG or DOC_START)"));
    const std::string role = schema::InputRole_Name(h.role());
    if (h.microbatch() >= plan.num_microbatches())
      return top(absl::StrCat(what, ": host_input.microbatch ", h.microbatch(),
                              " is outside [0, num_microbatches ", plan.num_microbatches(), ")"));
    auto [at, fresh] = seen[int(h.role())].try_emplace(h.microbatch(), i);
    if (!fresh)
      return top(absl::StrCat(what, ": host input ", role, " of microbatch ", h.microbatch(),
                              " is also buffer ", at->second, " '",
                              p.buffers(at->second).name(), "'"));
    DType t = toDType(b.dtype());
    bool rng = h.role() == schema::RNG, mask = h.role() == schema::LOSS_MASK;
    bool dtypeOk = rng    ? t == DType::I64
                   : mask ? t == DType::F32 || t == DType::F64
                          : t == DType::I32;
    if (!dtypeOk)
      return top(absl::StrCat(what, ": host input ", role, " has dtype ", dtypeName(t),
                              ", expected ", rng ? "i64" : mask ? "f32 or f64" : "i32"));
    std::vector<int64_t> want = rng ? std::vector<int64_t>{3} : std::vector<int64_t>{rows, seq};
    if (!std::equal(b.shape().begin(), b.shape().end(), want.begin(), want.end()))
      return top(absl::StrCat(
          what, ": host input ", role, " has shape ",
          shapeString(b.shape().data(), std::min(b.shape_size(), kMaxRank)), ", expected ",
          shapeString(want.data(), int(want.size())),
          rng ? " (seed, iteration, microbatch)" : " ([micro_batch_size, seq_length] of the plan)"));
  }
  for (const auto &[role, mbs] : seen) {
    if (mbs.size() == plan.num_microbatches())
      continue;
    uint32_t missing = 0;
    while (mbs.count(missing))
      ++missing;
    return top(absl::StrCat("host input ", schema::InputRole_Name(schema::InputRole(role)),
                            " has no buffer for microbatch ", missing, " (num_microbatches ",
                            plan.num_microbatches(), ": one buffer per microbatch)"));
  }
  return absl::OkStatus();
}

absl::Status Validator::checkParameters() {
  for (int i = 0; i < p.parameters_size(); ++i) {
    const schema::Parameter &q = p.parameters(i);
    std::string what = absl::StrCat("parameter ", i, " '", q.name(), "'");
    if (q.buffer() >= uint32_t(p.buffers_size()))
      return top(absl::StrCat(what, ": buffer index ", q.buffer(), " is outside the buffer table"));
    int r = q.global_shape_size();
    if (q.slice_start_size() != r || q.slice_size_size() != r)
      return top(absl::StrCat(what, ": slice_start and slice_size must have rank ", r));
    int64_t n = 1;
    for (int d = 0; d < r; ++d) {
      if (q.global_shape(d) < 0 || q.slice_start(d) < 0 || q.slice_size(d) < 0 ||
          q.slice_start(d) > q.global_shape(d) ||
          q.slice_size(d) > q.global_shape(d) - q.slice_start(d))
        return top(absl::StrCat(what, ": slice [", q.slice_start(d), ", +", q.slice_size(d),
                                ") on dim ", d, " is outside the global size ",
                                q.global_shape(d)));
      if (q.slice_size(d) > 0 && n > (int64_t(1) << 50) / q.slice_size(d))
        return top(absl::StrCat(what, ": slice too large"));
      n *= q.slice_size(d);
    }
    const schema::Buffer &b = p.buffers(q.buffer());
    TensorView v;
    makeView(toDType(b.dtype()), b.shape().data(), b.shape().size(), v);
    if (q.buffer_offset() > uint64_t(v.numel) || uint64_t(n) > v.numel - q.buffer_offset())
      return top(absl::StrCat(what, ": slice of ", n, " elements at offset ", q.buffer_offset(),
                              " exceeds buffer '", b.name(), "' of ", v.numel, " elements"));
    if (q.has_grad_buffer()) {
      if (q.grad_buffer() >= uint32_t(p.buffers_size()))
        return top(absl::StrCat(what, ": grad_buffer index ", q.grad_buffer(),
                                " is outside the buffer table"));
      const schema::Buffer &g = p.buffers(q.grad_buffer());
      TensorView gv;
      makeView(toDType(g.dtype()), g.shape().data(), g.shape().size(), gv);
      if (q.grad_offset() > uint64_t(gv.numel) || uint64_t(n) > gv.numel - q.grad_offset())
        return top(absl::StrCat(what, ": main_grad of ", n, " elements at offset ",
                                q.grad_offset(), " exceeds buffer '", g.name(), "' of ", gv.numel,
                                " elements"));
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::checkInstructionStatic(int fn, int idx) {
  const schema::Function &f = p.functions(fn);
  const schema::Instruction &ins = f.body(idx);
  std::vector<ResolvedOperand> &res = resolved[fn][idx];
  if (p.locations_size() > 0 && ins.loc() >= uint32_t(p.locations_size()))
    return err(fn, idx, absl::StrCat("loc ", ins.loc(), " is outside the location table (",
                                     p.locations_size(), " entries)"));
  if (ins.stream() >= kNumStreams)
    return err(fn, idx, absl::StrCat("stream ", ins.stream(), ", expected 0 (compute) or 1 (communication)"));
  auto resolve = [&](const schema::Operand &o, const std::string &field) -> std::string {
    ResolvedOperand r;
    std::string e = resolveOperand(p, f, o, r);
    if (!e.empty())
      return absl::StrCat(field, ": ", e);
    res.push_back(r);
    return "";
  };
  switch (ins.op_case()) {
  case schema::Instruction::kKernel: {
    const schema::KernelCall &k = ins.kernel();
    const KernelSignature *sig = findKernelSignature(k.kernel());
    if (!sig)
      return err(fn, idx, absl::StrCat("unknown kernel '", k.kernel(), "'"));
    if (backend && !backend->findKernel(k.kernel()))
      return err(fn, idx, absl::StrCat("kernel '", k.kernel(), "' is not implemented by the ",
                                       std::string(backend->name()), " backend"));
    if (k.inputs_size() != sig->numIn || k.outputs_size() != sig->numOut)
      return err(fn, idx, absl::StrCat("kernel '", k.kernel(), "' takes ", sig->numIn,
                                       " inputs and ", sig->numOut, " outputs, got ",
                                       k.inputs_size(), " inputs and ", k.outputs_size(),
                                       " outputs"));
    if (k.in_place_size() != 0 && k.in_place_size() != sig->numOut)
      return err(fn, idx, absl::StrCat("in_place has ", k.in_place_size(), " entries, expected 0 or ",
                                       sig->numOut));
    for (int j = 0; j < k.in_place_size(); ++j)
      if (k.in_place(j) < -1 || k.in_place(j) >= sig->numIn)
        return err(fn, idx, absl::StrCat("in_place[", j, "] = ", k.in_place(j),
                                         ", expected -1 or an input index below ", sig->numIn));
    for (int i = 0; i < k.inputs_size(); ++i)
      if (std::string e = resolve(k.inputs(i), absl::StrCat("input ", i)); !e.empty())
        return err(fn, idx, absl::StrCat("kernel '", k.kernel(), "' ", e));
    for (int i = 0; i < k.outputs_size(); ++i)
      if (std::string e = resolve(k.outputs(i), absl::StrCat("output ", i)); !e.empty())
        return err(fn, idx, absl::StrCat("kernel '", k.kernel(), "' ", e));
    Attrs attrs;
    if (std::string e = decodeAttrs(*sig, k.attrs(), attrs); !e.empty())
      return err(fn, idx, absl::StrCat("kernel '", k.kernel(), "' ", e));
    std::vector<TensorView> in, out;
    for (int i = 0; i < sig->numIn; ++i)
      in.push_back(res[i].view);
    for (int i = 0; i < sig->numOut; ++i)
      out.push_back(res[sig->numIn + i].view);
    KernelCtx ctx{in.data(), sig->numIn, out.data(), sig->numOut, &attrs, nullptr};
    if (std::string e = sig->verify(ctx); !e.empty())
      return err(fn, idx, absl::StrCat("kernel '", k.kernel(), "' ", e));
    return absl::OkStatus();
  }
  case schema::Instruction::kCollective: {
    const schema::Collective &c = ins.collective();
    if (c.kind() <= schema::COLLECTIVE_KIND_UNSPECIFIED || c.kind() > schema::BARRIER)
      return err(fn, idx, absl::StrCat("collective kind ", int(c.kind()), " is not valid"));
    if (c.group() >= uint32_t(p.groups_size()))
      return err(fn, idx, absl::StrCat("collective group ", c.group(),
                                       " is outside the group table (", p.groups_size(),
                                       " groups)"));
    if (c.op() < schema::SUM || c.op() > schema::MIN)
      return err(fn, idx, absl::StrCat("collective reduce op ", int(c.op()), " is not valid"));
    if (c.async() && c.token() >= p.num_tokens())
      return err(fn, idx, absl::StrCat("async token ", c.token(), " is outside num_tokens ",
                                       p.num_tokens()));
    if (c.async() && ins.stream() != kCommStream)
      return err(fn, idx, "async collectives must be on stream 1 (communication)");
    if (c.kind() == schema::BARRIER)
      return absl::OkStatus();
    if (std::string e = resolve(c.input(), "input"); !e.empty())
      return err(fn, idx, absl::StrCat("collective ", e));
    if (std::string e = resolve(c.output(), "output"); !e.empty())
      return err(fn, idx, absl::StrCat("collective ", e));
    // The host reads and writes INPUT, SCALAR and OUTPUT buffers without draining the
    // communication stream (Program.carried_tokens), so async collectives must not touch them.
    if (c.async())
      for (const schema::Operand *o : {&c.input(), &c.output()})
        if (o->base_case() == schema::Operand::kBuffer) {
          schema::BufferKind kind = p.buffers(int(o->buffer())).kind();
          if (kind == schema::INPUT || kind == schema::SCALAR || kind == schema::OUTPUT)
            return err(fn, idx, absl::StrCat("async collective on buffer '",
                                             p.buffers(int(o->buffer())).name(), "' of kind ",
                                             schema::BufferKind_Name(kind),
                                             ", which the host accesses while collectives run "
                                             "(use a sync collective)"));
        }
    const TensorView &a = res[0].view, &b = res[1].view;
    if (a.dtype != b.dtype)
      return err(fn, idx, absl::StrCat("collective output dtype ", dtypeName(b.dtype),
                                       " differs from input dtype ", dtypeName(a.dtype)));
    int64_t g = groupSize(c.group());
    int64_t want = c.kind() == schema::REDUCE_SCATTER ? a.numel / g
                   : c.kind() == schema::ALL_GATHER   ? a.numel * g
                                                      : a.numel;
    if (c.kind() == schema::REDUCE_SCATTER && a.numel % g != 0)
      return err(fn, idx, absl::StrCat("reduce_scatter input of ", a.numel,
                                       " elements is not a multiple of the group size ", g));
    if (b.numel != want)
      return err(fn, idx, absl::StrCat("collective output has ", b.numel, " elements, expected ",
                                       want, " (input ", a.numel, ", group size ", g, ")"));
    if (c.kind() == schema::BROADCAST && (c.root() < 0 || c.root() >= g))
      return err(fn, idx, absl::StrCat("broadcast root ", c.root(), " is outside the group of ",
                                       g, " ranks"));
    return absl::OkStatus();
  }
  case schema::Instruction::kWait:
    if (ins.wait().token() >= p.num_tokens())
      return err(fn, idx, absl::StrCat("wait token ", ins.wait().token(),
                                       " is outside num_tokens ", p.num_tokens()));
    return absl::OkStatus();
  case schema::Instruction::kSend:
  case schema::Instruction::kRecv: {
    const schema::SendRecv &s = ins.has_send() ? ins.send() : ins.recv();
    if (s.group() >= uint32_t(p.groups_size()))
      return err(fn, idx, absl::StrCat("send/recv group ", s.group(), " is outside the group table"));
    int64_t g = groupSize(s.group());
    if (s.peer() < 0 || s.peer() >= g)
      return err(fn, idx, absl::StrCat("send/recv peer ", s.peer(), " is outside the group of ",
                                       g, " ranks"));
    if (p.groups(s.group()).ranks(s.peer()) == p.mesh().rank())
      return err(fn, idx, "send/recv peer is this rank");
    if (s.async() && s.token() >= p.num_tokens())
      return err(fn, idx, absl::StrCat("async token ", s.token(), " is outside num_tokens ",
                                       p.num_tokens()));
    if (s.async() && ins.stream() != kCommStream)
      return err(fn, idx, "async send/recv must be on stream 1 (communication)");
    if (std::string e = resolve(s.operand(), "operand"); !e.empty())
      return err(fn, idx, absl::StrCat("send/recv ", e));
    return absl::OkStatus();
  }
  case schema::Instruction::kCall: {
    const schema::Call &c = ins.call();
    if (c.function() >= uint32_t(p.functions_size()))
      return err(fn, idx, absl::StrCat("call of function ", c.function(),
                                       ", outside the function table (", p.functions_size(), ")"));
    const schema::Function &callee = p.functions(c.function());
    if (c.args_size() != callee.args_size())
      return err(fn, idx, absl::StrCat("call of '", callee.name(), "' passes ", c.args_size(),
                                       " arguments, expected ", callee.args_size()));
    for (int i = 0; i < c.args_size(); ++i) {
      if (std::string e = resolve(c.args(i), absl::StrCat("argument ", i)); !e.empty())
        return err(fn, idx, absl::StrCat("call of '", callee.name(), "' ", e));
      const TensorView &v = res.back().view;
      const schema::Arg &a = callee.args(i);
      bool same = toDType(a.dtype()) == v.dtype && a.shape_size() == v.rank;
      for (int d = 0; same && d < v.rank; ++d)
        same = a.shape(d) == v.dims[d];
      if (!same)
        return err(fn, idx, absl::StrCat("call of '", callee.name(), "' argument ", i, " '",
                                         a.name(), "': got ", dtypeName(v.dtype), " ",
                                         v.shapeString(), ", expected ",
                                         dtypeName(toDType(a.dtype())), " ",
                                         shapeString(a.shape().data(), std::min(a.shape_size(), kMaxRank))));
    }
    return absl::OkStatus();
  }
  case schema::Instruction::kHostIo:
    if (ins.host_io().kind() != schema::FILL_INPUTS && ins.host_io().kind() != schema::READ_OUTPUTS)
      return err(fn, idx, absl::StrCat("host_io kind ", int(ins.host_io().kind()), " is not valid"));
    return absl::OkStatus();
  case schema::Instruction::kRegion:
    if (ins.region().kind() != schema::GRAPH_CAPTURE_BEGIN &&
        ins.region().kind() != schema::GRAPH_CAPTURE_END)
      return err(fn, idx, absl::StrCat("region kind ", int(ins.region().kind()), " is not valid"));
    return absl::OkStatus();
  case schema::Instruction::kEvent:
    if (ins.event().event() >= p.num_events())
      return err(fn, idx, absl::StrCat("event ", ins.event().event(), " is outside num_events ",
                                       p.num_events()));
    return absl::OkStatus();
  default:
    return err(fn, idx, "instruction has no operation");
  }
}

absl::Status Validator::checkFunctionsStatic() {
  if (p.functions_size() == 0)
    return top("program has no functions");
  if (p.entry() >= uint32_t(p.functions_size()))
    return top(absl::StrCat("entry function ", p.entry(), " is outside the function table (",
                            p.functions_size(), " functions)"));
  if (p.functions(p.entry()).args_size() != 0)
    return top("the entry function must take no arguments");
  for (const auto &[name, fn] : p.entry_points()) {
    if (fn >= uint32_t(p.functions_size()))
      return top(absl::StrCat("entry point '", name, "' names function ", fn,
                              ", outside the function table (", p.functions_size(),
                              " functions)"));
    if (p.functions(int(fn)).args_size() != 0)
      return top(absl::StrCat("entry point '", name, "' must take no arguments"));
  }
  resolved.resize(p.functions_size());
  for (int fn = 0; fn < p.functions_size(); ++fn) {
    const schema::Function &f = p.functions(fn);
    // The executor binds arguments through 16-bit indices.
    if (f.args_size() > 65535)
      return top(absl::StrCat("function '", f.name(), "' has ", f.args_size(),
                              " arguments; at most 65535 are supported"));
    for (int a = 0; a < f.args_size(); ++a) {
      TensorView v;
      if (toDType(f.args(a).dtype()) == DType::Invalid ||
          !makeView(toDType(f.args(a).dtype()), f.args(a).shape().data(), f.args(a).shape_size(), v))
        return top(absl::StrCat("function '", f.name(), "' argument ", a, " '", f.args(a).name(),
                                "' has an invalid dtype or shape"));
    }
    resolved[fn].resize(f.body_size());
    for (int i = 0; i < f.body_size(); ++i)
      if (absl::Status s = checkInstructionStatic(fn, i); !s.ok())
        return s;
  }
  return absl::OkStatus();
}

absl::Status Validator::checkCallGraph(int root) {
  // Depth-first search for cycles (0 = unvisited, 1 = on stack, 2 = done).
  std::vector<int> state(p.functions_size(), 0);
  std::function<absl::Status(int)> dfs = [&](int fn) -> absl::Status {
    state[fn] = 1;
    const schema::Function &f = p.functions(fn);
    for (int i = 0; i < f.body_size(); ++i) {
      if (!f.body(i).has_call())
        continue;
      int callee = int(f.body(i).call().function());
      if (state[callee] == 1)
        return err(fn, i, absl::StrCat("call of '", p.functions(callee).name(),
                                       "' makes the call graph recursive"));
      if (state[callee] == 0)
        if (absl::Status s = dfs(callee); !s.ok())
          return s;
    }
    state[fn] = 2;
    return absl::OkStatus();
  };
  return dfs(root);
}

absl::Status Validator::simulate(int fn, const std::vector<Range> &argRanges, std::string path,
                                 int depth) {
  if (depth > 64)
    return top(absl::StrCat("call depth exceeds 64 at ", path));
  const schema::Function &f = p.functions(fn);
  auto where = [&](int i) {
    return path.empty() ? std::string() : absl::StrCat(" (called via ", path, ")");
  };
  for (int i = 0; i < f.body_size(); ++i) {
    if (++steps > (uint64_t(1) << 24))
      return top("program executes more than 2^24 instructions per iteration");
    const schema::Instruction &ins = f.body(i);
    const std::vector<ResolvedOperand> &res = resolved[fn][i];
    std::vector<Range> rs;
    for (const ResolvedOperand &r : res)
      rs.push_back(absRange(r, argRanges));
    switch (ins.op_case()) {
    case schema::Instruction::kKernel: {
      const schema::KernelCall &k = ins.kernel();
      int nin = k.inputs_size(), nout = k.outputs_size();
      for (int o = 0; o < nout; ++o) {
        const Range &ro = rs[nin + o];
        int ip = k.in_place_size() ? k.in_place(o) : -1;
        for (int in = 0; in < nin; ++in) {
          if (!ro.overlaps(rs[in]))
            continue;
          if (in == ip && ro == rs[in])
            continue;
          if (in == ip)
            return err(fn, i, absl::StrCat("kernel '", k.kernel(), "' output ", o,
                                           " is declared in place of input ", in,
                                           " but covers a different range", where(i)));
          return err(fn, i, absl::StrCat("kernel '", k.kernel(), "' output ", o,
                                         " overlaps input ", in,
                                         " without an in_place declaration", where(i)));
        }
        for (int o2 = 0; o2 < o; ++o2)
          if (ro.overlaps(rs[nin + o2]))
            return err(fn, i, absl::StrCat("kernel '", k.kernel(), "' output ", o,
                                           " overlaps output ", o2, where(i)));
      }
      break;
    }
    case schema::Instruction::kCollective: {
      const schema::Collective &c = ins.collective();
      if (c.kind() != schema::BARRIER && rs[0].overlaps(rs[1]) && !(rs[0] == rs[1])) {
        // In-place reduce_scatter / all_gather use this rank's chunk of the larger buffer.
        int64_t me = 0;
        const schema::CommGroup &g = p.groups(c.group());
        for (int r = 0; r < g.ranks_size(); ++r)
          if (g.ranks(r) == p.mesh().rank())
            me = r;
        bool ok = false;
        if (c.kind() == schema::REDUCE_SCATTER) {
          uint64_t chunk = rs[1].end - rs[1].begin;
          ok = rs[1].begin == rs[0].begin + me * chunk;
        } else if (c.kind() == schema::ALL_GATHER) {
          uint64_t chunk = rs[0].end - rs[0].begin;
          ok = rs[0].begin == rs[1].begin + me * chunk;
        }
        if (!ok)
          return err(fn, i, absl::StrCat("collective output partially overlaps its input",
                                         where(i)));
      }
      if (c.kind() == schema::REDUCE_SCATTER || c.kind() == schema::ALL_GATHER) {
        if (c.kind() != schema::BARRIER && rs[0] == rs[1])
          return err(fn, i, "reduce_scatter/all_gather input and output cannot be the same range");
      }
      if (c.async()) {
        if (tokenPending[c.token()])
          return err(fn, i, absl::StrCat("async token ", c.token(),
                                         " is started again before its wait", where(i)));
        tokenPending[c.token()] = true;
      }
      break;
    }
    case schema::Instruction::kSend:
    case schema::Instruction::kRecv: {
      const schema::SendRecv &s = ins.has_send() ? ins.send() : ins.recv();
      if (s.async()) {
        if (tokenPending[s.token()])
          return err(fn, i, absl::StrCat("async token ", s.token(),
                                         " is started again before its wait", where(i)));
        tokenPending[s.token()] = true;
      }
      break;
    }
    case schema::Instruction::kWait:
      if (!tokenPending[ins.wait().token()])
        return err(fn, i, absl::StrCat("wait on token ", ins.wait().token(),
                                       " that no async operation started", where(i)));
      tokenPending[ins.wait().token()] = false;
      break;
    case schema::Instruction::kCall: {
      const schema::Function &callee = p.functions(ins.call().function());
      std::string sub = absl::StrCat(path.empty() ? "" : absl::StrCat(path, " -> "), f.name(),
                                     "#", i);
      if (absl::Status s = simulate(int(ins.call().function()), rs, sub, depth + 1); !s.ok())
        return s;
      (void)callee;
      break;
    }
    case schema::Instruction::kHostIo:
      if (captureDepth > 0)
        return err(fn, i, absl::StrCat("host_io '", ins.host_io().name(),
                                       "' inside a graph-capture region (no host work may run "
                                       "inside a captured iteration)", where(i)));
      break;
    case schema::Instruction::kRegion:
      if (ins.region().kind() == schema::GRAPH_CAPTURE_BEGIN) {
        if (captureDepth > 0)
          return err(fn, i, absl::StrCat("graph-capture region '", ins.region().name(),
                                         "' begins inside another capture region", where(i)));
        ++captureDepth;
      } else {
        if (captureDepth == 0)
          return err(fn, i, absl::StrCat("graph-capture region '", ins.region().name(),
                                         "' ends without a begin", where(i)));
        --captureDepth;
      }
      break;
    default:
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::run() {
  if (absl::Status s = checkHeader(); !s.ok())
    return s;
  if (absl::Status s = checkBuffers(); !s.ok())
    return s;
  if (absl::Status s = checkPlan(); !s.ok())
    return s;
  if (absl::Status s = checkParameters(); !s.ok())
    return s;
  if (absl::Status s = checkFunctionsStatic(); !s.ok())
    return s;
  std::vector<uint32_t> roots = {p.entry()};
  for (const auto &[name, fn] : p.entry_points())
    roots.push_back(fn);
  for (uint32_t root : roots) {
    if (absl::Status s = checkCallGraph(int(root)); !s.ok())
      return s;
    tokenPending.assign(p.num_tokens(), false);
    std::vector<bool> carried(p.num_tokens(), false);
    for (uint32_t t : p.carried_tokens()) {
      if (t >= p.num_tokens())
        return top(absl::StrCat("carried token ", t, " is outside num_tokens ", p.num_tokens()));
      carried[t] = tokenPending[t] = true; // possibly in flight from the previous run
    }
    captureDepth = 0;
    if (absl::Status s = simulate(int(root), {}, "", 0); !s.ok())
      return s;
    for (uint32_t t = 0; t < p.num_tokens(); ++t)
      if (tokenPending[t] && !carried[t])
        return top(absl::StrCat("async token ", t, " is still pending at the end of '",
                                p.functions(int(root)).name(), "' (missing wait)"));
    if (captureDepth != 0)
      return top(absl::StrCat("a graph-capture region is still open at the end of '",
                              p.functions(int(root)).name(), "'"));
  }
  return absl::OkStatus();
}

} // namespace

absl::Status validateProgram(const schema::Program &program, const Backend *backend) {
  return Validator(program, backend).run();
}

bool runsAsSendRecvPair(const schema::Instruction &send, const schema::Instruction &recv) {
  return send.has_send() && recv.has_recv() && send.send().group() == recv.recv().group() &&
         send.send().async() == recv.recv().async() && send.stream() == recv.stream();
}

} // namespace trainc::rt
