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

#include <cmath>
#include <functional>

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
};

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
FlagSpec flag(StringRef name, std::function<void(PlanConfig &)> set) {
  return {name, Arity::None, [set](PlanConfig &c, StringRef, ArrayRef<StringRef>) -> Error {
            set(c);
            return Error::success();
          }};
}

/// A boolean switch that sets `field` to `value`.
FlagSpec setBool(StringRef name, Field<bool> field, bool value = true) {
  return flag(name, [field, value](PlanConfig &c) { field(c) = value; });
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
          }};
}

FlagSpec string(StringRef name, Field<std::string> field) {
  return {name, Arity::One, [field](PlanConfig &c, StringRef, ArrayRef<StringRef> v) -> Error {
            field(c) = v[0].str();
            return Error::success();
          }};
}

FlagSpec choice(StringRef name, std::vector<StringRef> choices, Field<std::string> field) {
  return {name, Arity::One,
          [field, choices](PlanConfig &c, StringRef flag, ArrayRef<StringRef> v) -> Error {
            if (!llvm::is_contained(choices, v[0]))
              return makeError(flag + " expects one of " + llvm::join(choices, ", ") + ", got '" +
                               v[0] + "'");
            field(c) = v[0].str();
            return Error::success();
          }};
}

/// Accepted, recorded in ignoredFlags, otherwise without effect.
FlagSpec ignored(StringRef name, Arity arity = Arity::None) {
  return {name, arity, [](PlanConfig &c, StringRef flag, ArrayRef<StringRef>) -> Error {
            c.ignoredFlags.push_back(flag.str());
            return Error::success();
          }};
}

const std::vector<FlagSpec> &flagTable() {
  static const std::vector<FlagSpec> table = {
      // Model shape.
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
      // Model numerics.
      choice("--position-embedding-type", {"learned_absolute", "rope"},
             model(&ModelConfig::position_embedding_type)),
      flag("--use-rotary-position-embeddings", [](PlanConfig &) {}), // applied after parsing
      number("--rotary-base", model(&ModelConfig::rotary_base)),
      number("--rotary-percent", model(&ModelConfig::rotary_percent)),
      setBool("--use-rope-scaling", model(&ModelConfig::use_rope_scaling)),
      number("--rope-scaling-factor", model(&ModelConfig::rope_scaling_factor)),
      choice("--normalization", {"LayerNorm", "RMSNorm"}, model(&ModelConfig::normalization)),
      number("--norm-epsilon", model(&ModelConfig::norm_epsilon)),
      setBool("--swiglu", model(&ModelConfig::swiglu)),
      setBool("--openai-gelu", model(&ModelConfig::openai_gelu)),
      setBool("--disable-bias-linear", model(&ModelConfig::add_bias_linear), false),
      setBool("--untie-embeddings-and-output-weights",
              model(&ModelConfig::untie_embeddings_and_output_weights)),
      number("--attention-dropout", model(&ModelConfig::attention_dropout)),
      number("--hidden-dropout", model(&ModelConfig::hidden_dropout)),
      number("--init-method-std", model(&ModelConfig::init_method_std)),

      // Parallelism.
      positive("--tensor-model-parallel-size",
               parallel(&ParallelConfig::tensor_model_parallel_size)),
      positive("--pipeline-model-parallel-size",
               parallel(&ParallelConfig::pipeline_model_parallel_size)),
      positive("--data-parallel-size", parallel(&ParallelConfig::data_parallel_size)),
      positive("--virtual-pipeline-model-parallel-size",
               parallel(&ParallelConfig::virtual_pipeline_model_parallel_size)),
      positive("--num-layers-per-virtual-pipeline-stage",
               parallel(&ParallelConfig::num_layers_per_virtual_pipeline_stage)),
      setBool("--sequence-parallel", parallel(&ParallelConfig::sequence_parallel)),
      setBool("--use-distributed-optimizer", parallel(&ParallelConfig::use_distributed_optimizer)),
      setBool("--overlap-grad-reduce", parallel(&ParallelConfig::overlap_grad_reduce)),
      setBool("--overlap-param-gather", parallel(&ParallelConfig::overlap_param_gather)),
      positive("--ddp-bucket-size", parallel(&ParallelConfig::ddp_bucket_size)),

      // Training.
      positive("--micro-batch-size", training(&TrainingConfig::micro_batch_size)),
      positive("--global-batch-size", training(&TrainingConfig::global_batch_size)),
      flag("--bf16", [](PlanConfig &c) { c.training.params_dtype = "bf16"; }),
      flag("--fp16", [](PlanConfig &c) { c.training.params_dtype = "fp16"; }),
      choice("--optimizer", {"adam", "sgd"}, training(&TrainingConfig::optimizer)),
      number("--adam-beta1", training(&TrainingConfig::adam_beta1)),
      number("--adam-beta2", training(&TrainingConfig::adam_beta2)),
      number("--adam-eps", training(&TrainingConfig::adam_eps)),
      number("--clip-grad", training(&TrainingConfig::clip_grad)),
      number("--weight-decay", training(&TrainingConfig::weight_decay)),
      setBool("--calculate-per-token-loss", training(&TrainingConfig::calculate_per_token_loss)),
      setBool("--no-calculate-per-token-loss", training(&TrainingConfig::calculate_per_token_loss),
              false),
      flag("--recompute-activations", [](PlanConfig &) {}), // applied after parsing
      choice("--recompute-granularity", {"full", "selective"},
             training(&TrainingConfig::recompute_granularity)),
      choice("--recompute-method", {"uniform", "block"},
             training(&TrainingConfig::recompute_method)),
      positive("--recompute-num-layers", training(&TrainingConfig::recompute_num_layers)),

      // Run-time defaults.
      {"--lr", Arity::One,
       [](PlanConfig &c, StringRef flag, ArrayRef<StringRef> v) -> Error {
         double value;
         if (Error e = parseNumber(flag, v[0], value))
           return e;
         c.runtime.lr = value;
         return Error::success();
       }},
      number("--min-lr", runtime(&RuntimeDefaults::min_lr)),
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
       }},
      setBool("--mock-data", runtime(&RuntimeDefaults::mock_data)),
      setBool("--check-for-nan-in-loss-and-grad",
              runtime(&RuntimeDefaults::check_for_nan_in_loss_and_grad)),
      setBool("--no-check-for-nan-in-loss-and-grad",
              runtime(&RuntimeDefaults::check_for_nan_in_loss_and_grad), false),
      string("--split", runtime(&RuntimeDefaults::split)),
      string("--tokenizer-type", runtime(&RuntimeDefaults::tokenizer_type)),
      string("--tokenizer-model", runtime(&RuntimeDefaults::tokenizer_model)),
      string("--vocab-file", runtime(&RuntimeDefaults::vocab_file)),
      string("--merge-file", runtime(&RuntimeDefaults::merge_file)),
      positive("--log-interval", runtime(&RuntimeDefaults::log_interval)),
      positive("--eval-interval", runtime(&RuntimeDefaults::eval_interval)),
      nonNegative("--eval-iters", runtime(&RuntimeDefaults::eval_iters)),
      positive("--save-interval", runtime(&RuntimeDefaults::save_interval)),
      string("--save", runtime(&RuntimeDefaults::save)),
      string("--load", runtime(&RuntimeDefaults::load)),
      nonNegative("--seed", runtime(&RuntimeDefaults::seed)),

      // Logging and profiling only.
      setBool("--log-throughput", runtime(&RuntimeDefaults::log_throughput)),
      ignored("--log-progress"),
      ignored("--log-params-norm"),
      ignored("--log-num-zeros-in-grad"),
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
      string("--tensorboard-dir", runtime(&RuntimeDefaults::tensorboard_dir)),
      positive("--tensorboard-log-interval", runtime(&RuntimeDefaults::tensorboard_log_interval)),
      ignored("--tensorboard-queue-size", Arity::One), // events are written synchronously
      ignored("--wandb-project", Arity::One),
      ignored("--wandb-exp-name", Arity::One),
      ignored("--wandb-save-dir", Arity::One),
      ignored("--timing-log-level", Arity::One),
      ignored("--timing-log-option", Arity::One),
      ignored("--profile"),
      ignored("--use-pytorch-profiler"),
      ignored("--profile-step-start", Arity::One),
      ignored("--profile-step-end", Arity::One),
      ignored("--profile-ranks", Arity::OneOrMore),
      ignored("--record-memory-history"),
      ignored("--memory-snapshot-path", Arity::One),
      // Megatron implementation switches: trainc compiles its own kernels, so these choose
      // nothing (the computed function is the same).
      // DDP switches whose behaviour is trainc's fixed choice: gradients always accumulate and
      // reduce in fp32 (main_grad), the DP average is applied after the sum (legacy mode) or
      // replaced by the global token count (default).
      ignored("--accumulate-allreduce-grads-in-fp32"),
      ignored("--ddp-average-in-collective"),
      ignored("--use-mcore-models"),
      ignored("--transformer-impl", Arity::One),
      ignored("--use-flash-attn"),
      ignored("--no-masked-softmax-fusion"),
      ignored("--no-bias-gelu-fusion"),
      ignored("--no-bias-swiglu-fusion"),
      ignored("--no-bias-dropout-fusion"),
      ignored("--no-rope-fusion"),
      ignored("--no-gradient-accumulation-fusion"),
      ignored("--no-persist-layer-norm"),
  };
  return table;
}

const FlagSpec *lookupFlag(StringRef name) {
  for (const FlagSpec &spec : flagTable())
    if (spec.name == name)
      return &spec;
  return nullptr;
}

} // namespace

llvm::Expected<PlanConfig> parseMegatronFlags(ArrayRef<std::string> args,
                                              const FlagParseOptions &options) {
  PlanConfig config;
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
      // The nearest accepted flag by edit distance, when it is near enough to be a typo.
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

  if (Error e = config.finalize())
    return std::move(e);
  if (options.check_supported)
    if (Error e = checkSupported(config))
      return std::move(e);
  return config;
}

} // namespace trainc::config
