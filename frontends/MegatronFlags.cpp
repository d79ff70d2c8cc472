//===- MegatronFlags.cpp - Megatron-LM command-line frontend -------------===//
//
// One table entry per accepted flag. Flag names, value types and meanings are Megatron-LM's
// (megatron/training/arguments.py); the parser checks syntax and value types, and
// PlanConfig::finalize() checks ranges and consistency.
//
//===----------------------------------------------------------------------===//

#include "frontends/MegatronFlags.h"
#include "frontends/Support.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>

using llvm::ArrayRef;
using llvm::Error;
using llvm::StringRef;
using llvm::Twine;

namespace trainc::config {

using detail::makeError;

namespace {

/// How many values a flag takes.
enum class Arity {
  None, // a boolean switch
  One,
  OneOrMore, // values up to the next "--" token
};

struct FlagSpec {
  StringRef name;
  Arity arity;
  /// Stores `values` into the config; `flag` is the name for messages.
  std::function<Error(PlanConfig &, StringRef flag, ArrayRef<StringRef> values)> apply;
  /// For --help: the value placeholder ("INT", "X", "{a,b}", "PATH..."; empty for a switch)
  /// and the default as read from a default-constructed PlanConfig ("" = no default shown).
  std::string value;
  std::function<std::string(PlanConfig &)> show;
  std::string group;
  std::optional<FlagKind> kind;
};

/// A number as --help prints it (shortest form that reads back).
std::string showNumber(double v) {
  std::string s = llvm::formatv("{0}", v).str();
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return std::to_string(int64_t(v));
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v)
      return buf;
  }
  return s;
}

template <typename T> using Field = std::function<T &(PlanConfig &)>;

template <typename T> Field<T> model(T ModelConfig::*member) {
  return [member](PlanConfig &c) -> T & { return c.model.*member; };
}
template <typename T> Field<T> parallel(T ParallelConfig::*member) {
  return [member](PlanConfig &c) -> T & { return c.parallel.*member; };
}
template <typename T> Field<T> training(T TrainingConfig::*member) {
  return [member](PlanConfig &c) -> T & { return c.training.*member; };
}
template <typename T> Field<T> runtime(T RuntimeDefaults::*member) {
  return [member](PlanConfig &c) -> T & { return c.runtime.*member; };
}

/// A boolean switch running `set`.
FlagSpec flag(StringRef name, std::function<void(PlanConfig &)> set,
              std::function<std::string(PlanConfig &)> show = {}) {
  return {name, Arity::None,
          [set](PlanConfig &c, StringRef, ArrayRef<StringRef>) -> Error {
            set(c);
            return Error::success();
          },
          "", std::move(show)};
}

/// A boolean switch that sets `field` to `value`.
FlagSpec setBool(StringRef name, Field<bool> field, bool value = true) {
  return flag(name, [field, value](PlanConfig &c) { field(c) = value; },
              [field, value](PlanConfig &c) -> std::string {
                return field(c) == value ? "on" : "off";
              });
}

FlagSpec integer(StringRef name, Field<int64_t> field, int64_t min) {
  return {name, Arity::One,
          [field, min](PlanConfig &c, StringRef flag, ArrayRef<StringRef> v) -> Error {
            int64_t value;
            if (v[0].getAsInteger(10, value) || value < min)
              return makeError(flag + " expects a " + (min > 0 ? "positive" : "non-negative") +
                               " integer, got '" + v[0] + "'");
            field(c) = value;
            return Error::success();
          },
          min > 0 ? "N" : "INT",
          [field, min](PlanConfig &c) -> std::string {
            // A positive flag at 0 is unset: derived or not used (ModelConfig.h).
            return min > 0 && field(c) == 0 ? "derived/none" : std::to_string(field(c));
          }};
}
FlagSpec positive(StringRef name, Field<int64_t> field) { return integer(name, field, 1); }
FlagSpec nonNegative(StringRef name, Field<int64_t> field) { return integer(name, field, 0); }

Error parseNumber(StringRef flag, StringRef text, double &value) {
  if (text.getAsDouble(value) || !std::isfinite(value))
    return makeError(flag + " expects a number, got '" + text + "'");
  return Error::success();
}

FlagSpec number(StringRef name, Field<double> field) {
  return {name, Arity::One, [field](PlanConfig &c, StringRef flag, ArrayRef<StringRef> v) -> Error {
            return parseNumber(flag, v[0], field(c));
          },
          "X", [field](PlanConfig &c) { return showNumber(field(c)); }};
}

/// A number that must be > 0 (`what` says what it is in the error).
FlagSpec positiveNumber(StringRef name, Field<double> field, StringRef what) {
  FlagSpec f = number(name, field);
  std::string w = what.str();
  f.apply = [field, w](PlanConfig &c, StringRef flag, ArrayRef<StringRef> v) -> Error {
    double value;
    if (Error e = parseNumber(flag, v[0], value))
      return e;
    if (!(value > 0))
      return makeError(flag + " expects a positive number (" + w + "), got '" + v[0] + "'");
    field(c) = value;
    return Error::success();
  };
  return f;
}

/// A number whose absence means something (the default shown is `unset`).
FlagSpec optionalNumber(StringRef name, std::optional<double> RuntimeDefaults::*member,
                        StringRef unset = "--weight-decay") {
  return {name, Arity::One,
          [member](PlanConfig &c, StringRef flag, ArrayRef<StringRef> v) -> Error {
            double value;
            if (Error e = parseNumber(flag, v[0], value))
              return e;
            c.runtime.*member = value;
            return Error::success();
          },
          "X", [unset](PlanConfig &) { return unset.str(); }};
}

FlagSpec string(StringRef name, Field<std::string> field, StringRef placeholder = "STR") {
  return {name, Arity::One, [field](PlanConfig &c, StringRef, ArrayRef<StringRef> v) -> Error {
            field(c) = v[0].str();
            return Error::success();
          },
          placeholder.str(), [field](PlanConfig &c) { return field(c).empty() ? "none" : field(c); }};
}

FlagSpec choice(StringRef name, std::vector<StringRef> choices, Field<std::string> field) {
  return {name, Arity::One,
          [field, choices](PlanConfig &c, StringRef flag, ArrayRef<StringRef> v) -> Error {
            if (!llvm::is_contained(choices, v[0]))
              return makeError(flag + " expects one of " + llvm::join(choices, ", ") + ", got '" +
                               v[0] + "'");
            field(c) = v[0].str();
            return Error::success();
          },
          "{" + llvm::join(choices, ",") + "}",
          [field](PlanConfig &c) { return field(c).empty() ? "none" : field(c); }};
}

/// Accepted, recorded in ignoredFlags, otherwise without effect.
FlagSpec ignored(StringRef name, Arity arity = Arity::None) {
  return {name, arity, [](PlanConfig &c, StringRef flag, ArrayRef<StringRef>) -> Error {
            c.ignoredFlags.push_back(flag.str());
            return Error::success();
          },
          arity == Arity::None ? "" : arity == Arity::One ? "V" : "V...", {}, "",
          FlagKind::Ignored};
}

FlagSpec withKind(FlagSpec s, FlagKind kind) {
  s.kind = kind;
  return s;
}

/// A section header of the flag table: the flags after it, up to the next header, belong to
/// `group` and are of `kind` unless they say otherwise (ignored()).
FlagSpec section(StringRef group, FlagKind kind) {
  FlagSpec s{"", Arity::None, {}, "", {}, group.str(), kind};
  return s;
}

/// Drops the section headers, giving each flag its section's group and kind.
std::vector<FlagSpec> withSections(std::vector<FlagSpec> raw) {
  std::vector<FlagSpec> out;
  std::string group;
  FlagKind kind = FlagKind::CompileTime;
  for (FlagSpec &s : raw) {
    if (s.name.empty()) {
      group = s.group;
      kind = *s.kind;
      continue;
    }
    s.group = group;
    if (!s.kind)
      s.kind = kind;
    out.push_back(std::move(s));
  }
  return out;
}

const std::vector<FlagSpec> &flagTable() {
  static const std::vector<FlagSpec> table = withSections({
      section("model shape", FlagKind::CompileTime),
      positive("--num-layers", model(&ModelConfig::num_layers)),
      positive("--hidden-size", model(&ModelConfig::hidden_size)),
      positive("--ffn-hidden-size", model(&ModelConfig::ffn_hidden_size)),
      positive("--num-attention-heads", model(&ModelConfig::num_attention_heads)),
      setBool("--group-query-attention", model(&ModelConfig::group_query_attention)),
      positive("--num-query-groups", model(&ModelConfig::num_query_groups)),
      positive("--kv-channels", model(&ModelConfig::kv_channels)),
      positive("--seq-length", model(&ModelConfig::seq_length)),
      positive("--max-position-embeddings", model(&ModelConfig::max_position_embeddings)),
      positive("--vocab-size", model(&ModelConfig::vocab_size)),
      positive("--make-vocab-size-divisible-by", model(&ModelConfig::make_vocab_size_divisible_by)),
      section("model numerics", FlagKind::CompileTime),
      choice("--position-embedding-type", {"learned_absolute", "rope"},
             model(&ModelConfig::position_embedding_type)),
      flag("--use-rotary-position-embeddings", [](PlanConfig &) {}, // applied after parsing
           [](PlanConfig &) { return std::string("off"); }),
      number("--rotary-base", model(&ModelConfig::rotary_base)),
      number("--rotary-percent", model(&ModelConfig::rotary_percent)),
      setBool("--use-rope-scaling", model(&ModelConfig::use_rope_scaling)),
      number("--rope-scaling-factor", model(&ModelConfig::rope_scaling_factor)),
      choice("--normalization", {"LayerNorm", "RMSNorm"}, model(&ModelConfig::normalization)),
      number("--norm-epsilon", model(&ModelConfig::norm_epsilon)),
      setBool("--swiglu", model(&ModelConfig::swiglu)),
      setBool("--openai-gelu", model(&ModelConfig::openai_gelu)),
      // Selects the GELU Megatron then computes (erf instead of the fused tanh form).
      setBool("--no-bias-gelu-fusion", model(&ModelConfig::bias_gelu_fusion), false),
      setBool("--disable-bias-linear", model(&ModelConfig::add_bias_linear), false),
      setBool("--untie-embeddings-and-output-weights",
              model(&ModelConfig::untie_embeddings_and_output_weights)),
      number("--attention-dropout", model(&ModelConfig::attention_dropout)),
      number("--hidden-dropout", model(&ModelConfig::hidden_dropout)),
      // A data argument in Megatron; compile-time here (the model's doc_start input).
      setBool("--reset-attention-mask", model(&ModelConfig::reset_attention_mask)),
      number("--init-method-std", model(&ModelConfig::init_method_std)),

      section("parallelism", FlagKind::CompileTime),
      positive("--tensor-model-parallel-size",
               parallel(&ParallelConfig::tensor_model_parallel_size)),
      positive("--pipeline-model-parallel-size",
               parallel(&ParallelConfig::pipeline_model_parallel_size)),
      positive("--data-parallel-size", parallel(&ParallelConfig::data_parallel_size)),
      positive("--virtual-pipeline-model-parallel-size",
               parallel(&ParallelConfig::virtual_pipeline_model_parallel_size)),
      positive("--num-layers-per-virtual-pipeline-stage",
               parallel(&ParallelConfig::num_layers_per_virtual_pipeline_stage)),
      // Megatron's newer name of --virtual-pipeline-model-parallel-size.
      positive("--num-virtual-stages-per-pipeline-rank",
               parallel(&ParallelConfig::virtual_pipeline_model_parallel_size)),
      positive("--microbatch-group-size-per-vp-stage",
               parallel(&ParallelConfig::microbatch_group_size_per_vp_stage)),
      // trainc's (Megatron picks the schedule from the flags above).
      choice("--pipeline-schedule", {"1f1b", "interleaved", "zb-h1"},
             parallel(&ParallelConfig::pipeline_schedule)),
      setBool("--account-for-embedding-in-pipeline-split",
              parallel(&ParallelConfig::account_for_embedding_in_pipeline_split)),
      setBool("--account-for-loss-in-pipeline-split",
              parallel(&ParallelConfig::account_for_loss_in_pipeline_split)),
      positive("--decoder-first-pipeline-num-layers",
               parallel(&ParallelConfig::decoder_first_pipeline_num_layers)),
      positive("--decoder-last-pipeline-num-layers",
               parallel(&ParallelConfig::decoder_last_pipeline_num_layers)),
      setBool("--sequence-parallel", parallel(&ParallelConfig::sequence_parallel)),
      // Deprecated (ignored) in Megatron-LM, whose async dgrad all-reduce is always on; here it
      // keeps every tensor collective synchronous (trainc-tp-comm-overlap off).
      setBool("--no-async-tensor-model-parallel-allreduce",
              parallel(&ParallelConfig::async_tensor_model_parallel_allreduce), false),
      // Megatron's store_false dest overlap_p2p_comm: on by default, off without virtual stages
      // (finalize); off, the interleaved units receive synchronously (docs/design.md
      // "Pipeline parallelism").
      setBool("--no-overlap-p2p-communication", parallel(&ParallelConfig::overlap_p2p_comm),
              false),
      setBool("--use-distributed-optimizer", parallel(&ParallelConfig::use_distributed_optimizer)),
      setBool("--overlap-grad-reduce", parallel(&ParallelConfig::overlap_grad_reduce)),
      setBool("--overlap-param-gather", parallel(&ParallelConfig::overlap_param_gather)),
      setBool("--grad-reduce-in-bf16", parallel(&ParallelConfig::grad_reduce_in_bf16)),
      setBool("--tp-reduce-in-bf16", parallel(&ParallelConfig::tp_reduce_in_bf16)),
      positive("--ddp-bucket-size", parallel(&ParallelConfig::ddp_bucket_size)),

      section("training", FlagKind::CompileTime),
      positive("--micro-batch-size", training(&TrainingConfig::micro_batch_size)),
      positive("--global-batch-size", training(&TrainingConfig::global_batch_size)),
      // Megatron's nargs='*' then "expected the following format" (num_microbatches_calculator.py).
      {"--rampup-batch-size", Arity::OneOrMore,
       [](PlanConfig &c, StringRef flag, ArrayRef<StringRef> v) -> Error {
         if (v.size() != 3)
           return makeError("expected the following format: --rampup-batch-size <start batch "
                            "size> <batch size increment> <ramp-up samples>, got " +
                            Twine(v.size()) + " value" + (v.size() == 1 ? "" : "s"));
         c.training.rampup_batch_size.clear();
         for (StringRef s : v) {
           int64_t x;
           if (s.getAsInteger(10, x))
             return makeError(flag + " expects integers, got '" + s + "'");
           c.training.rampup_batch_size.push_back(x);
         }
         return Error::success();
       },
       "START INCR SAMPLES", [](PlanConfig &) { return std::string("none (constant)"); }},
      setBool("--decrease-batch-size-if-needed",
              training(&TrainingConfig::decrease_batch_size_if_needed)),
      flag("--bf16", [](PlanConfig &c) { c.training.params_dtype = "bf16"; },
           [](PlanConfig &) { return std::string("off (fp32)"); }),
      flag("--fp16", [](PlanConfig &c) { c.training.params_dtype = "fp16"; },
           [](PlanConfig &) { return std::string("off (fp32)"); }),
      choice("--optimizer", {"adam", "sgd"}, training(&TrainingConfig::optimizer)),
      number("--adam-beta1", training(&TrainingConfig::adam_beta1)),
      number("--adam-beta2", training(&TrainingConfig::adam_beta2)),
      number("--adam-eps", training(&TrainingConfig::adam_eps)),
      number("--clip-grad", training(&TrainingConfig::clip_grad)),
      positiveNumber("--loss-scale", training(&TrainingConfig::loss_scale),
                     "a static fp16 loss scale"),
      positiveNumber("--initial-loss-scale", training(&TrainingConfig::initial_loss_scale),
                     "the dynamic loss scale's start"),
      positiveNumber("--min-loss-scale", training(&TrainingConfig::min_loss_scale),
                     "the dynamic loss scale's floor"),
      positive("--loss-scale-window", training(&TrainingConfig::loss_scale_window)),
      positive("--hysteresis", training(&TrainingConfig::hysteresis)),
      withKind(number("--weight-decay", training(&TrainingConfig::weight_decay)),
               FlagKind::RunTimeDefault), // a device scalar trainrun writes every iteration
      setBool("--calculate-per-token-loss", training(&TrainingConfig::calculate_per_token_loss)),
      setBool("--no-calculate-per-token-loss", training(&TrainingConfig::calculate_per_token_loss),
              false),
      flag("--recompute-activations", [](PlanConfig &) {}, // applied after parsing
           [](PlanConfig &) { return std::string("off"); }),
      choice("--recompute-granularity", {"full", "selective"},
             training(&TrainingConfig::recompute_granularity)),
      choice("--recompute-method", {"uniform", "block"},
             training(&TrainingConfig::recompute_method)),
      positive("--recompute-num-layers", training(&TrainingConfig::recompute_num_layers)),
      {"--recompute-modules", Arity::OneOrMore,
       [](PlanConfig &c, StringRef, ArrayRef<StringRef> v) -> Error {
         c.training.recompute_modules.assign(v.begin(), v.end());
         return Error::success();
       },
       "MODULE...", [](PlanConfig &) { return std::string("core_attn"); }},
      // CUDA graphs (docs/cuda.md): local + scope full_iteration captures the whole iteration.
      choice("--cuda-graph-impl", {"none", "local", "transformer_engine"},
             training(&TrainingConfig::cuda_graph_impl)),
      {"--cuda-graph-scope", Arity::OneOrMore,
       [](PlanConfig &c, StringRef, ArrayRef<StringRef> v) -> Error {
         c.training.cuda_graph_scope.assign(v.begin(), v.end());
         return Error::success();
       },
       "SCOPE...", [](PlanConfig &) { return std::string("none"); }},
      nonNegative("--cuda-graph-warmup-steps", training(&TrainingConfig::cuda_graph_warmup_steps)),
      // trainc's: the compiler picks the recompute set whose planned arena fits.
      positive("--recompute-memory-budget", training(&TrainingConfig::recompute_memory_budget)),

      section("run-time defaults (recorded in the plan; trainrun flags override them)",
              FlagKind::RunTimeDefault),
      {"--lr", Arity::One,
       [](PlanConfig &c, StringRef flag, ArrayRef<StringRef> v) -> Error {
         double value;
         if (Error e = parseNumber(flag, v[0], value))
           return e;
         c.runtime.lr = value;
         return Error::success();
       },
       "X", [](PlanConfig &) { return std::string("none (required here or by trainrun)"); }},
      number("--min-lr", runtime(&RuntimeDefaults::min_lr)),
      optionalNumber("--start-weight-decay", &RuntimeDefaults::start_weight_decay),
      optionalNumber("--end-weight-decay", &RuntimeDefaults::end_weight_decay),
      choice("--weight-decay-incr-style", {"constant", "linear", "cosine"},
             runtime(&RuntimeDefaults::weight_decay_incr_style)),
      choice("--lr-decay-style", {"constant", "linear", "cosine", "inverse-square-root"},
             runtime(&RuntimeDefaults::lr_decay_style)),
      nonNegative("--lr-warmup-iters", runtime(&RuntimeDefaults::lr_warmup_iters)),
      nonNegative("--lr-warmup-samples", runtime(&RuntimeDefaults::lr_warmup_samples)),
      nonNegative("--lr-decay-iters", runtime(&RuntimeDefaults::lr_decay_iters)),
      nonNegative("--lr-decay-samples", runtime(&RuntimeDefaults::lr_decay_samples)),
      positive("--train-iters", runtime(&RuntimeDefaults::train_iters)),
      positive("--train-samples", runtime(&RuntimeDefaults::train_samples)),
      {"--data-path", Arity::OneOrMore,
       [](PlanConfig &c, StringRef, ArrayRef<StringRef> v) -> Error {
         c.runtime.data_path.assign(v.begin(), v.end());
         return Error::success();
       },
       "PATH...", [](PlanConfig &) { return std::string("none"); }},
      setBool("--mock-data", runtime(&RuntimeDefaults::mock_data)),
      setBool("--check-for-nan-in-loss-and-grad",
              runtime(&RuntimeDefaults::check_for_nan_in_loss_and_grad)),
      setBool("--no-check-for-nan-in-loss-and-grad",
              runtime(&RuntimeDefaults::check_for_nan_in_loss_and_grad), false),
      string("--split", runtime(&RuntimeDefaults::split), "A,B,C"),
      string("--tokenizer-type", runtime(&RuntimeDefaults::tokenizer_type), "NAME"),
      string("--tokenizer-model", runtime(&RuntimeDefaults::tokenizer_model), "FILE"),
      string("--vocab-file", runtime(&RuntimeDefaults::vocab_file), "FILE"),
      string("--merge-file", runtime(&RuntimeDefaults::merge_file), "FILE"),
      positive("--log-interval", runtime(&RuntimeDefaults::log_interval)),
      positive("--eval-interval", runtime(&RuntimeDefaults::eval_interval)),
      nonNegative("--eval-iters", runtime(&RuntimeDefaults::eval_iters)),
      positive("--save-interval", runtime(&RuntimeDefaults::save_interval)),
      string("--save", runtime(&RuntimeDefaults::save), "DIR"),
      string("--load", runtime(&RuntimeDefaults::load), "DIR"),
      nonNegative("--seed", runtime(&RuntimeDefaults::seed)),

      section("logging and TensorBoard (run-time defaults recorded in the plan)",
              FlagKind::RunTimeDefault),
      setBool("--log-throughput", runtime(&RuntimeDefaults::log_throughput)),
      ignored("--log-progress"),
      setBool("--log-params-norm", runtime(&RuntimeDefaults::log_params_norm)),
      setBool("--log-num-zeros-in-grad", runtime(&RuntimeDefaults::log_num_zeros_in_grad)),
      // TensorBoard: run-time defaults the plan records (trainrun may override them).
      setBool("--log-timers-to-tensorboard", runtime(&RuntimeDefaults::log_timers_to_tensorboard)),
      setBool("--log-validation-ppl-to-tensorboard",
              runtime(&RuntimeDefaults::log_validation_ppl_to_tensorboard)),
      setBool("--log-memory-to-tensorboard", runtime(&RuntimeDefaults::log_memory_to_tensorboard)),
      setBool("--log-world-size-to-tensorboard",
              runtime(&RuntimeDefaults::log_world_size_to_tensorboard)),
      setBool("--log-batch-size-to-tensorboard",
              runtime(&RuntimeDefaults::log_batch_size_to_tensorboard)),
      setBool("--no-log-learning-rate-to-tensorboard",
              runtime(&RuntimeDefaults::log_learning_rate_to_tensorboard), false),
      setBool("--no-log-loss-scale-to-tensorboard",
              runtime(&RuntimeDefaults::log_loss_scale_to_tensorboard), false),
      string("--tensorboard-dir", runtime(&RuntimeDefaults::tensorboard_dir), "DIR"),
      positive("--tensorboard-log-interval", runtime(&RuntimeDefaults::tensorboard_log_interval)),
      ignored("--tensorboard-queue-size", Arity::One), // events are written synchronously
      ignored("--wandb-project", Arity::One),
      ignored("--wandb-exp-name", Arity::One),
      ignored("--wandb-save-dir", Arity::One),
      {"--timing-log-level", Arity::One,
       [](PlanConfig &c, StringRef flag, ArrayRef<StringRef> v) -> Error {
         if (v[0] != "0" && v[0] != "1" && v[0] != "2")
           return makeError(flag + " expects one of 0, 1, 2, got '" + v[0] + "'");
         c.runtime.timing_log_level = v[0][0] - '0';
         return Error::success();
       },
       "{0,1,2}", [](PlanConfig &c) { return std::to_string(c.runtime.timing_log_level); }},
      choice("--timing-log-option", {"max", "minmax", "all"},
             runtime(&RuntimeDefaults::timing_log_option)),
      ignored("--profile"),
      ignored("--use-pytorch-profiler"),
      ignored("--profile-step-start", Arity::One),
      ignored("--profile-step-end", Arity::One),
      ignored("--profile-ranks", Arity::OneOrMore),
      ignored("--record-memory-history"),
      ignored("--memory-snapshot-path", Arity::One),
      section("accepted and ignored (Megatron implementation switches; profiling)",
              FlagKind::Ignored),
      // Megatron implementation switches: trainc compiles its own kernels, so these choose
      // nothing (the computed function is the same).
      // DDP switches whose behaviour is trainc's fixed choice: gradients always accumulate in
      // fp32 (main_grad) and reduce in fp32 unless --grad-reduce-in-bf16, the DP average is applied after the sum (legacy mode) or
      // replaced by the global token count (default).
      ignored("--accumulate-allreduce-grads-in-fp32"),
      ignored("--ddp-average-in-collective"),
      ignored("--use-mcore-models"),
      ignored("--transformer-impl", Arity::One),
      ignored("--use-flash-attn"),
      ignored("--no-masked-softmax-fusion"),
      ignored("--no-bias-swiglu-fusion"),
      ignored("--no-bias-dropout-fusion"),
      ignored("--no-rope-fusion"),
      ignored("--no-gradient-accumulation-fusion"),
      ignored("--no-persist-layer-norm"),
  });
  return table;
}

const FlagSpec *lookupFlag(StringRef name) {
  for (const FlagSpec &spec : flagTable())
    if (spec.name == name)
      return &spec;
  return nullptr;
}

} // namespace

std::string nearestMegatronFlag(StringRef name) {
  StringRef best;
  unsigned bestDistance = ~0u;
  for (const FlagSpec &f : flagTable()) {
    unsigned d = name.edit_distance(f.name, /*AllowReplacements=*/true, bestDistance);
    if (d < bestDistance) {
      bestDistance = d;
      best = f.name;
    }
  }
  if (!best.empty() && bestDistance <= std::max<size_t>(2, name.size() / 5))
    return best.str();
  return "";
}

std::vector<FlagInfo> megatronFlagTable() {
  std::vector<FlagInfo> out;
  for (const FlagSpec &f : flagTable()) {
    PlanConfig defaults; // Megatron's defaults, before finalize()
    out.push_back({f.name.str(), f.group, *f.kind, f.value, f.show ? f.show(defaults) : ""});
  }
  // Defaults that a default PlanConfig cannot show: required values and finalize()'s rules.
  static const std::pair<const char *, const char *> derived[] = {
      {"--num-layers", "required (or --preset / --hf-config)"},
      {"--hidden-size", "required (or --preset / --hf-config)"},
      {"--num-attention-heads", "required (or --preset / --hf-config)"},
      {"--seq-length", "required (or --preset / --hf-config)"},
      {"--vocab-size", "required (or --preset / --hf-config)"},
      {"--micro-batch-size", "required"},
      {"--ffn-hidden-size", "4 x hidden (SwiGLU: 8 x hidden / 3, rounded down to a multiple of 64)"},
      {"--num-query-groups", "num-attention-heads"},
      {"--kv-channels", "hidden / heads"},
      {"--max-position-embeddings", "seq-length"},
      {"--global-batch-size", "micro-batch-size x data-parallel-size"},
      {"--ddp-bucket-size", "max(40000000, 1000000 x data-parallel-size)"},
      {"--save-interval", "none"},
      {"--train-iters", "none (this or --train-samples, here or in trainrun)"},
      {"--train-samples", "none"},
      {"--recompute-num-layers", "none"},
      {"--recompute-memory-budget", "none (bytes of a rank's arena; the compiler chooses)"},
      {"--loss-scale", "none (dynamic)"},
      {"--virtual-pipeline-model-parallel-size", "none"},
      {"--num-layers-per-virtual-pipeline-stage", "none"},
      {"--num-virtual-stages-per-pipeline-rank", "none"},
      {"--microbatch-group-size-per-vp-stage", "none (--pipeline-model-parallel-size)"},
      {"--pipeline-schedule", "none (interleaved with virtual stages, else 1f1b at pp > 1)"},
  };
  for (FlagInfo &f : out)
    for (auto [name, text] : derived)
      if (f.name == name)
        f.defaultValue = text;
  return out;
}

std::string megatronFlagHelp() {
  std::string out, group;
  for (const FlagInfo &f : megatronFlagTable()) {
    if (f.group != group) {
      group = f.group;
      out += "\n" + group + ":\n";
    }
    std::string head = "  " + f.name + (f.value.empty() ? "" : " " + f.value);
    if (head.size() < 46)
      head.resize(46, ' ');
    else
      head += "  ";
    out += head;
    if (!f.defaultValue.empty())
      out += "default: " + f.defaultValue + "  ";
    out += f.kind == FlagKind::CompileTime      ? "[compile-time]"
           : f.kind == FlagKind::RunTimeDefault ? "[run-time]"
                                                : "[ignored]";
    out += "\n";
  }
  return out;
}

llvm::Expected<PlanConfig> parseMegatronFlags(ArrayRef<std::string> args,
                                              const FlagParseOptions &options) {
  PlanConfig config;
  if (options.base_plan)
    config = *options.base_plan;
  if (options.base_model)
    config.model = *options.base_model;
  if (options.base_micro_batch_size)
    config.training.micro_batch_size = *options.base_micro_batch_size;
  llvm::StringSet<> seen;

  for (size_t i = 0; i < args.size(); ++i) {
    StringRef arg = args[i];
    if (!arg.starts_with("-"))
      return makeError("unexpected argument '" + arg + "'");
    auto [name, inlineValue] = arg.split('=');
    const bool hasInlineValue = name.size() < arg.size();
    const FlagSpec *spec = lookupFlag(name);
    if (!spec) {
      std::string best = nearestMegatronFlag(name);
      if (!best.empty())
        return makeError("unknown flag " + name + " (did you mean " + best + "?)");
      return makeError("unknown flag " + name);
    }

    llvm::SmallVector<StringRef, 4> values;
    auto isValue = [&](size_t j) {
      return j < args.size() && !StringRef(args[j]).starts_with("--");
    };
    switch (spec->arity) {
    case Arity::None:
      if (hasInlineValue)
        return makeError(name + " does not take a value");
      break;
    case Arity::One:
      if (hasInlineValue)
        values.push_back(inlineValue);
      else if (isValue(i + 1))
        values.push_back(args[++i]);
      if (values.empty() || values[0].empty())
        return makeError(name + " expects a value");
      break;
    case Arity::OneOrMore:
      if (hasInlineValue)
        values.push_back(inlineValue);
      else
        while (isValue(i + 1))
          values.push_back(args[++i]);
      if (values.empty() || llvm::any_of(values, [](StringRef v) { return v.empty(); }))
        return makeError(name + " expects one or more values");
      break;
    }
    seen.insert(name);
    if (Error e = spec->apply(config, name, values))
      return std::move(e);
  }

  // Megatron applies these after parsing, whatever the order on the command line.
  if (seen.contains("--use-rotary-position-embeddings"))
    config.model.position_embedding_type = "rope";
  if (seen.contains("--recompute-activations"))
    config.training.recompute_granularity = "selective";

  std::vector<StringRef> required = {"--micro-batch-size"};
  if (!options.base_model)
    required = {"--num-layers", "--hidden-size", "--num-attention-heads",
                "--seq-length", "--vocab-size",  "--micro-batch-size"};
  if (options.base_micro_batch_size)
    llvm::erase(required, StringRef("--micro-batch-size"));
  for (StringRef name : required)
    if (!seen.contains(name))
      return makeError("missing required flag " + name);
  for (auto [a, b] : {std::pair<StringRef, StringRef>{"--bf16", "--fp16"},
                      {"--calculate-per-token-loss", "--no-calculate-per-token-loss"}})
    if (seen.contains(a) && seen.contains(b))
      return makeError(a + " and " + b + " are mutually exclusive");

  // Megatron's arguments.py: start/end weight decay go with a non-constant increment style (the
  // same rule and message as trainrun's).
  const RuntimeDefaults &rd = config.runtime;
  if (rd.weight_decay_incr_style == "constant" && (rd.start_weight_decay || rd.end_weight_decay))
    return makeError("--start-weight-decay and --end-weight-decay need --weight-decay-incr-style "
                     "linear or cosine (with constant, --weight-decay applies throughout)");
  if (rd.weight_decay_incr_style != "constant" &&
      (!rd.start_weight_decay || !rd.end_weight_decay))
    return makeError("--weight-decay-incr-style " + rd.weight_decay_incr_style +
                     " needs both --start-weight-decay and --end-weight-decay");
  if (Error e = config.finalize())
    return std::move(e);
  if (options.check_supported)
    if (Error e = checkSupported(config))
      return std::move(e);
  return config;
}

} // namespace trainc::config
