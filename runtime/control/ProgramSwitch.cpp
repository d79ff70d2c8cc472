//===- ProgramSwitch.cpp - Moving the training state between programs ----===//

#include "runtime/control/ProgramSwitch.h"

#include "runtime/core/Program.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <map>
#include <vector>

namespace trainc::rt::control {

bool isTrainingState(schema::BufferKind k) {
  return k == schema::PARAMETER || k == schema::MAIN_GRAD || k == schema::MASTER_PARAM ||
         k == schema::OPTIMIZER_STATE || k == schema::SCALAR;
}

namespace {
template <typename R> std::string list(const R &r) { return absl::StrJoin(r, "x"); }
} // namespace

namespace {
/// The buffers checkpoints address by index (Checkpoint.cpp's pieces): they must keep it.
bool isIndexedState(schema::BufferKind k) { return isTrainingState(k) && k != schema::SCALAR; }

/// The index of each SCALAR buffer of `p` by name.
std::map<std::string, int> scalarsByName(const schema::Program &p) {
  std::map<std::string, int> out;
  for (int i = 0; i < p.buffers_size(); ++i)
    if (p.buffers(i).kind() == schema::SCALAR)
      out.emplace(p.buffers(i).name(), i);
  return out;
}

std::string describe(const schema::Buffer &x) {
  return absl::StrCat("'", x.name(), "' (", schema::BufferKind_Name(x.kind()), ", ",
                      schema::DType_Name(x.dtype()), ", ", x.byte_size(), " bytes)");
}
} // namespace

std::string trainingStateMismatch(const schema::Program &a, const schema::Program &b) {
  if (list(a.mesh().coords()) != list(b.mesh().coords()) ||
      list(a.mesh().axis_sizes()) != list(b.mesh().axis_sizes()))
    return absl::StrCat("the mesh differs (coordinates ", list(a.mesh().coords()), " of ",
                        list(a.mesh().axis_sizes()), " vs ", list(b.mesh().coords()), " of ",
                        list(b.mesh().axis_sizes()), ")");
  auto indexed = [](const schema::Program &p) {
    std::vector<int> idx;
    for (int i = 0; i < p.buffers_size(); ++i)
      if (isIndexedState(p.buffers(i).kind()))
        idx.push_back(i);
    return idx;
  };
  const std::vector<int> sa = indexed(a), sb = indexed(b);
  if (sa != sb)
    return absl::StrCat("the parameter, gradient and optimizer buffers are at different "
                        "indices (",
                        sa.size(), " buffers up to index ", sa.empty() ? -1 : sa.back(), " vs ",
                        sb.size(), " up to ", sb.empty() ? -1 : sb.back(), ")");
  auto same = [](const schema::Buffer &x, const schema::Buffer &y) {
    return x.name() == y.name() && x.kind() == y.kind() && x.dtype() == y.dtype() &&
           x.byte_size() == y.byte_size();
  };
  for (int i : sa)
    if (!same(a.buffers(i), b.buffers(i)))
      return absl::StrCat("training-state buffer ", i, " differs: ", describe(a.buffers(i)),
                          " vs ", describe(b.buffers(i)));
  const std::map<std::string, int> ka = scalarsByName(a), kb = scalarsByName(b);
  for (const auto &[name, i] : ka) {
    auto j = kb.find(name);
    if (j == kb.end())
      return absl::StrCat("device scalar ", describe(a.buffers(i)), " is missing");
    if (!same(a.buffers(i), b.buffers(j->second)))
      return absl::StrCat("device scalar ", describe(a.buffers(i)), " differs: ",
                          describe(b.buffers(j->second)));
  }
  if (ka.size() != kb.size())
    return absl::StrCat("the programs have ", ka.size(), " and ", kb.size(), " device scalars");
  if (a.parameters_size() != b.parameters_size())
    return absl::StrCat("the parameter tables differ in length (", a.parameters_size(), " vs ",
                        b.parameters_size(), ")");
  for (int i = 0; i < a.parameters_size(); ++i) {
    const schema::Parameter &x = a.parameters(i), &y = b.parameters(i);
    if (x.SerializeAsString() != y.SerializeAsString())
      return absl::StrCat("parameter ", i, " differs: '", x.name(), "' vs '", y.name(), "'");
  }
  return "";
}

absl::Status copyTrainingState(const Executor &from, Executor &to) {
  from.drainCommunication();
  to.drainCommunication();
  const schema::Program &p = from.program();
  const std::map<std::string, int> scalars = scalarsByName(to.program());
  std::vector<char> bytes;
  for (int i = 0; i < p.buffers_size(); ++i) {
    const schema::Buffer &b = p.buffers(i);
    if (!isTrainingState(b.kind()))
      continue;
    int target = i;
    if (b.kind() == schema::SCALAR) {
      auto it = scalars.find(b.name());
      if (it == scalars.end())
        return absl::FailedPreconditionError(
            absl::StrCat("the next program has no device scalar '", b.name(), "'"));
      target = it->second;
    }
    bytes.resize(b.byte_size());
    if (absl::Status s = from.readBuffer(i, bytes.data(), bytes.size()); !s.ok())
      return s;
    if (absl::Status s = to.writeBuffer(target, bytes.data(), bytes.size()); !s.ok())
      return s;
  }
  return absl::OkStatus();
}

std::string rampupProgramPath(const std::string &planDir, int64_t rank, int64_t m,
                              int64_t finalM) {
  return m == finalM ? absl::StrCat(planDir, "/rank", rank, ".pb")
                     : absl::StrCat(planDir, "/rampup/m", m, "/rank", rank, ".pb");
}

absl::StatusOr<schema::Program> readRampupProgram(const std::string &path, int64_t m,
                                                  const schema::Program &current,
                                                  const std::string &currentPath) {
  absl::StatusOr<schema::Program> next = readProgramFile(path);
  if (!next.ok())
    return absl::Status(next.status().code(),
                        absl::StrCat("batch-size ramp-up to ", m, " microbatches: ",
                                     next.status().message()));
  const schema::PlanInfo &a = current.plan(), &b = next->plan();
  if (int64_t(b.num_microbatches()) != m || b.micro_batch_size() != a.micro_batch_size() ||
      b.seq_length() != a.seq_length())
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": expected a program of ", m, " microbatches of ", a.micro_batch_size(), " x ",
        a.seq_length(), " tokens for the batch-size ramp-up, found ", b.num_microbatches(),
        " of ", b.micro_batch_size(), " x ", b.seq_length(),
        " (recompile the plan into an empty directory)"));
  if (std::string e = trainingStateMismatch(current, *next); !e.empty())
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot continue the training state of ", currentPath, ": ", e));
  return next;
}

absl::StatusOr<std::optional<BatchRampup>> rampupOf(const schema::Program &program) {
  auto it = program.metadata().find("training.rampup_batch_size");
  if (it == program.metadata().end() || it->second.empty())
    return std::optional<BatchRampup>();
  std::vector<int64_t> v;
  for (absl::string_view piece : absl::StrSplit(it->second, ' ', absl::SkipEmpty())) {
    int64_t x;
    if (!absl::SimpleAtoi(piece, &x))
      return absl::InvalidArgumentError(absl::StrCat(
          "the plan's training.rampup_batch_size '", it->second, "' is not three integers"));
    v.push_back(x);
  }
  if (v.size() != 3)
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan's training.rampup_batch_size '", it->second, "' is not three integers"));
  const int64_t gbs = int64_t(program.plan().global_batch_size());
  if (std::string e = BatchRampup::check(gbs, v[0], v[1], v[2]); !e.empty())
    return absl::InvalidArgumentError(absl::StrCat("the plan's --rampup-batch-size: ", e));
  int64_t dp = 1;
  for (int a = 0; a < program.mesh().axis_names_size() && a < program.mesh().axis_sizes_size();
       ++a)
    if (program.mesh().axis_names(a) == "dp")
      dp = program.mesh().axis_sizes(a);
  auto d = program.metadata().find("training.decrease_batch_size_if_needed");
  const bool decrease = d != program.metadata().end() && d->second == "true";
  return std::optional<BatchRampup>(BatchRampup(
      gbs, int64_t(program.plan().micro_batch_size()), dp, decrease, v[0], v[1], v[2]));
}

absl::Status checkRampupRunOptions(const schema::Program &program, const RunOptions &o) {
  auto it = program.metadata().find("training.rampup_batch_size");
  if (it == program.metadata().end() || it->second.empty())
    return absl::OkStatus();
  const std::string given = absl::StrCat("this plan's --rampup-batch-size ", it->second);
  if (o.trainIters > 0)
    return absl::InvalidArgumentError(absl::StrCat(
        given, ": expected no batch-size rampup for iteration-based training (give "
               "--train-samples instead of --train-iters ",
        o.trainIters, ")"));
  if (o.lrWarmupIters > 0)
    return absl::InvalidArgumentError(absl::StrCat(
        given, ": expected sample-based learning rate warmup (give --lr-warmup-samples instead "
               "of --lr-warmup-iters ",
        o.lrWarmupIters, ")"));
  if (o.lrDecayIters > 0)
    return absl::InvalidArgumentError(absl::StrCat(
        given, ": expected sample-based learning rate decay (give --lr-decay-samples instead of "
               "--lr-decay-iters ",
        o.lrDecayIters, ")"));
  if (!o.traceDir.empty())
    return absl::UnimplementedError(absl::StrCat(
        "not supported yet: --trace with ", given,
        " (a trace names the instructions of one program; the ramp-up switches programs)"));
  return absl::OkStatus();
}

} // namespace trainc::rt::control
