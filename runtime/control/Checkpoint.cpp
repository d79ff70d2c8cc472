//===- Checkpoint.cpp - Save, load and exit controls ----------------------===//
//
// See Checkpoint.h and docs/checkpoint.md.
//
//===----------------------------------------------------------------------===//

#include "runtime/control/Checkpoint.h"

#include "runtime/control/Safetensors.h"
#include "runtime/core/Crc32c.h"
#include "runtime/core/DType.h"
#include "runtime/core/Executor.h"
#include "runtime/core/Init.h"
#include "runtime/schema/checkpoint.pb.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace trainc::rt::control {

namespace fs = std::filesystem;

namespace {

constexpr const char *kTracker = "latest_checkpointed_iteration.txt";
constexpr const char *kIndex = "metadata.json";
constexpr const char *kFormat = "trainc-checkpoint";
constexpr uint32_t kVersion = 1;
constexpr const char *kRankIndexKey = "trainc.index";

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string shapeText(const std::vector<int64_t> &s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}
template <typename R> std::vector<int64_t> toVec(const R &r) {
  return std::vector<int64_t>(r.begin(), r.end());
}
int64_t numel(const std::vector<int64_t> &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

//===----------------------------------------------------------------------===//
// Exit signal (SIGTERM / SIGINT)
//===----------------------------------------------------------------------===//

volatile std::sig_atomic_t gExitSignal = 0;
void onExitSignal(int sig) { gExitSignal = sig; }

} // namespace

std::string iterationDirName(int64_t iteration) {
  return absl::StrFormat("iter_%07d", iteration);
}

//===----------------------------------------------------------------------===//
// Flags
//===----------------------------------------------------------------------===//

void checkpointDefaults(const schema::Program &p, CheckpointOptions &o) {
  auto meta = [&](const char *k) -> std::string {
    auto it = p.metadata().find(k);
    return it == p.metadata().end() ? "" : it->second;
  };
  o.save = meta("runtime.save");
  o.load = meta("runtime.load");
  char *end = nullptr;
  std::string si = meta("runtime.save_interval");
  long long v = std::strtoll(si.c_str(), &end, 10);
  if (!si.empty() && !*end && v > 0)
    o.saveInterval = v;
}

absl::StatusOr<bool> parseCheckpointFlag(const std::string &flag,
                                         const std::function<absl::Status(std::string &)> &value,
                                         CheckpointOptions &o) {
  auto text = [&](std::string &out) -> absl::Status {
    if (absl::Status s = value(out); !s.ok())
      return s;
    if (out.empty())
      return absl::InvalidArgumentError(absl::StrCat(flag, " expects a directory, got ''"));
    return absl::OkStatus();
  };
  auto integer = [&](int64_t &out, int64_t lo, const char *what) -> absl::Status {
    std::string v;
    if (absl::Status s = value(v); !s.ok())
      return s;
    char *end = nullptr;
    long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || x < lo)
      return absl::InvalidArgumentError(absl::StrCat(flag, " expects ", what, ", got '", v, "'"));
    out = x;
    return absl::OkStatus();
  };
  absl::Status s = absl::OkStatus();
  if (flag == "--save")
    s = text(o.save);
  else if (flag == "--load")
    s = text(o.load);
  else if (flag == "--save-interval")
    s = integer(o.saveInterval, 1, "a positive integer");
  else if (flag == "--ckpt-step")
    s = integer(o.ckptStep, 0, "a non-negative integer (an iteration)");
  else if (flag == "--exit-interval")
    s = integer(o.exitInterval, 1, "a positive integer");
  else if (flag == "--exit-duration-in-mins") {
    std::string v;
    s = value(v);
    char *end = nullptr;
    double x = s.ok() ? std::strtod(v.c_str(), &end) : 0;
    if (s.ok() && (v.empty() || *end || !(x > 0) || !std::isfinite(x)))
      s = absl::InvalidArgumentError(absl::StrCat(
          flag, " expects a positive number of minutes, got '", v, "'"));
    o.exitDurationInMins = x;
  } else if (flag == "--no-save-optim")
    o.noSaveOptim = true;
  else if (flag == "--no-load-optim")
    o.noLoadOptim = true;
  else if (flag == "--no-load-rng")
    o.noLoadRng = true;
  else if (flag == "--finetune")
    o.finetune = true;
  else if (flag == "--override-opt_param-scheduler" || flag == "--override-opt-param-scheduler")
    o.overrideOptParamScheduler = true;
  else if (flag == "--exit-signal-handler")
    o.exitSignalHandler = true;
  else if (flag == "--async-save")
    o.asyncSave = true;
  else if (flag == "--use-checkpoint-opt_param-scheduler" ||
           flag == "--non-persistent-save-interval" || flag == "--use-dist-ckpt" ||
           flag == "--ckpt-format")
    s = absl::InvalidArgumentError(absl::StrCat("not supported yet: ", flag,
                                                " (see docs/checkpoint.md)"));
  else
    return false;
  if (!s.ok())
    return s;
  return true;
}

//===----------------------------------------------------------------------===//
// What this rank holds
//===----------------------------------------------------------------------===//

namespace {

/// A contiguous range of a global tensor that this rank holds in its arena: elements
/// [flatBegin, flatEnd) of the row-major flattening of the box (boxStart, boxSize), at element
/// `elemOffset` of buffer `buffer` (flatBegin's element).
struct Piece {
  std::string tensor, kind, param, dtype;
  std::vector<int64_t> globalShape, boxStart, boxSize;
  int64_t flatBegin = 0, flatEnd = 0;
  int buffer = -1;
  uint64_t elemOffset = 0;
  size_t esize = 4;
  bool owned = false; // this rank writes it
  bool optimizer() const { return kind != "param"; }
  int64_t size() const { return flatEnd - flatBegin; }
};

const char *stDtype(schema::DType t) {
  return t == schema::F64 ? "F64" : t == schema::BF16 ? "BF16" : t == schema::F16 ? "F16" : "F32";
}

struct Operand {
  int buffer = -1;
  uint64_t offset = 0;
  int64_t numel = 0;
};

absl::StatusOr<Operand> resolve(const schema::Program &p, const schema::Operand &o,
                                const std::string &where) {
  if (o.base_case() != schema::Operand::kBuffer)
    return absl::UnimplementedError(absl::StrCat(
        where, " reads a function argument: the checkpoint cannot locate the optimizer state "
               "(adamw must name its buffers directly)"));
  Operand r;
  r.buffer = int(o.buffer());
  if (r.buffer >= p.buffers_size())
    return absl::InvalidArgumentError(absl::StrCat(where, ": buffer ", r.buffer, " out of range"));
  if (o.whole()) {
    r.numel = numel(toVec(p.buffers(r.buffer).shape()));
  } else {
    r.offset = o.offset();
    r.numel = numel(toVec(o.shape()));
  }
  return r;
}

/// Copies into `x`'s elements (at x.elemOffset of `dst`, a buffer's bytes) those that a shard
/// holds: elements [sBegin, sEnd) of the row-major box (sStart, sSize) of the same global
/// tensor, at `src`. Runs along the last dim. Returns the number of elements copied (resharding
/// between tensor-parallel layouts: a tp 2 checkpoint into tp 1 and back).
int64_t copyBoxOverlap(const Piece &x, const std::vector<int64_t> &sStart,
                       const std::vector<int64_t> &sSize, int64_t sBegin, int64_t sEnd,
                       const char *src, char *dst) {
  const size_t rank = x.boxSize.size();
  if (rank == 0)
    return 0;
  const int64_t row = x.boxSize[rank - 1];
  int64_t copied = 0;
  std::vector<int64_t> idx(rank);
  for (int64_t i = x.flatBegin; i < x.flatEnd;) {
    // The global index of x's element i.
    int64_t r = i;
    for (size_t k = rank; k-- > 0;) {
      idx[k] = x.boxStart[k] + r % x.boxSize[k];
      r /= x.boxSize[k];
    }
    int64_t run = std::min(row - (i % row), x.flatEnd - i);
    bool inside = true;
    int64_t j = 0; // its flat index in the shard's box
    for (size_t k = 0; k < rank; ++k) {
      int64_t local = idx[k] - sStart[k];
      if (local < 0 || local >= sSize[k]) {
        inside = false;
        break;
      }
      j = j * sSize[k] + local;
    }
    if (!inside) {
      // Skip to where the shard's box may start on this row, or the next row.
      int64_t last = idx[rank - 1];
      bool rowInside = true;
      for (size_t k = 0; k + 1 < rank; ++k)
        rowInside = rowInside && idx[k] >= sStart[k] && idx[k] < sStart[k] + sSize[k];
      int64_t skip = rowInside && last < sStart[rank - 1] ? sStart[rank - 1] - last : run;
      i += std::min(skip, run);
      continue;
    }
    run = std::min(run, sStart[rank - 1] + sSize[rank - 1] - idx[rank - 1]);
    int64_t lo = std::max(j, sBegin), hi = std::min(j + run, sEnd);
    if (lo < hi) {
      std::memcpy(dst + (x.elemOffset + uint64_t(i + (lo - j) - x.flatBegin)) * x.esize,
                  src + size_t(lo - sBegin) * x.esize, size_t(hi - lo) * x.esize);
      copied += hi - lo;
    }
    i += run;
  }
  return copied;
}

/// A parameter whose global_shape [a, b, rest...] is recorded with one more dim than the
/// tensor its files hold, tensor_shape [a * b, rest...] (SwiGLU's fc1 under tensor
/// parallelism: [2, F, H] so that a rank's gate and up chunks are one box), is checkpointed as
/// tensor_shape, like a single-rank plan's: each of its pieces becomes one piece per index of
/// the leading dim (a box of rows [(s0 + i) * b + s1, ...) of tensor_shape; contiguous in the
/// rank's buffer), so checkpoints of any tp load into any other.
std::vector<Piece> splitToTensorShapes(const schema::Program &p, std::vector<Piece> pieces) {
  std::map<std::string, std::vector<int64_t>> merged; // parameter -> tensor_shape
  for (const schema::Parameter &q : p.parameters()) {
    std::vector<int64_t> g = toVec(q.global_shape()), t = toVec(q.tensor_shape());
    if (g.size() >= 2 && t.size() + 1 == g.size() && t[0] == g[0] * g[1] &&
        std::equal(t.begin() + 1, t.end(), g.begin() + 2))
      merged[q.name()] = t;
  }
  if (merged.empty())
    return pieces;
  std::vector<Piece> out;
  for (Piece &x : pieces) {
    auto it = merged.find(x.param);
    if (it == merged.end()) {
      out.push_back(std::move(x));
      continue;
    }
    const int64_t b = x.globalShape[1];
    std::vector<int64_t> subSize(x.boxSize.begin() + 1, x.boxSize.end());
    const int64_t inner = numel(subSize);
    for (int64_t i0 = 0; i0 < x.boxSize[0]; ++i0) {
      int64_t lo = std::max(x.flatBegin, i0 * inner), hi = std::min(x.flatEnd, (i0 + 1) * inner);
      if (lo >= hi)
        continue;
      Piece y = x;
      y.globalShape = it->second;
      y.boxStart.assign(x.boxStart.begin() + 1, x.boxStart.end());
      y.boxStart[0] += (x.boxStart[0] + i0) * b;
      y.boxSize = subSize;
      y.flatBegin = lo - i0 * inner;
      y.flatEnd = hi - i0 * inner;
      y.elemOffset = x.elemOffset + uint64_t(lo - x.flatBegin);
      out.push_back(std::move(y));
    }
  }
  return out;
}

/// Derives this rank's pieces: one per parameter (its slice) and, for every adamw call, the
/// exp_avg / exp_avg_sq ranges of the parameters it updates (bucket padding excluded).
/// Parameter values are replicated over data parallelism and written by dp rank 0; the Adam
/// moments too, unless this rank holds only a shard of them (the distributed optimizer).
/// Pieces of a parameter replicated over tensor parallelism (its box is the whole tensor: norm
/// weights, row-parallel biases; bitwise equal on every TP rank) are written by tp rank 0 only;
/// a TP-split parameter's box is its own TP rank's.
absl::StatusOr<std::vector<Piece>> collectPieces(const schema::Program &p, int64_t dpRank,
                                                 int64_t tpRank) {
  std::vector<Piece> out;
  std::map<int, std::vector<int>> paramsOfBuffer; // buffer -> parameter indices
  int64_t paramElems = 0;
  for (int i = 0; i < p.parameters_size(); ++i) {
    const schema::Parameter &q = p.parameters(i);
    const schema::Buffer &b = p.buffers(int(q.buffer()));
    if (b.dtype() != schema::F32 && b.dtype() != schema::F64 && b.dtype() != schema::BF16 &&
        b.dtype() != schema::F16)
      return absl::UnimplementedError(absl::StrCat(
          "parameter '", q.name(), "' is held in a buffer of dtype ", schema::DType_Name(b.dtype()),
          ": checkpoints support F32, F64, BF16 and F16 parameters"));
    Piece x;
    x.tensor = x.param = q.name();
    x.kind = "param";
    x.dtype = stDtype(b.dtype());
    x.esize = dtypeSize(DType(int(b.dtype())));
    x.globalShape = toVec(q.global_shape());
    x.boxStart = toVec(q.slice_start());
    x.boxSize = toVec(q.slice_size());
    x.flatEnd = numel(x.boxSize);
    x.buffer = int(q.buffer());
    x.elemOffset = q.buffer_offset();
    x.owned = dpRank == 0;
    paramElems += x.flatEnd;
    paramsOfBuffer[x.buffer].push_back(i);
    out.push_back(std::move(x));
  }
  const size_t numParams = out.size();
  std::vector<Piece> adam;
  for (const schema::Function &fn : p.functions())
    for (int k = 0; k < fn.body_size(); ++k) {
      const schema::Instruction &ins = fn.body(k);
      if (ins.op_case() != schema::Instruction::kKernel ||
          (ins.kernel().kernel() != "adamw" && ins.kernel().kernel() != "adamw_master"))
        continue;
      const schema::KernelCall &kc = ins.kernel();
      // adamw_master (--bf16, --fp16): input 0 is the fp32 master weights, output 3 the 16-bit
      // parameter; the masters are saved as optimizer.state.fp32_param.<name> (Megatron's
      // distributed-checkpoint name), aligned with the Adam moments.
      const bool withMaster = kc.kernel() == "adamw_master";
      std::string where = absl::StrCat("function '", fn.name(), "' instruction ", k, " (",
                                       kc.kernel(), ")");
      if (kc.inputs_size() < 4 || (withMaster && kc.outputs_size() < 4))
        return absl::InvalidArgumentError(absl::StrCat(where, ": fewer than 4 inputs or outputs"));
      absl::StatusOr<Operand> prm = withMaster ? resolve(p, kc.outputs(3), where + " output 3")
                                               : resolve(p, kc.inputs(0), where + " input 0");
      absl::StatusOr<Operand> mw = resolve(p, kc.inputs(0), where + " input 0");
      absl::StatusOr<Operand> m = resolve(p, kc.inputs(2), where + " input 2");
      absl::StatusOr<Operand> v = resolve(p, kc.inputs(3), where + " input 3");
      for (const auto *s : {&prm, &mw, &m, &v})
        if (!s->ok())
          return s->status();
      // adamw's segments: (begin, end, decay) triples inside the operands, padding excluded;
      // none = every element.
      std::vector<std::pair<int64_t, int64_t>> segs;
      bool hasSegments = false;
      for (const schema::Attr &a : kc.attrs())
        if (a.name() == "segments" && a.value().has_ints() && a.value().ints().values_size()) {
          hasSegments = true;
          const auto &vals = a.value().ints().values();
          for (int s = 0; s + 2 < vals.size(); s += 3)
            if (vals[s] < vals[s + 1])
              segs.push_back({vals[s], vals[s + 1]});
        }
      if (!hasSegments)
        segs.push_back({0, prm->numel});
      if (!paramsOfBuffer.count(prm->buffer))
        return absl::UnimplementedError(absl::StrCat(
            where, " updates buffer '", p.buffers(prm->buffer).name(),
            "', which holds no parameter of the parameter table (separate master weights are not "
            "supported by checkpoints yet)"));
      for (auto [sb, se] : segs) {
        int64_t lo0 = int64_t(prm->offset) + sb, hi0 = int64_t(prm->offset) + se;
        for (int qi : paramsOfBuffer[prm->buffer]) {
          const Piece &q = out[size_t(qi)];
          int64_t qlo = int64_t(q.elemOffset), qhi = qlo + q.flatEnd;
          int64_t lo = std::max(lo0, qlo), hi = std::min(hi0, qhi);
          if (lo >= hi)
            continue;
          for (int which = 0; which < (withMaster ? 3 : 2); ++which) {
            Piece x = q;
            x.kind = which == 0 ? "exp_avg" : which == 1 ? "exp_avg_sq" : "fp32_param";
            x.tensor = absl::StrCat("optimizer.state.", x.kind, ".", q.param);
            x.flatBegin = lo - qlo;
            x.flatEnd = hi - qlo;
            const Operand &st = which == 0 ? *m : which == 1 ? *v : *mw;
            x.buffer = st.buffer;
            x.elemOffset = st.offset + uint64_t(lo - int64_t(prm->offset));
            const schema::Buffer &sb2 = p.buffers(st.buffer);
            if (withMaster ? sb2.dtype() != schema::F32 : sb2.dtype() != p.buffers(q.buffer).dtype())
              return absl::UnimplementedError(absl::StrCat(
                  where, withMaster ? ": the Adam state or master weights are not F32"
                                    : ": the Adam state's dtype differs from the parameter's"));
            x.dtype = stDtype(sb2.dtype());
            x.esize = dtypeSize(DType(int(sb2.dtype())));
            adam.push_back(std::move(x));
          }
        }
      }
    }
  int64_t adamElems = 0;
  for (const Piece &x : adam)
    if (x.kind == "exp_avg")
      adamElems += x.size();
  // Replicated moments (every parameter element here): written by dp rank 0 only. A shard
  // (the distributed optimizer): every rank writes its own.
  bool replicated = adamElems == paramElems;
  for (Piece &x : adam) {
    x.owned = !replicated || dpRank == 0;
    out.push_back(std::move(x));
  }
  for (Piece &x : out)
    if (tpRank != 0 && x.boxSize == x.globalShape)
      x.owned = false;
  // A parameter copy held on another pipeline stage too (the tied word embedding on the last
  // stage; metadata "pipeline.shared_copies", comma-separated) is bitwise equal to the first
  // stage's, which writes it; this rank only reads it back.
  auto shared = p.metadata().find("pipeline.shared_copies");
  if (shared != p.metadata().end())
    for (absl::string_view name : absl::StrSplit(shared->second, ',', absl::SkipEmpty()))
      for (Piece &x : out)
        if (x.param == name)
          x.owned = false;
  (void)numParams;
  return splitToTensorShapes(p, std::move(out));
}

std::string jsonOf(const google::protobuf::Message &m, bool pretty) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = pretty;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  std::string s;
  (void)google::protobuf::util::MessageToJsonString(m, &s, o);
  return s;
}

bool parseJson(const std::string &text, google::protobuf::Message &m, std::string &err) {
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = false;
  auto s = google::protobuf::util::JsonStringToMessage(text, &m, o);
  if (!s.ok())
    err = std::string(s.message());
  return s.ok();
}

bool boxesOverlap(const std::vector<int64_t> &as, const std::vector<int64_t> &az,
                  const std::vector<int64_t> &bs, const std::vector<int64_t> &bz) {
  for (size_t d = 0; d < as.size() && d < bs.size(); ++d)
    if (as[d] + az[d] <= bs[d] || bs[d] + bz[d] <= as[d])
      return false;
  return true;
}

absl::StatusOr<std::string> readFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

} // namespace

//===----------------------------------------------------------------------===//
// Checkpointer
//===----------------------------------------------------------------------===//

struct Checkpointer::Impl {
  const schema::Program *program = nullptr;
  Executor *ex = nullptr;
  Communicator *comm = nullptr;
  std::ostream *log = nullptr;
  CheckpointOptions opts;
  LrSchedulerConfig schedule;
  int64_t rngSeed = 0, dataSeed = 0;
  std::vector<Piece> pieces;
  /// Why this program cannot be checkpointed (e.g. bf16 master weights); reported by save and
  /// load only, so that a run without --save / --load trains.
  absl::Status piecesError;
  int64_t dpRank = 0;
  int64_t lastSaved = -1;
  Clock::time_point start = Clock::now();
  bool handlerInstalled = false;
  struct sigaction oldTerm {}, oldInt {};

  int64_t rank() const { return comm->rank(); }
  int64_t world() const { return comm->worldSize(); }

  /// fp16's grad scaler state: the LOSS_SCALE, LOSS_SCALE_GROWTH_TRACKER and
  /// LOSS_SCALE_HYSTERESIS_TRACKER device scalars (f32); {1, 0, 0} for a plan without them.
  std::array<double, 3> scalerState() const {
    std::array<double, 3> v{1.0, 0.0, 0.0};
    for (int b = 0; b < program->buffers_size(); ++b) {
      const schema::Buffer &buf = program->buffers(b);
      int i = buf.scalar_role() == schema::LOSS_SCALE                      ? 0
              : buf.scalar_role() == schema::LOSS_SCALE_GROWTH_TRACKER     ? 1
              : buf.scalar_role() == schema::LOSS_SCALE_HYSTERESIS_TRACKER ? 2
                                                                           : -1;
      float f;
      if (i >= 0 && buf.byte_size() == 4 && ex->readBuffer(b, &f, 4).ok())
        v[size_t(i)] = f;
    }
    return v;
  }
  /// Writes the scaler state back (a resumed fp16 run continues the saved scale sequence).
  absl::Status setScalerState(const schema::CheckpointRunState &rs) {
    for (int b = 0; b < program->buffers_size(); ++b) {
      const schema::Buffer &buf = program->buffers(b);
      double v = buf.scalar_role() == schema::LOSS_SCALE                      ? rs.loss_scale()
                 : buf.scalar_role() == schema::LOSS_SCALE_GROWTH_TRACKER     ? rs.loss_scale_growth_tracker()
                 : buf.scalar_role() == schema::LOSS_SCALE_HYSTERESIS_TRACKER ? rs.loss_scale_hysteresis_tracker()
                                                                              : std::nan("");
      if (std::isnan(v) || buf.byte_size() != 4)
        continue;
      float f = float(v);
      if (absl::Status s = ex->writeBuffer(b, &f, 4); !s.ok())
        return s;
    }
    return absl::OkStatus();
  }

  /// Reduces `v` (n values) with `op` over every multi-rank communicator group, in one order on
  /// every rank (by name, then members). The groups are the mesh's axis groups, so in sequence
  /// they reduce over the whole world. Drains the communication stream first (the communicator
  /// is never used from two threads at once).
  absl::Status reduceOverWorld(int64_t *v, int n, ReduceOp op) {
    ex->drainCommunication();
    std::vector<int> groups;
    for (int g = 0; g < program->groups_size(); ++g)
      if (program->groups(g).ranks_size() > 1)
        groups.push_back(g);
    std::sort(groups.begin(), groups.end(), [&](int a, int b) {
      const schema::CommGroup &x = program->groups(a), &y = program->groups(b);
      if (x.name() != y.name())
        return x.name() < y.name();
      return toVec(x.ranks()) < toVec(y.ranks());
    });
    try {
      for (int g : groups)
        comm->allReduce(g, v, v, n, DType::I64, op);
    } catch (const std::exception &e) {
      return absl::UnavailableError(absl::StrCat("rank ", rank(), ": checkpoint coordination failed: ",
                                                 e.what()));
    }
    return absl::OkStatus();
  }

  std::string metaValue(const std::string &k) const {
    auto it = program->metadata().find(k);
    return it == program->metadata().end() ? "" : it->second;
  }

  //===--------------------------------------------------------------------===//
  // Save
  //===--------------------------------------------------------------------===//

  /// Copies every buffer holding a piece this rank writes out of the arena into host memory
  /// (`staged`, buffer -> bytes): the only part of a save that needs the arena. The caller has
  /// drained the communication stream.
  absl::Status stageBuffers(std::map<int, std::string> &staged) {
    std::set<int> copied; // `staged` may hold an earlier save's bytes (reused memory)
    for (const Piece &x : pieces) {
      if (!x.owned || x.size() == 0 || (x.optimizer() && opts.noSaveOptim))
        continue;
      if (!copied.insert(x.buffer).second)
        continue;
      std::string &all = staged[x.buffer];
      all.resize(program->buffers(x.buffer).byte_size());
      if (absl::Status s = ex->readBuffer(x.buffer, all.data(), all.size()); !s.ok())
        return s;
    }
    return absl::OkStatus();
  }

  /// Writes this rank's file into `partial` from the staged buffers (no arena, executor or
  /// communicator access: it runs on the background thread of --async-save); returns its bytes.
  absl::StatusOr<uint64_t> writeRankFile(const std::string &partial,
                                         const std::map<int, std::string> &bufferBytes) {
    std::vector<NamedTensor> tensors;
    schema::CheckpointMetadata index; // this rank's part: tensors and shards only
    std::string file = absl::StrCat("rank", rank(), ".safetensors");
    std::map<std::string, int> keys;
    for (const Piece &x : pieces) {
      if (!x.owned || x.size() == 0 || (x.optimizer() && opts.noSaveOptim))
        continue;
      auto it = bufferBytes.find(x.buffer);
      if (it == bufferBytes.end())
        return absl::InternalError(absl::StrCat("buffer ", x.buffer, " was not staged"));
      NamedTensor t;
      int n = keys[x.tensor]++;
      t.name = n ? absl::StrCat(x.tensor, "#", n) : x.tensor;
      t.dtype = x.dtype;
      bool whole = x.flatBegin == 0 && x.flatEnd == numel(x.boxSize);
      t.shape = whole ? x.boxSize : std::vector<int64_t>{x.size()};
      t.bytes = it->second.substr(x.elemOffset * x.esize, size_t(x.size()) * x.esize);
      schema::CheckpointTensor &ct = (*index.mutable_tensors())[x.tensor];
      ct.set_dtype(x.dtype);
      ct.mutable_global_shape()->Assign(x.globalShape.begin(), x.globalShape.end());
      ct.set_kind(x.kind);
      ct.set_param(x.param);
      schema::CheckpointShard *sh = ct.add_shards();
      sh->set_file(file);
      sh->set_key(t.name);
      sh->mutable_box_start()->Assign(x.boxStart.begin(), x.boxStart.end());
      sh->mutable_box_size()->Assign(x.boxSize.begin(), x.boxSize.end());
      sh->set_flat_begin(x.flatBegin);
      sh->set_flat_end(x.flatEnd);
      sh->set_crc32c(crc32c(t.bytes));
      tensors.push_back(std::move(t));
    }
    SafetensorsWriteOptions w;
    w.durable = true;
    // Test-only knob: TRAINC_TEST_ASYNC_WRITE_SLEEP_MS=T stalls an --async-save's background
    // write for T ms once half of the rank file's bytes are in its .tmp (so that a test can
    // train on, or kill -9 the process, in the middle of a write).
    if (const char *t = std::getenv("TRAINC_TEST_ASYNC_WRITE_SLEEP_MS"); t && opts.asyncSave) {
      int ms = std::atoi(t);
      auto stalled = std::make_shared<bool>(false);
      w.onProgress = [ms, stalled](uint64_t written, uint64_t total) {
        if (*stalled || written * 2 < total)
          return;
        *stalled = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      };
    }
    return writeSafetensors(partial + "/" + file, tensors,
                            {{"format", kFormat}, {kRankIndexKey, jsonOf(index, false)}}, w);
  }

  /// Rank 0, after every rank's file is complete: reads the rank files' headers, merges their
  /// indexes, checks that every global tensor is covered exactly once, and writes metadata.json.
  absl::StatusOr<uint64_t> writeIndex(const std::string &partial, const TrainState &st,
                                      const std::array<double, 3> &scaler) {
    schema::CheckpointMetadata meta;
    meta.set_format(kFormat);
    meta.set_version(kVersion);
    uint64_t total = 0;
    for (int64_t r = 0; r < world(); ++r) {
      std::string name = absl::StrCat("rank", r, ".safetensors");
      absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(partial + "/" + name);
      if (!f.ok())
        return f.status();
      const auto &md = (*f)->metadata();
      auto it = md.find(kRankIndexKey);
      schema::CheckpointMetadata part;
      std::string err;
      if (it == md.end() || !parseJson(it->second, part, err))
        return absl::DataLossError(absl::StrCat((*f)->path(), ": __metadata__ field ",
                                                kRankIndexKey, " is missing or invalid ", err));
      for (const auto &[tname, t] : part.tensors()) {
        schema::CheckpointTensor &g = (*meta.mutable_tensors())[tname];
        if (g.dtype().empty()) {
          g.set_dtype(t.dtype());
          *g.mutable_global_shape() = t.global_shape();
          g.set_kind(t.kind());
          g.set_param(t.param());
        } else if (g.dtype() != t.dtype() || toVec(g.global_shape()) != toVec(t.global_shape())) {
          return absl::InternalError(absl::StrCat("rank ", r, " saved tensor '", tname,
                                                  "' with another dtype or shape"));
        }
        for (const schema::CheckpointShard &s : t.shards()) {
          const SafetensorsFile::Entry *e = (*f)->find(s.key());
          if (!e)
            return absl::DataLossError(absl::StrCat((*f)->path(), ": no tensor '", s.key(), "'"));
          *g.add_shards() = s;
        }
      }
      schema::CheckpointFile *cf = meta.add_files();
      cf->set_name(name);
      cf->set_bytes((*f)->fileBytes());
      cf->set_rank(r);
      total += (*f)->fileBytes();
    }
    // Every tensor's shards: boxes identical or disjoint, flat ranges within one box disjoint,
    // and all of them together exactly the global tensor.
    for (const auto &[tname, t] : meta.tensors()) {
      std::map<std::vector<int64_t>, std::vector<std::pair<int64_t, int64_t>>> byBox;
      std::map<std::vector<int64_t>, std::vector<int64_t>> boxSize;
      int64_t elems = 0;
      for (const schema::CheckpointShard &s : t.shards()) {
        byBox[toVec(s.box_start())].push_back({s.flat_begin(), s.flat_end()});
        boxSize[toVec(s.box_start())] = toVec(s.box_size());
        elems += s.flat_end() - s.flat_begin();
      }
      for (auto &[b, ranges] : byBox) {
        std::sort(ranges.begin(), ranges.end());
        for (size_t i = 1; i < ranges.size(); ++i)
          if (ranges[i].first < ranges[i - 1].second)
            return absl::InternalError(absl::StrCat("tensor '", tname,
                                                    "' is saved twice by two ranks (elements ",
                                                    ranges[i].first, "..", ranges[i - 1].second, ")"));
      }
      for (auto a = boxSize.begin(); a != boxSize.end(); ++a)
        for (auto b = std::next(a); b != boxSize.end(); ++b)
          if (boxesOverlap(a->first, a->second, b->first, b->second))
            return absl::InternalError(
                absl::StrCat("tensor '", tname, "' is saved in overlapping boxes"));
      if (elems != numel(toVec(t.global_shape())))
        return absl::InternalError(absl::StrCat("tensor '", tname, "': the ranks saved ", elems,
                                                " of its ", numel(toVec(t.global_shape())),
                                                " elements"));
    }
    schema::CheckpointRunState *rs = meta.mutable_run_state();
    rs->set_iteration(st.iteration);
    rs->set_consumed_train_samples(st.consumedSamples);
    rs->set_adam_steps(st.adamSteps);
    rs->set_skipped_iterations(st.skipped);
    rs->set_nan_iterations(st.nans);
    rs->set_loss_scale(scaler[0]);
    rs->set_loss_scale_growth_tracker(scaler[1]);
    rs->set_loss_scale_hysteresis_tracker(scaler[2]);
    rs->set_rng_seed(rngSeed);
    rs->set_data_seed(dataSeed);
    schema::CheckpointLrScheduler *ls = meta.mutable_opt_param_scheduler();
    ls->set_max_lr(schedule.maxLr);
    ls->set_min_lr(schedule.minLr);
    ls->set_lr_warmup_steps(schedule.warmupSamples);
    ls->set_lr_decay_steps(schedule.decaySamples);
    ls->set_lr_decay_style(schedule.decayStyle);
    ls->set_num_steps(st.scheduledSamples);
    schema::CheckpointPlan *pl = meta.mutable_plan();
    pl->set_fingerprint(metaValue("plan.fingerprint"));
    for (const std::string &a : program->mesh().axis_names())
      pl->add_mesh_axis_names(a);
    for (int64_t a : program->mesh().axis_sizes())
      pl->add_mesh_axis_sizes(a);
    pl->set_world_size(world());
    for (const auto &[k, v] : program->metadata())
      if (k.rfind("model.", 0) == 0)
        (*pl->mutable_model_config())[k] = v;
    meta.set_has_optimizer_state(!opts.noSaveOptim);
    std::string json = jsonOf(meta, true);
    if (absl::Status s = writeFileDurably(partial + "/" + kIndex, json); !s.ok())
      return s;
    return total + json.size();
  }

  /// A save whose rank file is written (or being written) and whose cross-rank completion is
  /// still to come.
  struct Pending {
    TrainState st;
    std::array<double, 3> scaler{1.0, 0.0, 0.0}; // fp16's grad scaler at the save
    std::string dir, partial, final;
    std::map<int, std::string> staged; // host staging: buffer -> bytes
    Clock::time_point t0;              // the save began
    double stageSeconds = 0;           // the blocking copy out of the arena
    absl::Status status = absl::OkStatus(); // this rank's file: written or why not
    uint64_t bytes = 0;
    double writeSeconds = 0;           // the rank file's write (background with --async-save)
    std::atomic<bool> done{false};
    std::thread writer;
  };
  std::unique_ptr<Pending> pending;   // an --async-save not finalized yet
  std::map<int, std::string> spare;   // staging memory kept for the next save (no page faults)

  /// The blocking first half of every save: drains the communication stream, creates
  /// iter_N.partial/ and copies what this rank writes into host staging memory.
  std::unique_ptr<Pending> stage(const TrainState &st) {
    auto p = std::make_unique<Pending>();
    p->t0 = Clock::now();
    p->st = st;
    ex->drainCommunication();
    p->scaler = scalerState();
    p->dir = opts.save;
    p->final = p->dir + "/" + iterationDirName(st.iteration);
    p->partial = p->final + ".partial";
    *log << absl::StrFormat(" saving checkpoint at iteration %7d to %s\n", st.iteration, p->dir)
         << std::flush;
    std::error_code ec;
    fs::create_directories(p->partial, ec);
    if (ec)
      p->status = absl::PermissionDeniedError(
          absl::StrCat("cannot create '", p->partial, "' (--save): ", ec.message()));
    p->staged.swap(spare);
    if (p->status.ok())
      p->status = stageBuffers(p->staged);
    p->stageSeconds = seconds(p->t0, Clock::now());
    return p;
  }

  /// The rank file of a staged save (on the training thread, or on the background thread).
  void write(Pending &p) {
    auto t = Clock::now();
    if (p.status.ok()) {
      try {
        absl::StatusOr<uint64_t> b = writeRankFile(p.partial, p.staged);
        if (b.ok())
          p.bytes = *b;
        else
          p.status = b.status();
      } catch (const std::exception &e) { // e.g. bad_alloc: fail the save, not the process
        p.status = absl::ResourceExhaustedError(absl::StrCat(
            "rank ", rank(), ": writing ", p.partial, "/rank", rank(), ".safetensors: ", e.what()));
      }
    }
    p.writeSeconds = seconds(t, Clock::now());
    p.done.store(true, std::memory_order_release);
  }

  /// The cross-rank completion of a save whose rank file is written, on the training thread
  /// (the only thread that uses the communicator): barrier, rank 0's index, rename and tracker,
  /// barrier. `asyncWait` is how long the training thread waited for the background writer.
  absl::Status complete(Pending &p, bool async, double asyncWait) {
    auto tc = Clock::now();
    const TrainState &st = p.st;
    const std::string &dir = p.dir, &partial = p.partial, &final = p.final;
    absl::Status mine = p.status;
    uint64_t bytes = p.bytes;
    std::error_code ec;
    // The staging memory is free again: an async run keeps it for the next save (no page
    // faults in the blocking part); a sync save frees it.
    if (async)
      spare.swap(p.staged);
    p.staged.clear();
    // Barrier 1: every rank's file is complete (or someone failed).
    int64_t ok = mine.ok() ? 1 : 0;
    if (absl::Status s = reduceOverWorld(&ok, 1, ReduceOp::Min); !s.ok())
      return s;
    if (!mine.ok())
      return mine;
    if (!ok)
      return absl::AbortedError(absl::StrCat("rank ", rank(), ": another rank failed to write its "
                                             "part of the checkpoint at iteration ",
                                             st.iteration, " (see its error)"));
    // Test-only knob: TRAINC_TEST_KILL_IN_SAVE=N kills rank 0 (SIGKILL) once every rank file of
    // iteration N is written but before the index and the tracker, as a crash would.
    if (const char *k = std::getenv("TRAINC_TEST_KILL_IN_SAVE");
        k && rank() == 0 && std::to_string(st.iteration) == k)
      std::raise(SIGKILL);
    if (rank() == 0) {
      absl::StatusOr<uint64_t> total = writeIndex(partial, st, p.scaler);
      if (total.ok()) {
        bytes = *total;
        if (fs::exists(final, ec))
          fs::remove_all(final, ec);
        if (ec || ::rename(partial.c_str(), final.c_str()) != 0)
          mine = absl::DataLossError(absl::StrCat("cannot rename '", partial, "' to '", final,
                                                  "': ", ec ? ec.message() : std::strerror(errno)));
        if (mine.ok())
          mine = syncDirectory(dir);
        // The tracker last: it names only a complete checkpoint.
        if (mine.ok())
          mine = writeFileDurably(dir + "/" + kTracker, std::to_string(st.iteration));
      } else {
        mine = total.status();
      }
    }
    // Barrier 2: rank 0 has published the checkpoint.
    ok = mine.ok() ? 1 : 0;
    if (absl::Status s = reduceOverWorld(&ok, 1, ReduceOp::Min); !s.ok())
      return s;
    if (!mine.ok())
      return mine;
    if (!ok)
      return absl::AbortedError(absl::StrCat("rank ", rank(), ": rank 0 could not complete the "
                                             "checkpoint at iteration ", st.iteration,
                                             " (see its error)"));
    lastSaved = st.iteration;
    std::string what = rank() == 0 ? absl::StrCat(world(), " rank file", world() > 1 ? "s" : "",
                                                  " + index: ")
                                   : absl::StrCat("rank ", rank(), ": ");
    double finalize = seconds(tc, Clock::now());
    if (!async) {
      double dt = seconds(p.t0, Clock::now());
      *log << absl::StrFormat(
                  " successfully saved checkpoint from iteration %7d to %s [ %s%d bytes in %.3f s, "
                  "%.1f MB/s ]\n",
                  st.iteration, dir, what, bytes, dt, dt > 0 ? double(bytes) / dt / 1e6 : 0.0)
           << std::flush;
    } else {
      double blocking = p.stageSeconds + asyncWait + finalize;
      double bg = p.writeSeconds;
      *log << absl::StrFormat(
                  " successfully saved checkpoint from iteration %7d to %s [ %s%d bytes, async: "
                  "blocking %.3f s (staging %.3f s, waiting %.3f s, finalize %.3f s), background "
                  "write %.3f s, %.1f MB/s ]\n",
                  st.iteration, dir, what, bytes, blocking, p.stageSeconds, asyncWait, finalize,
                  bg, bg > 0 ? double(p.bytes) / bg / 1e6 : 0.0)
           << std::flush;
    }
    return absl::OkStatus();
  }

  /// A synchronous save (without --async-save, and the rerun state machine's pre-step save).
  absl::Status save(const TrainState &st) {
    if (absl::Status s = finalizePending(); !s.ok())
      return s;
    std::unique_ptr<Pending> p = stage(st);
    write(*p);
    return complete(*p, false, 0);
  }

  /// --async-save: finalizes the previous save, stages this one (blocking) and starts the
  /// background writer; complete() runs later on the training thread (finalizePending).
  absl::Status saveAsync(const TrainState &st) {
    if (absl::Status s = finalizePending(); !s.ok())
      return s;
    pending = stage(st);
    *log << absl::StrFormat(" scheduled an async checkpoint save at iteration %7d to %s [ staged "
                            "in %.3f s; the rank file is written in the background ]\n",
                            st.iteration, pending->dir, pending->stageSeconds)
         << std::flush;
    Pending *p = pending.get();
    p->writer = std::thread([this, p] { write(*p); });
    // Saved as far as the end of training is concerned: finish() finalizes it.
    lastSaved = st.iteration;
    return absl::OkStatus();
  }

  /// A save at an interval or an exit: asynchronous with --async-save.
  absl::Status saveNow(const TrainState &st) { return opts.asyncSave ? saveAsync(st) : save(st); }

  /// Megatron's finalize_async_save(blocking=True): waits for the background writer and
  /// completes the save across the ranks. Collective when a save is pending (every rank has
  /// one: saves are collective).
  absl::Status finalizePending() {
    if (!pending)
      return absl::OkStatus();
    auto t = Clock::now();
    if (pending->writer.joinable())
      pending->writer.join();
    double wait = seconds(t, Clock::now());
    std::unique_ptr<Pending> p = std::move(pending);
    lastSaved = -1;
    return complete(*p, true, wait);
  }

  //===--------------------------------------------------------------------===//
  // Load
  //===--------------------------------------------------------------------===//

  absl::Status load(TrainState &state, int64_t &seedOut) {
    auto t0 = Clock::now();
    const std::string dir = opts.load;
    int64_t iteration = opts.ckptStep;
    const std::string tracker = dir + "/" + kTracker;
    if (iteration < 0) {
      absl::StatusOr<std::string> text = readFile(tracker);
      if (!text.ok()) {
        // Megatron: no tracker, nothing to load; train from the start (--save X --load X).
        *log << " could not find " << tracker << ": no checkpoint to load, training from the "
             << "start\n" << std::flush;
        return absl::OkStatus();
      }
      std::string t(absl::StripAsciiWhitespace(*text));
      char *end = nullptr;
      long long v = std::strtoll(t.c_str(), &end, 10);
      if (t.empty() || *end || v < 0)
        return absl::DataLossError(absl::StrCat(
            tracker, ": expected an iteration number, got '", t,
            t == "release" ? "' (release checkpoints are not supported)" : "'"));
      iteration = v;
    }
    const std::string iterDir = dir + "/" + iterationDirName(iteration);
    const std::string indexPath = iterDir + "/" + kIndex;
    absl::StatusOr<std::string> text = readFile(indexPath);
    if (!text.ok())
      return absl::NotFoundError(absl::StrCat(
          opts.ckptStep >= 0
              ? absl::StrCat("--ckpt-step ", iteration)
              : absl::StrCat(tracker, " names iteration ", iteration),
          ", but ", indexPath, " does not exist (an incomplete or deleted checkpoint)"));
    *log << absl::StrFormat(" loading checkpoint from %s at iteration %d\n", dir, iteration)
         << std::flush;
    schema::CheckpointMetadata meta;
    std::string err;
    if (!parseJson(*text, meta, err))
      return absl::DataLossError(absl::StrCat(indexPath, ": not a trainc checkpoint index: ", err));
    if (meta.format() != kFormat)
      return absl::DataLossError(absl::StrCat(indexPath, ": field format is '", meta.format(),
                                              "', expected '", kFormat, "'"));
    if (meta.version() != kVersion)
      return absl::DataLossError(absl::StrCat(indexPath, ": field version is ", meta.version(),
                                              ", this runtime reads version ", kVersion));
    if (meta.run_state().iteration() != iteration)
      return absl::DataLossError(absl::StrCat(indexPath, ": field run_state.iteration is ",
                                              meta.run_state().iteration(), ", but the directory is ",
                                              iterationDirName(iteration)));
    if (absl::Status s = checkModel(meta, indexPath); !s.ok())
      return s;
    const bool loadOptim = !opts.finetune && !opts.noLoadOptim;
    bool planHasOptim = false;
    for (const Piece &x : pieces)
      planHasOptim = planHasOptim || x.optimizer();
    if (loadOptim && planHasOptim && !meta.has_optimizer_state())
      return absl::FailedPreconditionError(absl::StrCat(
          indexPath, ": field has_optimizer_state is false (saved with --no-save-optim): pass "
                     "--no-load-optim or --finetune to load the weights only"));
    if (!opts.finetune && !opts.overrideOptParamScheduler)
      if (absl::Status s = checkScheduler(meta.opt_param_scheduler(), indexPath); !s.ok())
        return s;
    // Every rank file the index lists exists with its recorded size.
    for (int i = 0; i < meta.files_size(); ++i) {
      const schema::CheckpointFile &f = meta.files(i);
      std::string path = iterDir + "/" + f.name();
      std::error_code ec;
      uint64_t size = fs::file_size(path, ec);
      if (ec)
        return absl::NotFoundError(absl::StrCat(path, ": missing (", kIndex, " field files[", i,
                                                "] lists it: rank ", f.rank(), "'s part, ",
                                                f.bytes(), " bytes)"));
      if (size != f.bytes())
        return absl::DataLossError(absl::StrCat(
            path, size < f.bytes() ? ": truncated: " : ": changed: ", size, " bytes, but ", kIndex,
            " field files[", i, "].bytes says ", f.bytes()));
    }
    // Read every piece this rank needs from the shards that overlap it.
    std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
    std::map<int, std::string> staged;
    uint64_t bytesRead = 0;
    for (const Piece &x : pieces) {
      if (x.size() == 0 || (x.optimizer() && !loadOptim))
        continue;
      auto ti = meta.tensors().find(x.tensor);
      if (ti == meta.tensors().end())
        return absl::DataLossError(absl::StrCat(indexPath, ": field tensors has no '", x.tensor,
                                                "' (this plan's ", x.kind, " of '", x.param,
                                                "')"));
      const schema::CheckpointTensor &t = ti->second;
      if (t.dtype() != x.dtype || toVec(t.global_shape()) != x.globalShape)
        return absl::DataLossError(absl::StrCat(
            indexPath, ": field tensors['", x.tensor, "'] is ", t.dtype(), " ",
            shapeText(toVec(t.global_shape())), ", this plan's is ", x.dtype, " ",
            shapeText(x.globalShape)));
      auto st = staged.find(x.buffer);
      if (st == staged.end()) {
        std::string all(program->buffers(x.buffer).byte_size(), '\0');
        if (absl::Status s = ex->readBuffer(x.buffer, all.data(), all.size()); !s.ok())
          return s;
        st = staged.emplace(x.buffer, std::move(all)).first;
      }
      int64_t covered = 0;
      for (int si = 0; si < t.shards_size(); ++si) {
        const schema::CheckpointShard &s = t.shards(si);
        std::string field = absl::StrCat(kIndex, " field tensors['", x.tensor, "'].shards[", si, "]");
        const std::vector<int64_t> sStart = toVec(s.box_start()), sSize = toVec(s.box_size());
        if (s.flat_begin() < 0 || s.flat_begin() > s.flat_end() ||
            s.flat_end() > numel(sSize))
          return absl::DataLossError(absl::StrCat(
              iterDir, ": ", field, " holds elements [", s.flat_begin(), ", ", s.flat_end(),
              ") of box ", shapeText(sStart), "+", shapeText(sSize), ", which has ",
              numel(sSize), " elements"));
        // Another box (another tensor-parallel layout): read the shard and copy what overlaps.
        const bool sameBox = sStart == x.boxStart && sSize == x.boxSize;
        if (!sameBox && (sStart.size() != x.boxStart.size() ||
                         !boxesOverlap(sStart, sSize, x.boxStart, x.boxSize)))
          continue;
        int64_t lo = std::max(s.flat_begin(), x.flatBegin), hi = std::min(s.flat_end(), x.flatEnd);
        if (sameBox && lo >= hi)
          continue;
        auto fi = files.find(s.file());
        if (fi == files.end()) {
          absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
              SafetensorsFile::open(iterDir + "/" + s.file());
          if (!f.ok())
            return f.status();
          fi = files.emplace(s.file(), std::move(*f)).first;
        }
        const SafetensorsFile &f = *fi->second;
        const SafetensorsFile::Entry *e = f.find(s.key());
        if (!e)
          return absl::DataLossError(absl::StrCat(f.path(), ": no tensor '", s.key(), "' (", field,
                                                  ".key names it)"));
        int64_t n = s.flat_end() - s.flat_begin();
        // A whole box is stored with the box's shape, a part of one flat.
        std::vector<int64_t> want = s.flat_begin() == 0 && s.flat_end() == numel(sSize)
                                        ? sSize
                                        : std::vector<int64_t>{n};
        if (e->dtype != t.dtype() || e->shape != want)
          return absl::DataLossError(absl::StrCat(
              f.path(), ": tensor '", s.key(), "' is ", e->dtype, " ", shapeText(e->shape),
              " in the file's header, but ", field, " says ", t.dtype(), " ", shapeText(want)));
        std::string bytes(size_t(n) * x.esize, '\0');
        if (absl::Status rs = f.read(s.key(), 0, bytes.size(), bytes.data()); !rs.ok())
          return rs;
        bytesRead += bytes.size();
        if (uint32_t c = crc32c(bytes); c != s.crc32c())
          return absl::DataLossError(absl::StrFormat(
              "%s: tensor '%s': CRC32C 0x%08x does not match %s.crc32c 0x%08x (the file is "
              "corrupted)",
              f.path(), s.key(), c, field, s.crc32c()));
        if (sameBox) {
          std::memcpy(st->second.data() + (x.elemOffset + uint64_t(lo - x.flatBegin)) * x.esize,
                      bytes.data() + size_t(lo - s.flat_begin()) * x.esize,
                      size_t(hi - lo) * x.esize);
          covered += hi - lo;
          continue;
        }
        covered += copyBoxOverlap(x, sStart, sSize, s.flat_begin(), s.flat_end(), bytes.data(),
                                  st->second.data());
      }
      if (covered != x.size())
        return absl::DataLossError(absl::StrCat(
            indexPath, ": field tensors['", x.tensor, "'] ",
            covered < x.size() ? "covers only " : "has overlapping shards: they hold ", covered,
            " of the ", x.size(), " elements [", x.flatBegin, ", ", x.flatEnd,
            ") this rank needs"));
    }
    for (auto &[b, bytes] : staged)
      if (absl::Status s = ex->writeBuffer(b, bytes.data(), bytes.size()); !s.ok())
        return s;
    const schema::CheckpointRunState &rs = meta.run_state();
    if (loadOptim) { // the grad scaler is part of Megatron's optimizer state
      if (absl::Status s = setScalerState(rs); !s.ok())
        return s;
    } else if (absl::Status s = initializeMasterWeights(*ex); !s.ok()) {
      return s; // fresh fp32 master weights from the loaded 16-bit parameters, as Megatron's
    }         // optimizer builds them from the model when it loads no optimizer state
    std::error_code ec0;
    if (!opts.finetune) {
      state.iteration = rs.iteration();
      state.consumedSamples = rs.consumed_train_samples();
      state.scheduledSamples = meta.opt_param_scheduler().num_steps();
      state.adamSteps = loadOptim ? rs.adam_steps() : 0;
      state.skipped = rs.skipped_iterations();
      state.nans = rs.nan_iterations();
      if (!opts.noLoadRng) {
        seedOut = rs.rng_seed();
        rngSeed = rs.rng_seed();
      }
      // Saving into the directory just loaded: the iteration loaded is already there.
      if (!opts.save.empty() && fs::equivalent(opts.save, opts.load, ec0))
        lastSaved = state.iteration;
    }
    double dt = seconds(t0, Clock::now());
    std::string plan = meta.plan().fingerprint() == metaValue("plan.fingerprint")
                           ? ""
                           : absl::StrCat(", saved by plan ", meta.plan().fingerprint(), " of ",
                                          meta.plan().world_size(), " rank",
                                          meta.plan().world_size() == 1 ? "" : "s");
    *log << absl::StrFormat(
                " successfully loaded checkpoint from %s at iteration %d [ %d bytes read by rank "
                "%d in %.3f s, %.1f MB/s%s%s ]\n",
                dir, iteration, bytesRead, rank(), dt, dt > 0 ? double(bytesRead) / dt / 1e6 : 0.0,
                opts.finetune ? ", --finetune: weights only, iteration 0"
                : !loadOptim  ? ", --no-load-optim: Adam state fresh"
                              : "",
                plan)
         << std::flush;
    return absl::OkStatus();
  }

  /// The checkpoint's parameters must be this plan's: same names, global shapes and dtypes.
  absl::Status checkModel(const schema::CheckpointMetadata &meta, const std::string &indexPath) {
    // Which model.* settings differ, as a hint.
    std::vector<std::string> diffs;
    for (const auto &[k, v] : program->metadata())
      if (k.rfind("model.", 0) == 0) {
        auto it = meta.plan().model_config().find(k);
        std::string theirs = it == meta.plan().model_config().end() ? "(unset)" : it->second;
        if (theirs != v && diffs.size() < 3)
          diffs.push_back(absl::StrCat(k, ": ", theirs, " in the checkpoint, ", v, " in this plan"));
      }
    std::string hint = diffs.empty() ? "" : absl::StrCat(" (", absl::StrJoin(diffs, "; "), ")");
    auto different = [&](const std::string &what) {
      return absl::FailedPreconditionError(
          absl::StrCat(indexPath, ": a checkpoint of a different model: ", what, hint));
    };
    std::set<std::string> mine;
    for (const Piece &x : pieces) {
      if (x.optimizer())
        continue;
      mine.insert(x.tensor);
      auto it = meta.tensors().find(x.tensor);
      if (it == meta.tensors().end())
        return different(absl::StrCat("field tensors has no '", x.tensor, "' (a parameter of this plan)"));
      if (toVec(it->second.global_shape()) != x.globalShape)
        return different(absl::StrCat("field tensors['", x.tensor, "'].global_shape is ",
                                      shapeText(toVec(it->second.global_shape())),
                                      ", this plan's parameter has ", shapeText(x.globalShape)));
      if (it->second.dtype() != x.dtype)
        return different(absl::StrCat("field tensors['", x.tensor, "'].dtype is ",
                                      it->second.dtype(), ", this plan's parameter is ", x.dtype));
    }
    // A pipeline stage holds only its layers' parameters: the other stages' are not its own.
    bool pipelined = false;
    for (int a = 0; a < program->mesh().axis_names_size() && a < program->mesh().axis_sizes_size();
         ++a)
      pipelined |= program->mesh().axis_names(a) == "pp" && program->mesh().axis_sizes(a) > 1;
    for (const auto &[name, t] : meta.tensors())
      if (!pipelined && t.kind() == "param" && !mine.count(name))
        return different(absl::StrCat("its parameter '", name, "' is not in this plan"));
    return absl::OkStatus();
  }

  /// Megatron's OptimizerParamScheduler check on load: the schedule must be the saved one.
  absl::Status checkScheduler(const schema::CheckpointLrScheduler &c, const std::string &indexPath) {
    auto mismatch = [&](const std::string &field, const std::string &theirs,
                        const std::string &ours, const char *flags) {
      return absl::FailedPreconditionError(absl::StrCat(
          indexPath, ": field opt_param_scheduler.", field, " is ", theirs,
          " in the checkpoint but ", ours, " in this run (", flags,
          "): pass the saved values, or --override-opt_param-scheduler to use this run's"));
    };
    if (c.max_lr() != schedule.maxLr)
      return mismatch("max_lr", absl::StrCat(c.max_lr()), absl::StrCat(schedule.maxLr), "--lr");
    if (c.min_lr() != schedule.minLr)
      return mismatch("min_lr", absl::StrCat(c.min_lr()), absl::StrCat(schedule.minLr), "--min-lr");
    if (c.lr_warmup_steps() != schedule.warmupSamples)
      return mismatch("lr_warmup_steps", absl::StrCat(c.lr_warmup_steps(), " samples"),
                      absl::StrCat(schedule.warmupSamples), "--lr-warmup-iters/--lr-warmup-samples");
    if (c.lr_decay_steps() != schedule.decaySamples)
      return mismatch("lr_decay_steps", absl::StrCat(c.lr_decay_steps(), " samples"),
                      absl::StrCat(schedule.decaySamples),
                      "--lr-decay-iters/--lr-decay-samples, else --train-iters/--train-samples");
    if (c.lr_decay_style() != schedule.decayStyle)
      return mismatch("lr_decay_style", c.lr_decay_style(), schedule.decayStyle,
                      "--lr-decay-style");
    return absl::OkStatus();
  }
};

Checkpointer::Checkpointer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Checkpointer::~Checkpointer() {
  // A pending --async-save that was not finalized (the run stopped with an error): let the
  // writer finish its file, but publish nothing (the peers may be gone): iter_N.partial/ stays
  // incomplete and the tracker names the previous checkpoint.
  if (impl_ && impl_->pending) {
    if (impl_->pending->writer.joinable())
      impl_->pending->writer.join();
    *impl_->log << absl::StrFormat(" async checkpoint save of iteration %d not finalized (the run "
                                   "stopped before): %s is incomplete\n",
                                   impl_->pending->st.iteration, impl_->pending->partial)
                << std::flush;
  }
  if (impl_ && impl_->handlerInstalled) {
    sigaction(SIGTERM, &impl_->oldTerm, nullptr);
    sigaction(SIGINT, &impl_->oldInt, nullptr);
  }
}

absl::StatusOr<std::unique_ptr<Checkpointer>>
Checkpointer::create(const schema::Program &program, Executor &ex, Communicator &comm,
                     const CheckpointOptions &options, const LrSchedulerConfig &schedule,
                     int64_t seed, std::ostream &log) {
  if (options.asyncSave && options.save.empty())
    return absl::InvalidArgumentError(
        "--async-save needs --save DIR (there is nothing to save asynchronously)");
  auto im = std::make_unique<Impl>();
  im->program = &program;
  im->ex = &ex;
  im->comm = &comm;
  im->log = &log;
  im->opts = options;
  im->schedule = schedule;
  im->rngSeed = im->dataSeed = seed;
  int64_t tpRank = 0;
  for (int a = 0; a < program.mesh().axis_names_size() && a < program.mesh().coords_size(); ++a) {
    if (program.mesh().axis_names(a) == "dp")
      im->dpRank = program.mesh().coords(a);
    if (program.mesh().axis_names(a) == "tp")
      tpRank = program.mesh().coords(a);
  }
  absl::StatusOr<std::vector<Piece>> pieces = collectPieces(program, im->dpRank, tpRank);
  if (!pieces.ok() && (!options.save.empty() || !options.load.empty()))
    return pieces.status();
  if (pieces.ok())
    im->pieces = std::move(*pieces);
  else
    im->piecesError = pieces.status();
  if (options.exitSignalHandler) {
    gExitSignal = 0;
    struct sigaction sa {};
    sa.sa_handler = onExitSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, &im->oldTerm);
    sigaction(SIGINT, &sa, &im->oldInt);
    im->handlerInstalled = true;
  }
  return std::unique_ptr<Checkpointer>(new Checkpointer(std::move(im)));
}

absl::Status Checkpointer::load(TrainState &state, int64_t &rngSeed) {
  if (impl_->opts.load.empty())
    return absl::OkStatus();
  if (!impl_->piecesError.ok())
    return impl_->piecesError;
  return impl_->load(state, rngSeed);
}

void Checkpointer::setExecutor(Executor &ex) { impl_->ex = &ex; }
bool Checkpointer::savedAt(int64_t iteration) const { return impl_->lastSaved == iteration; }

absl::Status Checkpointer::save(const TrainState &state) {
  if (!impl_->piecesError.ok())
    return impl_->piecesError;
  return impl_->save(state);
}

absl::StatusOr<bool> Checkpointer::afterIteration(const TrainState &st) {
  Impl &im = *impl_;
  const CheckpointOptions &o = im.opts;
  const bool saving = !o.save.empty();
  // Test-only knob: TRAINC_TEST_ITERATION_SLEEP_MS=T makes every iteration T ms longer, so that
  // a test can signal a run in the middle.
  if (const char *t = std::getenv("TRAINC_TEST_ITERATION_SLEEP_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(t)));
  // flags: [0] a signal, [1] the duration is over, [2] this rank's async writer still runs.
  int64_t flags[3] = {0, 0, 0};
  const bool pending = im.pending != nullptr;
  if (o.exitSignalHandler || o.exitDurationInMins > 0 || pending) {
    // Every rank decides the same (Megatron's all-gather of the signals and all_reduce(MAX) of
    // the elapsed-time test): a rank that alone stopped would leave its peers in a collective.
    // A pending async save is finalized once every rank's writer is done (Megatron's
    // maybe_finalize_async_save(blocking=False), whose all_reduce this is).
    flags[0] = gExitSignal != 0 ? 1 : 0;
    flags[1] = o.exitDurationInMins > 0 &&
                       seconds(im.start, Clock::now()) / 60.0 > o.exitDurationInMins
                   ? 1
                   : 0;
    flags[2] = pending && !im.pending->done.load(std::memory_order_acquire) ? 1 : 0;
    if (absl::Status s = im.reduceOverWorld(flags, 3, ReduceOp::Max); !s.ok())
      return s;
  }
  if (pending && !flags[2])
    if (absl::Status s = im.finalizePending(); !s.ok())
      return s;
  // Before an exit, every save is finalized (Megatron's finalize_async_save before exit).
  auto saveAndFinalize = [&]() -> absl::Status {
    if (absl::Status s = im.saveNow(st); !s.ok())
      return s;
    return im.finalizePending();
  };
  if (flags[0]) {
    if (absl::Status s = saving ? saveAndFinalize() : im.finalizePending(); !s.ok())
      return s;
    int sig = gExitSignal ? int(gExitSignal) : SIGTERM;
    *im.log << absl::StrFormat(" exiting program after receiving %s at iteration %d\n",
                               sig == SIGINT ? "SIGINT" : "SIGTERM", st.iteration)
            << std::flush;
    return true;
  }
  bool saved = false;
  const bool exiting = flags[1] || (o.exitInterval > 0 && st.iteration % o.exitInterval == 0);
  if (saving && o.saveInterval > 0 && st.iteration % o.saveInterval == 0) {
    if (absl::Status s = im.saveNow(st); !s.ok())
      return s;
    saved = true;
  }
  if (exiting) {
    if (absl::Status s = saving && !saved ? saveAndFinalize() : im.finalizePending(); !s.ok())
      return s;
  }
  if (flags[1]) {
    *im.log << absl::StrFormat(" exiting program after %.2f minutes (--exit-duration-in-mins %g) "
                               "at iteration %d\n",
                               seconds(im.start, Clock::now()) / 60.0, o.exitDurationInMins,
                               st.iteration)
            << std::flush;
    return true;
  }
  if (exiting) {
    *im.log << absl::StrFormat(" exiting program at iteration %d (--exit-interval %d)\n",
                               st.iteration, o.exitInterval)
            << std::flush;
    return true;
  }
  return false;
}

absl::Status Checkpointer::finish(const TrainState &st) {
  Impl &im = *impl_;
  if (absl::Status s = im.finalizePending(); !s.ok())
    return s;
  if (im.opts.save.empty() || im.lastSaved == st.iteration || st.iteration == 0)
    return absl::OkStatus();
  if (absl::Status s = im.saveNow(st); !s.ok())
    return s;
  return im.finalizePending();
}

} // namespace trainc::rt::control
