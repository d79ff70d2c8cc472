//===- Trainer.cpp - The training loop of one rank ------------------------===//

#include "runtime/control/Trainer.h"
#include "runtime/control/BatchRampup.h"
#include "runtime/control/CommOverlap.h"
#include "runtime/control/ProgramSwitch.h"

#include "runtime/control/TensorBoard.h"
#include "runtime/control/Timers.h"
#include "runtime/core/Files.h"

#include "runtime/comm/Communicator.h"
#include "runtime/control/Dataset.h"
#include "runtime/control/LrSchedule.h"
#include "runtime/control/ShardedTensors.h"
#include "runtime/core/Executor.h"
#include "runtime/core/Init.h"
#include "runtime/core/Program.h"
#include "runtime/data/Tokenizer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace trainc::rt::control {

//===----------------------------------------------------------------------===//
// Run options
//===----------------------------------------------------------------------===//

namespace {

absl::Status badValue(const std::string &flag, const std::string &v, const char *what) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " expects ", what, ", got '", v, "'"));
}

bool toInt(const std::string &v, int64_t &out) {
  char *end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end)
    return false;
  out = x;
  return true;
}

bool toDouble(const std::string &v, double &out) {
  char *end = nullptr;
  out = std::strtod(v.c_str(), &end);
  return !v.empty() && !*end && std::isfinite(out);
}

std::string meta(const schema::Program &p, const std::string &key, const std::string &dflt = "") {
  auto it = p.metadata().find(key);
  return it == p.metadata().end() ? dflt : it->second;
}

int64_t metaInt(const schema::Program &p, const std::string &key, int64_t dflt) {
  int64_t v;
  return toInt(meta(p, key), v) ? v : dflt;
}

double metaDouble(const schema::Program &p, const std::string &key, double dflt) {
  double v;
  return toDouble(meta(p, key), v) ? v : dflt;
}

} // namespace

//===----------------------------------------------------------------------===//
// The run-time flag table (trainrun --help and the parser's gate)
//===----------------------------------------------------------------------===//

namespace {

std::string showInt(int64_t v) { return std::to_string(v); }
std::string showOnOff(bool v) { return v ? "on" : "off"; }
std::string showText(const std::string &v) { return v.empty() ? "none" : v; }
std::string showNum(double v) { return absl::StrCat(v); }

const std::vector<RunFlag> &runFlagTable() {
  using O = const RunOptions &;
  static const std::vector<RunFlag> table = {
      // group, name, value placeholder, an example value (tests), default
      {"data", "--data-path", "PATH...", "a.txt", [](O) { return std::string("plan's or none"); }},
      {"data", "--mock-data", "", "", [](O o) { return showOnOff(o.mockData); }},
      {"data", "--split", "A,B,C", "98,2,0", [](O o) { return o.split; }},
      {"data", "--seq-length", "N", "8", [](O) { return std::string("the compiled one"); }},
      {"data", "--tokenizer-type", "NAME", "NullTokenizer",
       [](O) { return std::string("ByteTokenizer (text data)"); }},
      {"data", "--vocab-file", "FILE", "v.json", [](O o) { return showText(o.vocabFile); }},
      {"data", "--merge-file", "FILE", "m.txt", [](O o) { return showText(o.mergeFile); }},
      {"data", "--tokenizer-model", "FILE", "t.model",
       [](O o) { return showText(o.tokenizerModel); }},
      {"data", "--train-data-path", "[W] PREFIX...", "a",
       [](O) { return std::string("--data-path split by --split"); }},
      {"data", "--valid-data-path", "[W] PREFIX...", "a",
       [](O) { return std::string("--data-path split by --split"); }},
      {"data", "--test-data-path", "[W] PREFIX...", "a",
       [](O) { return std::string("--data-path split by --split"); }},
      {"data", "--data-cache-path", "DIR", "c",
       [](O) { return std::string("PREFIX's cache/GPTDataset_indices"); }},
      {"data", "--eod-mask-loss", "", "", [](O o) { return showOnOff(o.eodMaskLoss); }},
      {"data", "--reset-position-ids", "", "", [](O o) { return showOnOff(o.resetPositionIds); }},
      {"data", "--reset-attention-mask", "", "",
       [](O) { return std::string("the plan's (trainc compile --reset-attention-mask)"); }},
      {"training", "--train-iters", "N", "3", [](O) { return std::string("plan's"); }},
      {"training", "--train-samples", "N", "24", [](O) { return std::string("plan's"); }},
      {"training", "--seed", "INT", "7", [](O o) { return showInt(o.seed); }},
      {"training", "--check-for-nan-in-loss-and-grad", "", "",
       [](O o) { return showOnOff(o.checkForNanInLossAndGrad); }},
      {"training", "--no-check-for-nan-in-loss-and-grad", "", "",
       [](O o) { return showOnOff(!o.checkForNanInLossAndGrad); }},
      {"learning rate and weight decay", "--lr", "X", "0.001",
       [](O) { return std::string("plan's (required)"); }},
      {"learning rate and weight decay", "--min-lr", "X", "0", [](O o) { return showNum(o.minLr); }},
      {"learning rate and weight decay", "--lr-decay-style",
       "{constant,linear,cosine,inverse-square-root}", "cosine",
       [](O o) { return o.lrDecayStyle; }},
      {"learning rate and weight decay", "--lr-warmup-iters", "INT", "1",
       [](O o) { return showInt(o.lrWarmupIters); }},
      {"learning rate and weight decay", "--lr-warmup-samples", "INT", "8",
       [](O o) { return showInt(o.lrWarmupSamples); }},
      {"learning rate and weight decay", "--lr-decay-iters", "N", "3",
       [](O) { return std::string("--train-iters"); }},
      {"learning rate and weight decay", "--lr-decay-samples", "N", "24",
       [](O) { return std::string("--train-samples"); }},
      {"learning rate and weight decay", "--weight-decay", "X", "0.1",
       [](O o) { return showNum(o.weightDecay); }},
      {"learning rate and weight decay", "--start-weight-decay", "X", "0.01",
       [](O) { return std::string("--weight-decay"); }},
      {"learning rate and weight decay", "--end-weight-decay", "X", "0.1",
       [](O) { return std::string("--weight-decay"); }},
      {"learning rate and weight decay", "--weight-decay-incr-style", "{constant,linear,cosine}",
       "linear", [](O o) { return o.weightDecayIncrStyle; }},
      {"logging", "--log-interval", "N", "1", [](O o) { return showInt(o.logInterval); }},
      {"logging", "--eval-interval", "N", "2", [](O o) { return showInt(o.evalInterval); }},
      {"logging", "--eval-iters", "INT", "1", [](O o) { return showInt(o.evalIters); }},
      {"logging", "--log-throughput", "", "", [](O o) { return showOnOff(o.logThroughput); }},
      {"logging", "--log-params-norm", "", "", [](O o) { return showOnOff(o.logParamsNorm); }},
      {"logging", "--log-num-zeros-in-grad", "", "",
       [](O o) { return showOnOff(o.logNumZerosInGrad); }},
      {"logging", "--timing-log-level", "{0,1,2}", "1", [](O o) { return showInt(o.timingLogLevel); }},
      {"logging", "--timing-log-option", "{max,minmax,all}", "all",
       [](O o) { return o.timingLogOption; }},
      {"TensorBoard", "--tensorboard-dir", "DIR", "tb", [](O o) { return showText(o.tensorboardDir); }},
      {"TensorBoard", "--tensorboard-log-interval", "N", "1",
       [](O o) { return showInt(o.tensorboardLogInterval); }},
      {"TensorBoard", "--tensorboard-queue-size", "N", "10",
       [](O) { return std::string("ignored (events are written synchronously)"); }},
      {"TensorBoard", "--log-timers-to-tensorboard", "", "",
       [](O o) { return showOnOff(o.logTimersToTensorboard); }},
      {"TensorBoard", "--log-validation-ppl-to-tensorboard", "", "",
       [](O o) { return showOnOff(o.logValidationPplToTensorboard); }},
      {"TensorBoard", "--log-memory-to-tensorboard", "", "",
       [](O o) { return showOnOff(o.logMemoryToTensorboard); }},
      {"TensorBoard", "--log-world-size-to-tensorboard", "", "",
       [](O o) { return showOnOff(o.logWorldSizeToTensorboard); }},
      {"TensorBoard", "--log-batch-size-to-tensorboard", "", "",
       [](O o) { return showOnOff(o.logBatchSizeToTensorboard); }},
      {"TensorBoard", "--no-log-learning-rate-to-tensorboard", "", "",
       [](O o) { return showOnOff(!o.logLearningRateToTensorboard); }},
      {"TensorBoard", "--no-log-loss-scale-to-tensorboard", "", "",
       [](O o) { return showOnOff(!o.logLossScaleToTensorboard); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--save", "DIR", "ck",
       [](O o) { return showText(o.ckpt.save); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--save-interval", "N", "2",
       [](O) { return std::string("none (at the end and on exit)"); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--load", "DIR", "ck",
       [](O o) { return showText(o.ckpt.load); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--ckpt-step", "INT", "2",
       [](O) { return std::string("the tracker's"); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--no-save-optim", "", "",
       [](O o) { return showOnOff(o.ckpt.noSaveOptim); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--no-load-optim", "", "",
       [](O o) { return showOnOff(o.ckpt.noLoadOptim); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--no-load-rng", "", "",
       [](O o) { return showOnOff(o.ckpt.noLoadRng); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--finetune", "", "",
       [](O o) { return showOnOff(o.ckpt.finetune); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--override-opt_param-scheduler", "", "",
       [](O o) { return showOnOff(o.ckpt.overrideOptParamScheduler); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--override-opt-param-scheduler", "", "",
       [](O o) { return showOnOff(o.ckpt.overrideOptParamScheduler); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--exit-signal-handler", "", "",
       [](O o) { return showOnOff(o.ckpt.exitSignalHandler); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--exit-interval", "N", "2",
       [](O) { return std::string("none"); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--exit-duration-in-mins", "X", "5",
       [](O) { return std::string("none"); }},
      {"checkpoints and exits (docs/checkpoint.md)", "--async-save", "", "",
       [](O o) { return showOnOff(o.ckpt.asyncSave); }},
      {"rerun state machine", "--rerun-mode",
       "{disabled,validate_results,report_determinism_stats}", "disabled",
       [](O) { return std::string("validate_results"); }},
      {"rerun state machine", "--check-for-spiky-loss", "", "",
       [](O o) { return showOnOff(o.rerun.checkSpikyLoss); }},
      {"rerun state machine", "--check-for-large-grads", "", "",
       [](O o) { return showOnOff(o.rerun.checkLargeGrads); }},
      {"rerun state machine", "--error-injection-rate", "INT", "0",
       [](O o) { return showInt(o.rerun.errorInjectionRate); }},
      {"rerun state machine", "--error-injection-type",
       "{correct_result,transient_error,persistent_error}", "transient_error",
       [](O) { return std::string("transient_error"); }},
      {"rerun state machine", "--result-rejected-tracker-filename", "FILE", "r.txt",
       [](O o) { return showText(o.rerun.rejectedTrackerFile); }},
      {"profiling and dumps (trainc)", "--dump-dir", "DIR", "d",
       [](O o) { return showText(o.dumpDir); }},
      {"profiling and dumps (trainc)", "--trace", "DIR", "t", [](O o) { return showText(o.traceDir); }},
      {"profiling and dumps (trainc)", "--profile-step-start", "N", "1",
       [](O) { return std::string("the first iteration"); }},
      {"profiling and dumps (trainc)", "--profile-step-end", "N", "2",
       [](O) { return std::string("the last iteration"); }},
      // Megatron flags refused with the reason (not silently dropped).
      {"not supported yet (refused, naming the reason)", "--use-dist-ckpt", "", "",
       [](O) { return std::string("off"); }},
      {"not supported yet (refused, naming the reason)", "--ckpt-format", "", "",
       [](O) { return std::string("torch (trainc: safetensors)"); }},
      {"not supported yet (refused, naming the reason)", "--non-persistent-save-interval", "",
       "", [](O) { return std::string("none"); }},
      {"not supported yet (refused, naming the reason)", "--use-checkpoint-opt_param-scheduler",
       "", "", [](O) { return std::string("off"); }},
  };
  return table;
}

const RunFlag *findRunFlag(const std::string &name) {
  for (const RunFlag &f : runFlagTable())
    if (f.name == name)
      return &f;
  return nullptr;
}

/// Levenshtein distance (insertions, deletions, replacements).
size_t editDistance(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

} // namespace

std::vector<RunFlag> runFlags() { return runFlagTable(); }

std::string nearestFlag(const std::string &name, const std::vector<std::string> &candidates) {
  std::string best;
  size_t bestDistance = ~size_t(0);
  for (const std::string &c : candidates)
    if (size_t d = editDistance(name, c); d < bestDistance) {
      bestDistance = d;
      best = c;
    }
  return bestDistance <= std::max<size_t>(2, name.size() / 5) ? best : "";
}

std::string runFlagHelp() {
  std::string out, group;
  RunOptions defaults;
  for (const RunFlag &f : runFlagTable()) {
    if (f.group != group) {
      group = f.group;
      out += "\n" + group + ":\n";
    }
    std::string head = "  " + f.name + (f.value.empty() ? "" : " " + f.value);
    head.resize(std::max<size_t>(head.size() + 2, 46), ' ');
    out += head + "default: " + f.show(defaults) + "\n";
  }
  return out;
}

absl::StatusOr<RunOptions> parseRunOptions(const schema::Program &program,
                                           const std::vector<std::string> &args) {
  RunOptions o;
  const schema::Program &p = program;
  // Defaults recorded by `trainc compile` from the Megatron command line.
  std::string dataPath = meta(p, "runtime.data_path");
  std::istringstream ds(dataPath);
  for (std::string s; ds >> s;)
    o.dataPath.push_back(s);
  o.mockData = meta(p, "runtime.mock_data") == "true";
  o.split = meta(p, "runtime.split", o.split);
  o.trainIters = metaInt(p, "runtime.train_iters", 0);
  o.trainSamples = metaInt(p, "runtime.train_samples", 0);
  o.lrGiven = !meta(p, "runtime.lr").empty();
  o.lr = metaDouble(p, "runtime.lr", 0);
  o.minLr = metaDouble(p, "runtime.min_lr", 0);
  o.lrDecayStyle = meta(p, "runtime.lr_decay_style", o.lrDecayStyle);
  o.lrWarmupIters = metaInt(p, "runtime.lr_warmup_iters", 0);
  o.lrWarmupSamples = metaInt(p, "runtime.lr_warmup_samples", 0);
  o.lrDecayIters = metaInt(p, "runtime.lr_decay_iters", 0);
  o.lrDecaySamples = metaInt(p, "runtime.lr_decay_samples", 0);
  o.weightDecay = metaDouble(p, "training.weight_decay", o.weightDecay);
  o.logInterval = metaInt(p, "runtime.log_interval", o.logInterval);
  o.evalInterval = metaInt(p, "runtime.eval_interval", o.evalInterval);
  o.evalIters = metaInt(p, "runtime.eval_iters", o.evalIters);
  o.seed = metaInt(p, "runtime.seed", o.seed);
  o.checkForNanInLossAndGrad =
      meta(p, "runtime.check_for_nan_in_loss_and_grad", "true") == "true";
  o.tokenizerType = meta(p, "runtime.tokenizer_type");
  o.vocabFile = meta(p, "runtime.vocab_file");
  o.mergeFile = meta(p, "runtime.merge_file");
  o.tokenizerModel = meta(p, "runtime.tokenizer_model");
  checkpointDefaults(p, o.ckpt);
  o.tensorboardDir = meta(p, "runtime.tensorboard_dir");
  o.tensorboardLogInterval = metaInt(p, "runtime.tensorboard_log_interval", 1);
  auto metaBool = [&](const char *key, bool dflt) {
    std::string v = meta(p, key, dflt ? "true" : "false");
    return v == "true";
  };
  o.logTimersToTensorboard = metaBool("runtime.log_timers_to_tensorboard", false);
  o.logValidationPplToTensorboard = metaBool("runtime.log_validation_ppl_to_tensorboard", false);
  o.logMemoryToTensorboard = metaBool("runtime.log_memory_to_tensorboard", false);
  o.logWorldSizeToTensorboard = metaBool("runtime.log_world_size_to_tensorboard", false);
  o.logBatchSizeToTensorboard = metaBool("runtime.log_batch_size_to_tensorboard", false);
  o.logLearningRateToTensorboard = metaBool("runtime.log_learning_rate_to_tensorboard", true);
  o.logLossScaleToTensorboard = metaBool("runtime.log_loss_scale_to_tensorboard", true);
  o.logThroughput = metaBool("runtime.log_throughput", false);
  o.logParamsNorm = metaBool("runtime.log_params_norm", false);
  o.logNumZerosInGrad = metaBool("runtime.log_num_zeros_in_grad", false);
  o.timingLogLevel = metaInt(p, "runtime.timing_log_level", 0);
  o.timingLogOption = meta(p, "runtime.timing_log_option", o.timingLogOption);
  o.weightDecayIncrStyle = meta(p, "runtime.weight_decay_incr_style", o.weightDecayIncrStyle);
  if (double v; toDouble(meta(p, "runtime.start_weight_decay"), v))
    o.startWeightDecay = v;
  if (double v; toDouble(meta(p, "runtime.end_weight_decay"), v))
    o.endWeightDecay = v;

  bool gaveIters = false, gaveSamples = false; // on this command line
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool inlineValue = false;
    if (size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inlineValue = true;
    }
    auto next = [&](std::string &out) -> absl::Status {
      if (inlineValue) {
        out = value;
        return absl::OkStatus();
      }
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)
        return absl::InvalidArgumentError(absl::StrCat(flag, " expects a value"));
      out = args[++i];
      return absl::OkStatus();
    };
    auto intFlag = [&](int64_t &out, bool positive) -> absl::Status {
      std::string v;
      if (absl::Status s = next(v); !s.ok())
        return s;
      if (!toInt(v, out) || out < (positive ? 1 : 0))
        return badValue(flag, v, positive ? "a positive integer" : "a non-negative integer");
      return absl::OkStatus();
    };
    auto doubleFlag = [&](double &out) -> absl::Status {
      std::string v;
      if (absl::Status s = next(v); !s.ok())
        return s;
      if (!toDouble(v, out) || out < 0)
        return badValue(flag, v, "a non-negative number");
      return absl::OkStatus();
    };
    absl::Status s = absl::OkStatus();
    if (!findRunFlag(flag)) {
      // A compile-time flag (the plan records it): say so rather than "unknown".
      std::string key = flag.substr(flag.rfind("--", 0) == 0 ? 2 : 0);
      std::replace(key.begin(), key.end(), '-', '_');
      for (const char *section : {"training.", "parallel.", "model."})
        if (auto it = p.metadata().find(section + key); it != p.metadata().end())
          return absl::InvalidArgumentError(absl::StrCat(
              flag, " is fixed at compile time (this plan has ", it->second,
              "): give it to trainc compile"));
      // Constant-batch plans omit the ramp-up keys.
      if (key == "rampup_batch_size" || key == "decrease_batch_size_if_needed")
        return absl::InvalidArgumentError(absl::StrCat(
            flag, " is fixed at compile time (this plan has none): give it to trainc compile"));
      std::vector<std::string> names;
      for (const RunFlag &f : runFlagTable())
        names.push_back(f.name);
      std::string best = nearestFlag(flag, names);
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", flag, best.empty() ? "" : " (did you mean " + best + "?)"));
    }
    auto choiceFlag = [&](std::string &out,
                          std::initializer_list<const char *> choices) -> absl::Status {
      std::string v;
      if (absl::Status s = next(v); !s.ok())
        return s;
      for (const char *c : choices)
        if (v == c) {
          out = v;
          return absl::OkStatus();
        }
      return badValue(flag, v, absl::StrCat("one of ", absl::StrJoin(choices, ", ")).c_str());
    };
    if (flag == "--start-weight-decay" || flag == "--end-weight-decay") {
      double v = 0;
      s = doubleFlag(v);
      (flag == "--start-weight-decay" ? o.startWeightDecay : o.endWeightDecay) = v;
    } else if (flag == "--weight-decay-incr-style") {
      s = choiceFlag(o.weightDecayIncrStyle, {"constant", "linear", "cosine"});
    } else if (flag == "--log-params-norm") {
      o.logParamsNorm = true;
    } else if (flag == "--log-num-zeros-in-grad") {
      o.logNumZerosInGrad = true;
    } else if (flag == "--timing-log-level") {
      std::string v;
      s = choiceFlag(v, {"0", "1", "2"});
      if (s.ok())
        o.timingLogLevel = v[0] - '0';
    } else if (flag == "--timing-log-option") {
      s = choiceFlag(o.timingLogOption, {"max", "minmax", "all"});
    } else if (flag == "--data-path") {
      o.dataPath.clear();
      o.splitDataPath = {};
      if (inlineValue)
        o.dataPath.push_back(value);
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0)
        o.dataPath.push_back(args[++i]);
      if (o.dataPath.empty())
        s = absl::InvalidArgumentError("--data-path expects one or more files or directories");
    } else if (flag == "--train-data-path" || flag == "--valid-data-path" ||
               flag == "--test-data-path") {
      // Megatron's per-split blends replace --data-path (the plan's included).
      std::vector<std::string> &v =
          o.splitDataPath[flag[2] == 't' && flag[3] == 'r' ? 0 : flag[2] == 'v' ? 1 : 2];
      o.dataPath.clear();
      v.clear();
      if (inlineValue)
        v.push_back(value);
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0)
        v.push_back(args[++i]);
      if (v.empty())
        s = absl::InvalidArgumentError(
            absl::StrCat(flag, " expects one or more dataset prefixes (optionally weighted)"));
    } else if (flag == "--data-cache-path") {
      s = next(o.dataCachePath);
    } else if (flag == "--mock-data") {
      o.mockData = true;
    } else if (flag == "--check-for-nan-in-loss-and-grad") {
      o.checkForNanInLossAndGrad = true;
    } else if (flag == "--no-check-for-nan-in-loss-and-grad") {
      o.checkForNanInLossAndGrad = false;
    } else if (flag == "--tokenizer-type") {
      s = next(o.tokenizerType);
    } else if (flag == "--vocab-file") {
      s = next(o.vocabFile);
    } else if (flag == "--merge-file") {
      s = next(o.mergeFile);
    } else if (flag == "--tokenizer-model") {
      s = next(o.tokenizerModel);
    } else if (flag == "--eod-mask-loss") {
      o.eodMaskLoss = true;
    } else if (flag == "--reset-position-ids") {
      o.resetPositionIds = true;
    } else if (flag == "--reset-attention-mask") {
      o.resetAttentionMask = true;
    } else if (flag == "--split") {
      s = next(o.split);
    } else if (flag == "--seq-length") {
      s = intFlag(o.seqLength, true);
    } else if (flag == "--train-iters") {
      s = intFlag(o.trainIters, true);
      o.trainSamples = 0; // overrides the plan's --train-samples
      gaveIters = true;
    } else if (flag == "--train-samples") {
      s = intFlag(o.trainSamples, true);
      o.trainIters = 0;
      gaveSamples = true;
    } else if (flag == "--lr") {
      s = doubleFlag(o.lr);
      o.lrGiven = true;
    } else if (flag == "--min-lr") {
      s = doubleFlag(o.minLr);
    } else if (flag == "--lr-decay-style") {
      s = next(o.lrDecayStyle);
    } else if (flag == "--lr-warmup-iters") {
      s = intFlag(o.lrWarmupIters, false);
    } else if (flag == "--lr-warmup-samples") {
      s = intFlag(o.lrWarmupSamples, false);
    } else if (flag == "--lr-decay-iters") {
      s = intFlag(o.lrDecayIters, true);
    } else if (flag == "--lr-decay-samples") {
      s = intFlag(o.lrDecaySamples, true);
    } else if (flag == "--weight-decay") {
      s = doubleFlag(o.weightDecay);
    } else if (flag == "--log-interval") {
      s = intFlag(o.logInterval, true);
    } else if (flag == "--eval-interval") {
      s = intFlag(o.evalInterval, true);
    } else if (flag == "--eval-iters") {
      s = intFlag(o.evalIters, false);
    } else if (flag == "--seed") {
      s = intFlag(o.seed, false);
    } else if (flag == "--dump-dir") {
      s = next(o.dumpDir);
    } else if (flag == "--trace") {
      s = next(o.traceDir);
    } else if (flag == "--profile-step-start") {
      s = intFlag(o.profileStepStart, true);
    } else if (flag == "--profile-step-end") {
      s = intFlag(o.profileStepEnd, true);
    } else if (absl::StatusOr<bool> c = parseCheckpointFlag(flag, next, o.ckpt); !c.ok() || *c) {
      s = c.status();
    } else if (absl::StatusOr<bool> r = parseRerunFlag(flag, next, o.rerun); !r.ok() || *r) {
      s = r.status();
    } else if (flag == "--tensorboard-dir") {
      s = next(o.tensorboardDir);
    } else if (flag == "--tensorboard-log-interval") {
      s = intFlag(o.tensorboardLogInterval, true);
    } else if (flag == "--tensorboard-queue-size") {
      std::string ignoredValue; // events are written synchronously
      s = next(ignoredValue);
    } else if (flag == "--log-timers-to-tensorboard") {
      o.logTimersToTensorboard = true;
    } else if (flag == "--log-validation-ppl-to-tensorboard") {
      o.logValidationPplToTensorboard = true;
    } else if (flag == "--log-memory-to-tensorboard") {
      o.logMemoryToTensorboard = true;
    } else if (flag == "--log-world-size-to-tensorboard") {
      o.logWorldSizeToTensorboard = true;
    } else if (flag == "--log-batch-size-to-tensorboard") {
      o.logBatchSizeToTensorboard = true;
    } else if (flag == "--no-log-learning-rate-to-tensorboard") {
      o.logLearningRateToTensorboard = false;
    } else if (flag == "--no-log-loss-scale-to-tensorboard") {
      o.logLossScaleToTensorboard = false;
    } else if (flag == "--log-throughput") {
      o.logThroughput = true;
    } else {
      s = absl::InternalError(absl::StrCat(flag, " is in the run-time flag table but has no "
                                           "handler in parseRunOptions"));
    }
    if (!s.ok())
      return s;
  }
  if (gaveIters && gaveSamples) // as trainc compile and Megatron's arguments.py
    return absl::InvalidArgumentError("--train-iters and --train-samples are mutually exclusive");
  if (!o.lrGiven)
    return absl::InvalidArgumentError("missing --lr (give it to trainc compile or to trainrun)");
  // Megatron's arguments.py: start/end weight decay go with a non-constant increment style.
  if (o.weightDecayIncrStyle == "constant" && (o.startWeightDecay || o.endWeightDecay))
    return absl::InvalidArgumentError(
        "--start-weight-decay and --end-weight-decay need --weight-decay-incr-style linear or "
        "cosine (with constant, --weight-decay applies throughout)");
  if (o.weightDecayIncrStyle != "constant" && (!o.startWeightDecay || !o.endWeightDecay))
    return absl::InvalidArgumentError(absl::StrCat(
        "--weight-decay-incr-style ", o.weightDecayIncrStyle,
        " needs both --start-weight-decay and --end-weight-decay"));
  if (o.trainIters == 0 && o.trainSamples == 0)
    return absl::InvalidArgumentError(
        "missing --train-iters or --train-samples (give one to trainc compile or to trainrun)");
  if (absl::Status s = checkRampupRunOptions(p, o); !s.ok())
    return s;
  return o;
}

//===----------------------------------------------------------------------===//
// Trainer
//===----------------------------------------------------------------------===//

struct Trainer::Impl {
  RunOptions opts;
  std::ostream *log = nullptr;
  schema::Program program;
  std::unique_ptr<Backend> ownBackend; // when Trainer::create was given none: the CPU backend
  Backend *backend = nullptr;
  std::unique_ptr<Communicator> ownComm;
  Communicator *comm = nullptr;
  std::string programPath;
  std::unique_ptr<Executor> ex;
  Datasets data;
  std::unique_ptr<LrSchedule> schedule;
  int64_t mbs = 0, numMicrobatches = 0, gbs = 0, seq = 0;
  /// This rank's place on the data-parallel axis (Megatron's pretraining sampler).
  int64_t dpRank = 0, dpSize = 1;
  DType scalarType = DType::F32;
  /// An INPUT buffer the host fills (Buffer.host_input), by microbatch.
  struct HostBuffer {
    schema::InputRole role;
    int buffer;
    DType dtype;
  };
  std::vector<std::vector<HostBuffer>> inputs;
  /// The plan has the DOC_START input (compiled with --reset-attention-mask).
  bool docMask = false;
  std::vector<double> losses, gradNorms, weightDecays;
  std::vector<EvalResult> evals;
  OutputFile batchesOut, lossesOut; // --dump-dir, written every iteration
  /// Checkpoints and exits; the state a --load resumes from; dropout's seed (the checkpoint's
  /// unless --no-load-rng).
  std::unique_ptr<Checkpointer> ckpt;
  std::unique_ptr<RerunStateMachine> rerun;
  /// The event file writer of the last rank (Megatron's), when --tensorboard-dir is set.
  std::unique_ptr<TensorBoardWriter> tb;
  int64_t consumedSamples = 0; // for the "vs samples" keys of the validation loss
  /// Megatron's timers (--timing-log-level > 0) and, with them, the trace's window as marks in
  /// the executor's timings (timing stays on for the timers).
  std::unique_ptr<IterationTimers> timers;
  Executor::TimingMark traceFrom;
  std::optional<Executor::TimingMark> traceTo;

  /// The elements of buffer `b` as doubles (F32 or F64; other dtypes: empty).
  std::vector<double> readAsDoubles(int b) const {
    const schema::Buffer &buf = program.buffers(b);
    std::string raw(buf.byte_size(), '\0');
    (void)ex->readBuffer(b, raw.data(), raw.size());
    std::vector<double> out;
    if (buf.dtype() == schema::F64) {
      out.resize(raw.size() / 8);
      std::memcpy(out.data(), raw.data(), out.size() * 8);
    } else if (buf.dtype() == schema::F32) {
      std::vector<float> f(raw.size() / 4);
      std::memcpy(f.data(), raw.data(), f.size() * 4);
      out.assign(f.begin(), f.end());
    }
    return out;
  }

  /// Megatron's calc_params_l2_norm after the step: sqrt of the sum of squares of every
  /// parameter element this rank holds (each parameter once; a tied embedding is one parameter).
  /// Tensor-parallel slices' sums are added over the tp group (an all-reduce outside the
  /// iteration). Otherwise every rank holds whole parameters (data parallelism replicates them; the distributed
  /// optimizer all-gathers them), so no reduction is needed; reading drains carried all-gathers.
  double paramsNorm() const {
    std::map<int, std::vector<double>> bufs;
    // Tensor-parallel slices are summed over the tp group, replicated parameters counted once.
    double sumsq = 0, sliced = 0;
    const int tpGroup = tensorParallelGroup(program).first;
    for (const schema::Parameter &p : program.parameters()) {
      absl::StatusOr<int> dim = splitDimOf(p);
      double &acc = tpGroup >= 0 && dim.ok() && *dim >= 0 ? sliced : sumsq;
      auto it = bufs.find(int(p.buffer()));
      if (it == bufs.end())
        it = bufs.emplace(int(p.buffer()), readAsDoubles(int(p.buffer()))).first;
      int64_t numel = 1;
      for (int64_t d : p.slice_size())
        numel *= d;
      for (int64_t i = 0; i < numel && p.buffer_offset() + uint64_t(i) < it->second.size(); ++i) {
        double v = it->second[size_t(p.buffer_offset() + uint64_t(i))];
        acc += v * v;
      }
    }
    if (tpGroup >= 0) {
      ex->drainCommunication();
      try {
        comm->allReduce(tpGroup, &sliced, &sliced, 1, DType::F64, ReduceOp::Sum);
      } catch (const std::exception &) {
        return std::nan("");
      }
    }
    return std::sqrt(sumsq + sliced);
  }

  /// Megatron's count_zeros (--log-num-zeros-in-grad): main-gradient elements equal to zero after
  /// the reduction and clipping, over the parameters' ranges of the main-grad buffers (bucket
  /// padding excluded). With the distributed optimizer a rank holds reduced values only in its
  /// reduce-scatter shards, so it counts those and the counts are summed over the data-parallel
  /// group (Megatron's grad-stats group); otherwise every rank holds the whole reduced gradient
  /// and counts it alone.
  absl::StatusOr<int64_t> numZerosInGrad() {
    // This rank's reduced ranges: the REDUCE_SCATTER outputs into each main-grad buffer.
    std::map<int, std::vector<std::pair<uint64_t, uint64_t>>> shards;
    int shardGroup = -1;
    for (const schema::Function &f : program.functions())
      for (const schema::Instruction &ins : f.body())
        if (ins.has_collective() && ins.collective().kind() == schema::REDUCE_SCATTER &&
            ins.collective().output().has_buffer() &&
            program.buffers(int(ins.collective().output().buffer())).kind() ==
                schema::MAIN_GRAD) {
          const schema::Operand &o = ins.collective().output();
          uint64_t n = 1;
          for (int64_t d : o.shape())
            n *= uint64_t(d);
          shards[int(o.buffer())].push_back({o.offset(), o.offset() + n});
          shardGroup = int(ins.collective().group());
        }
    std::map<int, std::vector<double>> bufs;
    int64_t zeros = 0;
    for (const schema::Parameter &p : program.parameters()) {
      if (!p.has_grad_buffer())
        continue;
      const int b = int(p.grad_buffer());
      auto it = bufs.find(b);
      if (it == bufs.end())
        it = bufs.emplace(b, readAsDoubles(b)).first;
      uint64_t numel = 1;
      for (int64_t d : p.slice_size())
        numel *= uint64_t(d);
      const uint64_t lo = p.grad_offset(), hi = std::min<uint64_t>(lo + numel, it->second.size());
      auto inShard = [&](uint64_t e) {
        auto s = shards.find(b);
        if (shardGroup < 0)
          return true;
        if (s == shards.end())
          return false;
        for (auto [a, z] : s->second)
          if (e >= a && e < z)
            return true;
        return false;
      };
      for (uint64_t e = lo; e < hi; ++e)
        zeros += it->second[size_t(e)] == 0.0 && inShard(e);
    }
    if (shardGroup >= 0 && program.groups(shardGroup).ranks_size() > 1) {
      ex->drainCommunication();
      try {
        comm->allReduce(shardGroup, &zeros, &zeros, 1, DType::I64, ReduceOp::Sum);
      } catch (const std::exception &e) {
        return absl::UnavailableError(absl::StrCat("counting zero gradients failed: ", e.what()));
      }
    }
    return zeros;
  }

  /// Every rank's interval values of the timers, by global rank: an all-gather over the group
  /// of all ranks at the logging interval (outside the iteration; the communication stream is
  /// drained first so that the host may use the communicator). Only this rank's values when
  /// the program has no group of every rank.
  absl::StatusOr<std::vector<std::vector<double>>> gatherTimers(const std::vector<double> &mine) {
    const int64_t world = comm->worldSize();
    std::vector<std::vector<double>> out(size_t(world), std::vector<double>(mine.size(), 0));
    out[size_t(comm->rank())] = mine;
    if (world == 1 || mine.empty())
      return out;
    for (int g = 0; g < program.groups_size(); ++g) {
      const schema::CommGroup &grp = program.groups(g);
      if (grp.ranks_size() != world)
        continue;
      std::vector<double> all(mine.size() * size_t(world));
      ex->drainCommunication();
      try {
        comm->allGather(g, mine.data(), all.data(), int64_t(mine.size()), DType::F64);
      } catch (const std::exception &e) {
        return absl::UnavailableError(absl::StrCat("gathering the timers failed: ", e.what()));
      }
      for (int k = 0; k < grp.ranks_size(); ++k)
        std::copy(all.begin() + long(size_t(k) * mine.size()),
                  all.begin() + long(size_t(k + 1) * mine.size()),
                  out[size_t(grp.ranks(k))].begin());
      return out;
    }
    return out;
  }

  /// Megatron's scalar and its " vs samples" twin.
  absl::Status tbScalar(const std::string &tag, double v, int64_t it, bool vsSamples = true) {
    if (absl::Status s = tb->addScalar(tag, v, it); !s.ok())
      return s;
    return vsSamples ? tb->addScalar(tag + " vs samples", v, consumedSamples) : absl::OkStatus();
  }
  TrainState resume;
  int64_t rngSeed = 0;
  /// Batch-size ramp-up (BatchRampup.h, ProgramSwitch.h): the calculator when the plan has
  /// one, and the plan directory whose rampup/m<m>/ programs switchProgram loads.
  std::optional<BatchRampup> rampup;
  std::string planDir;

  /// Moves the training state into this rank's program of `m` microbatches (the plan's own
  /// rank file for the final m, else rampup/m<m>/) and continues with it: executor, host
  /// inputs, scalar roles, timers (the interval's values so far are dropped) and the
  /// checkpointer. Errors: a missing or invalid program, one of another plan or whose
  /// training-state buffers differ (naming the file and the buffer). `rebuildTimers` false:
  /// the timers keep their interval (evaluation switches to the final program and back to
  /// this one, whose timer tables are then the same again).
  absl::Status switchProgram(int64_t m, bool rebuildTimers = true) {
    const int64_t finalM = rampup->globalBatchSize() / (mbs * dpSize);
    const std::string path = rampupProgramPath(planDir, comm->rank(), m, finalM);
    absl::StatusOr<schema::Program> next = readRampupProgram(path, m, program, programPath);
    if (!next.ok())
      return next.status();
    ExecutorOptions eo;
    eo.timing = timers != nullptr;
    absl::StatusOr<std::unique_ptr<Executor>> nextEx =
        Executor::create(*next, *backend, *comm, eo);
    if (!nextEx.ok())
      return absl::Status(nextEx.status().code(),
                          absl::StrCat(path, ": ", nextEx.status().message()));
    if (absl::Status s = copyTrainingState(*ex, **nextEx); !s.ok())
      return s;
    ckpt->setExecutor(**nextEx);
    ex = std::move(*nextEx);
    program = std::move(*next);
    programPath = path;
    if (absl::Status s = checkSameCompile(); !s.ok())
      return s;
    numMicrobatches = m;
    gbs = int64_t(program.plan().global_batch_size());
    roleBuffer.fill(-1);
    for (int b = 0; b < program.buffers_size(); ++b)
      if (program.buffers(b).scalar_role() != schema::SCALAR_ROLE_UNSPECIFIED)
        roleBuffer[size_t(program.buffers(b).scalar_role())] = b;
    inputs.assign(size_t(m), {});
    for (int b = 0; b < program.buffers_size(); ++b)
      if (program.buffers(b).has_host_input()) {
        const schema::HostInput &h = program.buffers(b).host_input();
        inputs[h.microbatch()].push_back({h.role(), b, DType(int(program.buffers(b).dtype()))});
      }
    if (timers && rebuildTimers)
      timers = std::make_unique<IterationTimers>(program, opts.timingLogLevel);
    return absl::OkStatus();
  }

  /// The buffer of each host scalar role (Buffer.scalar_role), -1 when the program has none.
  std::array<int, schema::ScalarRole_ARRAYSIZE> roleBuffer = [] {
    std::array<int, schema::ScalarRole_ARRAYSIZE> a;
    a.fill(-1);
    return a;
  }();
  int buffer(schema::ScalarRole role) const { return roleBuffer[size_t(role)]; }
  /// --dump-dir file names: rank 0 keeps the single-rank names, rank r adds ".rank<r>".
  std::string dumpSuffix() const {
    return comm->rank() == 0 ? "" : absl::StrCat(".rank", comm->rank());
  }

  absl::Status writeScalar(schema::ScalarRole role, double v) {
    int b = buffer(role);
    if (b < 0)
      return absl::OkStatus();
    if (scalarType == DType::F64)
      return ex->writeBuffer(b, &v, 8);
    float f = float(v);
    return ex->writeBuffer(b, &f, 4);
  }
  double readScalar(schema::ScalarRole role) const {
    int b = buffer(role);
    if (b < 0)
      return std::nan("");
    if (scalarType == DType::F64) {
      double d;
      (void)ex->readBuffer(b, &d, 8);
      return d;
    }
    float f;
    (void)ex->readBuffer(b, &f, 4);
    return f;
  }

  /// Megatron's _get_ltor_masks_and_position_ids for one sample's `seq` input tokens: with
  /// --eod-mask-loss loss_mask is 0 where the input token is EOD, with --reset-position-ids the
  /// position ids restart at 0 after each EOD; otherwise mask 1 and positions 0..seq-1. With
  /// --reset-attention-mask (docMask) docStart[j] is the first position of token j's document:
  /// Megatron zeroes attention_mask[(e + 1):, :(e + 1)] for each EOD at e, so the EOD belongs to
  /// the document it ends and token j attends keys docStart[j] <= k <= j.
  void applyEod(int32_t eod, const int32_t *tok, float *mask32, double *mask64, int32_t *pos,
                int32_t *docStart) {
    int32_t p = 0, start = 0;
    for (int64_t j = 0; j < seq; ++j) {
      bool isEod = tok[j] == eod;
      mask32[j] = opts.eodMaskLoss && isEod ? 0.0f : 1.0f;
      mask64[j] = mask32[j];
      pos[j] = opts.resetPositionIds ? p : int32_t(j);
      p = opts.resetPositionIds && isEod ? 0 : p + 1;
      docStart[j] = docMask ? start : 0;
      start = isEod ? int32_t(j + 1) : start;
    }
  }

  /// Fills every microbatch's input buffers from global samples [first, first + gbs) of `ds` with
  /// Megatron's pretraining sampler: microbatch i covers the block [first + i*mbs*dp,
  /// first + (i+1)*mbs*dp) and data-parallel rank r reads its samples [r*mbs, (r+1)*mbs) only.
  absl::Status fillBatch(const Dataset &ds, int64_t first, int64_t iteration,
                         std::vector<int32_t> *record) {
    std::vector<int32_t> sample(size_t(seq + 1)), tok(size_t(mbs * seq)), lab(size_t(mbs * seq)),
        pos(size_t(mbs * seq)), docStart(size_t(mbs * seq), 0);
    std::vector<float> mask32(size_t(mbs * seq), 1.0f);
    std::vector<double> mask64(size_t(mbs * seq), 1.0);
    for (int64_t i = 0; i < mbs * seq; ++i)
      pos[size_t(i)] = int32_t(i % seq);
    for (int64_t m = 0; m < numMicrobatches; ++m) {
      for (int64_t b = 0; b < mbs; ++b) {
        if (absl::Status s = ds.readSample(first + (m * dpSize + dpRank) * mbs + b, sample.data());
            !s.ok())
          return s;
        if (record)
          record->insert(record->end(), sample.begin(), sample.end());
        std::memcpy(tok.data() + b * seq, sample.data(), size_t(seq) * 4);
        std::memcpy(lab.data() + b * seq, sample.data() + 1, size_t(seq) * 4);
        if (opts.eodMaskLoss || opts.resetPositionIds || docMask)
          applyEod(ds.eodToken(), tok.data() + b * seq, mask32.data() + b * seq,
                   mask64.data() + b * seq, pos.data() + b * seq, docStart.data() + b * seq);
      }
      // The dropout key: the index in the global batch of this microbatch's first sample, so
      // that a sample's masks are the same under every data-parallel layout (Philox.h).
      const int64_t rng[3] = {rngSeed, iteration, (m * dpSize + dpRank) * mbs};
      for (const HostBuffer &h : inputs[size_t(m)]) {
        // The validator checked each role's dtype and shape against the plan.
        const void *data = nullptr;
        size_t bytes = tok.size() * 4;
        switch (h.role) {
        case schema::TOKENS: data = tok.data(); break;
        case schema::LABELS: data = lab.data(); break;
        case schema::POSITION_IDS: data = pos.data(); break;
        case schema::DOC_START: data = docStart.data(); break;
        case schema::LOSS_MASK:
          data = h.dtype == DType::F64 ? static_cast<const void *>(mask64.data()) : mask32.data();
          bytes = mask32.size() * dtypeSize(h.dtype);
          break;
        case schema::RNG:
          data = rng;
          bytes = sizeof(rng);
          break;
        default:
          return absl::InternalError(absl::StrCat("host input role ", int(h.role),
                                                  " passed validation but has no filler"));
        }
        if (absl::Status s = ex->writeBuffer(h.buffer, data, bytes); !s.ok())
          return s;
      }
    }
    return absl::OkStatus();
  }

  /// Every parameter as its global tensor: a tensor-parallel slice is all-gathered over the tp
  /// group (every rank of the group calls this at the same point), so a TP plan's weights compare
  /// directly with a single-rank plan's.
  absl::StatusOr<std::vector<NamedTensor>> parameters() const {
    std::vector<NamedTensor> out;
    if (tensorParallelGroup(program).first >= 0)
      ex->drainCommunication();
    for (const schema::Parameter &p : program.parameters()) {
      const schema::Buffer &b = program.buffers(int(p.buffer()));
      NamedTensor t;
      t.name = p.name();
      t.dtype = b.dtype() == schema::F64    ? "F64"
                : b.dtype() == schema::BF16 ? "BF16" // --bf16 / --fp16 model parameters
                : b.dtype() == schema::F16  ? "F16"
                                            : "F32";
      if (p.tensor_shape_size() > 0)
        t.shape.assign(p.tensor_shape().begin(), p.tensor_shape().end());
      else
        t.shape.assign(p.global_shape().begin(), p.global_shape().end());
      int64_t numel = 1;
      for (int64_t d : p.slice_size())
        numel *= d;
      size_t esize = dtypeSize(DType(int(b.dtype())));
      t.bytes.resize(size_t(numel) * esize);
      // A parameter may be a range of a larger buffer (the distributed optimizer's contiguous
      // parameter buffer); the validator checked that it fits.
      std::string all(b.byte_size(), '\0');
      (void)ex->readBuffer(int(p.buffer()), all.data(), all.size());
      std::memcpy(t.bytes.data(), all.data() + p.buffer_offset() * esize, t.bytes.size());
      absl::StatusOr<std::string> global = gatherGlobal(*comm, program, p, t.bytes, esize);
      if (!global.ok())
        return global.status();
      t.bytes = std::move(*global);
      out.push_back(std::move(t));
    }
    return out;
  }

  /// Every rank must run a program of the same compile: compares the plan fingerprint (metadata
  /// "plan.fingerprint", written by trainc compile) over every multi-rank group with a max and a
  /// min all-reduce. Errors name this rank, the group and the fingerprints.
  absl::Status checkSameCompile() {
    auto it = program.metadata().find("plan.fingerprint");
    uint64_t mine = 0;
    if (it != program.metadata().end())
      mine = std::strtoull(it->second.c_str(), nullptr, 16);
    for (int g = 0; g < program.groups_size(); ++g) {
      if (program.groups(g).ranks_size() < 2)
        continue;
      int64_t v[2] = {int64_t(mine), int64_t(mine)};
      try {
        comm->allReduce(g, &v[0], &v[0], 1, DType::I64, ReduceOp::Max);
        comm->allReduce(g, &v[1], &v[1], 1, DType::I64, ReduceOp::Min);
      } catch (const std::exception &e) {
        return absl::UnavailableError(
            absl::StrCat(programPath, ": comparing plan fingerprints failed: ", e.what()));
      }
      if (v[0] != int64_t(mine) || v[1] != int64_t(mine))
        return absl::FailedPreconditionError(absl::StrCat(
            programPath, ": the rank programs come from different compiles (plan fingerprint ",
            absl::Hex(mine, absl::kZeroPad16), " here, ",
            absl::Hex(uint64_t(v[0] != int64_t(mine) ? v[0] : v[1]), absl::kZeroPad16),
            " on another rank of group '", program.groups(g).name(),
            "'): compile into an empty directory and use its rank files together"));
    }
    return absl::OkStatus();
  }

  /// Writes the executor's timings as a Chrome trace (Trace Event Format, "X" events in
  /// microseconds): process = rank, one thread per stream (0 compute, 1 communication).
  absl::Status writeTrace() const {
    std::error_code ec;
    std::filesystem::create_directories(opts.traceDir, ec);
    if (ec)
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create --trace '", opts.traceDir, "': ", ec.message()));
    std::string path = absl::StrCat(opts.traceDir, "/rank", comm->rank(), ".trace.json");
    std::ostringstream f; // written atomically at the end
    int64_t rank = comm->rank();
    f << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    f << absl::StrFormat("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{"
                         "\"name\":\"rank %d\"}},\n",
                         rank, rank);
    for (int s = 0; s < 2; ++s)
      f << absl::StrFormat("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                           "\"args\":{\"name\":\"%s\"}},\n",
                           rank, s, s == 0 ? "compute" : "communication");
    std::vector<InstrTiming> t = timers ? ex->timingsBetween(traceFrom, traceTo) : ex->timings();
    for (size_t i = 0; i < t.size(); ++i) {
      const schema::Function &fn = program.functions(t[i].function);
      const schema::Instruction &ins = fn.body(t[i].index);
      std::string name;
      switch (ins.op_case()) {
      case schema::Instruction::kKernel: name = ins.kernel().kernel(); break;
      case schema::Instruction::kCollective:
        name = absl::AsciiStrToLower(schema::CollectiveKind_Name(ins.collective().kind()));
        break;
      case schema::Instruction::kCall: name = program.functions(int(ins.call().function())).name(); break;
      case schema::Instruction::kWait: name = "wait"; break;
      case schema::Instruction::kHostIo: name = ins.host_io().name(); break;
      default: name = "instr"; break;
      }
      std::string op = ins.loc() < uint32_t(program.locations_size())
                           ? program.locations(int(ins.loc())).op()
                           : "";
      // A matmul's problem size, so that a trace reader can compute each GEMM's rate
      // (bench/train_throughput.sh's per-shape table): "gemm" is batch x M x K x N with
      // the transposes and " beta1" when it accumulates, "gflop" 2 * batch * M * N * K / 1e9.
      std::string gemm;
      if (std::optional<MatmulDims> d =
              ins.has_kernel() ? matmulDims(program, t[i].function, ins.kernel()) : std::nullopt)
        gemm = absl::StrFormat(",\"gemm\":\"%dx%dx%dx%d%s%s%s\",\"gflop\":%.6g", d->batch,
                               d->m, d->k, d->n, d->transA ? " trans_a" : "",
                               d->transB ? " trans_b" : "", d->accumulate ? " beta1" : "",
                               d->flops * 1e-9);
      const bool async = (ins.has_collective() && ins.collective().async()) ||
                         (ins.has_send() && ins.send().async()) ||
                         (ins.has_recv() && ins.recv().async());
      f << absl::StrFormat("{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,"
                           "\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"function\":"
                           "\"%s\",\"index\":%d,\"op\":\"%s\",\"async\":%s%s}}%s\n",
                           name, t[i].stream == 0 ? "compute" : "communication", rank,
                           t[i].stream, double(t[i].startNs) / 1e3,
                           double(t[i].endNs - t[i].startNs) / 1e3, fn.name(), t[i].index, op,
                           async ? "true" : "false", gemm, i + 1 < t.size() ? "," : "");
    }
    // How much of each group's communication ran while compute kernels did (CommOverlap.h).
    f << "],\"otherData\":{\"comm_overlap\":"
      << commOverlapJson(summarizeCommOverlap(program, t)) << "}}\n";
    return writeFileAtomically(path, f.str());
  }

  /// Megatron's evaluate() runs --global-batch-size batches (eval_num_microbatches from it),
  /// also during a batch-size ramp-up: the final program evaluates, then the ramp continues.
  absl::Status evaluate(int64_t iteration) {
    if (!data.valid || opts.evalIters == 0)
      return absl::OkStatus();
    const int64_t current = numMicrobatches;
    const int64_t finalM = rampup ? rampup->globalBatchSize() / (mbs * dpSize) : current;
    if (current == finalM)
      return evaluateHere(iteration);
    if (absl::Status s = switchProgram(finalM, /*rebuildTimers=*/false); !s.ok())
      return s;
    absl::Status e = evaluateHere(iteration);
    absl::Status back = switchProgram(current, /*rebuildTimers=*/false);
    return e.ok() ? back : e;
  }

  absl::Status evaluateHere(int64_t iteration) {
    if (!ex->hasEntry("eval_step"))
      return absl::OkStatus();
    double lossSum = 0, tokens = 0;
    for (int64_t k = 0; k < opts.evalIters; ++k) {
      absl::Status s = ex->runEntry("eval_step", [&](schema::HostIOKind kind, const std::string &) {
        if (kind == schema::FILL_INPUTS)
          return fillBatch(*data.valid, k * gbs, iteration, nullptr);
        lossSum += readScalar(schema::LOSS_SUM);
        tokens += readScalar(schema::NUM_TOKENS);
        return absl::OkStatus();
      });
      if (!s.ok())
        return s;
    }
    double loss = tokens > 0 ? lossSum / tokens : std::nan("");
    evals.push_back({iteration, loss});
    if (tb) {
      if (absl::Status s = tbScalar("lm loss validation", loss, iteration); !s.ok())
        return s;
      if (opts.logValidationPplToTensorboard)
        if (absl::Status s = tbScalar("lm loss validation ppl", std::exp(loss), iteration); !s.ok())
          return s;
    }
    *log << "-----------------------------------------------------------------------------------"
            "------------\n";
    *log << absl::StrFormat(" validation loss at iteration %d | lm loss value: %.6E | lm loss PPL: "
                            "%.6E | \n",
                            iteration, loss, std::exp(loss));
    *log << "-----------------------------------------------------------------------------------"
            "------------\n";
    log->flush();
    return absl::OkStatus();
  }

  /// Megatron's rerun state machine around the run of iteration `it` that just finished
  /// (Rerun.h): on a suspicious result (or every iteration under report_determinism_stats) the
  /// pre-step state is restored from `snapshot` and `runOnce` repeats the iteration. A transient
  /// fault continues with the rerun's `loss`, `norm`, `update`; a persistent one restores the
  /// pre-step state, saves it as iteration `preStep.iteration` when --save is set, and returns
  /// the error naming the iteration, the rank and both runs' values.
  absl::Status validateIteration(int64_t it, const RerunSnapshot &snapshot,
                                 const std::function<absl::Status()> &runOnce, double &loss,
                                 double &norm, double &update, const TrainState &preStep) {
    const IterationResult first = rerun->observed(it, 0, {loss, norm});
    const std::string why = rerun->suspicion(it, first);
    const bool report = rerun->options().mode == RerunMode::ReportDeterminismStats;
    if (why.empty() && !report) {
      rerun->accept(first);
      return absl::OkStatus();
    }
    // A step that was applied can only be rerun from a snapshot. A non-finite grad norm
    // skipped its update, so a NaN/Inf result needs none.
    const bool canRerun = snapshot.taken() || update == 0;
    if (canRerun) {
      if (snapshot.taken())
        if (absl::Status e = snapshot.restore(*ex); !e.ok())
          return e;
      if (absl::Status e = runOnce(); !e.ok())
        return e;
    }
    const IterationResult second =
        canRerun ? rerun->observed(it, 1, {loss, norm}) : first;
    if (why.empty()) { // report_determinism_stats on an unsuspicious result
      rerun->addDeterminismSample(first, second);
      rerun->accept(second);
      return absl::OkStatus();
    }
    const int rank = int(comm->rank());
    if (canRerun && !RerunStateMachine::reproduced(first, second)) {
      *log << absl::StrFormat("iteration %d: transient error: %s in the first run (lm loss %.6E, "
                              "grad norm %.3f), not in the rerun (lm loss %.6E, grad norm "
                              "%.3f); continuing with the rerun's result\n",
                              it, why, first.loss, first.gradNorm, second.loss, second.gradNorm);
      log->flush();
      if (absl::Status e = rerun->recordRejected(it, "transient error", why, first, second);
          !e.ok())
        return e;
      rerun->accept(second);
      return absl::OkStatus();
    }
    // Persistent: the rerun reproduced it (or there was no clean state to rerun from).
    if (absl::Status e = rerun->recordRejected(it, "persistent error", why, first, second);
        !e.ok())
      return e;
    std::string saved;
    if (snapshot.taken())
      if (absl::Status e = snapshot.restore(*ex); !e.ok())
        return e;
    if (!opts.ckpt.save.empty() && preStep.iteration > 0 && (snapshot.taken() || update == 0)) {
      if (absl::Status e = ckpt->save(preStep); !e.ok())
        return e;
      saved = absl::StrCat("; the state before it was saved as iteration ", preStep.iteration,
                           " in ", opts.ckpt.save);
    }
    std::string rerunText =
        canRerun ? "a rerun of the iteration reproduced it (a persistent error: a faulty "
                   "device, or a true divergence)"
                 : "the step was applied, so it could not be rerun";
    return absl::DataLossError(absl::StrFormat(
        "iteration %d, rank %d: found %s (lm loss: %g, grad norm: %g); %s%s; %s", it, rank, why,
        first.loss, first.gradNorm, rerunText, saved, advice(why)));
  }

  /// What to pass to go on past a persistent fault.
  static std::string advice(const std::string &why) {
    return why.find("NaN") != std::string::npos || why.find("Inf") != std::string::npos
               ? "--check-for-nan-in-loss-and-grad is on (Megatron's default): pass "
                 "--no-check-for-nan-in-loss-and-grad to skip such iterations instead"
               : "pass --rerun-mode disabled to train on";
  }
};

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

namespace {
std::string timestamp() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}
double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
} // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::create(const std::string &planDir,
                                                         const RunOptions &options,
                                                         std::ostream &log, Communicator *comm,
                                                         Backend *backend) {
  auto im = std::make_unique<Impl>();
  im->opts = options;
  im->log = &log;
  if (!backend) {
    im->ownBackend = createCpuBackend();
    backend = im->ownBackend.get();
  }
  im->backend = backend;
  if (!comm) {
    im->ownComm = createLocalCommunicator();
    comm = im->ownComm.get();
  }
  im->comm = comm;
  auto t0 = std::chrono::steady_clock::now();
  log << "> loading plan " << planDir << " ..." << std::flush;
  im->programPath = absl::StrCat(planDir, "/rank", comm->rank(), ".pb");
  absl::StatusOr<schema::Program> p = readProgramFile(im->programPath);
  if (!p.ok())
    return p.status();
  im->program = std::move(*p);
  const schema::Program &prog = im->program;
  if (prog.mesh().world_size() != comm->worldSize())
    return absl::FailedPreconditionError(
        absl::StrCat(im->programPath, ": the plan has ", prog.mesh().world_size(),
                     prog.mesh().world_size() == 1 ? " rank" : " ranks", " but the job has ",
                     comm->worldSize()));
  for (int a = 0; a < prog.mesh().axis_names_size(); ++a)
    if (prog.mesh().axis_names(a) == "dp" && a < prog.mesh().coords_size() &&
        a < prog.mesh().axis_sizes_size()) {
      im->dpRank = prog.mesh().coords(a);
      im->dpSize = prog.mesh().axis_sizes(a);
    }
  if (!prog.has_plan())
    return absl::InvalidArgumentError(absl::StrCat(
        im->programPath,
        ": the program has no plan (Program.plan: micro batch size, number of microbatches, "
        "sequence length), which trainrun needs (was it written by trainc compile?)"));
  im->mbs = int64_t(prog.plan().micro_batch_size());
  im->numMicrobatches = int64_t(prog.plan().num_microbatches());
  im->gbs = int64_t(prog.plan().global_batch_size());
  im->seq = int64_t(prog.plan().seq_length());
  if (options.seqLength != 0 && options.seqLength != im->seq)
    return absl::InvalidArgumentError(absl::StrCat(
        "--seq-length ", options.seqLength, options.seqLength > im->seq ? " is larger than" : " differs from",
        " the plan's compiled sequence length ", im->seq, " (recompile with --seq-length ",
        options.seqLength, ")"));
  if (options.profileStepEnd && options.profileStepEnd <= options.profileStepStart)
    return absl::InvalidArgumentError(
        absl::StrCat("--profile-step-end ", options.profileStepEnd,
                     " must be greater than --profile-step-start ", options.profileStepStart));
  if (!options.traceDir.empty()) {
    // Refuse an unusable trace directory before training, not after it.
    std::error_code ec;
    std::filesystem::create_directories(options.traceDir, ec);
    std::string probe = absl::StrCat(options.traceDir, "/rank", comm->rank(), ".trace.json");
    if (ec || !std::ofstream(probe, std::ios::trunc))
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot write the trace into --trace '", options.traceDir, "'",
          ec ? absl::StrCat(": ", ec.message()) : std::string()));
  }
  ExecutorOptions eo;
  eo.timing = (!options.traceDir.empty() && options.profileStepStart <= 1) ||
              options.timingLogLevel > 0;
  auto ex = Executor::create(prog, *im->backend, *im->comm, eo);
  if (!ex.ok())
    return absl::Status(ex.status().code(),
                        absl::StrCat(im->programPath, ": ", ex.status().message()));
  im->ex = std::move(*ex);
  if (options.timingLogLevel > 0)
    im->timers = std::make_unique<IterationTimers>(im->program, options.timingLogLevel);
  if (absl::Status s = im->checkSameCompile(); !s.ok())
    return s;
  for (int b = 0; b < prog.buffers_size(); ++b)
    if (prog.buffers(b).scalar_role() != schema::SCALAR_ROLE_UNSPECIFIED)
      im->roleBuffer[size_t(prog.buffers(b).scalar_role())] = b; // unique: the validator checked
  if (int lr = im->buffer(schema::LR); lr >= 0)
    im->scalarType = DType(int(prog.buffers(lr).dtype()));
  // The validator checked the host inputs against the plan: every microbatch of a role present.
  im->inputs.assign(size_t(im->numMicrobatches), {});
  for (int b = 0; b < prog.buffers_size(); ++b)
    if (prog.buffers(b).has_host_input()) {
      const schema::HostInput &h = prog.buffers(b).host_input();
      im->inputs[h.microbatch()].push_back({h.role(), b, DType(int(prog.buffers(b).dtype()))});
      im->docMask |= h.role() == schema::DOC_START;
    }
  if (options.resetAttentionMask && !im->docMask)
    return absl::InvalidArgumentError(
        "--reset-attention-mask: the plan was compiled without it (its program has no doc_start "
        "input); recompile with trainc compile ... --reset-attention-mask");
  if (absl::Status s = initializeParameters(*im->ex, uint64_t(options.seed)); !s.ok())
    return s;
  log << " done (" << absl::StrFormat("%.2f", seconds(t0, std::chrono::steady_clock::now()))
      << " s)\n> building train, validation, and test datasets ..." << std::flush;
  auto t1 = std::chrono::steady_clock::now();
  DataOptions d;
  d.dataPath = options.dataPath;
  d.splitDataPath = options.splitDataPath;
  d.dataCachePath = options.dataCachePath;
  d.mockData = options.mockData;
  d.split = options.split;
  d.seqLength = im->seq;
  d.seed = uint64_t(options.seed);
  d.vocabSize = int64_t(prog.plan().vocab_size());
  if (absl::StatusOr<std::optional<BatchRampup>> r = rampupOf(prog); !r.ok())
    return r.status();
  else
    im->rampup = *r;
  im->planDir = planDir;
  // Megatron's train_valid_test_num_samples: what the run reads of each split.
  {
    int64_t trainSamples = options.trainSamples ? options.trainSamples : options.trainIters * im->gbs;
    int64_t iters = options.trainSamples ? options.trainSamples / im->gbs : options.trainIters;
    if (im->rampup) // Megatron's update_train_iters
      iters = im->rampup->trainIters(options.trainSamples);
    d.numSamples = {trainSamples, (iters / options.evalInterval + 1) * options.evalIters * im->gbs,
                    options.evalIters * im->gbs};
  }
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (!options.tokenizerType.empty()) {
    absl::StatusOr<std::unique_ptr<data::Tokenizer>> t = data::createTokenizer(
        {options.tokenizerType, options.vocabFile, options.mergeFile, d.vocabSize - 1,
         options.tokenizerModel});
    if (!t.ok())
      return t.status();
    tokenizer = std::move(*t);
    if (absl::Status s = data::checkVocabAgainstPlan(
            *tokenizer, d.vocabSize, metaInt(prog, "model.make_vocab_size_divisible_by", 128),
            metaInt(prog, "parallel.tensor_model_parallel_size", 1));
        !s.ok())
      return s;
    d.tokenizer = tokenizer.get();
  }
  absl::StatusOr<Datasets> ds = buildDatasets(d);
  if (!ds.ok())
    return ds.status();
  im->data = std::move(*ds);
  if (!im->data.train)
    return absl::InvalidArgumentError("the train split is empty (check --split)");
  if ((options.eodMaskLoss || options.resetPositionIds) && im->data.train->eodToken() < 0)
    return absl::InvalidArgumentError(
        "--eod-mask-loss and --reset-position-ids need the EOD token id of the .bin/.idx data: "
        "give --tokenizer-type (and its files) as preprocess_data had");
  if (im->docMask && im->data.train->eodToken() < 0)
    return absl::InvalidArgumentError(
        "--reset-attention-mask (compiled into the plan) needs the EOD token id of the .bin/.idx "
        "data: give --tokenizer-type (and its files) as preprocess_data had");
  log << " done (" << absl::StrFormat("%.2f", seconds(t1, std::chrono::steady_clock::now()))
      << " s): " << im->data.train->numSamples() << " train samples, "
      << (im->data.valid ? im->data.valid->numSamples() : 0) << " validation samples\n";
  for (const std::string &note : im->data.notes)
    log << "> " << note << "\n";
  // The LR schedule in samples (Megatron converts iterations with the global batch size).
  int64_t warmup = options.lrWarmupSamples ? options.lrWarmupSamples
                                           : options.lrWarmupIters * im->gbs;
  int64_t total = options.trainSamples ? options.trainSamples : options.trainIters * im->gbs;
  int64_t decay = options.lrDecaySamples  ? options.lrDecaySamples
                  : options.lrDecayIters ? options.lrDecayIters * im->gbs
                                         : total;
  absl::StatusOr<LrSchedule> sched =
      LrSchedule::create(options.lr, options.minLr, warmup, decay, options.lrDecayStyle);
  if (!sched.ok())
    return sched.status();
  im->schedule = std::make_unique<LrSchedule>(*sched);
  im->rngSeed = options.seed;
  absl::StatusOr<std::unique_ptr<Checkpointer>> ck = Checkpointer::create(
      prog, *im->ex, *im->comm, options.ckpt,
      {options.lr, options.minLr, warmup, decay, options.lrDecayStyle}, options.seed, log);
  if (!ck.ok())
    return absl::Status(ck.status().code(),
                        absl::StrCat(im->programPath, ": ", ck.status().message()));
  im->ckpt = std::move(*ck);
  if (!options.tensorboardDir.empty() && im->comm->rank() == im->comm->worldSize() - 1) {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w =
        TensorBoardWriter::create(options.tensorboardDir);
    if (!w.ok())
      return w.status();
    im->tb = std::move(*w);
  }
  im->rerun = std::make_unique<RerunStateMachine>(options.rerun, options.checkForNanInLossAndGrad,
                                                  int(im->comm->rank()));
  if (im->buffer(schema::LOSS_SCALE) >= 0) {
    // --fp16: the grad scaler's state before the first iteration (Megatron's ConstantGradScaler
    // or DynamicGradScaler constructor); the program updates it on device from then on (a --load
    // replaces it with the checkpoint's).
    const double fixed = metaDouble(im->program, "training.loss_scale", 0);
    const double scale =
        fixed > 0 ? fixed : metaDouble(im->program, "training.initial_loss_scale", 4294967296.0);
    for (auto [role, v] : {std::pair{schema::LOSS_SCALE, scale},
                           {schema::LOSS_SCALE_GROWTH_TRACKER, 0.0},
                           {schema::LOSS_SCALE_HYSTERESIS_TRACKER,
                            double(metaInt(im->program, "training.hysteresis", 2))}})
      if (absl::Status s = im->writeScalar(role, v); !s.ok())
        return s;
  }
  if (absl::Status s = im->ckpt->load(im->resume, im->rngSeed); !s.ok())
    return s;
  // Batch-size ramp-up: the program of the samples consumed so far (0, or a --load's).
  if (im->rampup) {
    std::string e;
    const int64_t m = im->rampup->at(im->resume.consumedSamples, true, &e).numMicrobatches;
    if (!e.empty())
      return absl::InvalidArgumentError(e);
    // Megatron's messages (num_microbatches_calculator.py, rank 0's log).
    log << "> will use batch size rampup starting from global batch size "
        << im->rampup->start() << " to global batch size " << im->gbs
        << " with batch size increments " << im->rampup->increment() << " over "
        << im->rampup->samples() << " samples.\n> setting initial batch size to "
        << im->rampup->start() << "\n";
    if (BatchRampup::Step first = im->rampup->at(0, false);
        first.runningGlobalBatchSize != first.globalBatchSize)
      log << "> decreasing batch size from " << first.globalBatchSize << " to "
          << first.runningGlobalBatchSize << " to keep divisiblity by micro_batch_size="
          << im->mbs << " * data_parallel_size=" << im->dpSize << "\n";
    if (m != im->numMicrobatches)
      if (absl::Status s = im->switchProgram(m); !s.ok())
        return s;
  }
  if (!options.dumpDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.dumpDir, ec);
    if (ec)
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create --dump-dir '", options.dumpDir, "': ", ec.message()));
    std::string sfx = im->dumpSuffix();
    absl::StatusOr<std::vector<NamedTensor>> initial = im->parameters();
    if (!initial.ok())
      return initial.status();
    if (absl::Status s = writeSafetensors(
            options.dumpDir + "/initial_weights" + sfx + ".safetensors", *initial).status();
        !s.ok())
      return s;
    if (absl::Status s = im->batchesOut.open(options.dumpDir + "/batches" + sfx + ".bin");
        !s.ok())
      return s;
    if (absl::Status s = im->lossesOut.open(options.dumpDir + "/losses" + sfx + ".txt"); !s.ok())
      return s;
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(im)));
}

absl::Status Trainer::train() {
  Impl &im = *impl_;
  const RunOptions &o = im.opts;
  std::ostream &log = *im.log;
  // Megatron's update_train_iters without ramp-up: train_samples // global_batch_size (floor).
  int64_t iters = o.trainIters ? o.trainIters : o.trainSamples / im.gbs;
  if (im.rampup) // Megatron's update_train_iters (ramp-up needs --train-samples)
    iters = im.rampup->trainIters(o.trainSamples);
  // The state a --load resumed (all zero otherwise); `successful` counts Adam updates.
  int64_t consumed = im.resume.consumedSamples, scheduled = im.resume.scheduledSamples,
          successful = im.resume.adamSteps, skipped = im.resume.skipped, nans = im.resume.nans;
  // TFLOP/s as Megatron counts them (num_floating_point_operations per GPU) when the plan has the
  // figure, else the IR's own count (a .mlir model).
  // (Of the program running now: a batch-size ramp-up switches programs.)
  auto flopsNow = [&] {
    return im.program.reports().flops().megatron_flops_per_iteration() > 0
               ? im.program.reports().flops().megatron_flops_per_iteration()
               : im.program.reports().flops().flops_per_iteration();
  };
  // Interval accumulators (Megatron averages the loss over the non-skipped iterations of the
  // logging interval).
  double intervalLoss = 0, intervalTime = 0;
  int64_t intervalCount = 0, intervalIters = 0, intervalSkipped = 0, intervalNans = 0;
  // On an error the trace of the iterations so far is still written (best effort).
  auto fail = [&](absl::Status s) {
    if (!o.traceDir.empty())
      (void)im.writeTrace();
    return s;
  };
  int64_t it = im.resume.iteration + 1;
  // The ramp's current (un-rounded) batch size, for Megatron's "ramping up" messages.
  int64_t rampGbs = im.rampup ? im.rampup->start() : 0;
  bool exited = false;
  for (; it <= iters; ++it) {
    // Megatron's update_num_microbatches(consumed_train_samples, consistency_check=True) before
    // each iteration; a new num_microbatches saves a checkpoint first (with --save) and runs
    // the program compiled for it.
    if (im.rampup) {
      std::string e;
      const BatchRampup::Step step = im.rampup->at(consumed, true, &e);
      const int64_t m = step.numMicrobatches;
      if (!e.empty())
        return fail(absl::InvalidArgumentError(absl::StrCat("iteration ", it, ": ", e)));
      if (step.globalBatchSize != rampGbs) {
        log << "> ramping up batch size from " << rampGbs << " to " << step.globalBatchSize
            << "\n";
        rampGbs = step.globalBatchSize;
        if (step.runningGlobalBatchSize != step.globalBatchSize)
          log << "> decreasing batch size from " << step.globalBatchSize << " to "
              << step.runningGlobalBatchSize << " to keep divisiblity by micro_batch_size="
              << im.mbs << " * data_parallel_size=" << im.dpSize << "\n";
      }
      if (m != im.numMicrobatches) {
        if (!o.ckpt.save.empty() && it > 1 && !im.ckpt->savedAt(it - 1))
          if (absl::Status s = im.ckpt->save({it - 1, consumed, scheduled, successful, skipped,
                                              nans});
              !s.ok())
            return fail(s);
        if (absl::Status s = im.switchProgram(m); !s.ok())
          return fail(s);
        if (im.timers)
          im.timers->reset();
      }
    }
    if (!o.traceDir.empty()) {
      // With the timers on, timing stays on and the trace's window is a range of marks.
      if (it == o.profileStepStart) {
        if (im.timers)
          im.traceFrom = im.ex->timingMark();
        else
          im.ex->setTiming(true);
      }
      if (it == o.profileStepEnd) {
        if (im.timers)
          im.traceTo = im.ex->timingMark();
        else
          im.ex->setTiming(false);
      }
    }
    // Where this iteration's timings start (a rerun moves it: only the run kept is timed).
    Executor::TimingMark iterationMark = im.ex->timingMark();
    double lr = im.schedule->lr(scheduled);
    // Megatron's weight-decay schedule over the training samples (constant: --weight-decay).
    const double wd = o.weightDecayIncrStyle == "constant"
                          ? o.weightDecay
                          : weightDecayAt(*o.startWeightDecay, *o.endWeightDecay,
                                          o.trainSamples ? o.trainSamples : o.trainIters * im.gbs,
                                          o.weightDecayIncrStyle, scheduled);
    im.weightDecays.push_back(wd);
    double loss = 0, norm = 0, update = 0, tokens = 0, lossScale = 1.0;
    std::vector<int32_t> record;
    auto t0 = std::chrono::steady_clock::now();
    // One execution of the iteration's program with this iteration's inputs (a rerun repeats it
    // with the same batch and the same RNG key).
    auto runOnce = [&]() -> absl::Status {
      record.clear();
      iterationMark = im.ex->timingMark();
      absl::Status s = im.ex->run([&](schema::HostIOKind kind, const std::string &) -> absl::Status {
        if (kind == schema::FILL_INPUTS) {
          if (absl::Status f = im.fillBatch(*im.data.train, consumed, it,
                                            im.batchesOut.isOpen() ? &record : nullptr);
              !f.ok())
            return f;
          if (absl::Status f = im.writeScalar(schema::LR, lr); !f.ok())
            return f;
          if (absl::Status f = im.writeScalar(schema::WEIGHT_DECAY, wd); !f.ok())
            return f;
          return im.writeScalar(schema::STEP, double(successful + 1));
        }
        tokens = im.readScalar(schema::NUM_TOKENS);
        loss = im.readScalar(schema::LOSS_SUM) / tokens;
        norm = im.readScalar(schema::GRAD_NORM);
        update = im.readScalar(schema::UPDATE_SUCCESSFUL);
        if (im.buffer(schema::LOSS_SCALE) >= 0) // fp16: the scale after this step's update
          lossScale = im.readScalar(schema::LOSS_SCALE);
        return absl::OkStatus();
      });
      if (!s.ok())
        return absl::Status(s.code(), absl::StrCat("iteration ", it, ": ", s.message()));
      return absl::OkStatus();
    };
    RerunSnapshot snapshot;
    if (im.rerun->needsSnapshot(it))
      if (absl::Status e = snapshot.take(*im.ex); !e.ok())
        return fail(e);
    if (absl::Status e = runOnce(); !e.ok())
      return fail(e);
    // Under fp16 loss scaling a non-finite grad norm with a finite loss is an overflow
    // (found_inf): the step was skipped and the scale backs off, as Megatron's
    // MixedPrecisionOptimizer.step returns before any check of the norm, so it is neither
    // rerun nor an error; the loss is still checked.
    const bool scaled = im.buffer(schema::LOSS_SCALE) >= 0;
    const bool overflow = scaled && std::isfinite(loss) && !std::isfinite(norm);
    if (!overflow)
      if (absl::Status e = im.validateIteration(it, snapshot, runOnce, loss, norm, update,
                                                {it - 1, consumed, scheduled, successful,
                                                 skipped, nans});
          !e.ok())
        return fail(e);
    // Megatron's --check-for-nan-in-loss-and-grad. The loss and the grad norm are reduced over
    // the data-parallel ranks, so every rank stops at the same iteration (none waits for a peer).
    if (o.checkForNanInLossAndGrad && (!std::isfinite(loss) || (!overflow && !std::isfinite(norm)))) {
      auto what = [](double v) { return std::isnan(v) ? "NaN" : "Inf"; };
      std::string found =
          tokens == 0 ? "the global batch has no unmasked token (lm loss = 0 / 0)"
          : !std::isfinite(loss)
              ? absl::StrCat("found ", what(loss), " in the loss (lm loss: ", loss,
                             ", grad norm: ", norm, ")")
              : absl::StrCat("found ", what(norm), " in the grad norm (lm loss: ", loss, ")");
      return fail(absl::DataLossError(absl::StrCat(
          "iteration ", it, ", rank ", im.comm->rank(), ": ", found,
          "; --check-for-nan-in-loss-and-grad is on (Megatron's default): pass "
          "--no-check-for-nan-in-loss-and-grad to skip such iterations instead")));
    }
    double dt = seconds(t0, std::chrono::steady_clock::now());
    if (im.timers) {
      im.timers->addIteration(im.ex->timingsBetween(iterationMark));
      if (o.traceDir.empty()) // nothing else reads them: keep the memory bounded
        im.ex->clearTimings();
    }
    consumed += im.gbs;
    bool ok = update != 0;
    if (ok) {
      ++successful;
      scheduled += im.gbs;
    } else {
      ++skipped;
      ++intervalSkipped;
    }
    if (!std::isfinite(loss)) {
      ++nans;
      ++intervalNans;
    }
    im.losses.push_back(loss);
    im.gradNorms.push_back(norm);
    if (im.batchesOut.isOpen()) {
      // A write error (a full disk) stops the run at this iteration, naming the file.
      absl::Status w = im.batchesOut.write(std::string_view(
          reinterpret_cast<const char *>(record.data()), record.size() * 4));
      if (w.ok())
        w = im.lossesOut.write(absl::StrFormat("%d %.17g %.17g %.17g\n", it, loss, norm, lr));
      if (!w.ok())
        return fail(absl::Status(w.code(), absl::StrCat("iteration ", it, ": ", w.message())));
    }
    if (ok && std::isfinite(loss)) {
      intervalLoss += loss;
      ++intervalCount;
    }
    intervalTime += dt;
    ++intervalIters;
    im.consumedSamples = consumed;
    // Megatron's --log-params-norm / --log-num-zeros-in-grad, of this iteration, when the log
    // line or TensorBoard shows them (the same iterations on every rank: the zero count is a
    // collective under the distributed optimizer).
    const bool logsNow = it % o.logInterval == 0 || it == iters;
    const bool tbNow = !o.tensorboardDir.empty() && it % o.tensorboardLogInterval == 0;
    std::optional<double> paramsNorm;
    std::optional<int64_t> numZeros;
    if (o.logParamsNorm && (logsNow || tbNow))
      paramsNorm = im.paramsNorm();
    if (o.logNumZerosInGrad && (logsNow || tbNow)) {
      absl::StatusOr<int64_t> z = im.numZerosInGrad();
      if (!z.ok())
        return fail(z.status());
      numZeros = *z;
    }
    if (im.tb && it % o.tensorboardLogInterval == 0) {
      // Megatron's training_log keys, each with its " vs samples" twin.
      absl::Status w = absl::OkStatus();
      auto put = [&](const std::string &tag, double v) {
        if (w.ok())
          w = im.tbScalar(tag, v, it);
      };
      if (o.logLearningRateToTensorboard)
        put("learning-rate", lr);
      if (o.logBatchSizeToTensorboard)
        put("batch-size", double(im.gbs));
      put("lm loss", loss);
      if (o.logLossScaleToTensorboard)
        put("loss-scale", lossScale);
      if (o.logWorldSizeToTensorboard)
        put("world-size", double(im.comm->worldSize()));
      put("grad-norm", norm);
      if (numZeros)
        put("num-zeros", double(*numZeros));
      if (paramsNorm)
        put("params-norm", *paramsNorm);
      if (o.logMemoryToTensorboard) {
        const schema::MemoryReport &m = im.program.reports().memory();
        if (w.ok())
          w = im.tb->addScalar("mem-reserved-bytes", double(m.arena_bytes()), it);
        if (w.ok())
          w = im.tb->addScalar("mem-allocated-bytes", double(im.ex->highWaterMark()), it);
        if (w.ok())
          w = im.tb->addScalar("mem-max-allocated-bytes", double(im.ex->highWaterMark()), it);
      }
      if (!w.ok())
        return fail(absl::Status(w.code(), absl::StrCat("iteration ", it, ": ", w.message())));
    }
    if (it % o.logInterval == 0 || it == iters) {
      double perIter = intervalTime / double(intervalIters);
      double tokensPerSec = double(im.gbs * im.seq) / perIter;
      // Megatron's training_log fields, labels and order (training.py), so that a script that
      // parses Megatron's logs parses these; tokens per second is an extra field at the end.
      std::string line = absl::StrFormat(
          " [%s] iteration %8d/%8d | consumed samples: %12d | elapsed time per iteration (ms): "
          "%.1f |",
          timestamp(), it, iters, consumed, perIter * 1e3);
      if (o.logThroughput)
        line += absl::StrFormat(" throughput per GPU (TFLOP/s/GPU): %.1f |",
                                flopsNow() / perIter / 1e12);
      line += absl::StrFormat(" learning rate: %.6E | global batch size: %5d |", lr, im.gbs);
      double avgLoss = intervalCount ? intervalLoss / double(intervalCount) : 0.0;
      if (avgLoss > 0.0) // Megatron prints a loss only when its average is positive
        line += absl::StrFormat(" lm loss: %.6E |", avgLoss);
      line += absl::StrFormat(" loss scale: %.1f |", lossScale);
      if (!scaled || std::isfinite(norm)) // Megatron prints no norm for an fp16 skipped step
        line += absl::StrFormat(" grad norm: %.3f |", norm);
      if (numZeros)
        line += absl::StrFormat(" num zeros: %.1f |", double(*numZeros));
      if (paramsNorm)
        line += absl::StrFormat(" params norm: %.3f |", *paramsNorm);
      line += absl::StrFormat(" number of skipped iterations: %3d | number of nan iterations: %3d "
                              "| tokens per second: %.0f |\n",
                              intervalSkipped, intervalNans, tokensPerSec);
      log << line;
      if (o.rerun.mode == RerunMode::ReportDeterminismStats)
        log << " " << im.rerun->determinismReport() << "\n";
      // Megatron writes these at the log interval (seconds per iteration; TFLOP/s per GPU).
      if (im.tb && o.logTimersToTensorboard)
        if (absl::Status w = im.tb->addScalar("iteration-time", perIter, it); !w.ok())
          return fail(w);
      if (im.tb && o.logThroughput)
        if (absl::Status w = im.tb->addScalar("throughput", flopsNow() / perIter / 1e12, it); !w.ok())
          return fail(w);
      if (it == o.logInterval || (it == iters && iters < o.logInterval)) {
        const schema::MemoryReport &m = im.program.reports().memory();
        log << absl::StrFormat(
            "[Rank 0] (after %d iterations) memory (MB) | plan arena: %.2f | persistent: %.2f | "
            "flowing peak: %.2f | touched high-water mark: %.2f\n",
            it, double(m.arena_bytes()) / 1048576.0, double(m.persistent_bytes()) / 1048576.0,
            double(m.flowing_peak_bytes()) / 1048576.0,
            double(im.ex->highWaterMark()) / 1048576.0);
      }
      // Megatron's timers.log after the log line (and the first memory report), then
      // --log-timers-to-tensorboard's "<name>-time" keys (the maximum over the ranks).
      if (im.timers) {
        absl::StatusOr<std::vector<std::vector<double>>> perRank =
            im.gatherTimers(im.timers->intervalMs());
        if (!perRank.ok())
          return fail(perRank.status());
        std::string text = formatTimers(im.timers->names(), *perRank, o.timingLogOption);
        if (!text.empty())
          log << text << "\n";
        if (im.tb && o.logTimersToTensorboard)
          for (size_t k = 0; k < im.timers->names().size(); ++k) {
            double hi = 0;
            for (const std::vector<double> &r : *perRank)
              hi = std::max(hi, r[k]);
            if (absl::Status w = im.tb->addScalar(im.timers->names()[k] + "-time", hi, it);
                !w.ok())
              return fail(w);
          }
        im.timers->reset();
      }
      log.flush();
      intervalLoss = intervalTime = 0;
      intervalCount = intervalIters = intervalSkipped = intervalNans = 0;
    }
    if (o.evalInterval > 0 && it % o.evalInterval == 0 && it != iters)
      if (absl::Status e = im.evaluate(it); !e.ok())
        return fail(e);
    absl::StatusOr<bool> stop =
        im.ckpt->afterIteration({it, consumed, scheduled, successful, skipped, nans});
    if (!stop.ok())
      return fail(stop.status());
    if (*stop) {
      exited = true;
      break;
    }
  }
  int64_t last = std::min(it, iters);
  if (!exited) {
    if (absl::Status e = im.evaluate(iters); !e.ok())
      return fail(e);
    if (absl::Status e = im.ckpt->finish({last, consumed, scheduled, successful, skipped, nans});
        !e.ok())
      return fail(e);
  }
  if (!o.dumpDir.empty()) {
    std::string sfx = im.dumpSuffix();
    absl::StatusOr<std::vector<NamedTensor>> final = im.parameters();
    if (!final.ok())
      return final.status();
    if (absl::Status w =
            writeSafetensors(o.dumpDir + "/final_weights" + sfx + ".safetensors", *final).status();
        !w.ok())
      return w;
  }
  if (!o.traceDir.empty())
    if (absl::Status w = im.writeTrace(); !w.ok())
      return w;
  log << absl::StrFormat("trainc: %d iterations, %d skipped, %d with a nan loss\n", last, skipped,
                         nans);
  return absl::OkStatus();
}

const std::vector<double> &Trainer::losses() const { return impl_->losses; }
const std::vector<double> &Trainer::gradNorms() const { return impl_->gradNorms; }
const std::vector<double> &Trainer::weightDecays() const { return impl_->weightDecays; }
const std::vector<EvalResult> &Trainer::evaluations() const { return impl_->evals; }

} // namespace trainc::rt::control
