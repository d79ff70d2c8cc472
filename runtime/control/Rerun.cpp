//===- Rerun.cpp - Megatron's rerun state machine, for a compiled iteration ---===//

#include "runtime/control/Rerun.h"

#include "runtime/core/Executor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <cerrno>
#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <fstream>

namespace trainc::rt::control {
namespace {

/// Megatron's factor for "unexpectedly large" (pretrain_gpt.py's spiky loss and
/// --check-for-large-grads): a value above 10x the largest of the recent accepted ones.
constexpr double kLargeFactor = 10.0;
/// Accepted iterations the recent maximum looks back over.
constexpr size_t kWindow = 100;

double relativeDiff(double a, double b) {
  if (a == b || (std::isnan(a) && std::isnan(b)))
    return 0;
  double scale = std::max(std::fabs(a), std::fabs(b));
  return scale > 0 && std::isfinite(scale) ? std::fabs(a - b) / scale : INFINITY;
}

std::string show(const IterationResult &r) {
  return absl::StrFormat("lm loss %.17g, grad norm %.17g", r.loss, r.gradNorm);
}

} // namespace

absl::StatusOr<bool> parseRerunFlag(const std::string &flag,
                                    const std::function<absl::Status(std::string &)> &value,
                                    RerunOptions &o) {
  std::string v;
  auto choice = [&](std::initializer_list<const char *> names) -> absl::StatusOr<int> {
    if (absl::Status s = value(v); !s.ok())
      return s;
    int i = 0;
    std::string all;
    for (const char *n : names) {
      if (v == n)
        return i;
      all += (i ? (i + 1 == int(names.size()) ? " or " : ", ") : "") + std::string(n);
      ++i;
    }
    return absl::InvalidArgumentError(absl::StrCat(flag, " expects ", all, ", got '", v, "'"));
  };
  if (flag == "--rerun-mode") {
    absl::StatusOr<int> c = choice({"disabled", "validate_results", "report_determinism_stats"});
    if (!c.ok())
      return c.status();
    o.mode = RerunMode(*c);
    return true;
  }
  if (flag == "--error-injection-type") {
    absl::StatusOr<int> c = choice({"correct_result", "transient_error", "persistent_error"});
    if (!c.ok())
      return c.status();
    o.errorInjectionType = ErrorInjection(*c);
    return true;
  }
  if (flag == "--error-injection-rate") {
    if (absl::Status s = value(v); !s.ok())
      return s;
    char *end = nullptr;
    errno = 0;
    long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || errno == ERANGE || n < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "--error-injection-rate expects a non-negative integer (1 in N results), got '", v,
          "'"));
    o.errorInjectionRate = n;
    return true;
  }
  if (flag == "--result-rejected-tracker-filename") {
    if (absl::Status s = value(o.rejectedTrackerFile); !s.ok())
      return s;
    return true;
  }
  if (flag == "--check-for-spiky-loss") {
    o.checkSpikyLoss = true;
    return true;
  }
  if (flag == "--check-for-large-grads") {
    o.checkLargeGrads = true;
    return true;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Snapshot
//===----------------------------------------------------------------------===//

absl::Status RerunSnapshot::take(const Executor &ex) {
  ex.drainCommunication();
  const auto &bufs = ex.program().buffers();
  buffers_.clear();
  for (int i = 0; i < bufs.size(); ++i) {
    schema::BufferKind k = bufs[i].kind();
    schema::ScalarRole r = bufs[i].scalar_role();
    // fp16's grad scaler is state the program updates too (loss_scale_update).
    const bool scaler = r == schema::LOSS_SCALE || r == schema::LOSS_SCALE_GROWTH_TRACKER ||
                        r == schema::LOSS_SCALE_HYSTERESIS_TRACKER;
    if (k != schema::PARAMETER && k != schema::MAIN_GRAD && k != schema::MASTER_PARAM &&
        k != schema::OPTIMIZER_STATE && !scaler)
      continue;
    std::vector<char> data(bufs[i].byte_size());
    if (absl::Status s = ex.readBuffer(i, data.data(), data.size()); !s.ok())
      return s;
    buffers_.emplace_back(i, std::move(data));
  }
  return absl::OkStatus();
}

absl::Status RerunSnapshot::restore(Executor &ex) const {
  ex.drainCommunication();
  for (const auto &[i, data] : buffers_)
    if (absl::Status s = ex.writeBuffer(i, data.data(), data.size()); !s.ok())
      return s;
  return absl::OkStatus();
}

uint64_t RerunSnapshot::bytes() const {
  uint64_t n = 0;
  for (const auto &b : buffers_)
    n += b.second.size();
  return n;
}

//===----------------------------------------------------------------------===//
// State machine
//===----------------------------------------------------------------------===//

RerunStateMachine::RerunStateMachine(RerunOptions options, bool checkNan, int rank)
    : opts_(std::move(options)), checkNan_(checkNan), rank_(rank) {}

bool RerunStateMachine::injects(int64_t it) const {
  return opts_.mode == RerunMode::ValidateResults && opts_.errorInjectionRate > 0 &&
         it % opts_.errorInjectionRate == 0;
}

bool RerunStateMachine::needsSnapshot(int64_t it) const {
  if (opts_.mode == RerunMode::ReportDeterminismStats)
    return true;
  if (opts_.mode == RerunMode::Disabled)
    return false;
  return opts_.checkSpikyLoss || opts_.checkLargeGrads || injects(it);
}

IterationResult RerunStateMachine::observed(int64_t it, int attempt,
                                            const IterationResult &computed) const {
  if (!injects(it))
    return computed;
  bool corrupt = opts_.errorInjectionType == ErrorInjection::PersistentError ||
                 (opts_.errorInjectionType == ErrorInjection::TransientError && attempt == 0);
  IterationResult r = computed;
  if (corrupt)
    r.loss = std::nan("");
  return r;
}

std::string RerunStateMachine::suspicion(int64_t it, const IterationResult &r) const {
  if (opts_.mode == RerunMode::Disabled)
    return "";
  auto what = [](double v) { return std::isnan(v) ? "NaN" : "Inf"; };
  if (checkNan_ || injects(it)) {
    if (!std::isfinite(r.loss))
      return absl::StrCat(what(r.loss), " in the loss");
    if (!std::isfinite(r.gradNorm))
      return absl::StrCat(what(r.gradNorm), " in the grad norm");
  }
  auto recentMax = [](const std::deque<double> &d) {
    return d.empty() ? 0.0 : *std::max_element(d.begin(), d.end());
  };
  if (opts_.checkSpikyLoss && !recentLoss_.empty() &&
      r.loss > kLargeFactor * recentMax(recentLoss_))
    return absl::StrFormat("spiky loss %.6g, more than %gx the recent maximum %.6g", r.loss,
                           kLargeFactor, recentMax(recentLoss_));
  if (opts_.checkLargeGrads && !recentNorm_.empty() &&
      r.gradNorm > kLargeFactor * recentMax(recentNorm_))
    return absl::StrFormat("large grad norm %.6g, more than %gx the recent maximum %.6g",
                           r.gradNorm, kLargeFactor, recentMax(recentNorm_));
  if (injects(it) && opts_.errorInjectionType == ErrorInjection::CorrectResult)
    return "an injected check of a correct result (--error-injection-type correct_result)";
  return "";
}

bool RerunStateMachine::reproduced(const IterationResult &a, const IterationResult &b) {
  return relativeDiff(a.loss, b.loss) == 0 && relativeDiff(a.gradNorm, b.gradNorm) == 0;
}

void RerunStateMachine::accept(const IterationResult &r) {
  auto push = [](std::deque<double> &d, double v) {
    if (!std::isfinite(v))
      return;
    d.push_back(v);
    if (d.size() > kWindow)
      d.pop_front();
  };
  push(recentLoss_, r.loss);
  push(recentNorm_, r.gradNorm);
}

absl::Status RerunStateMachine::recordRejected(int64_t it, const std::string &verdict,
                                               const std::string &why,
                                               const IterationResult &first,
                                               const IterationResult &rerun) const {
  if (opts_.rejectedTrackerFile.empty())
    return absl::OkStatus();
  std::ofstream out(opts_.rejectedTrackerFile, std::ios::app);
  out << "iteration " << it << " rank " << rank_ << ": " << verdict << ": " << why
      << "; first run " << show(first) << "; rerun " << show(rerun) << "\n";
  out.flush();
  if (!out)
    return absl::UnavailableError(absl::StrCat("cannot write --result-rejected-tracker-filename '",
                                               opts_.rejectedTrackerFile, "'"));
  return absl::OkStatus();
}

void RerunStateMachine::addDeterminismSample(const IterationResult &first,
                                             const IterationResult &rerun) {
  ++samples_;
  maxLossDiff_ = std::max(maxLossDiff_, relativeDiff(first.loss, rerun.loss));
  maxNormDiff_ = std::max(maxNormDiff_, relativeDiff(first.gradNorm, rerun.gradNorm));
}

std::string RerunStateMachine::determinismReport() const {
  return absl::StrFormat("rerun determinism over %d iterations: max relative difference lm loss "
                         "%g, grad norm %g",
                         samples_, maxLossDiff_, maxNormDiff_);
}

} // namespace trainc::rt::control
