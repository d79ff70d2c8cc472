//===- ModelConfig.cpp - Derivations, checks and presets -----------------===//
//
// The derivations follow Megatron-LM's megatron/training/arguments.py (validate_args) and
// megatron/training/tokenizer/tokenizer.py (_vocab_size_with_padding).
//
//===----------------------------------------------------------------------===//

#include "frontends/ModelConfig.h"
#include "frontends/Support.h"
#include "runtime/control/BatchRampup.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>

using llvm::Error;
using llvm::StringRef;
using llvm::Twine;

namespace trainc::config {

std::string detail::formatNumber(double value) {
  char buffer[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value)
      break;
  }
  return buffer;
}

using detail::formatNumber;
using detail::makeError;

namespace {

/// Sizes that enter products (ffn from hidden, micro x dp, layers per chunk, ...) stay far
/// from int64 overflow.
constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxLayers = 65536;
constexpr double kMaxTensorElements = double(int64_t(1) << 40);
constexpr double kMaxParameters = double(int64_t(1) << 48);
constexpr int64_t kMaxMicrobatches = int64_t(1) << 20;
constexpr int64_t kMaxRanks = int64_t(1) << 20;

/// `value` must be in [1, kMaxSize], or 0 when `zeroMeansDerive`.
Error checkSize(StringRef flag, int64_t value, bool zeroMeansDerive = false) {
  if (value < 0 || (value == 0 && !zeroMeansDerive))
    return makeError(flag + " must be positive, got " + Twine(value));
  if (value > kMaxSize)
    return makeError(flag + " " + Twine(value) + " is too large (at most " + Twine(kMaxSize) + ")");
  return Error::success();
}

Error checkNonNegative(StringRef flag, int64_t value) {
  if (value < 0)
    return makeError(flag + " must be non-negative, got " + Twine(value));
  return Error::success();
}

Error checkPositive(StringRef flag, double value) {
  if (!(value > 0) || !std::isfinite(value))
    return makeError(flag + " must be positive, got " + formatNumber(value));
  return Error::success();
}

Error checkNonNegative(StringRef flag, double value) {
  if (!(value >= 0) || !std::isfinite(value))
    return makeError(flag + " must be non-negative, got " + formatNumber(value));
  return Error::success();
}

/// `value` in [0, 1): probabilities and Adam betas.
Error checkUnitInterval(StringRef flag, double value) {
  if (!(value >= 0 && value < 1))
    return makeError(flag + " must be in [0, 1), got " + formatNumber(value));
  return Error::success();
}

Error checkChoice(StringRef what, StringRef value, llvm::ArrayRef<StringRef> choices) {
  if (llvm::is_contained(choices, value))
    return Error::success();
  // An empty choice means "unset"; it is accepted but not listed.
  llvm::SmallVector<StringRef, 8> named;
  llvm::copy_if(choices, std::back_inserter(named), [](StringRef c) { return !c.empty(); });
  return makeError(what + " '" + value + "' is not one of " + llvm::join(named, ", "));
}

/// Megatron's --split: up to three non-negative weights separated by ',' or '/' (Megatron reads
/// the numbers of "98,2,0" and "98/2/0" alike), not all zero. The same syntax as trainrun's
/// parser (runtime/control/Dataset.cpp, parseSplitWeights).
Error checkSplit(StringRef split) {
  llvm::SmallVector<StringRef, 4> parts;
  for (size_t start = 0;;) {
    size_t sep = split.find_first_of(",/", start);
    parts.push_back(split.slice(start, sep));
    if (sep == StringRef::npos)
      break;
    start = sep + 1;
  }
  double sum = 0;
  bool ok = parts.size() <= 3;
  for (StringRef part : parts) {
    double weight;
    part = part.trim();
    if (part.empty() || part.getAsDouble(weight) || !(weight >= 0) || !std::isfinite(weight)) {
      ok = false;
      break;
    }
    sum += weight;
  }
  if (!ok || !(sum > 0))
    return makeError("--split expects up to three non-negative weights separated by ',' or '/' "
                     "with a positive sum, got '" +
                     split + "'");
  return Error::success();
}

std::string str(bool value) { return value ? "true" : "false"; }
std::string str(int64_t value) { return std::to_string(value); }
std::string str(double value) { return formatNumber(value); }

} // namespace

//===----------------------------------------------------------------------===//
// ModelConfig
//===----------------------------------------------------------------------===//

Error ModelConfig::finalize(int64_t tensor_model_parallel_size) {
  const int64_t tp = tensor_model_parallel_size;
  if (Error e = checkSize("--tensor-model-parallel-size", tp))
    return e;
  if (Error e = checkChoice("model family", family, {"", "gpt", "llama"}))
    return e;
  for (auto [flag, value] : {std::pair<StringRef, int64_t>{"--num-layers", num_layers},
                             {"--hidden-size", hidden_size},
                             {"--num-attention-heads", num_attention_heads},
                             {"--seq-length", seq_length},
                             {"--vocab-size", vocab_size},
                             {"--make-vocab-size-divisible-by", make_vocab_size_divisible_by}})
    if (Error e = checkSize(flag, value))
      return e;
  for (auto [flag, value] : {std::pair<StringRef, int64_t>{"--ffn-hidden-size", ffn_hidden_size},
                             {"--num-query-groups", num_query_groups},
                             {"--kv-channels", kv_channels},
                             {"--max-position-embeddings", max_position_embeddings}})
    if (Error e = checkSize(flag, value, /*zeroMeansDerive=*/true))
      return e;
  if (Error e = checkChoice("--position-embedding-type", position_embedding_type,
                            {"learned_absolute", "rope"}))
    return e;
  if (Error e = checkChoice("--normalization", normalization, {"LayerNorm", "RMSNorm"}))
    return e;
  const bool rope = position_embedding_type == "rope";

  // Positions. trainc defaults --max-position-embeddings to --seq-length (Megatron requires it
  // for learned absolute positions).
  if (max_position_embeddings == 0)
    max_position_embeddings = seq_length;
  if (!rope && seq_length > max_position_embeddings)
    return makeError("--seq-length " + Twine(seq_length) + " is greater than " +
                     "--max-position-embeddings " + Twine(max_position_embeddings) +
                     " (learned_absolute position embeddings have one row per position)");

  // Attention heads (arguments.py: kv_channels; attention.py: heads per query group).
  if (kv_channels == 0) {
    if (hidden_size % num_attention_heads != 0)
      return makeError("--hidden-size " + Twine(hidden_size) + " is not divisible by " +
                       "--num-attention-heads " + Twine(num_attention_heads));
    kv_channels = hidden_size / num_attention_heads;
  }
  if (group_query_attention) {
    if (num_query_groups == 0)
      num_query_groups = 1;
    if (num_attention_heads % num_query_groups != 0)
      return makeError("--num-attention-heads " + Twine(num_attention_heads) +
                       " is not divisible by --num-query-groups " + Twine(num_query_groups));
  } else {
    // Megatron ignores --num-query-groups without --group-query-attention; trainc refuses a
    // value that would be silently dropped.
    if (num_query_groups != 0 && num_query_groups != num_attention_heads)
      return makeError("--num-query-groups " + Twine(num_query_groups) +
                       " requires --group-query-attention");
    num_query_groups = num_attention_heads;
  }

  // MLP.
  if (swiglu && openai_gelu)
    return makeError("--openai-gelu and --swiglu are mutually exclusive");
  gelu_tanh = !swiglu && (openai_gelu || (bias_gelu_fusion && add_bias_linear));
  if (ffn_hidden_size == 0) {
    // int((4 * h * 2 / 3) / 64) * 64 in exact integer arithmetic.
    ffn_hidden_size = swiglu ? (8 * hidden_size) / 192 * 64 : 4 * hidden_size;
    if (ffn_hidden_size == 0)
      return makeError("--swiglu with --hidden-size " + Twine(hidden_size) +
                       " gives Megatron's default ffn size int((4 * " + Twine(hidden_size) +
                       " * 2 / 3) / 64) * 64 = 0; pass --ffn-hidden-size");
  }

  // Rotary embeddings (Megatron's RotaryEmbedding rotates int(kv_channels * rotary_percent)
  // channels in pairs).
  if (rope) {
    if (!(rotary_percent > 0 && rotary_percent <= 1))
      return makeError("--rotary-percent must be in (0, 1], got " + formatNumber(rotary_percent));
    if (Error e = checkPositive("--rotary-base", rotary_base))
      return e;
    auto rotaryChannels = static_cast<int64_t>(static_cast<double>(kv_channels) * rotary_percent);
    if (rotaryChannels == 0 || rotaryChannels % 2 != 0)
      return makeError("--rotary-percent " + formatNumber(rotary_percent) + " of --kv-channels " +
                       Twine(kv_channels) + " gives " + Twine(rotaryChannels) +
                       " rotary channels; RoPE needs a positive even number");
    if (use_rope_scaling)
      if (Error e = checkPositive("--rope-scaling-factor", rope_scaling_factor))
        return e;
  } else if (use_rope_scaling) {
    return makeError("--use-rope-scaling requires --position-embedding-type rope");
  }

  if (Error e = checkPositive("--norm-epsilon", norm_epsilon))
    return e;
  if (Error e = checkUnitInterval("--attention-dropout", attention_dropout))
    return e;
  if (Error e = checkUnitInterval("--hidden-dropout", hidden_dropout))
    return e;
  if (Error e = checkPositive("--init-method-std", init_method_std))
    return e;

  if (family.empty())
    family = rope && normalization == "RMSNorm" && swiglu ? "llama" : "gpt";

  // _vocab_size_with_padding.
  const int64_t multiple = make_vocab_size_divisible_by * tp;
  padded_vocab_size = (vocab_size + multiple - 1) / multiple * multiple;

  // Sizes the compiler and runtime can hold (faults issue, item 6), in double so that nothing
  // overflows: every parameter tensor at most 2^40 elements, the model at most 2^48 parameters,
  // and at most 65536 layers (programs hold one call per layer).
  if (num_layers > kMaxLayers)
    return makeError("--num-layers " + Twine(num_layers) + " is more than " + Twine(kMaxLayers) +
                     " layers");
  const double h = double(hidden_size), fc1 = double(swiglu ? 2 * ffn_hidden_size : ffn_hidden_size);
  const double q = double(num_attention_heads) * double(kv_channels);
  struct Tensor {
    const char *flags;
    double numel;
  };
  for (Tensor t : {Tensor{"--hidden-size x --padded vocabulary size", h * double(padded_vocab_size)},
                   Tensor{"--hidden-size x --ffn-hidden-size", h * fc1},
                   Tensor{"--hidden-size x --num-attention-heads x --kv-channels", h * q},
                   Tensor{"--hidden-size x --max-position-embeddings",
                          h * double(max_position_embeddings)}})
    if (t.numel > kMaxTensorElements)
      return makeError(t.flags + Twine(" gives a weight of ") + formatNumber(t.numel) +
                       " elements, more than 2^40");
  const double perLayer = 2 * h * q + 2 * h * double(num_query_groups) * double(kv_channels) +
                          2 * h * fc1 + 4 * h;
  const double total = double(num_layers) * perLayer + 2 * h * double(padded_vocab_size);
  if (total > kMaxParameters)
    return makeError("the model has about " + formatNumber(total) +
                     " parameters (--num-layers x the layer's, plus the embeddings), more than "
                     "2^48");
  return Error::success();
}

KeyValues ModelConfig::toKeyValues() const {
  return {
      {"family", family},
      {"num_layers", str(num_layers)},
      {"hidden_size", str(hidden_size)},
      {"ffn_hidden_size", str(ffn_hidden_size)},
      {"num_attention_heads", str(num_attention_heads)},
      {"group_query_attention", str(group_query_attention)},
      {"num_query_groups", str(num_query_groups)},
      {"kv_channels", str(kv_channels)},
      {"seq_length", str(seq_length)},
      {"max_position_embeddings", str(max_position_embeddings)},
      {"vocab_size", str(vocab_size)},
      {"make_vocab_size_divisible_by", str(make_vocab_size_divisible_by)},
      {"padded_vocab_size", str(padded_vocab_size)},
      {"position_embedding_type", position_embedding_type},
      {"rotary_base", str(rotary_base)},
      {"rotary_percent", str(rotary_percent)},
      {"use_rope_scaling", str(use_rope_scaling)},
      {"rope_scaling_factor", str(rope_scaling_factor)},
      {"normalization", normalization},
      {"norm_epsilon", str(norm_epsilon)},
      {"swiglu", str(swiglu)},
      {"openai_gelu", str(openai_gelu)},
      {"bias_gelu_fusion", str(bias_gelu_fusion)},
      {"gelu_tanh", str(gelu_tanh)},
      {"add_bias_linear", str(add_bias_linear)},
      {"untie_embeddings_and_output_weights", str(untie_embeddings_and_output_weights)},
      {"attention_dropout", str(attention_dropout)},
      {"hidden_dropout", str(hidden_dropout)},
      {"init_method_std", str(init_method_std)},
      {"reset_attention_mask", str(reset_attention_mask)},
  };
}

//===----------------------------------------------------------------------===//
// ParallelConfig, TrainingConfig, RuntimeDefaults
//===----------------------------------------------------------------------===//

KeyValues ParallelConfig::toKeyValues() const {
  return {
      {"tensor_model_parallel_size", str(tensor_model_parallel_size)},
      {"pipeline_model_parallel_size", str(pipeline_model_parallel_size)},
      {"data_parallel_size", str(data_parallel_size)},
      {"virtual_pipeline_model_parallel_size", str(virtual_pipeline_model_parallel_size)},
      {"num_layers_per_virtual_pipeline_stage", str(num_layers_per_virtual_pipeline_stage)},
      {"decoder_first_pipeline_num_layers", str(decoder_first_pipeline_num_layers)},
      {"decoder_last_pipeline_num_layers", str(decoder_last_pipeline_num_layers)},
      {"account_for_embedding_in_pipeline_split", str(account_for_embedding_in_pipeline_split)},
      {"account_for_loss_in_pipeline_split", str(account_for_loss_in_pipeline_split)},
      {"microbatch_group_size_per_vp_stage", str(microbatch_group_size_per_vp_stage)},
      {"pipeline_schedule", pipeline_schedule},
      {"overlap_p2p_comm", str(overlap_p2p_comm)},
      {"sequence_parallel", str(sequence_parallel)},
      {"use_distributed_optimizer", str(use_distributed_optimizer)},
      {"overlap_grad_reduce", str(overlap_grad_reduce)},
      {"overlap_param_gather", str(overlap_param_gather)},
      {"grad_reduce_in_bf16", str(grad_reduce_in_bf16)},
      {"tp_reduce_in_bf16", str(tp_reduce_in_bf16)},
      {"ddp_bucket_size", str(ddp_bucket_size)},
  };
}

KeyValues TrainingConfig::toKeyValues() const {
  KeyValues kv = {
      {"micro_batch_size", str(micro_batch_size)},
      {"global_batch_size", str(global_batch_size)},
      {"num_microbatches", str(num_microbatches)},
      {"params_dtype", params_dtype},
      {"optimizer", optimizer},
      {"adam_beta1", str(adam_beta1)},
      {"adam_beta2", str(adam_beta2)},
      {"adam_eps", str(adam_eps)},
      {"clip_grad", str(clip_grad)},
      {"weight_decay", str(weight_decay)},
      {"calculate_per_token_loss", str(calculate_per_token_loss)},
      {"recompute_granularity", recompute_granularity},
      {"recompute_method", recompute_method},
      {"recompute_num_layers", str(recompute_num_layers)},
      {"recompute_modules", llvm::join(recompute_modules, ",")},
      {"recompute_memory_budget", str(recompute_memory_budget)},
  };
  // CUDA-graph keys only when graphs are asked for, so that other plans keep their metadata.
  if (cuda_graph_impl != "none") {
    kv.insert({"cuda_graph_impl", cuda_graph_impl});
    kv.insert({"cuda_graph_scope", llvm::join(cuda_graph_scope, " ")});
    kv.insert({"cuda_graph_warmup_steps", str(cuda_graph_warmup_steps)});
  }
  // Ramp-up keys only when it is on, so that constant-batch plans keep their metadata.
  if (!rampup_batch_size.empty()) {
    kv.insert({"rampup_batch_size", llvm::join(llvm::map_range(rampup_batch_size,
                                                                  [](int64_t v) { return str(v); }),
                                                  " ")});
    kv.insert({"decrease_batch_size_if_needed", str(decrease_batch_size_if_needed)});
    kv.insert({"rampup_num_microbatches",
                  llvm::join(llvm::map_range(rampup_num_microbatches,
                                             [](int64_t v) { return str(v); }),
                             " ")});
  }
  return kv;
}

KeyValues RuntimeDefaults::toKeyValues() const {
  KeyValues kv = {
      {"min_lr", str(min_lr)},
      {"lr_decay_style", lr_decay_style},
      {"lr_warmup_iters", str(lr_warmup_iters)},
      {"lr_warmup_samples", str(lr_warmup_samples)},
      {"lr_decay_iters", str(lr_decay_iters)},
      {"lr_decay_samples", str(lr_decay_samples)},
      {"train_iters", str(train_iters)},
      {"train_samples", str(train_samples)},
      {"data_path", llvm::join(data_path, " ")},
      {"mock_data", str(mock_data)},
      {"check_for_nan_in_loss_and_grad", str(check_for_nan_in_loss_and_grad)},
      {"split", split},
      {"tokenizer_type", tokenizer_type},
      {"tokenizer_model", tokenizer_model},
      {"vocab_file", vocab_file},
      {"merge_file", merge_file},
      {"log_interval", str(log_interval)},
      {"eval_interval", str(eval_interval)},
      {"eval_iters", str(eval_iters)},
      {"save_interval", str(save_interval)},
      {"save", save},
      {"load", load},
      {"seed", str(seed)},
      {"tensorboard_dir", tensorboard_dir},
      {"log_throughput", str(log_throughput)},
      {"tensorboard_log_interval", str(tensorboard_log_interval)},
      {"log_timers_to_tensorboard", str(log_timers_to_tensorboard)},
      {"log_validation_ppl_to_tensorboard", str(log_validation_ppl_to_tensorboard)},
      {"log_memory_to_tensorboard", str(log_memory_to_tensorboard)},
      {"log_world_size_to_tensorboard", str(log_world_size_to_tensorboard)},
      {"log_batch_size_to_tensorboard", str(log_batch_size_to_tensorboard)},
      {"log_learning_rate_to_tensorboard", str(log_learning_rate_to_tensorboard)},
      {"log_loss_scale_to_tensorboard", str(log_loss_scale_to_tensorboard)},
      {"log_params_norm", str(log_params_norm)},
      {"log_num_zeros_in_grad", str(log_num_zeros_in_grad)},
      {"timing_log_level", str(timing_log_level)},
      {"timing_log_option", timing_log_option},
      {"weight_decay_incr_style", weight_decay_incr_style},
  };
  if (lr)
    kv["lr"] = str(*lr);
  if (start_weight_decay)
    kv["start_weight_decay"] = str(*start_weight_decay);
  if (end_weight_decay)
    kv["end_weight_decay"] = str(*end_weight_decay);
  return kv;
}

//===----------------------------------------------------------------------===//
// PlanConfig
//===----------------------------------------------------------------------===//

namespace {

Error finalizeParallel(PlanConfig &c) {
  ParallelConfig &p = c.parallel;
  const ModelConfig &m = c.model;
  const int64_t tp = p.tensor_model_parallel_size, pp = p.pipeline_model_parallel_size;

  // Tensor parallelism: heads and the MLP's column-parallel dimension split evenly. (Query
  // groups: checkSupported, as Megatron, requires tp to divide them.)
  if (m.num_attention_heads % tp != 0)
    return makeError("--num-attention-heads " + Twine(m.num_attention_heads) +
                     " is not divisible by --tensor-model-parallel-size " + Twine(tp));
  if (m.ffn_hidden_size % tp != 0)
    return makeError("--ffn-hidden-size " + Twine(m.ffn_hidden_size) +
                     " is not divisible by --tensor-model-parallel-size " + Twine(tp));
  if (p.sequence_parallel && tp == 1) {
    p.sequence_parallel = false;
    c.warnings.push_back("--sequence-parallel disabled: it has no effect with "
                         "--tensor-model-parallel-size 1 (as in Megatron)");
  }
  // Sequence parallelism splits the sequence over the TP ranks (Megatron's
  // scatter_to_sequence_parallel_region asserts the same divisibility).
  if (p.sequence_parallel && m.seq_length % tp != 0)
    return makeError("--seq-length " + Twine(m.seq_length) +
                     " is not divisible by --tensor-model-parallel-size " + Twine(tp) +
                     " (--sequence-parallel splits the sequence over the tensor-parallel ranks)");

  // Pipeline parallelism: an even split of the layers over stages and virtual chunks, or
  // Megatron's uneven split (first and/or last stage given, the others even).
  const int64_t first = p.decoder_first_pipeline_num_layers,
                last = p.decoder_last_pipeline_num_layers;
  const bool accountE = p.account_for_embedding_in_pipeline_split,
             accountL = p.account_for_loss_in_pipeline_split;
  if ((accountE || accountL) && pp > 1) {
    // Megatron's transformer_config.py refuses the uneven split flags with these, and an
    // accounted layer count that does not divide by pp; trainc also a stage left without
    // decoder layers and the virtual pipeline (Megatron supports it; not done here).
    const char *flag = accountE ? "--account-for-embedding-in-pipeline-split"
                                : "--account-for-loss-in-pipeline-split";
    if (first > 0 || last > 0)
      return makeError(Twine(flag) + " cannot be combined with " +
                       (first > 0 ? "--decoder-first-pipeline-num-layers"
                                  : "--decoder-last-pipeline-num-layers") +
                       " (Megatron: the uneven split and the accounted split are exclusive)");
    if (p.virtual_pipeline_model_parallel_size > 1 || p.num_layers_per_virtual_pipeline_stage > 0)
      return makeError(Twine(flag) + " with a virtual pipeline is not supported");
    const int64_t counted = m.num_layers + accountE + accountL;
    if (counted % pp != 0)
      return makeError("--num-layers " + Twine(m.num_layers) + " plus " +
                       (accountE && accountL ? "the embedding and the loss" :
                        accountE ? "the embedding" : "the loss") +
                       " (" + Twine(counted) + " layers, " + flag +
                       ") is not divisible by --pipeline-model-parallel-size " + Twine(pp));
    if (counted / pp < 2 && (accountE || accountL))
      return makeError("--num-layers " + Twine(m.num_layers) + " with " + flag + " gives " +
                       Twine(counted / pp) +
                       " layer(s) per stage, which leaves the " +
                       (accountE ? "first" : "last") +
                       " pipeline stage without a decoder layer");
  } else if (first > 0 || last > 0) {
    const char *flag =
        first > 0 ? "--decoder-first-pipeline-num-layers" : "--decoder-last-pipeline-num-layers";
    if (pp == 1)
      return makeError(Twine(flag) + " requires --pipeline-model-parallel-size greater than 1");
    if (p.virtual_pipeline_model_parallel_size > 1 || p.num_layers_per_virtual_pipeline_stage > 0)
      return makeError(Twine(flag) + " cannot be combined with a virtual pipeline");
    const int64_t rest = m.num_layers - first - last;
    const int64_t others = pp - (first > 0) - (last > 0);
    if (rest < 0 || (others == 0 && rest != 0) || (others > 0 && (rest < others || rest % others))) {
      std::string given;
      if (first > 0)
        given += " minus --decoder-first-pipeline-num-layers " + std::to_string(first);
      if (last > 0)
        given += " minus --decoder-last-pipeline-num-layers " + std::to_string(last);
      return makeError("--num-layers " + Twine(m.num_layers) + given + " leaves " + Twine(rest) +
                       " layers, which do not split evenly into " + Twine(others) +
                       " other pipeline stage(s) of at least one layer each");
    }
  } else if (m.num_layers % pp != 0)
    return makeError("--num-layers " + Twine(m.num_layers) +
                     " is not divisible by --pipeline-model-parallel-size " + Twine(pp));
  const int64_t layersPerStage = m.num_layers / pp;
  int64_t &vpp = p.virtual_pipeline_model_parallel_size;
  int64_t &layersPerChunk = p.num_layers_per_virtual_pipeline_stage;
  if (layersPerChunk > 0) {
    if (layersPerStage % layersPerChunk != 0)
      return makeError("--num-layers-per-virtual-pipeline-stage " + Twine(layersPerChunk) +
                       " does not divide the " + Twine(layersPerStage) +
                       " layers per pipeline stage");
    const int64_t chunks = layersPerStage / layersPerChunk;
    if (vpp > 0 && vpp != chunks)
      return makeError("--virtual-pipeline-model-parallel-size " + Twine(vpp) +
                       " contradicts --num-layers-per-virtual-pipeline-stage " +
                       Twine(layersPerChunk) + " (" + Twine(layersPerStage) +
                       " layers per pipeline stage make " + Twine(chunks) + " chunks)");
    vpp = chunks;
  } else if (vpp > 0) {
    if (layersPerStage % vpp != 0)
      return makeError("--num-layers " + Twine(m.num_layers) +
                       " is not divisible by --pipeline-model-parallel-size " + Twine(pp) +
                       " x --virtual-pipeline-model-parallel-size " + Twine(vpp));
    layersPerChunk = layersPerStage / vpp;
  }
  if (vpp == 1) {
    vpp = 0;
    layersPerChunk = 0;
  }
  if (vpp > 1 && pp == 1)
    return makeError("--virtual-pipeline-model-parallel-size " + Twine(vpp) +
                     " requires --pipeline-model-parallel-size greater than 1");
  // The schedule (trainc's --pipeline-schedule; Megatron picks it from the flags above).
  std::string &schedule = p.pipeline_schedule;
  if (schedule.empty() && pp > 1)
    schedule = vpp > 1 ? "interleaved" : "1f1b";
  if (!schedule.empty() && pp == 1)
    return makeError("--pipeline-schedule " + Twine(schedule) +
                     " requires --pipeline-model-parallel-size greater than 1");
  if (schedule == "interleaved" && vpp <= 1)
    return makeError("--pipeline-schedule interleaved requires "
                     "--num-layers-per-virtual-pipeline-stage or "
                     "--virtual-pipeline-model-parallel-size (more than one model chunk per "
                     "pipeline stage)");
  if (schedule == "1f1b" && vpp > 1)
    return makeError("--pipeline-schedule 1f1b runs one model chunk per pipeline stage, but "
                     "--virtual-pipeline-model-parallel-size is " +
                     Twine(vpp) + " (use --pipeline-schedule interleaved)");
  if (schedule == "zb-h1" && vpp > 1)
    return makeError("--pipeline-schedule zb-h1 runs one model chunk per pipeline stage, but "
                     "--virtual-pipeline-model-parallel-size is " +
                     Twine(vpp) + " (zero-bubble with model chunks, ZB-V, is not supported)");
  if (p.microbatch_group_size_per_vp_stage > 0 && vpp <= 1)
    return makeError("--microbatch-group-size-per-vp-stage " +
                     Twine(p.microbatch_group_size_per_vp_stage) +
                     " requires an interleaved schedule (--virtual-pipeline-model-parallel-size)");
  if (vpp > 1 && p.microbatch_group_size_per_vp_stage == 0)
    p.microbatch_group_size_per_vp_stage = pp; // Megatron's default
  // Megatron overlaps pipeline p2p only with virtual stages (arguments.py turns it off
  // otherwise); trainc's interleaved schedule is the only one with virtual stages.
  if (vpp <= 1)
    p.overlap_p2p_comm = false;

  // Data parallelism (arguments.py).
  if (p.overlap_param_gather && !p.use_distributed_optimizer)
    return makeError("--overlap-param-gather requires --use-distributed-optimizer");
  if (p.overlap_param_gather && !p.overlap_grad_reduce)
    return makeError("--overlap-param-gather requires --overlap-grad-reduce");
  // Megatron reduces in the grad buffer's dtype, the parameters' without
  // accumulate_allreduce_grads_in_fp32, so the flag means bf16 only with bf16 parameters.
  if (p.grad_reduce_in_bf16 && c.training.params_dtype != "bf16")
    return makeError("--grad-reduce-in-bf16 requires --bf16 (the parameters are " +
                     Twine(c.training.params_dtype == "fp16" ? "fp16 (--fp16)" : "fp32") +
                     "; trainc reduces their fp32 main grads in fp32)");
  if (p.tp_reduce_in_bf16 && c.training.params_dtype != "bf16")
    return makeError("--tp-reduce-in-bf16 requires --bf16 (the parameters are " +
                     Twine(c.training.params_dtype == "fp16" ? "fp16 (--fp16)" : "fp32") +
                     "; their tensor-parallel partial sums are reduced in fp32)");
  return Error::success();
}

/// Megatron's --rampup-batch-size checks (RampupBatchsizeNumMicroBatchesCalculator's, with its
/// messages; arguments.py's "expected no batch-size rampup for iteration-based training") and
/// the num_microbatches a run reaches below the final one (BatchRampup.h).
Error finalizeRampup(PlanConfig &c) {
  TrainingConfig &t = c.training;
  t.rampup_num_microbatches.clear();
  if (t.rampup_batch_size.empty()) {
    if (t.decrease_batch_size_if_needed)
      return makeError("--decrease-batch-size-if-needed needs --rampup-batch-size (trainc requires "
                       "--global-batch-size to be a multiple of --micro-batch-size x "
                       "data-parallel size)");
    return Error::success();
  }
  const std::vector<int64_t> &r = t.rampup_batch_size;
  const std::string given = "--rampup-batch-size " + std::to_string(r[0]) + " " +
                            std::to_string(r[1]) + " " + std::to_string(r[2]);
  if (c.runtime.train_iters > 0)
    return makeError(given + ": expected no batch-size rampup for iteration-based training (give "
                     "--train-samples instead of --train-iters " +
                     Twine(c.runtime.train_iters) + ")");
  if (std::string e = ::trainc::rt::control::BatchRampup::check(t.global_batch_size, r[0], r[1],
                                                                 r[2]);
      !e.empty())
    return makeError(given + ": " + e);
  ::trainc::rt::control::BatchRampup ramp(t.global_batch_size, t.micro_batch_size,
                                          c.parallel.data_parallel_size,
                                          t.decrease_batch_size_if_needed, r[0], r[1], r[2]);
  std::string error;
  std::vector<int64_t> ms = ramp.numMicrobatchesReached(&error);
  if (!error.empty())
    return makeError(given + ": " + error);
  for (int64_t m : ms)
    if (m != t.num_microbatches)
      t.rampup_num_microbatches.push_back(m);
  return Error::success();
}

Error finalizeTraining(PlanConfig &c) {
  {
    // Megatron's --cuda-graph-impl / --cuda-graph-scope / --cuda-graph-warmup-steps.
    TrainingConfig &g = c.training;
    if (Error e = checkChoice("--cuda-graph-impl", g.cuda_graph_impl,
                              {"none", "local", "transformer_engine"}))
      return e;
    for (const std::string &s : g.cuda_graph_scope)
      if (Error e = checkChoice("--cuda-graph-scope", s,
                                {"attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba",
                                 "full_iteration"}))
        return e;
    if (g.cuda_graph_warmup_steps < 1)
      return makeError("--cuda-graph-warmup-steps " + Twine(g.cuda_graph_warmup_steps) +
                       ": expected at least 1 (the eager iterations before the capture size the "
                       "CUDA kernels' scratch memory, which cannot grow inside a captured graph)");
    if (g.cuda_graph_impl == "none" && !g.cuda_graph_scope.empty()) {
      // Megatron: "has no effect when --cuda-graph-impl=none" (a warning).
      c.warnings.push_back("--cuda-graph-scope " + llvm::join(g.cuda_graph_scope, " ") +
                           " has no effect with --cuda-graph-impl none");
      g.cuda_graph_scope.clear();
    }
  }
  TrainingConfig &t = c.training;
  const int64_t dp = c.parallel.data_parallel_size;
  if (Error e = checkSize("--micro-batch-size", t.micro_batch_size))
    return e;
  if (Error e = checkSize("--global-batch-size", t.global_batch_size, true))
    return e;
  if (t.global_batch_size == 0)
    t.global_batch_size = t.micro_batch_size * dp;
  if (t.global_batch_size % (t.micro_batch_size * dp) != 0)
    return makeError("--global-batch-size " + Twine(t.global_batch_size) +
                     " is not divisible by --micro-batch-size " + Twine(t.micro_batch_size) +
                     " x data-parallel size " + Twine(dp));
  t.num_microbatches = t.global_batch_size / (t.micro_batch_size * dp);
  // Megatron's interleaved schedule (schedules.py at commit e03878b5f) refuses these.
  if (c.parallel.pipeline_schedule == "interleaved") {
    const int64_t pp = c.parallel.pipeline_model_parallel_size,
                  g = c.parallel.microbatch_group_size_per_vp_stage, m = t.num_microbatches;
    if (m % pp != 0)
      return makeError("number of microbatches (" + Twine(m) +
                       ") is not divisible by pipeline-model-parallel-size (" + Twine(pp) +
                       ") when using interleaved schedule (--global-batch-size " +
                       Twine(t.global_batch_size) + " / (--micro-batch-size " +
                       Twine(t.micro_batch_size) + " x data-parallel size " + Twine(dp) + "))");
    if (g > m || g < pp)
      return makeError("The number of contiguous micro-batches in a virtual pipeline stage "
                       "should range in [PP=" +
                       Twine(pp) + " , M=" + Twine(m) +
                       "] (--microbatch-group-size-per-vp-stage " + Twine(g) + ")");
    if (int64_t rest = m % g; rest > 0 && rest < pp)
      return makeError("The remainder of M (the total micro-batches) divided by N (number of "
                       "contiguous micro-batches in a virtual pipeline stage) should be 0, or "
                       "larger than or equal to the pipeline-parallel size, but it is " +
                       Twine(rest) + " (M " + Twine(m) + ", --microbatch-group-size-per-vp-stage " +
                       Twine(g) + ")");
  }
  if (t.num_microbatches > kMaxMicrobatches)
    return makeError("--global-batch-size " + Twine(t.global_batch_size) + " / (--micro-batch-size " +
                     Twine(t.micro_batch_size) + " x data-parallel size " + Twine(dp) + ") = " +
                     Twine(t.num_microbatches) + " microbatches per iteration, more than " +
                     Twine(kMaxMicrobatches) + " (the program holds one unit per microbatch)");
  if (Error e = finalizeRampup(c))
    return e;

  // One microbatch's activations must be tensors the runtime can hold: token ids are i32
  // (mbs x seq <= 2^31) and the widest activation (logits, the MLP's fc1 output, ...) at most
  // 2^40 elements (4 TiB in fp32). Both products fit in int64: every factor is < 2^31.
  const ModelConfig &m = c.model;
  const int64_t tokens = t.micro_batch_size * m.seq_length;
  if (tokens > kMaxSize)
    return makeError("--micro-batch-size " + Twine(t.micro_batch_size) + " x --seq-length " +
                     Twine(m.seq_length) + " = " + Twine(tokens) +
                     " tokens per microbatch, more than " + Twine(kMaxSize) +
                     " (token positions are 32-bit)");
  const int64_t width = std::max({m.hidden_size, m.swiglu ? 2 * m.ffn_hidden_size : m.ffn_hidden_size,
                                  m.padded_vocab_size, m.num_attention_heads * m.kv_channels});
  constexpr int64_t kMaxActivation = int64_t(1) << 40;
  if (tokens > kMaxActivation / width)
    return makeError("--micro-batch-size " + Twine(t.micro_batch_size) + " x --seq-length " +
                     Twine(m.seq_length) + " x the widest activation (" + Twine(width) +
                     ": hidden, ffn or padded vocabulary size) is more than 2^40 elements per "
                     "tensor; reduce --micro-batch-size or --seq-length");

  if (Error e = checkChoice("params dtype", t.params_dtype, {"fp32", "bf16", "fp16"}))
    return e;
  if (Error e = checkChoice("--optimizer", t.optimizer, {"adam", "sgd"}))
    return e;
  if (Error e = checkUnitInterval("--adam-beta1", t.adam_beta1))
    return e;
  if (Error e = checkUnitInterval("--adam-beta2", t.adam_beta2))
    return e;
  if (Error e = checkPositive("--adam-eps", t.adam_eps))
    return e;
  if (Error e = checkNonNegative("--clip-grad", t.clip_grad))
    return e;
  if (t.min_loss_scale > t.initial_loss_scale)
    return makeError("--min-loss-scale " + formatNumber(t.min_loss_scale) +
                     " is above --initial-loss-scale " + formatNumber(t.initial_loss_scale));
  if (Error e = checkNonNegative("--weight-decay", t.weight_decay))
    return e;

  // Recompute (Megatron's TransformerConfig.__post_init__).
  if (Error e = checkChoice("--recompute-granularity", t.recompute_granularity,
                            {"none", "selective", "full"}))
    return e;
  if (Error e = checkChoice("--recompute-method", t.recompute_method, {"", "uniform", "block"}))
    return e;
  if (Error e = checkNonNegative("--recompute-num-layers", t.recompute_num_layers))
    return e;
  for (const std::string &m : t.recompute_modules)
    if (Error e = checkChoice("--recompute-modules", m, {"core_attn", "mlp"}))
      return e;
  if (t.recompute_granularity != "selective" &&
      t.recompute_modules != std::vector<std::string>{"core_attn"})
    return makeError("--recompute-modules " + llvm::join(t.recompute_modules, " ") +
                     " requires --recompute-granularity selective, got " +
                     t.recompute_granularity);
  if (t.recompute_memory_budget > 0 && t.recompute_granularity != "none")
    return makeError("--recompute-memory-budget " + Twine(t.recompute_memory_budget) +
                     " chooses the recompute settings itself; it does not combine with "
                     "--recompute-granularity " + t.recompute_granularity);
  if (t.recompute_granularity == "full") {
    if (t.recompute_method.empty())
      return makeError("--recompute-granularity full requires --recompute-method uniform or "
                       "block");
    const int64_t layersPerStage = c.model.num_layers / c.parallel.pipeline_model_parallel_size;
    if (t.recompute_num_layers == 0)
      return makeError("--recompute-granularity full requires --recompute-num-layers");
    if (t.recompute_num_layers > layersPerStage)
      return makeError("--recompute-num-layers " + Twine(t.recompute_num_layers) + " exceeds the " +
                       Twine(layersPerStage) + " layers per pipeline stage");
  } else {
    if (!t.recompute_method.empty())
      return makeError("--recompute-method " + t.recompute_method +
                       " requires --recompute-granularity full, got " + t.recompute_granularity);
    if (t.recompute_num_layers != 0)
      return makeError("--recompute-num-layers " + Twine(t.recompute_num_layers) +
                       " requires --recompute-granularity full, got " + t.recompute_granularity);
  }
  return Error::success();
}

Error finalizeRuntime(RuntimeDefaults &r) {
  if (r.lr)
    if (Error e = checkNonNegative("--lr", *r.lr))
      return e;
  if (Error e = checkNonNegative("--min-lr", r.min_lr))
    return e;
  if (Error e = checkChoice("--lr-decay-style", r.lr_decay_style,
                            {"constant", "linear", "cosine", "inverse-square-root"}))
    return e;
  for (auto [flag, value] : {std::pair<StringRef, int64_t>{"--lr-warmup-iters", r.lr_warmup_iters},
                             {"--lr-warmup-samples", r.lr_warmup_samples},
                             {"--lr-decay-iters", r.lr_decay_iters},
                             {"--lr-decay-samples", r.lr_decay_samples},
                             {"--train-iters", r.train_iters},
                             {"--train-samples", r.train_samples},
                             {"--eval-iters", r.eval_iters},
                             {"--save-interval", r.save_interval},
                             {"--seed", r.seed}})
    if (Error e = checkNonNegative(flag, value))
      return e;
  if (r.log_interval <= 0)
    return makeError("--log-interval must be positive, got " + Twine(r.log_interval));
  if (r.eval_interval <= 0)
    return makeError("--eval-interval must be positive, got " + Twine(r.eval_interval));

  // A run counts either iterations or samples, and its LR schedule counts the same unit.
  if (r.train_iters > 0 && r.train_samples > 0)
    return makeError("--train-iters and --train-samples are mutually exclusive");
  if (r.train_iters > 0) {
    if (r.lr_warmup_samples > 0)
      return makeError("--lr-warmup-samples needs --train-samples; with --train-iters use "
                       "--lr-warmup-iters");
    if (r.lr_decay_samples > 0)
      return makeError("--lr-decay-samples needs --train-samples; with --train-iters use "
                       "--lr-decay-iters");
  }
  if (r.train_samples > 0) {
    if (r.lr_warmup_iters > 0)
      return makeError("--lr-warmup-iters needs --train-iters; with --train-samples use "
                       "--lr-warmup-samples");
    if (r.lr_decay_iters > 0)
      return makeError("--lr-decay-iters needs --train-iters; with --train-samples use "
                       "--lr-decay-samples");
  }
  return checkSplit(r.split);
}

} // namespace

Error PlanConfig::finalize() {
  ParallelConfig &p = parallel;
  if (Error e = checkSize("--tensor-model-parallel-size", p.tensor_model_parallel_size))
    return e;
  if (Error e = checkSize("--pipeline-model-parallel-size", p.pipeline_model_parallel_size))
    return e;
  if (Error e = checkSize("--data-parallel-size", p.data_parallel_size))
    return e;
  if (Error e = checkSize("--virtual-pipeline-model-parallel-size",
                          p.virtual_pipeline_model_parallel_size, true))
    return e;
  if (Error e = checkSize("--num-layers-per-virtual-pipeline-stage",
                          p.num_layers_per_virtual_pipeline_stage, true))
    return e;
  if (Error e = checkNonNegative("--ddp-bucket-size", p.ddp_bucket_size))
    return e;
  // One program file per rank: the world size is bounded (and the product cannot overflow, every
  // factor being < 2^31 and checked one by one against 2^20 first).
  {
    double world = 1;
    for (int64_t f : {p.tensor_model_parallel_size, p.pipeline_model_parallel_size,
                      p.data_parallel_size})
      world *= double(f);
    if (world > double(kMaxRanks))
      return makeError("--tensor-model-parallel-size " + Twine(p.tensor_model_parallel_size) +
                       " x --pipeline-model-parallel-size " +
                       Twine(p.pipeline_model_parallel_size) + " x --data-parallel-size " +
                       Twine(p.data_parallel_size) + " = " + formatNumber(world) +
                       " ranks, more than " + Twine(kMaxRanks));
  }
  if (Error e = model.finalize(p.tensor_model_parallel_size))
    return e;
  if (Error e = finalizeParallel(*this))
    return e;
  if (Error e = finalizeTraining(*this))
    return e;
  return finalizeRuntime(runtime);
}

double megatronFlopsPerToken(const ModelConfig &m) {
  const double h = double(m.hidden_size), s = double(m.seq_length), L = double(m.num_layers);
  const double q = double(m.num_attention_heads) * double(m.kv_channels);
  const double kv = double(m.num_query_groups) * double(m.kv_channels);
  const double f = double(m.ffn_hidden_size) * (m.swiglu ? 3.0 : 2.0);
  const double perLayer = 6 * h * (q + 2 * kv) + 6 * q * s + 6 * q * h + 6 * h * f;
  return L * perLayer + 6 * h * double(m.padded_vocab_size);
}

Error checkSupported(const PlanConfig &config) {
  Error all = Error::success();
  auto reject = [&](const Twine &what) {
    all = llvm::joinErrors(std::move(all), makeError("not supported yet: " + what));
  };
  const ParallelConfig &p = config.parallel;
  const TrainingConfig &t = config.training;
  // Tensor parallelism (trainc-shard): Megatron's divisibility requirements, then what is not
  // sharded yet.
  const int64_t tp = p.tensor_model_parallel_size;
  const ModelConfig &m = config.model;
  auto divisible = [&](const char *flag, int64_t v, const char *why) {
    if (tp > 1 && v % tp)
      all = llvm::joinErrors(std::move(all),
                             makeError(Twine(flag) + " " + Twine(v) +
                                       " is not divisible by --tensor-model-parallel-size " +
                                       Twine(tp) + " (" + why + ")"));
  };
  // (Heads and ffn size: finalizeParallel; the padded vocabulary is a multiple of tp.)
  divisible("--num-query-groups", m.num_query_groups,
            "Megatron requires num_query_groups % tensor_model_parallel_size == 0");
  // Pipeline parallelism: even or uneven split, Megatron's 1F1B or interleaved schedule
  // (docs/design.md "Pipeline parallelism"). With the distributed optimizer the tied word
  // embedding has a bucket of its own on both stages (trainc-grad-buckets).
  // Interleaving (docs/design.md "Pipeline parallelism"): the chunks' units are split from one
  // stage function; overlapped parameter gathers would wait in every chunk's forward.
  if (p.virtual_pipeline_model_parallel_size > 1 && p.overlap_param_gather)
    reject("--overlap-param-gather with --virtual-pipeline-model-parallel-size " +
           Twine(p.virtual_pipeline_model_parallel_size));
  // Data parallelism, the distributed optimizer, --overlap-grad-reduce and
  // --overlap-param-gather are supported; the gradient reduction always overlaps backward
  // (trainc-grad-buckets places it), so --overlap-grad-reduce changes nothing.
  // --bf16 / --fp16: 16-bit parameters with fp32 main grads and master weights, --fp16 with
  // Megatron's loss scaler (docs/design.md "Mixed precision").
  if (t.params_dtype != "fp32" && t.params_dtype != "bf16" && t.params_dtype != "fp16")
    reject("--" + t.params_dtype);
  // With tensor and pipeline parallelism too: checked against the single-rank plan (lit
  // trainrun-mixed-precision-tp-pp.test).
  if (t.optimizer != "adam")
    reject("--optimizer " + t.optimizer);
  if (config.model.use_rope_scaling)
    reject("--use-rope-scaling");
  // CUDA graphs: only the whole iteration (trainc-cuda-graph), not per-layer graphs.
  if (t.cuda_graph_impl == "transformer_engine")
    reject("--cuda-graph-impl transformer_engine (trainc has no Transformer Engine; use "
           "--cuda-graph-impl local --cuda-graph-scope full_iteration)");
  else if (t.cuda_graph_impl == "local" && !t.fullIterationGraph())
    reject("--cuda-graph-impl local with --cuda-graph-scope " +
           (t.cuda_graph_scope.empty() ? std::string("(none: per-layer graphs)")
                                       : llvm::join(t.cuda_graph_scope, " ")) +
           " (only --cuda-graph-scope full_iteration, the whole training iteration, is "
           "supported)");
  if (t.fullIterationGraph() && p.overlap_param_gather)
    reject("--cuda-graph-scope full_iteration with --overlap-param-gather (the parameter "
           "all-gathers stay in flight into the next iteration, outside a captured graph)");
  return all;
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

namespace {

ModelConfig gptStyle(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab, int64_t seq) {
  ModelConfig m;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.vocab_size = vocab;
  m.seq_length = seq;
  m.max_position_embeddings = seq;
  return m; // learned positions, LayerNorm, GELU, biases, tied, dropout 0.1: the defaults.
}

ModelConfig llamaStyle(int64_t layers, int64_t hidden, int64_t ffn, int64_t heads, int64_t groups,
                       int64_t vocab, int64_t seq, double ropeBase) {
  ModelConfig m;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.ffn_hidden_size = ffn;
  m.num_attention_heads = heads;
  m.group_query_attention = groups != heads;
  m.num_query_groups = groups != heads ? groups : 0;
  m.vocab_size = vocab;
  m.seq_length = seq;
  m.max_position_embeddings = seq;
  m.position_embedding_type = "rope";
  m.rotary_base = ropeBase;
  m.normalization = "RMSNorm";
  m.swiglu = true;
  m.add_bias_linear = false;
  m.untie_embeddings_and_output_weights = true;
  m.attention_dropout = 0.0;
  m.hidden_dropout = 0.0;
  return m;
}

const std::vector<std::pair<std::string, ModelConfig>> &presets() {
  static const std::vector<std::pair<std::string, ModelConfig>> table = [] {
    ModelConfig gpt2Small = gptStyle(12, 768, 12, 50257, 1024);
    gpt2Small.ffn_hidden_size = 3072;
    return std::vector<std::pair<std::string, ModelConfig>>{
        // Unit-test sizes: odd vocab and sequence lengths catch layout mistakes.
        {"tiny-gpt", [] {
           // No dropout: tests compare exact values (dropout tests turn it on explicitly).
           ModelConfig m = gptStyle(2, 16, 4, 37, 9);
           m.attention_dropout = 0;
           m.hidden_dropout = 0;
           return m;
         }()},
        {"tiny-llama", llamaStyle(2, 16, 32, 4, 2, 37, 9, 10000)},
        {"gpt2-small", gpt2Small},
        // Llama-3.2-1B's shape. Unlike the released model, untied and without the llama3
        // RoPE scaling (factor 32); use --hf-config for the exact model.
        {"llama3.2-1b", llamaStyle(16, 2048, 8192, 32, 8, 128256, 8192, 500000)},
        {"llama3-8b", llamaStyle(32, 4096, 14336, 32, 8, 128256, 8192, 500000)},
        // Byte-level models for the training demos: ~9.6M and ~2.9M parameters.
        {"llama-10m", llamaStyle(6, 384, 1024, 6, 2, 256, 256, 10000)},
        {"llama-tiny-text", llamaStyle(4, 256, 640, 4, 2, 256, 128, 10000)},
    };
  }();
  return table;
}

} // namespace

std::optional<ModelConfig> findPreset(StringRef name) {
  for (const auto &[presetName, model] : presets())
    if (presetName == name)
      return model;
  return std::nullopt;
}

std::vector<std::string> presetNames() {
  std::vector<std::string> names;
  for (const auto &entry : presets())
    names.push_back(entry.first);
  return names;
}

std::pair<int64_t, int64_t> ParallelConfig::firstAndLastStageLayers(int64_t numLayers) const {
  const int64_t pp = pipeline_model_parallel_size;
  const int64_t e = account_for_embedding_in_pipeline_split ? 1 : 0,
                l = account_for_loss_in_pipeline_split ? 1 : 0;
  if (pp <= 1 || (e == 0 && l == 0))
    return {decoder_first_pipeline_num_layers, decoder_last_pipeline_num_layers};
  // Megatron's get_transformer_layer_offset / get_num_layers_to_build: (L + e + l) / P layers
  // per stage, the first stage's counting the embedding, the last's the loss.
  const int64_t per = (numLayers + e + l) / pp;
  return {e ? per - e : 0, l ? per - l : 0};
}

} // namespace trainc::config
