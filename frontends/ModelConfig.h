//===- ModelConfig.h - Model, parallelism and training configuration -----===//
//
// The configuration a plan is compiled from, with Megatron-LM's names and defaults
// (megatron/training/arguments.py). Field names are Megatron's argument names; a flag
// `--foo-bar` sets the field `foo_bar`.
//
// The frontends (MegatronFlags.h, HFConfig.h) and the presets below fill these structs
// with the values a user wrote; PlanConfig::finalize() then derives the rest (ffn size,
// kv channels, padded vocab, global batch, number of microbatches, model family) and
// rejects inconsistent values. A field documented "0 = derive" is filled by finalize().
// checkSupported() says which of the valid configurations trainc can compile today.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_FRONTENDS_MODELCONFIG_H
#define TRAINC_FRONTENDS_MODELCONFIG_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainc::config {

/// A string-to-string view of a config, keyed by field name, for recording in a plan.
using KeyValues = std::map<std::string, std::string>;

/// The transformer's shape and numerics (Megatron's GPTModel / TransformerConfig).
struct ModelConfig {
  /// "gpt" or "llama". Empty = derive: "llama" when position_embedding_type is "rope",
  /// normalization is "RMSNorm" and swiglu is set, else "gpt".
  std::string family;
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  /// 0 = derive: 4 * hidden_size; with swiglu, Megatron's
  /// int((4 * hidden_size * 2 / 3) / 64) * 64.
  int64_t ffn_hidden_size = 0;
  int64_t num_attention_heads = 0;
  bool group_query_attention = false;
  /// Key/value heads. 0 = derive: 1 with group_query_attention (Megatron's default),
  /// else num_attention_heads.
  int64_t num_query_groups = 0;
  /// Per-head dimension. 0 = derive: hidden_size / num_attention_heads.
  int64_t kv_channels = 0;
  /// Tokens per sample.
  int64_t seq_length = 0;
  /// 0 = derive: seq_length.
  int64_t max_position_embeddings = 0;
  /// The tokenizer's vocabulary size (before padding).
  int64_t vocab_size = 0;
  int64_t make_vocab_size_divisible_by = 128;
  /// Derived (always): vocab_size rounded up to a multiple of
  /// make_vocab_size_divisible_by * tensor_model_parallel_size
  /// (Megatron's _vocab_size_with_padding).
  int64_t padded_vocab_size = 0;
  /// "learned_absolute" or "rope".
  std::string position_embedding_type = "learned_absolute";
  double rotary_base = 10000;
  /// Fraction of each head's channels that RoPE rotates, in (0, 1].
  double rotary_percent = 1.0;
  /// Llama 3.1 RoPE frequency scaling (Megatron's --use-rope-scaling).
  bool use_rope_scaling = false;
  double rope_scaling_factor = 8.0;
  /// "LayerNorm" or "RMSNorm".
  std::string normalization = "LayerNorm";
  double norm_epsilon = 1e-5;
  /// Gated SiLU MLP (two input projections); else GELU.
  bool swiglu = false;
  /// Megatron's --openai-gelu: GELU in its tanh form (HF's gelu_new), unfused.
  bool openai_gelu = false;
  /// Megatron's bias_gelu_fusion (default on; --no-bias-gelu-fusion clears it): with biases the
  /// MLP runs fused_bias_gelu.py's bias_gelu, the tanh form.
  bool bias_gelu_fusion = true;
  /// The GELU the model computes, derived by finalize() as Megatron selects it (mlp.py,
  /// arguments.py): the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) with
  /// --openai-gelu, or with the bias-GELU fusion when the linears have biases (arguments.py turns
  /// the fusion off without them); else F.gelu's erf form. Not used with --swiglu.
  bool gelu_tanh = false;
  /// Biases on every linear layer (--disable-bias-linear clears it).
  bool add_bias_linear = true;
  bool untie_embeddings_and_output_weights = false;
  /// Probabilities in [0, 1).
  double attention_dropout = 0.1;
  double hidden_dropout = 0.1;
  /// Megatron's --reset-attention-mask (a data argument there): no attention across documents
  /// inside a sample (get_ltor_masks_and_position_ids). Compile-time in trainc, because the
  /// model gets one more input, "doc_start" (docs/design.md "Document attention masks").
  bool reset_attention_mask = false;
  /// Standard deviation of the normal initialisation.
  double init_method_std = 0.02;

  /// Derives the "0 = derive" fields and padded_vocab_size for the given tensor-model-parallel
  /// size, and checks the model on its own. Errors name the values and Megatron's flags, e.g.
  /// "--hidden-size 100 is not divisible by --num-attention-heads 3".
  llvm::Error finalize(int64_t tensor_model_parallel_size = 1);
  KeyValues toKeyValues() const;
};

/// How the model is split over ranks. World size = tp * pp * dp.
struct ParallelConfig {
  int64_t tensor_model_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  /// trainc's --data-parallel-size (Megatron derives it from the world size).
  int64_t data_parallel_size = 1;
  /// Model chunks per pipeline rank for the interleaved schedule. 0 = no interleaving
  /// (finalize() turns 1 into 0).
  int64_t virtual_pipeline_model_parallel_size = 0;
  /// Layers per virtual chunk; 0 = derive from virtual_pipeline_model_parallel_size.
  int64_t num_layers_per_virtual_pipeline_stage = 0;
  /// Megatron's uneven split: layers of the first / last pipeline stage (0 = the even share);
  /// the other stages split the rest evenly.
  int64_t decoder_first_pipeline_num_layers = 0;
  int64_t decoder_last_pipeline_num_layers = 0;
  /// Megatron's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split:
  /// the embedding (the output layer and loss) counts as one layer of the first (last) stage
  /// when splitting evenly (transformer_block.py get_num_layers_to_build / the layer offset).
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  /// The decoder layers of the first and last pipeline stage of a model of `numLayers` layers
  /// under the flags above and the uneven-split flags: (decoder_first_pipeline_num_layers,
  /// decoder_last_pipeline_num_layers) without accounting (0 = the even share), else
  /// ((L + e + l) / P - e, (L + e + l) / P - l) for the accounted ones (e, l in {0, 1}) and 0 for
  /// the others. Call after finalize() succeeded.
  std::pair<int64_t, int64_t> firstAndLastStageLayers(int64_t numLayers) const;
  /// Megatron's --microbatch-group-size-per-vp-stage: contiguous microbatches per model chunk in
  /// the interleaved schedule; 0 = the pipeline size (finalize() sets it with interleaving).
  int64_t microbatch_group_size_per_vp_stage = 0;
  /// trainc's --pipeline-schedule: "1f1b", "interleaved" or "zb-h1" with pp > 1; "" = what Megatron's
  /// flags imply (finalize(): interleaved with virtual stages, else 1f1b).
  std::string pipeline_schedule;
  /// Megatron's overlap_p2p_comm (--no-overlap-p2p-communication turns it off): with the
  /// interleaved schedule each unit's pipeline receive is posted async ahead of its use;
  /// finalize() clears it without virtual stages, as Megatron's arguments.py does.
  bool overlap_p2p_comm = true;
  /// finalize() clears it when tensor_model_parallel_size is 1, as Megatron does.
  bool sequence_parallel = false;
  bool use_distributed_optimizer = false;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  /// Megatron's async_tensor_model_parallel_allreduce (cleared by
  /// --no-async-tensor-model-parallel-allreduce): trainc-tp-comm-overlap starts tensor
  /// collectives asynchronously where independent compute hides them.
  bool async_tensor_model_parallel_allreduce = true;
  /// Megatron's --grad-reduce-in-bf16 (DistributedDataParallelConfig.grad_reduce_in_fp32 =
  /// false): the data-parallel gradient reduction in bf16; needs --bf16.
  bool grad_reduce_in_bf16 = false;
  /// --tp-reduce-in-bf16 (trainc; Megatron's only behaviour): the tensor-parallel partial sums
  /// (row-parallel outputs, column-parallel input gradients) reduced in bf16; by default trainc
  /// reduces them in fp32 and rounds the full sum once (docs/design.md). Needs --bf16.
  bool tp_reduce_in_bf16 = false;
  /// Gradient bucket size in elements; 0 = Megatron's default max(40M, 1M * dp).
  int64_t ddp_bucket_size = 0;

  KeyValues toKeyValues() const;
};

/// Compile-time training choices.
struct TrainingConfig {
  /// Samples per microbatch per data-parallel rank.
  int64_t micro_batch_size = 0;
  /// Samples per iteration over all data-parallel ranks. 0 = derive: micro_batch_size * dp.
  int64_t global_batch_size = 0;
  /// Derived (always): global_batch_size / (micro_batch_size * dp), which must be exact.
  int64_t num_microbatches = 0;
  /// "fp32", "bf16" (--bf16) or "fp16" (--fp16).
  std::string params_dtype = "fp32";
  /// "adam" (AdamW, decoupled weight decay) or "sgd".
  std::string optimizer = "adam";
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  /// Gradient-norm clipping threshold; 0 = no clipping.
  double clip_grad = 1.0;
  /// fp16 loss scaling (Megatron's): --loss-scale, a static scale (0 = unset: dynamic), and the
  /// DynamicGradScaler's --initial-loss-scale, --min-loss-scale, --loss-scale-window, --hysteresis.
  double loss_scale = 0;
  double initial_loss_scale = 4294967296.0; // 2^32
  double min_loss_scale = 1.0;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  double weight_decay = 0.01;
  /// true (trainc's default): the loss is the exact per-token mean over the whole global
  /// batch (Megatron's --calculate-per-token-loss). false (--no-calculate-per-token-loss):
  /// Megatron's legacy mean of per-microbatch token means.
  bool calculate_per_token_loss = true;
  /// "none", "selective" (core attention) or "full" (whole layers).
  std::string recompute_granularity = "none";
  /// With "full": "uniform" or "block".
  std::string recompute_method;
  /// With "full": layers per recompute chunk (uniform) or recomputed layers per stage (block).
  int64_t recompute_num_layers = 0;
  /// With "selective": Megatron's --recompute-modules, core_attn and/or mlp.
  std::vector<std::string> recompute_modules = {"core_attn"};
  /// trainc's --recompute-memory-budget: bytes of a rank's planned arena; > 0 lets the compiler
  /// choose the recompute settings (compiler/Driver.h chooseRecompute). 0 = not set.
  int64_t recompute_memory_budget = 0;
  /// CUDA graphs, Megatron's flags: --cuda-graph-impl none|local|transformer_engine,
  /// --cuda-graph-scope (a list; trainc supports exactly full_iteration, with impl local) and
  /// --cuda-graph-warmup-steps (eager iterations before the capture, >= 1). fullIterationGraph()
  /// is what trainc-cuda-graph compiles (docs/cuda.md "CUDA graphs").
  std::string cuda_graph_impl = "none";
  std::vector<std::string> cuda_graph_scope;
  int64_t cuda_graph_warmup_steps = 3;
  bool fullIterationGraph() const {
    return cuda_graph_impl == "local" && cuda_graph_scope == std::vector<std::string>{"full_iteration"};
  }
  /// Megatron's --rampup-batch-size START INCR SAMPLES (empty = constant batch size) and
  /// --decrease-batch-size-if-needed (runtime/control/BatchRampup.h). Derived by finalize():
  /// the num_microbatches below the final one that a run reaches, ascending; the compiler
  /// writes one program per value besides the final one (docs/design.md "Batch-size ramp-up").
  std::vector<int64_t> rampup_batch_size;
  bool decrease_batch_size_if_needed = false;
  std::vector<int64_t> rampup_num_microbatches;

  KeyValues toKeyValues() const;
};

/// Run-time values recorded in the plan as defaults that a launcher may override. 0 / empty
/// means "not given" unless stated otherwise.
struct RuntimeDefaults {
  std::optional<double> lr;
  double min_lr = 0;
  /// "constant", "linear", "cosine" or "inverse-square-root".
  std::string lr_decay_style = "linear";
  int64_t lr_warmup_iters = 0;
  int64_t lr_warmup_samples = 0;
  /// 0 = decay over the whole run.
  int64_t lr_decay_iters = 0;
  int64_t lr_decay_samples = 0;
  int64_t train_iters = 0;
  int64_t train_samples = 0;
  /// Megatron's "[weight] prefix ..." list.
  std::vector<std::string> data_path;
  bool mock_data = false;
  std::string split = "969, 30, 1";
  std::string tokenizer_type;
  std::string tokenizer_model;
  std::string vocab_file;
  std::string merge_file;
  int64_t log_interval = 100;
  int64_t eval_interval = 1000;
  /// 0 = no evaluation.
  int64_t eval_iters = 100;
  int64_t save_interval = 0;
  std::string save;
  std::string load;
  /// Seeds initialisation and dropout (a device scalar of the iteration program).
  int64_t seed = 1234;
  /// Megatron's --check-for-nan-in-loss-and-grad (default on): a NaN or Inf loss or grad norm
  /// stops the run with an error naming the iteration and the rank; off, such an iteration is
  /// skipped (no update) and counted in the log.
  bool check_for_nan_in_loss_and_grad = true;
  /// TensorBoard (Megatron's training_log): event files in tensorboard_dir (empty: none) every
  /// tensorboard_log_interval iterations, and the --log-*-to-tensorboard switches.
  std::string tensorboard_dir;
  /// Megatron's --log-throughput: the log line's "throughput per GPU (TFLOP/s/GPU)" field.
  bool log_throughput = false;
  int64_t tensorboard_log_interval = 1;
  bool log_timers_to_tensorboard = false, log_validation_ppl_to_tensorboard = false,
       log_memory_to_tensorboard = false, log_world_size_to_tensorboard = false,
       log_batch_size_to_tensorboard = false, log_learning_rate_to_tensorboard = true,
       log_loss_scale_to_tensorboard = true;
  /// Megatron's --log-params-norm and --log-num-zeros-in-grad: the log line's (and
  /// TensorBoard's) params-norm and num-zeros fields.
  bool log_params_norm = false, log_num_zeros_in_grad = false;
  /// Megatron's timers: --timing-log-level 0|1|2 and --timing-log-option max|minmax|all.
  int64_t timing_log_level = 0;
  std::string timing_log_option = "minmax";
  /// Megatron's weight-decay schedule (OptimizerParamScheduler): --start-weight-decay and
  /// --end-weight-decay (both unset: --weight-decay throughout) and --weight-decay-incr-style
  /// constant|linear|cosine over the training samples.
  std::optional<double> start_weight_decay, end_weight_decay;
  std::string weight_decay_incr_style = "constant";

  /// Field name -> value; doubles in shortest round-trip form, booleans "true"/"false",
  /// data_path joined by single spaces; lr only when given.
  KeyValues toKeyValues() const;
};

/// Everything a plan is compiled from.
struct PlanConfig {
  ModelConfig model;
  ParallelConfig parallel;
  TrainingConfig training;
  RuntimeDefaults runtime;
  /// Accepted flags that only steer logging or profiling, or choose a Megatron implementation
  /// detail with no meaning for trainc (e.g. "--tensorboard-dir"), in command-line order.
  std::vector<std::string> ignoredFlags;
  /// Notes for the user about values finalize() changed (e.g. sequence parallelism disabled).
  std::vector<std::string> warnings;

  /// Derives every derived field (see the field comments) and checks the whole configuration;
  /// reports the first inconsistency, naming Megatron's flags and the values, e.g.
  /// "--global-batch-size 10 is not divisible by --micro-batch-size 4 x data-parallel size 1".
  llvm::Error finalize();
};

/// Rejects valid configurations that trainc cannot compile yet: each such feature gives one
/// "not supported yet: <flag>[ <value>]" error (joined; llvm::toString puts one per line).
/// This is the one place to relax as features land. Expects a finalized config.
llvm::Error checkSupported(const PlanConfig &config);

/// Megatron-LM's model FLOPs of training on one token (forward + backward: every GEMM 3 times,
/// 2 FLOPs per multiply-add), as its num_floating_point_operations counts them for a dense GPT
/// (training.py; ../shared/seeds/ 002 "FLOPs"): per layer the q/k/v projections
/// 6 h (n_h d + 2 n_g d), causal core attention 6 n_h d s (QK^T and AV over s/2 keys on
/// average), the output projection 6 n_h d h and the MLP 6 h f (3 with SwiGLU, else 2), plus
/// the logits 6 h V_padded; embeddings and element-wise ops are not counted. Expects a finalized
/// config. E.g. h 4096, 32 layers, f 11008 SwiGLU, V 32000, s 4096, no GQA: 42,863,689,728.
double megatronFlopsPerToken(const ModelConfig &model);

/// Named model shapes. The returned config holds only explicit values: call finalize() (or
/// PlanConfig::finalize()) to derive the rest. Presets: tiny-gpt, tiny-llama, gpt2-small,
/// llama3.2-1b, llama3-8b, llama-10m, llama-tiny-text.
std::optional<ModelConfig> findPreset(llvm::StringRef name);
/// The preset names, in the order above.
std::vector<std::string> presetNames();

} // namespace trainc::config

#endif // TRAINC_FRONTENDS_MODELCONFIG_H
