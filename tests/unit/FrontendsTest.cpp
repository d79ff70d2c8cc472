//===- FrontendsTest.cpp - Configuration, Megatron flags, HF config.json --===//
//
// Every user-facing error of trainc_frontends is triggered here and its text asserted, and
// every derivation is checked against Megatron-LM's rule or a published number.
//
//===----------------------------------------------------------------------===//

#include "frontends/HFConfig.h"
#include "frontends/TextLimits.h"
#include "frontends/MegatronFlags.h"
#include "frontends/ModelConfig.h"
#include "frontends/RankTable.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <array>

#include <cstring>
#include <set>
#include <sstream>

using namespace trainc::config;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

std::vector<std::string> words(const std::string &commandLine) {
  std::istringstream in(commandLine);
  std::vector<std::string> out;
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

/// The smallest complete command line.
const char *kMinimal = "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --seq-length 8 "
                       "--vocab-size 37 --micro-batch-size 1";

llvm::Expected<PlanConfig> parse(const std::string &commandLine,
                                 const FlagParseOptions &options = {}) {
  return parseMegatronFlags(words(commandLine), options);
}

/// Parses a command line that must be accepted.
PlanConfig parseOk(const std::string &commandLine, const FlagParseOptions &options = {}) {
  llvm::Expected<PlanConfig> result = parse(commandLine, options);
  if (!result) {
    ADD_FAILURE() << "unexpected error: " << llvm::toString(result.takeError());
    return PlanConfig();
  }
  return std::move(*result);
}

/// The error text of a command line that must be refused ("" and a failure when accepted).
std::string parseError(const std::string &commandLine, const FlagParseOptions &options = {}) {
  llvm::Expected<PlanConfig> result = parse(commandLine, options);
  if (result) {
    ADD_FAILURE() << "accepted: " << commandLine;
    return "";
  }
  return llvm::toString(result.takeError());
}

std::string errorText(llvm::Error error) {
  if (!error)
    return "";
  return llvm::toString(std::move(error));
}

template <typename T> std::string errorText(llvm::Expected<T> result) {
  if (result)
    return "";
  return llvm::toString(result.takeError());
}

#define EXPECT_CONTAINS(text, part)                                                                \
  do {                                                                                             \
    std::string t_ = (text);                                                                       \
    EXPECT_NE(t_.find(part), std::string::npos) << "'" << t_ << "' lacks '" << (part) << "'";      \
  } while (0)

/// Minimal, finalize()-able configs for programmatic checks.
PlanConfig validPlan() {
  PlanConfig c;
  c.model = *findPreset("tiny-gpt");
  c.training.micro_batch_size = 1;
  return c;
}

std::string finalizeError(PlanConfig c) { return errorText(c.finalize()); }

std::string modelError(ModelConfig m, int64_t tp = 1) { return errorText(m.finalize(tp)); }

/// Parameter count of a (finalized) model, unpadded vocabulary: embeddings, learned positions,
/// per layer QKV + output projection + MLP + two norms, final norm, untied output layer.
int64_t numParameters(const ModelConfig &m) {
  const int64_t h = m.hidden_size, kv = m.kv_channels;
  const int64_t q = m.num_attention_heads * kv, k = m.num_query_groups * kv;
  const bool bias = m.add_bias_linear, layerNorm = m.normalization == "LayerNorm";
  const int64_t normSize = layerNorm ? 2 * h : h;
  int64_t attention = h * (q + 2 * k) + q * h + (bias ? q + 2 * k + h : 0);
  int64_t fc1 = m.swiglu ? 2 * m.ffn_hidden_size : m.ffn_hidden_size;
  int64_t mlp = h * fc1 + m.ffn_hidden_size * h + (bias ? fc1 + h : 0);
  int64_t total = m.vocab_size * h + m.num_layers * (attention + mlp + 2 * normSize) + normSize;
  if (m.position_embedding_type == "learned_absolute")
    total += m.max_position_embeddings * h;
  if (m.untie_embeddings_and_output_weights)
    total += m.vocab_size * h;
  return total;
}

const char *kFullCommandLine =
    "--num-layers 16 --hidden-size 2048 --ffn-hidden-size 8192 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings "
    "8192 --position-embedding-type rope --rotary-base 500000 --swiglu --normalization RMSNorm "
    "--disable-bias-linear --untie-embeddings-and-output-weights --attention-dropout 0.0 "
    "--hidden-dropout 0.0 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
    "--sequence-parallel --use-distributed-optimizer --overlap-grad-reduce "
    "--overlap-param-gather --micro-batch-size 1 --global-batch-size 16 --bf16 --lr 3e-4 "
    "--min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 10 --train-iters 50 --clip-grad "
    "1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --mock-data --tokenizer-type "
    "NullTokenizer --vocab-size 128256 --split 99,1,0 --log-interval 1 --eval-iters 0 "
    "--save-interval 1000000";

//===----------------------------------------------------------------------===//
// Sample config.json files
//===----------------------------------------------------------------------===//

// meta-llama/Llama-3.2-1B.
const char *kLlama32Config = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// openai-community/gpt2.
const char *kGPT2Config = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
})";

/// A small Llama config with one field replaced by `field: value` (or added).
std::string llamaWith(const std::string &field, const std::string &value) {
  std::string base = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 100, "max_position_embeddings": 32)";
  std::string key = "\"" + field + "\":";
  size_t at = base.find(key);
  if (at != std::string::npos) {
    size_t end = base.find_first_of(",", at);
    base.erase(at, end == std::string::npos ? std::string::npos : end - at);
    base.insert(at, key + " " + value);
    return base + "}";
  }
  return base + ", " + key + " " + value + "}";
}

std::string gpt2With(const std::string &field, const std::string &value) {
  std::string base = R"({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
    "n_positions": 32, "vocab_size": 100)";
  std::string key = "\"" + field + "\":";
  size_t at = base.find(key);
  if (at != std::string::npos) {
    size_t end = base.find_first_of(",", at);
    base.erase(at, end == std::string::npos ? std::string::npos : end - at);
    base.insert(at, key + " " + value);
    return base + "}";
  }
  return base + ", " + key + " " + value + "}";
}

std::string hfError(const std::string &json) { return errorText(parseHFConfig(json)); }

//===----------------------------------------------------------------------===//
// Derivations
//===----------------------------------------------------------------------===//

TEST(ModelConfigTest, PaddedVocabIsMegatronsVocabSizeWithPadding) {
  auto padded = [](int64_t vocab, int64_t divisibleBy, int64_t tp) {
    ModelConfig m = *findPreset("tiny-gpt");
    m.vocab_size = vocab;
    m.make_vocab_size_divisible_by = divisibleBy;
    EXPECT_FALSE(m.finalize(tp));
    return m.padded_vocab_size;
  };
  EXPECT_EQ(padded(128256, 128, 1), 128256);
  EXPECT_EQ(padded(50257, 128, 1), 50304);
  EXPECT_EQ(padded(50257, 128, 2), 50432);
  EXPECT_EQ(padded(37, 128, 1), 128);
  EXPECT_EQ(padded(37, 1, 1), 37);
  EXPECT_EQ(padded(128, 128, 1), 128);
}

// Megatron's num_floating_point_operations per token against the seeds' worked example
// (../shared/seeds/ 002: LLaMA-7B-like, no GQA) and a GQA + SwiGLU + untied case (llama3-8b
// shapes) written out by hand.
TEST(ModelConfigTest, MegatronFlopsPerTokenMatchesTheClosedForm) {
  ModelConfig m = *findPreset("tiny-llama");
  m.num_layers = 32;
  m.hidden_size = 4096;
  m.num_attention_heads = 32;
  m.num_query_groups = 0;
  m.group_query_attention = false;
  m.kv_channels = 0;
  m.ffn_hidden_size = 11008;
  m.vocab_size = 32000;
  m.seq_length = 4096;
  m.max_position_embeddings = 4096;
  ASSERT_FALSE(m.finalize(1));
  ASSERT_TRUE(m.swiglu);
  EXPECT_EQ(megatronFlopsPerToken(m), 42863689728.0);

  ModelConfig g = *findPreset("llama3-8b");
  ASSERT_FALSE(g.finalize(1));
  ASSERT_TRUE(g.untie_embeddings_and_output_weights);
  // h 4096, 32 layers, 32 heads of 128, 8 query groups, f 14336 SwiGLU, V 128256, s 8192:
  // per layer 6h(32*128 + 2*8*128) + 6*4096*8192 + 6*4096*4096 + 6*4096*14336*3, logits 6hV.
  const double h = 4096, perLayer = 6 * h * (4096 + 2 * 1024) + 6 * 4096.0 * 8192 +
                                    6 * 4096.0 * 4096 + 6 * h * 14336 * 3;
  EXPECT_EQ(g.seq_length, 8192);
  EXPECT_EQ(g.padded_vocab_size, 128256);
  EXPECT_EQ(megatronFlopsPerToken(g), 32 * perLayer + 6 * h * 128256);
}

TEST(ModelConfigTest, FfnDefaultIsFourHiddenOrMegatronsSwigluRule) {
  auto ffn = [](int64_t hidden, bool swiglu) {
    ModelConfig m = *findPreset("tiny-gpt");
    m.hidden_size = hidden;
    m.num_attention_heads = 1;
    m.swiglu = swiglu;
    EXPECT_FALSE(m.finalize());
    return m.ffn_hidden_size;
  };
  EXPECT_EQ(ffn(768, false), 3072);
  // int((4 * h * 2 / 3) / 64) * 64.
  EXPECT_EQ(ffn(4096, true), 10880);
  EXPECT_EQ(ffn(2048, true), 5440);
  EXPECT_EQ(ffn(384, true), 1024);
  EXPECT_EQ(ffn(100, true), 256);
}

TEST(ModelConfigTest, HeadsAndGroupsDefaults) {
  ModelConfig m = *findPreset("tiny-gpt");
  ASSERT_FALSE(m.finalize());
  EXPECT_EQ(m.kv_channels, 4);
  EXPECT_EQ(m.num_query_groups, 4); // no GQA: one group per head
  EXPECT_EQ(m.max_position_embeddings, 9);
  EXPECT_EQ(m.family, "gpt");

  ModelConfig g = *findPreset("tiny-gpt");
  g.group_query_attention = true; // Megatron's default --num-query-groups is 1
  ASSERT_FALSE(g.finalize());
  EXPECT_EQ(g.num_query_groups, 1);

  ModelConfig e = *findPreset("tiny-gpt");
  e.num_query_groups = 4; // equal to the heads: accepted without --group-query-attention
  EXPECT_FALSE(e.finalize());

  ModelConfig k = *findPreset("tiny-gpt");
  k.hidden_size = 18; // not divisible by 4 heads, but kv channels are explicit
  k.kv_channels = 8;
  k.ffn_hidden_size = 64;
  EXPECT_FALSE(k.finalize());
}

TEST(ModelConfigTest, FamilyIsDerivedFromFeaturesOrKept) {
  ModelConfig llama = *findPreset("tiny-llama");
  ASSERT_FALSE(llama.finalize());
  EXPECT_EQ(llama.family, "llama");
  ModelConfig ropeGpt = *findPreset("tiny-gpt");
  ropeGpt.position_embedding_type = "rope";
  ASSERT_FALSE(ropeGpt.finalize());
  EXPECT_EQ(ropeGpt.family, "gpt");
  ModelConfig named = *findPreset("tiny-gpt");
  named.family = "llama";
  ASSERT_FALSE(named.finalize());
  EXPECT_EQ(named.family, "llama");
}

TEST(PlanConfigTest, GlobalBatchDefaultsToMicroTimesDataParallel) {
  PlanConfig c = validPlan();
  c.training.micro_batch_size = 2;
  c.parallel.data_parallel_size = 4;
  ASSERT_FALSE(c.finalize());
  EXPECT_EQ(c.training.global_batch_size, 8);
  EXPECT_EQ(c.training.num_microbatches, 1);
}

TEST(PlanConfigTest, NumMicrobatchesIsGlobalOverMicroTimesDataParallel) {
  PlanConfig c = validPlan();
  c.training.micro_batch_size = 2;
  c.training.global_batch_size = 48;
  c.parallel.data_parallel_size = 3;
  ASSERT_FALSE(c.finalize());
  EXPECT_EQ(c.training.num_microbatches, 8);
}

TEST(PlanConfigTest, VirtualPipelineSizeAndLayersPerChunkDeriveEachOther) {
  PlanConfig a = validPlan();
  a.model.num_layers = 16;
  a.parallel.pipeline_model_parallel_size = 2;
  a.parallel.num_layers_per_virtual_pipeline_stage = 2;
  a.training.global_batch_size = 2; // interleaving: microbatches divisible by the stages
  ASSERT_EQ(errorText(a.finalize()), "");
  EXPECT_EQ(a.parallel.virtual_pipeline_model_parallel_size, 4);
  EXPECT_EQ(a.parallel.pipeline_schedule, "interleaved");
  EXPECT_EQ(a.parallel.microbatch_group_size_per_vp_stage, 2); // Megatron's default: pp

  PlanConfig b = validPlan();
  b.model.num_layers = 16;
  b.parallel.pipeline_model_parallel_size = 2;
  b.parallel.virtual_pipeline_model_parallel_size = 2;
  b.training.global_batch_size = 4;
  ASSERT_FALSE(b.finalize());
  EXPECT_EQ(b.parallel.num_layers_per_virtual_pipeline_stage, 4);

  PlanConfig one = validPlan(); // one chunk per stage is no interleaving
  one.parallel.virtual_pipeline_model_parallel_size = 1;
  ASSERT_FALSE(one.finalize());
  EXPECT_EQ(one.parallel.virtual_pipeline_model_parallel_size, 0);
  EXPECT_EQ(one.parallel.num_layers_per_virtual_pipeline_stage, 0);
}

// --pipeline-schedule defaults to what Megatron's flags imply and must agree with them; the
// interleaved schedule's microbatch constraints are Megatron's (schedules.py, e03878b5f).
TEST(PlanConfigErrorTest, PipelineSchedule) {
  PlanConfig c = validPlan();
  c.model.num_layers = 4;
  c.parallel.pipeline_model_parallel_size = 2;
  c.training.global_batch_size = 3;
  ASSERT_FALSE(c.finalize());
  EXPECT_EQ(c.parallel.pipeline_schedule, "1f1b");
  c = validPlan();
  c.model.num_layers = 4;
  c.parallel.pipeline_model_parallel_size = 2;
  c.parallel.virtual_pipeline_model_parallel_size = 2;
  c.training.global_batch_size = 3;
  EXPECT_CONTAINS(finalizeError(c),
                  "number of microbatches (3) is not divisible by pipeline-model-parallel-size "
                  "(2) when using interleaved schedule");
  c.training.global_batch_size = 4;
  c.parallel.microbatch_group_size_per_vp_stage = 5;
  EXPECT_CONTAINS(finalizeError(c), "The number of contiguous micro-batches in a virtual "
                                    "pipeline stage should range in [PP=2 , M=4] "
                                    "(--microbatch-group-size-per-vp-stage 5)");
  c.parallel.microbatch_group_size_per_vp_stage = 3;
  EXPECT_CONTAINS(finalizeError(c), "should be 0, or larger than or equal to the "
                                    "pipeline-parallel size, but it is 1");
  c.parallel.microbatch_group_size_per_vp_stage = 0;
  c.parallel.pipeline_schedule = "1f1b";
  EXPECT_CONTAINS(finalizeError(c), "--pipeline-schedule 1f1b runs one model chunk per pipeline "
                                    "stage, but --virtual-pipeline-model-parallel-size is 2");
  c = validPlan();
  c.model.num_layers = 4;
  c.parallel.pipeline_model_parallel_size = 2;
  c.parallel.pipeline_schedule = "interleaved";
  EXPECT_CONTAINS(finalizeError(c), "--pipeline-schedule interleaved requires "
                                    "--num-layers-per-virtual-pipeline-stage or "
                                    "--virtual-pipeline-model-parallel-size");
  c = validPlan();
  c.parallel.pipeline_schedule = "1f1b";
  EXPECT_CONTAINS(finalizeError(c), "--pipeline-schedule 1f1b requires "
                                    "--pipeline-model-parallel-size greater than 1");
}

TEST(PlanConfigTest, SequenceParallelIsDisabledWithoutTensorParallelism) {
  PlanConfig c = validPlan();
  c.parallel.sequence_parallel = true;
  ASSERT_FALSE(c.finalize());
  EXPECT_FALSE(c.parallel.sequence_parallel);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_CONTAINS(c.warnings[0], "--sequence-parallel disabled");
  EXPECT_FALSE(checkSupported(c));
}

TEST(PlanConfigTest, FinalizeIsIdempotent) {
  PlanConfig c = parseOk(kMinimal);
  PlanConfig again = c;
  ASSERT_FALSE(again.finalize());
  EXPECT_EQ(again.model.toKeyValues(), c.model.toKeyValues());
  EXPECT_EQ(again.parallel.toKeyValues(), c.parallel.toKeyValues());
  EXPECT_EQ(again.training.toKeyValues(), c.training.toKeyValues());
}

TEST(PlanConfigTest, RuntimeDefaultsToKeyValues) {
  PlanConfig c = parseOk(std::string(kMinimal) +
                         " --lr 3e-4 --min-lr 3e-5 --data-path 0.3 a 0.7 b --train-iters 5");
  KeyValues kv = c.runtime.toKeyValues();
  EXPECT_EQ(kv["lr"], "0.0003");
  EXPECT_EQ(kv["min_lr"], "3e-05");
  EXPECT_EQ(kv["data_path"], "0.3 a 0.7 b");
  EXPECT_EQ(kv["train_iters"], "5");
  EXPECT_EQ(kv["mock_data"], "false");
  EXPECT_EQ(kv["split"], "969, 30, 1");
  EXPECT_EQ(kv["lr_decay_style"], "linear");
  EXPECT_EQ(kv["log_interval"], "100");
  EXPECT_EQ(kv["eval_interval"], "1000");
  EXPECT_EQ(kv["eval_iters"], "100");
  EXPECT_EQ(kv["seed"], "1234");
  EXPECT_EQ(kv.count("lr"), 1u);
  EXPECT_EQ(RuntimeDefaults().toKeyValues().count("lr"), 0u); // not given: not recorded

  KeyValues model = c.model.toKeyValues();
  EXPECT_EQ(model["padded_vocab_size"], "128");
  EXPECT_EQ(model["norm_epsilon"], "1e-05");
  EXPECT_EQ(model["add_bias_linear"], "true");
  EXPECT_EQ(c.training.toKeyValues()["adam_eps"], "1e-08");
  EXPECT_EQ(c.parallel.toKeyValues()["data_parallel_size"], "1");
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

TEST(PresetTest, AllPresetsFinalizeAndAreSupported) {
  std::vector<std::string> names = presetNames();
  EXPECT_EQ(names.size(), 7u);
  for (const std::string &name : names) {
    std::optional<ModelConfig> m = findPreset(name);
    ASSERT_TRUE(m) << name;
    PlanConfig c;
    c.model = *m;
    c.training.micro_batch_size = 1;
    EXPECT_EQ(errorText(c.finalize()), "") << name;
    EXPECT_EQ(errorText(checkSupported(c)), "") << name;
  }
  EXPECT_FALSE(findPreset("gpt5"));
}

TEST(PresetTest, ShapesAndParameterCounts) {
  auto finalized = [](const char *name) {
    ModelConfig m = *findPreset(name);
    EXPECT_FALSE(m.finalize());
    return m;
  };
  ModelConfig tinyGpt = finalized("tiny-gpt");
  EXPECT_EQ(tinyGpt.position_embedding_type, "learned_absolute");
  EXPECT_EQ(tinyGpt.normalization, "LayerNorm");
  EXPECT_FALSE(tinyGpt.swiglu);
  EXPECT_TRUE(tinyGpt.add_bias_linear);
  EXPECT_FALSE(tinyGpt.untie_embeddings_and_output_weights);
  EXPECT_EQ(tinyGpt.ffn_hidden_size, 64);

  ModelConfig tinyLlama = finalized("tiny-llama");
  EXPECT_EQ(tinyLlama.num_query_groups, 2);
  EXPECT_EQ(tinyLlama.ffn_hidden_size, 32);
  EXPECT_EQ(tinyLlama.vocab_size, 37);
  EXPECT_EQ(tinyLlama.seq_length, 9);
  EXPECT_FALSE(tinyLlama.add_bias_linear);
  EXPECT_TRUE(tinyLlama.untie_embeddings_and_output_weights);

  // Published sizes: GPT-2 small 124,439,808; Llama 3 8B 8,030,261,248; Llama 3.2 1B is
  // 1,235,814,400 tied, plus its 128256 x 2048 output layer untied.
  EXPECT_EQ(numParameters(finalized("gpt2-small")), 124439808);
  EXPECT_EQ(numParameters(finalized("llama3-8b")), 8030261248);
  EXPECT_EQ(numParameters(finalized("llama3.2-1b")), 1235814400 + 128256LL * 2048);
  ModelConfig llama32 = finalized("llama3.2-1b");
  EXPECT_EQ(llama32.kv_channels, 64);
  EXPECT_EQ(llama32.rotary_base, 500000);

  int64_t tenM = numParameters(finalized("llama-10m"));
  EXPECT_GT(tenM, 9000000);
  EXPECT_LT(tenM, 11000000);
  int64_t tinyText = numParameters(finalized("llama-tiny-text"));
  EXPECT_GT(tinyText, 1000000);
  EXPECT_LT(tinyText, 5000000);
  EXPECT_EQ(finalized("llama-tiny-text").vocab_size, 256);
}

//===----------------------------------------------------------------------===//
// ModelConfig::finalize errors
//===----------------------------------------------------------------------===//

TEST(ModelConfigErrorTest, SizesMustBePositiveAndBounded) {
  ModelConfig m = *findPreset("tiny-gpt");
  EXPECT_CONTAINS(modelError(m, 0), "--tensor-model-parallel-size must be positive, got 0");
  m.num_layers = 0;
  EXPECT_CONTAINS(modelError(m), "--num-layers must be positive, got 0");
  m = *findPreset("tiny-gpt");
  m.vocab_size = -3;
  EXPECT_CONTAINS(modelError(m), "--vocab-size must be positive, got -3");
  m = *findPreset("tiny-gpt");
  m.hidden_size = 3000000000;
  EXPECT_CONTAINS(modelError(m), "--hidden-size 3000000000 is too large (at most 2147483647)");
  m = *findPreset("tiny-gpt");
  m.ffn_hidden_size = -5;
  EXPECT_CONTAINS(modelError(m), "--ffn-hidden-size must be positive, got -5");
  m = *findPreset("tiny-gpt");
  m.make_vocab_size_divisible_by = 0;
  EXPECT_CONTAINS(modelError(m), "--make-vocab-size-divisible-by must be positive, got 0");
}

TEST(ModelConfigErrorTest, ChoicesAreChecked) {
  ModelConfig m = *findPreset("tiny-gpt");
  m.family = "bert";
  EXPECT_CONTAINS(modelError(m), "model family 'bert' is not one of gpt, llama");
  m = *findPreset("tiny-gpt");
  m.position_embedding_type = "alibi";
  EXPECT_CONTAINS(modelError(m),
                  "--position-embedding-type 'alibi' is not one of learned_absolute, rope");
  m = *findPreset("tiny-gpt");
  m.normalization = "BatchNorm";
  EXPECT_CONTAINS(modelError(m), "--normalization 'BatchNorm' is not one of LayerNorm, RMSNorm");
}

TEST(ModelConfigErrorTest, SeqLengthBeyondLearnedPositions) {
  ModelConfig m = *findPreset("gpt2-small");
  m.seq_length = 2048;
  EXPECT_CONTAINS(modelError(m), "--seq-length 2048 is greater than --max-position-embeddings "
                                 "1024 (learned_absolute position embeddings");
  m.position_embedding_type = "rope"; // RoPE has no table: longer sequences are fine
  EXPECT_EQ(modelError(m), "");
}

TEST(ModelConfigErrorTest, HeadDivisibility) {
  ModelConfig m = *findPreset("tiny-gpt");
  m.hidden_size = 100;
  m.num_attention_heads = 3;
  EXPECT_CONTAINS(modelError(m), "--hidden-size 100 is not divisible by --num-attention-heads 3");
  m = *findPreset("llama3-8b");
  m.num_query_groups = 5;
  EXPECT_CONTAINS(modelError(m),
                  "--num-attention-heads 32 is not divisible by --num-query-groups 5");
  m = *findPreset("tiny-gpt");
  m.num_query_groups = 8;
  EXPECT_CONTAINS(modelError(m), "--num-query-groups 8 requires --group-query-attention");
}

TEST(ModelConfigErrorTest, MlpChecks) {
  ModelConfig m = *findPreset("tiny-llama");
  m.openai_gelu = true;
  EXPECT_CONTAINS(modelError(m), "--openai-gelu and --swiglu are mutually exclusive");
  m = *findPreset("tiny-llama");
  m.ffn_hidden_size = 0;
  EXPECT_CONTAINS(modelError(m), "--swiglu with --hidden-size 16 gives Megatron's default ffn "
                                 "size int((4 * 16 * 2 / 3) / 64) * 64 = 0; pass "
                                 "--ffn-hidden-size");
}

TEST(ModelConfigErrorTest, RotaryChecks) {
  ModelConfig m = *findPreset("tiny-llama");
  m.rotary_percent = 1.5;
  EXPECT_CONTAINS(modelError(m), "--rotary-percent must be in (0, 1], got 1.5");
  m.rotary_percent = 0;
  EXPECT_CONTAINS(modelError(m), "--rotary-percent must be in (0, 1], got 0");
  m = *findPreset("tiny-llama");
  m.rotary_base = 0;
  EXPECT_CONTAINS(modelError(m), "--rotary-base must be positive, got 0");
  m = *findPreset("tiny-llama");
  m.kv_channels = 10;
  m.rotary_percent = 0.3;
  EXPECT_CONTAINS(modelError(m), "--rotary-percent 0.3 of --kv-channels 10 gives 3 rotary "
                                 "channels; RoPE needs a positive even number");
  m.rotary_percent = 0.5;
  EXPECT_CONTAINS(modelError(m), "gives 5 rotary channels");
  m.rotary_percent = 0.4;
  EXPECT_EQ(modelError(m), "");
  m = *findPreset("tiny-llama");
  m.use_rope_scaling = true;
  m.rope_scaling_factor = 0;
  EXPECT_CONTAINS(modelError(m), "--rope-scaling-factor must be positive, got 0");
  m = *findPreset("tiny-gpt");
  m.use_rope_scaling = true;
  EXPECT_CONTAINS(modelError(m), "--use-rope-scaling requires --position-embedding-type rope");
}

TEST(ModelConfigErrorTest, NumericRanges) {
  ModelConfig m = *findPreset("tiny-gpt");
  m.norm_epsilon = 0;
  EXPECT_CONTAINS(modelError(m), "--norm-epsilon must be positive, got 0");
  m = *findPreset("tiny-gpt");
  m.attention_dropout = 1.5;
  EXPECT_CONTAINS(modelError(m), "--attention-dropout must be in [0, 1), got 1.5");
  m = *findPreset("tiny-gpt");
  m.hidden_dropout = -0.1;
  EXPECT_CONTAINS(modelError(m), "--hidden-dropout must be in [0, 1), got -0.1");
  m = *findPreset("tiny-gpt");
  m.init_method_std = 0;
  EXPECT_CONTAINS(modelError(m), "--init-method-std must be positive, got 0");
}

//===----------------------------------------------------------------------===//
// PlanConfig::finalize errors
//===----------------------------------------------------------------------===//

TEST(PlanConfigErrorTest, ParallelSizesMustBePositive) {
  PlanConfig c = validPlan();
  c.parallel.tensor_model_parallel_size = 0;
  EXPECT_CONTAINS(finalizeError(c), "--tensor-model-parallel-size must be positive, got 0");
  c = validPlan();
  c.parallel.pipeline_model_parallel_size = 0;
  EXPECT_CONTAINS(finalizeError(c), "--pipeline-model-parallel-size must be positive, got 0");
  c = validPlan();
  c.parallel.data_parallel_size = -1;
  EXPECT_CONTAINS(finalizeError(c), "--data-parallel-size must be positive, got -1");
  c = validPlan();
  c.parallel.virtual_pipeline_model_parallel_size = -1;
  EXPECT_CONTAINS(finalizeError(c),
                  "--virtual-pipeline-model-parallel-size must be positive, got -1");
  c = validPlan();
  c.parallel.num_layers_per_virtual_pipeline_stage = -2;
  EXPECT_CONTAINS(finalizeError(c),
                  "--num-layers-per-virtual-pipeline-stage must be positive, got -2");
  c = validPlan();
  c.parallel.ddp_bucket_size = -1;
  EXPECT_CONTAINS(finalizeError(c), "--ddp-bucket-size must be non-negative, got -1");
}

TEST(PlanConfigErrorTest, TensorParallelDivisibility) {
  PlanConfig c = validPlan();
  c.model = *findPreset("llama3-8b");
  c.parallel.tensor_model_parallel_size = 3;
  EXPECT_CONTAINS(finalizeError(c),
                  "--num-attention-heads 32 is not divisible by --tensor-model-parallel-size 3");
  c = validPlan();
  c.model.num_attention_heads = 8;
  c.model.hidden_size = 64;
  c.model.ffn_hidden_size = 100;
  c.parallel.tensor_model_parallel_size = 8;
  EXPECT_CONTAINS(finalizeError(c),
                  "--ffn-hidden-size 100 is not divisible by --tensor-model-parallel-size 8");
}

TEST(PlanConfigErrorTest, PipelineDivisibility) {
  PlanConfig c = validPlan();
  c.model.num_layers = 5;
  c.parallel.pipeline_model_parallel_size = 2;
  EXPECT_CONTAINS(finalizeError(c),
                  "--num-layers 5 is not divisible by --pipeline-model-parallel-size 2");

  c = validPlan();
  c.model.num_layers = 16;
  c.parallel.pipeline_model_parallel_size = 2;
  c.parallel.num_layers_per_virtual_pipeline_stage = 3;
  EXPECT_CONTAINS(finalizeError(c), "--num-layers-per-virtual-pipeline-stage 3 does not divide "
                                    "the 8 layers per pipeline stage");
  c.parallel.num_layers_per_virtual_pipeline_stage = 4;
  c.parallel.virtual_pipeline_model_parallel_size = 3;
  EXPECT_CONTAINS(finalizeError(c), "--virtual-pipeline-model-parallel-size 3 contradicts "
                                    "--num-layers-per-virtual-pipeline-stage 4 (8 layers per "
                                    "pipeline stage make 2 chunks)");
  c.parallel.num_layers_per_virtual_pipeline_stage = 0;
  EXPECT_CONTAINS(finalizeError(c),
                  "--num-layers 16 is not divisible by --pipeline-model-parallel-size 2 x "
                  "--virtual-pipeline-model-parallel-size 3");

  c = validPlan();
  c.parallel.virtual_pipeline_model_parallel_size = 2;
  EXPECT_CONTAINS(finalizeError(c), "--virtual-pipeline-model-parallel-size 2 requires "
                                    "--pipeline-model-parallel-size greater than 1");
}

TEST(PlanConfigErrorTest, OverlapParamGatherPrerequisites) {
  PlanConfig c = validPlan();
  c.parallel.overlap_param_gather = true;
  c.parallel.overlap_grad_reduce = true;
  EXPECT_CONTAINS(finalizeError(c), "--overlap-param-gather requires --use-distributed-optimizer");
  c.parallel.use_distributed_optimizer = true;
  c.parallel.overlap_grad_reduce = false;
  EXPECT_CONTAINS(finalizeError(c), "--overlap-param-gather requires --overlap-grad-reduce");
}

TEST(PlanConfigErrorTest, BatchSizes) {
  PlanConfig c = validPlan();
  c.training.micro_batch_size = 0;
  EXPECT_CONTAINS(finalizeError(c), "--micro-batch-size must be positive, got 0");
  c = validPlan();
  c.training.global_batch_size = -1;
  EXPECT_CONTAINS(finalizeError(c), "--global-batch-size must be positive, got -1");
  c = validPlan();
  c.training.micro_batch_size = 4;
  c.training.global_batch_size = 10;
  EXPECT_CONTAINS(finalizeError(c), "--global-batch-size 10 is not divisible by "
                                    "--micro-batch-size 4 x data-parallel size 1");
  c.training.global_batch_size = 16;
  c.parallel.data_parallel_size = 3;
  EXPECT_CONTAINS(finalizeError(c), "--global-batch-size 16 is not divisible by "
                                    "--micro-batch-size 4 x data-parallel size 3");
}

TEST(PlanConfigErrorTest, OptimizerAndPrecision) {
  PlanConfig c = validPlan();
  c.training.params_dtype = "int8";
  EXPECT_CONTAINS(finalizeError(c), "params dtype 'int8' is not one of fp32, bf16, fp16");
  c = validPlan();
  c.training.optimizer = "lamb";
  EXPECT_CONTAINS(finalizeError(c), "--optimizer 'lamb' is not one of adam, sgd");
  c = validPlan();
  c.training.adam_beta1 = 1;
  EXPECT_CONTAINS(finalizeError(c), "--adam-beta1 must be in [0, 1), got 1");
  c = validPlan();
  c.training.adam_beta2 = -0.5;
  EXPECT_CONTAINS(finalizeError(c), "--adam-beta2 must be in [0, 1), got -0.5");
  c = validPlan();
  c.training.adam_eps = 0;
  EXPECT_CONTAINS(finalizeError(c), "--adam-eps must be positive, got 0");
  c = validPlan();
  c.training.clip_grad = -1;
  EXPECT_CONTAINS(finalizeError(c), "--clip-grad must be non-negative, got -1");
  c = validPlan();
  c.training.weight_decay = -0.1;
  EXPECT_CONTAINS(finalizeError(c), "--weight-decay must be non-negative, got -0.1");
}

TEST(PlanConfigErrorTest, Recompute) {
  PlanConfig c = validPlan();
  c.training.recompute_granularity = "partial";
  EXPECT_CONTAINS(finalizeError(c),
                  "--recompute-granularity 'partial' is not one of none, selective, full");
  c = validPlan();
  c.training.recompute_method = "random";
  EXPECT_CONTAINS(finalizeError(c), "--recompute-method 'random' is not one of uniform, block");
  c = validPlan();
  c.training.recompute_num_layers = -1;
  EXPECT_CONTAINS(finalizeError(c), "--recompute-num-layers must be non-negative, got -1");
  c = validPlan();
  c.training.recompute_granularity = "full";
  EXPECT_CONTAINS(finalizeError(c),
                  "--recompute-granularity full requires --recompute-method uniform or block");
  c.training.recompute_method = "uniform";
  EXPECT_CONTAINS(finalizeError(c), "--recompute-granularity full requires --recompute-num-layers");
  c.training.recompute_num_layers = 3;
  EXPECT_CONTAINS(finalizeError(c), "--recompute-num-layers 3 exceeds the 2 layers per pipeline "
                                    "stage");
  c.training.recompute_num_layers = 2;
  EXPECT_EQ(finalizeError(c), "");
  c = validPlan();
  c.training.recompute_granularity = "selective";
  c.training.recompute_method = "block";
  EXPECT_CONTAINS(finalizeError(c), "--recompute-method block requires --recompute-granularity "
                                    "full, got selective");
  c.training.recompute_method = "";
  c.training.recompute_num_layers = 1;
  EXPECT_CONTAINS(finalizeError(c), "--recompute-num-layers 1 requires --recompute-granularity "
                                    "full, got selective");
  c = validPlan();
  c.training.recompute_memory_budget = 1000;
  EXPECT_EQ(finalizeError(c), "");
  c.training.recompute_granularity = "selective";
  EXPECT_CONTAINS(finalizeError(c), "--recompute-memory-budget 1000 chooses the recompute settings "
                                    "itself; it does not combine with --recompute-granularity "
                                    "selective");
}

TEST(PlanConfigErrorTest, RuntimeValues) {
  auto runtimeError = [](auto set) {
    PlanConfig c = validPlan();
    set(c.runtime);
    return finalizeError(c);
  };
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) { r.lr = -1; }),
                  "--lr must be non-negative, got -1");
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) { r.min_lr = -1e-5; }),
                  "--min-lr must be non-negative, got -1e-05");
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) { r.lr_decay_style = "WSD"; }),
                  "--lr-decay-style 'WSD' is not one of constant, linear, cosine, "
                  "inverse-square-root");
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) { r.lr_warmup_iters = -1; }),
                  "--lr-warmup-iters must be non-negative, got -1");
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) { r.seed = -7; }),
                  "--seed must be non-negative, got -7");
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) { r.log_interval = 0; }),
                  "--log-interval must be positive, got 0");
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) { r.eval_interval = 0; }),
                  "--eval-interval must be positive, got 0");
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) {
                    r.train_iters = 10;
                    r.train_samples = 100;
                  }),
                  "--train-iters and --train-samples are mutually exclusive");
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) {
                    r.train_iters = 10;
                    r.lr_warmup_samples = 100;
                  }),
                  "--lr-warmup-samples needs --train-samples; with --train-iters use "
                  "--lr-warmup-iters");
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) {
                    r.train_iters = 10;
                    r.lr_decay_samples = 100;
                  }),
                  "--lr-decay-samples needs --train-samples; with --train-iters use "
                  "--lr-decay-iters");
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) {
                    r.train_samples = 1000;
                    r.lr_warmup_iters = 10;
                  }),
                  "--lr-warmup-iters needs --train-iters; with --train-samples use "
                  "--lr-warmup-samples");
  EXPECT_CONTAINS(runtimeError([](RuntimeDefaults &r) {
                    r.train_samples = 1000;
                    r.lr_decay_iters = 10;
                  }),
                  "--lr-decay-iters needs --train-iters; with --train-samples use "
                  "--lr-decay-samples");
  for (const char *bad : {"99,x", "1,2,3,4", "0,0,0", "", "1,,2", "-1,2", "1/2/3/4", "98;2"})
    EXPECT_CONTAINS(runtimeError([bad](RuntimeDefaults &r) { r.split = bad; }),
                    std::string("--split expects up to three non-negative weights separated by "
                                "',' or '/' with a positive sum, got '") +
                        bad + "'");
  // The same strings as trainrun's parser (lit cli/split-consistency.test runs both).
  for (const char *good : {"969, 30, 1", "99,1,0", "1", "0.5,0.5", "98/2/0", "949/50/1"})
    EXPECT_EQ(runtimeError([good](RuntimeDefaults &r) { r.split = good; }), "") << good;
}

//===----------------------------------------------------------------------===//
// checkSupported
//===----------------------------------------------------------------------===//

TEST(CheckSupportedTest, EachUnsupportedFeatureIsNamed) {
  struct Case {
    std::string flags;
    std::string message;
  };
  std::vector<Case> cases = {
      {"--optimizer sgd", "not supported yet: --optimizer sgd"},
      {"--position-embedding-type rope --use-rope-scaling",
       "not supported yet: --use-rope-scaling"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(parseError(std::string(kMinimal) + " " + c.flags), c.message) << c.flags;

  // Several unsupported features are reported one per line.
  EXPECT_EQ(parseError(std::string(kMinimal) +
                       " --optimizer sgd --position-embedding-type rope --use-rope-scaling"),
            "not supported yet: --optimizer sgd\n"
            "not supported yet: --use-rope-scaling");
  // Tensor parallelism: Megatron's requirement on the query groups.
  EXPECT_EQ(parseError(std::string(kMinimal) + " --group-query-attention --num-query-groups 1 "
                                               "--tensor-model-parallel-size 2"),
            "--num-query-groups 1 is not divisible by --tensor-model-parallel-size 2 (Megatron "
            "requires num_query_groups % tensor_model_parallel_size == 0)");
  // Interleaving is supported, but not with overlapped parameter gathers.
  EXPECT_CONTAINS(parseError("--num-layers 4 --hidden-size 16 --num-attention-heads 4 "
                             "--seq-length 8 --vocab-size 37 --micro-batch-size 1 "
                             "--global-batch-size 4 --data-parallel-size 2 "
                             "--pipeline-model-parallel-size 2 "
                             "--virtual-pipeline-model-parallel-size 2 "
                             "--use-distributed-optimizer --overlap-grad-reduce "
                             "--overlap-param-gather --untie-embeddings-and-output-weights"),
                  "not supported yet: --overlap-param-gather with "
                  "--virtual-pipeline-model-parallel-size 2");
  parseOk("--num-layers 4 --hidden-size 16 --num-attention-heads 4 --seq-length 8 "
          "--vocab-size 37 --micro-batch-size 1 --global-batch-size 2 "
          "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2");

  // Sizes of 1 are accepted.
  parseOk(std::string(kMinimal) + " --tensor-model-parallel-size 1 "
                                  "--pipeline-model-parallel-size 1 --data-parallel-size 1 "
                                  "--virtual-pipeline-model-parallel-size 1");
  // Tensor parallelism is supported, also with data parallelism and attention dropout.
  parseOk(std::string(kMinimal) + " --tensor-model-parallel-size 2 --data-parallel-size 2 "
                                  "--use-distributed-optimizer --attention-dropout 0.1");
  // Data parallelism and the distributed optimizer are supported, with bf16 parameters too.
  parseOk(std::string(kMinimal) + " --data-parallel-size 2 --use-distributed-optimizer "
                                  "--overlap-grad-reduce --overlap-param-gather "
                                  "--ddp-bucket-size 1000");
  EXPECT_EQ(parseOk(std::string(kMinimal) + " --bf16 --data-parallel-size 2 "
                                            "--use-distributed-optimizer")
                .training.params_dtype,
            "bf16");
}

//===----------------------------------------------------------------------===//
// Megatron flags
//===----------------------------------------------------------------------===//

TEST(MegatronFlagsTest, FullCommandLineIsAccepted) {
  // The seed's run.sh (004 section 4) with every check on: tp 2 x pp 2 x dp 2, sequence
  // parallelism, the distributed optimizer and --bf16 are all supported.
  PlanConfig c = parseOk(kFullCommandLine);
  EXPECT_EQ(c.parallel.tensor_model_parallel_size, 2);
  EXPECT_EQ(c.parallel.pipeline_model_parallel_size, 2);
  EXPECT_TRUE(c.parallel.sequence_parallel);
  EXPECT_EQ(c.training.params_dtype, "bf16");
  EXPECT_EQ(c.model.padded_vocab_size, 128256);
  EXPECT_EQ(c.model.family, "llama");
}

TEST(MegatronFlagsTest, FullCommandLineRecordsEveryValue) {
  FlagParseOptions inspect;
  inspect.check_supported = false;
  PlanConfig c = parseOk(kFullCommandLine, inspect);
  const ModelConfig &m = c.model;
  EXPECT_EQ(m.family, "llama");
  EXPECT_EQ(m.num_layers, 16);
  EXPECT_EQ(m.hidden_size, 2048);
  EXPECT_EQ(m.ffn_hidden_size, 8192);
  EXPECT_EQ(m.num_attention_heads, 32);
  EXPECT_TRUE(m.group_query_attention);
  EXPECT_EQ(m.num_query_groups, 8);
  EXPECT_EQ(m.kv_channels, 64);
  EXPECT_EQ(m.seq_length, 8192);
  EXPECT_EQ(m.max_position_embeddings, 8192);
  EXPECT_EQ(m.position_embedding_type, "rope");
  EXPECT_EQ(m.rotary_base, 500000);
  EXPECT_TRUE(m.swiglu);
  EXPECT_EQ(m.normalization, "RMSNorm");
  EXPECT_FALSE(m.add_bias_linear);
  EXPECT_TRUE(m.untie_embeddings_and_output_weights);
  EXPECT_EQ(m.attention_dropout, 0.0);
  EXPECT_EQ(m.hidden_dropout, 0.0);
  EXPECT_EQ(m.vocab_size, 128256);
  EXPECT_EQ(m.padded_vocab_size, 128256); // 128256 = 501 x (128 x tp 2)

  EXPECT_EQ(c.parallel.tensor_model_parallel_size, 2);
  EXPECT_EQ(c.parallel.pipeline_model_parallel_size, 2);
  EXPECT_EQ(c.parallel.data_parallel_size, 1);
  EXPECT_TRUE(c.parallel.sequence_parallel);
  EXPECT_TRUE(c.parallel.use_distributed_optimizer);
  EXPECT_TRUE(c.parallel.overlap_grad_reduce);
  EXPECT_TRUE(c.parallel.overlap_param_gather);

  const TrainingConfig &t = c.training;
  EXPECT_EQ(t.micro_batch_size, 1);
  EXPECT_EQ(t.global_batch_size, 16);
  EXPECT_EQ(t.num_microbatches, 16);
  EXPECT_EQ(t.params_dtype, "bf16");
  EXPECT_EQ(t.clip_grad, 1.0);
  EXPECT_EQ(t.weight_decay, 0.1);
  EXPECT_EQ(t.adam_beta1, 0.9);
  EXPECT_EQ(t.adam_beta2, 0.95);
  EXPECT_TRUE(t.calculate_per_token_loss);

  const RuntimeDefaults &r = c.runtime;
  ASSERT_TRUE(r.lr);
  EXPECT_EQ(*r.lr, 3e-4);
  EXPECT_EQ(r.min_lr, 3e-5);
  EXPECT_EQ(r.lr_decay_style, "cosine");
  EXPECT_EQ(r.lr_warmup_iters, 10);
  EXPECT_EQ(r.train_iters, 50);
  EXPECT_TRUE(r.mock_data);
  EXPECT_EQ(r.tokenizer_type, "NullTokenizer");
  EXPECT_EQ(r.split, "99,1,0");
  EXPECT_EQ(r.log_interval, 1);
  EXPECT_EQ(r.eval_iters, 0);
  EXPECT_EQ(r.save_interval, 1000000);
  EXPECT_TRUE(c.ignoredFlags.empty());
}

TEST(MegatronFlagsTest, DefaultsAreMegatrons) {
  PlanConfig c = parseOk(kMinimal);
  const ModelConfig &m = c.model;
  EXPECT_EQ(m.family, "gpt");
  EXPECT_EQ(m.ffn_hidden_size, 64);
  EXPECT_EQ(m.kv_channels, 4);
  EXPECT_EQ(m.num_query_groups, 4);
  EXPECT_EQ(m.max_position_embeddings, 8);
  EXPECT_EQ(m.make_vocab_size_divisible_by, 128);
  EXPECT_EQ(m.padded_vocab_size, 128);
  EXPECT_EQ(m.position_embedding_type, "learned_absolute");
  EXPECT_EQ(m.rotary_base, 10000);
  EXPECT_EQ(m.rotary_percent, 1.0);
  EXPECT_EQ(m.normalization, "LayerNorm");
  EXPECT_EQ(m.norm_epsilon, 1e-5);
  EXPECT_FALSE(m.swiglu);
  EXPECT_TRUE(m.add_bias_linear);
  EXPECT_FALSE(m.untie_embeddings_and_output_weights);
  EXPECT_EQ(m.attention_dropout, 0.1);
  EXPECT_EQ(m.hidden_dropout, 0.1);
  EXPECT_EQ(m.init_method_std, 0.02);
  EXPECT_EQ(c.parallel.virtual_pipeline_model_parallel_size, 0);
  EXPECT_EQ(c.parallel.ddp_bucket_size, 0);
  const TrainingConfig &t = c.training;
  EXPECT_EQ(t.global_batch_size, 1);
  EXPECT_EQ(t.num_microbatches, 1);
  EXPECT_EQ(t.params_dtype, "fp32");
  EXPECT_EQ(t.optimizer, "adam");
  EXPECT_EQ(t.adam_beta1, 0.9);
  EXPECT_EQ(t.adam_beta2, 0.999);
  EXPECT_EQ(t.adam_eps, 1e-8);
  EXPECT_EQ(t.clip_grad, 1.0);
  EXPECT_EQ(t.weight_decay, 0.01);
  EXPECT_TRUE(t.calculate_per_token_loss);
  EXPECT_EQ(t.recompute_granularity, "none");
  EXPECT_FALSE(c.runtime.lr);
  EXPECT_EQ(c.runtime.seed, 1234);
}

TEST(MegatronFlagsTest, EveryOtherFlag) {
  PlanConfig c = parseOk(
      "--num-layers=4 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --vocab-size 50 "
      "--micro-batch-size 2 --global-batch-size 8 --data-parallel-size 1 --kv-channels 8 "
      "--norm-epsilon 1e-6 --make-vocab-size-divisible-by 64 --init-method-std 0.006 --seed 7 "
      "--adam-eps 1e-5 --lr-warmup-samples 16 --lr-decay-samples 800 --train-samples 1000 "
      "--data-path 0.5 /d/a_text_document 0.5 /d/b_text_document --eval-interval 50 --save "
      "/ckpt --load /ckpt0 --ddp-bucket-size 1000000 --use-rotary-position-embeddings "
      "--rotary-percent 0.5 --optimizer adam --calculate-per-token-loss --openai-gelu "
      "--tokenizer-model tok.model --vocab-file v.json --merge-file m.txt "
      "--max-position-embeddings 32 --ffn-hidden-size 96 --lr-decay-iters 0 "
      "--rope-scaling-factor 4",
      FlagParseOptions());
  EXPECT_EQ(c.model.num_layers, 4);
  EXPECT_EQ(c.model.kv_channels, 8);
  EXPECT_EQ(c.model.norm_epsilon, 1e-6);
  EXPECT_EQ(c.model.make_vocab_size_divisible_by, 64);
  EXPECT_EQ(c.model.padded_vocab_size, 64);
  EXPECT_EQ(c.model.init_method_std, 0.006);
  EXPECT_EQ(c.model.position_embedding_type, "rope");
  EXPECT_EQ(c.model.rotary_percent, 0.5);
  EXPECT_EQ(c.model.rope_scaling_factor, 4);
  EXPECT_TRUE(c.model.openai_gelu);
  EXPECT_EQ(c.model.max_position_embeddings, 32);
  EXPECT_EQ(c.model.ffn_hidden_size, 96);
  EXPECT_EQ(c.training.num_microbatches, 4);
  EXPECT_EQ(c.training.adam_eps, 1e-5);
  EXPECT_EQ(c.parallel.ddp_bucket_size, 1000000);
  EXPECT_EQ(c.runtime.seed, 7);
  EXPECT_EQ(c.runtime.lr_warmup_samples, 16);
  EXPECT_EQ(c.runtime.lr_decay_samples, 800);
  EXPECT_EQ(c.runtime.train_samples, 1000);
  EXPECT_EQ(c.runtime.data_path,
            (std::vector<std::string>{"0.5", "/d/a_text_document", "0.5", "/d/b_text_document"}));
  EXPECT_EQ(c.runtime.eval_interval, 50);
  EXPECT_EQ(c.runtime.save, "/ckpt");
  EXPECT_EQ(c.runtime.load, "/ckpt0");
  EXPECT_EQ(c.runtime.tokenizer_model, "tok.model");
  EXPECT_EQ(c.runtime.vocab_file, "v.json");
  EXPECT_EQ(c.runtime.merge_file, "m.txt");

  PlanConfig legacy = parseOk(std::string(kMinimal) + " --no-calculate-per-token-loss");
  EXPECT_FALSE(legacy.training.calculate_per_token_loss);
  PlanConfig vpp = parseOk("--num-layers 8 --hidden-size 16 --num-attention-heads 4 "
                           "--seq-length 8 --vocab-size 37 --micro-batch-size 1 "
                           "--pipeline-model-parallel-size 2 --global-batch-size 2 "
                           "--num-layers-per-virtual-pipeline-stage 2",
                           [] {
                             FlagParseOptions o;
                             o.check_supported = false;
                             return o;
                           }());
  EXPECT_EQ(vpp.parallel.virtual_pipeline_model_parallel_size, 2);
  PlanConfig recompute =
      parseOk(std::string(kMinimal) + " --recompute-granularity full --recompute-method block "
                                      "--recompute-num-layers 1",
              [] {
                FlagParseOptions o;
                o.check_supported = false;
                return o;
              }());
  EXPECT_EQ(recompute.training.recompute_method, "block");
  EXPECT_EQ(recompute.training.recompute_num_layers, 1);
}

TEST(MegatronFlagsTest, SyntaxVariants) {
  // --flag=value, repeated flags (last wins), a value that looks like a negative number.
  PlanConfig c =
      parseOk(std::string(kMinimal) + " --hidden-size=32 --lr=1e-3 --data-path=only --min-lr -0 "
                                      "--hidden-size 24 --split=98,2");
  EXPECT_EQ(c.model.hidden_size, 24);
  EXPECT_EQ(*c.runtime.lr, 1e-3);
  EXPECT_EQ(c.runtime.data_path, std::vector<std::string>{"only"});
  EXPECT_EQ(c.runtime.split, "98,2");

  // Megatron applies --use-rotary-position-embeddings and --recompute-activations last.
  FlagParseOptions inspect;
  inspect.check_supported = false;
  PlanConfig r = parseOk(std::string(kMinimal) + " --use-rotary-position-embeddings "
                                                 "--position-embedding-type learned_absolute "
                                                 "--recompute-activations",
                         inspect);
  EXPECT_EQ(r.model.position_embedding_type, "rope");
  EXPECT_EQ(r.training.recompute_granularity, "selective");
}

TEST(MegatronFlagsTest, LoggingFlagsAreRecordedAsIgnored) {
  PlanConfig c =
      parseOk(std::string(kMinimal) +
              " --log-throughput --tensorboard-dir /tmp/tb --wandb-project p "
              "--timing-log-level 2 --log-timers-to-tensorboard --profile "
              "--profile-ranks 0 1 --use-mcore-models --transformer-impl local "
              "--use-flash-attn --no-gradient-accumulation-fusion --profile-step-start=3 "
              "--accumulate-allreduce-grads-in-fp32 --ddp-average-in-collective");
  EXPECT_EQ(c.ignoredFlags,
            (std::vector<std::string>{
                "--wandb-project", "--profile",
                "--profile-ranks", "--use-mcore-models", "--transformer-impl", "--use-flash-attn",
                "--no-gradient-accumulation-fusion", "--profile-step-start",
                "--accumulate-allreduce-grads-in-fp32", "--ddp-average-in-collective"}));
  // The TensorBoard flags are run-time defaults the plan records, not ignored.
  EXPECT_EQ(c.runtime.tensorboard_dir, "/tmp/tb");
  EXPECT_TRUE(c.runtime.log_timers_to_tensorboard);
  EXPECT_TRUE(c.runtime.log_learning_rate_to_tensorboard);
  // Megatron's timers are run-time defaults too.
  EXPECT_EQ(c.runtime.timing_log_level, 2);
  EXPECT_EQ(c.runtime.timing_log_option, "minmax");
  EXPECT_EQ(parseError(std::string(kMinimal) + " --timing-log-level 3"),
            "--timing-log-level expects one of 0, 1, 2, got '3'");
  PlanConfig off = parseOk(std::string(kMinimal) + " --no-log-learning-rate-to-tensorboard "
                                                   "--tensorboard-log-interval 5");
  EXPECT_FALSE(off.runtime.log_learning_rate_to_tensorboard);
  EXPECT_EQ(off.runtime.tensorboard_log_interval, 5);
}

TEST(MegatronFlagsTest, BaseModelMakesModelFlagsOptional) {
  std::optional<ModelConfig> base = findPreset("tiny-llama");
  FlagParseOptions options;
  options.base_model = &*base;
  PlanConfig c = parseOk("--micro-batch-size 2 --seq-length 8 --attention-dropout 0.1", options);
  EXPECT_EQ(c.model.family, "llama");
  EXPECT_EQ(c.model.num_query_groups, 2);
  EXPECT_EQ(c.model.seq_length, 8);
  EXPECT_EQ(c.model.attention_dropout, 0.1);
  EXPECT_EQ(parseError("--seq-length 8", options), "missing required flag --micro-batch-size");

  // A base from config.json: derived values follow the overrides.
  llvm::Expected<ModelConfig> gpt2 = parseHFConfig(kGPT2Config);
  ASSERT_TRUE(bool(gpt2)) << llvm::toString(gpt2.takeError());
  options.base_model = &*gpt2;
  PlanConfig g = parseOk("--micro-batch-size 4 --seq-length 512 --num-attention-heads 8", options);
  EXPECT_EQ(g.model.seq_length, 512);
  EXPECT_EQ(g.model.kv_channels, 96);
  EXPECT_TRUE(g.model.openai_gelu);
  EXPECT_EQ(g.model.padded_vocab_size, 50304);
}

TEST(MegatronFlagsErrorTest, Syntax) {
  std::string m = kMinimal;
  EXPECT_EQ(parseError(m + " foo"), "unexpected argument 'foo'");
  EXPECT_EQ(parseError(m + " --foo"), "unknown flag --foo");
  EXPECT_EQ(parseError(m + " --foo=3"), "unknown flag --foo");
  EXPECT_EQ(parseError(m + " -h"), "unknown flag -h");
  EXPECT_EQ(parseError(m + " --bf16=true"), "--bf16 does not take a value");
  EXPECT_EQ(parseError(m + " --num-layers"), "--num-layers expects a value");
  EXPECT_EQ(parseError(m + " --num-layers --bf16"), "--num-layers expects a value");
  EXPECT_EQ(parseError(m + " --save="), "--save expects a value");
  EXPECT_EQ(parseError(m + " --data-path"), "--data-path expects one or more values");
  EXPECT_EQ(parseError(m + " --data-path --mock-data"), "--data-path expects one or more values");
  EXPECT_EQ(parseError(m + " --data-path="), "--data-path expects one or more values");
}

TEST(MegatronFlagsErrorTest, BadValues) {
  std::string m = kMinimal;
  EXPECT_EQ(parseError(m + " --num-layers abc"),
            "--num-layers expects a positive integer, got 'abc'");
  EXPECT_EQ(parseError(m + " --num-layers 0"), "--num-layers expects a positive integer, got '0'");
  EXPECT_EQ(parseError(m + " --num-layers 2.5"),
            "--num-layers expects a positive integer, got '2.5'");
  EXPECT_EQ(parseError(m + " --micro-batch-size=-1"),
            "--micro-batch-size expects a positive integer, got '-1'");
  EXPECT_EQ(parseError(m + " --lr-warmup-iters -1"),
            "--lr-warmup-iters expects a non-negative integer, got '-1'");
  EXPECT_EQ(parseError(m + " --lr x"), "--lr expects a number, got 'x'");
  EXPECT_EQ(parseError(m + " --rotary-base inf"), "--rotary-base expects a number, got 'inf'");
  EXPECT_EQ(parseError(m + " --hidden-dropout 0.1x"),
            "--hidden-dropout expects a number, got '0.1x'");
  EXPECT_EQ(parseError(m + " --normalization BatchNorm"),
            "--normalization expects one of LayerNorm, RMSNorm, got 'BatchNorm'");
  EXPECT_EQ(parseError(m + " --position-embedding-type alibi"),
            "--position-embedding-type expects one of learned_absolute, rope, got 'alibi'");
  EXPECT_EQ(parseError(m + " --optimizer lamb"),
            "--optimizer expects one of adam, sgd, got 'lamb'");
  EXPECT_EQ(parseError(m + " --lr-decay-style WSD"),
            "--lr-decay-style expects one of constant, linear, cosine, inverse-square-root, "
            "got 'WSD'");
  EXPECT_EQ(parseError(m + " --recompute-granularity some"),
            "--recompute-granularity expects one of full, selective, got 'some'");
  EXPECT_EQ(parseError(m + " --recompute-method all"),
            "--recompute-method expects one of uniform, block, got 'all'");
  // Range checks come from finalize() and name the flag too.
  EXPECT_EQ(parseError(m + " --attention-dropout 1.5"),
            "--attention-dropout must be in [0, 1), got 1.5");
  EXPECT_EQ(parseError(m + " --hidden-size 100 --num-attention-heads 3"),
            "--hidden-size 100 is not divisible by --num-attention-heads 3");
  EXPECT_EQ(parseError(m + " --global-batch-size 10 --micro-batch-size 4"),
            "--global-batch-size 10 is not divisible by --micro-batch-size 4 x data-parallel "
            "size 1");
  EXPECT_EQ(parseError(m + " --split 1,x"), "--split expects up to three non-negative weights "
                                            "separated by ',' or '/' with a positive sum, got "
                                            "'1,x'");
}

TEST(MegatronFlagsErrorTest, RequiredFlags) {
  const std::vector<std::string> required = {"--num-layers",          "--hidden-size",
                                             "--num-attention-heads", "--seq-length",
                                             "--vocab-size",          "--micro-batch-size"};
  std::vector<std::string> all = words(kMinimal);
  for (const std::string &flag : required) {
    std::vector<std::string> args;
    for (size_t i = 0; i < all.size(); i += 2)
      if (all[i] != flag) {
        args.push_back(all[i]);
        args.push_back(all[i + 1]);
      }
    llvm::Expected<PlanConfig> result = parseMegatronFlags(args);
    EXPECT_EQ(errorText(std::move(result)), "missing required flag " + flag);
  }
}

TEST(MegatronFlagsErrorTest, ConflictingFlags) {
  std::string m = kMinimal;
  EXPECT_EQ(parseError(m + " --bf16 --fp16"), "--bf16 and --fp16 are mutually exclusive");
  EXPECT_EQ(parseError(m + " --calculate-per-token-loss --no-calculate-per-token-loss"),
            "--calculate-per-token-loss and --no-calculate-per-token-loss are mutually "
            "exclusive");
}

//===----------------------------------------------------------------------===//
// Hugging Face config.json
//===----------------------------------------------------------------------===//

TEST(HFConfigTest, Llama32) {
  llvm::Expected<ModelConfig> parsed = parseHFConfig(kLlama32Config);
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  ModelConfig m = *parsed;
  EXPECT_EQ(m.num_layers, 16);
  EXPECT_EQ(m.hidden_size, 2048);
  EXPECT_EQ(m.ffn_hidden_size, 8192);
  EXPECT_EQ(m.num_attention_heads, 32);
  EXPECT_TRUE(m.group_query_attention);
  EXPECT_EQ(m.num_query_groups, 8);
  EXPECT_EQ(m.kv_channels, 64);
  EXPECT_EQ(m.vocab_size, 128256);
  EXPECT_EQ(m.max_position_embeddings, 131072);
  EXPECT_EQ(m.seq_length, 131072);
  EXPECT_EQ(m.position_embedding_type, "rope");
  EXPECT_EQ(m.rotary_base, 500000);
  EXPECT_TRUE(m.use_rope_scaling);
  EXPECT_EQ(m.rope_scaling_factor, 32);
  EXPECT_EQ(m.normalization, "RMSNorm");
  EXPECT_EQ(m.norm_epsilon, 1e-5);
  EXPECT_TRUE(m.swiglu);
  EXPECT_FALSE(m.add_bias_linear);
  EXPECT_FALSE(m.untie_embeddings_and_output_weights);
  EXPECT_EQ(m.init_method_std, 0.02);
  EXPECT_EQ(m.attention_dropout, 0.0);
  EXPECT_EQ(m.hidden_dropout, 0.0);
  ASSERT_FALSE(m.finalize());
  EXPECT_EQ(m.family, "llama");
  EXPECT_EQ(m.padded_vocab_size, 128256);
  EXPECT_EQ(numParameters(m), 1235814400);

  // Compiling it today stops at the RoPE scaling.
  PlanConfig c;
  c.model = *parsed;
  c.training.micro_batch_size = 1;
  ASSERT_FALSE(c.finalize());
  EXPECT_EQ(errorText(checkSupported(c)), "not supported yet: --use-rope-scaling");
}

TEST(HFConfigTest, GPT2) {
  llvm::Expected<ModelConfig> parsed = parseHFConfig(kGPT2Config);
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  ModelConfig m = *parsed;
  EXPECT_EQ(m.num_layers, 12);
  EXPECT_EQ(m.hidden_size, 768);
  EXPECT_EQ(m.num_attention_heads, 12);
  EXPECT_EQ(m.max_position_embeddings, 1024);
  EXPECT_EQ(m.seq_length, 1024);
  EXPECT_EQ(m.vocab_size, 50257);
  EXPECT_EQ(m.position_embedding_type, "learned_absolute");
  EXPECT_EQ(m.normalization, "LayerNorm");
  EXPECT_EQ(m.norm_epsilon, 1e-5);
  EXPECT_TRUE(m.openai_gelu);
  EXPECT_FALSE(m.swiglu);
  EXPECT_TRUE(m.add_bias_linear);
  EXPECT_FALSE(m.untie_embeddings_and_output_weights);
  EXPECT_EQ(m.attention_dropout, 0.1);
  EXPECT_EQ(m.hidden_dropout, 0.1);
  ASSERT_FALSE(m.finalize());
  EXPECT_EQ(m.family, "gpt");
  EXPECT_EQ(m.ffn_hidden_size, 3072); // n_inner null
  EXPECT_EQ(m.padded_vocab_size, 50304);
  EXPECT_EQ(numParameters(m), 124439808);

  llvm::Expected<ModelConfig> erf = parseHFConfig(gpt2With("activation_function", "\"gelu\""));
  ASSERT_TRUE(bool(erf));
  EXPECT_FALSE(erf->openai_gelu);
  llvm::Expected<ModelConfig> inner = parseHFConfig(gpt2With("n_inner", "100"));
  ASSERT_TRUE(bool(inner));
  EXPECT_EQ(inner->ffn_hidden_size, 100);
  llvm::Expected<ModelConfig> untied = parseHFConfig(gpt2With("tie_word_embeddings", "false"));
  ASSERT_TRUE(bool(untied));
  EXPECT_TRUE(untied->untie_embeddings_and_output_weights);
}

TEST(HFConfigTest, LlamaDefaultsAndVariants) {
  llvm::Expected<ModelConfig> plain = parseHFConfig(
      R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
          "num_key_value_heads": null, "rope_scaling": null, "unknown_field": [1, 2]})");
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  EXPECT_FALSE(plain->group_query_attention);
  EXPECT_EQ(plain->max_position_embeddings, 2048);
  EXPECT_EQ(plain->rotary_base, 10000);
  EXPECT_EQ(plain->norm_epsilon, 1e-6);
  EXPECT_TRUE(plain->untie_embeddings_and_output_weights);
  EXPECT_FALSE(plain->use_rope_scaling);
  llvm::Expected<ModelConfig> biased =
      parseHFConfig(llamaWith("attention_bias", "true").insert(1, "\"mlp_bias\": true, "));
  ASSERT_TRUE(bool(biased)) << llvm::toString(biased.takeError());
  EXPECT_TRUE(biased->add_bias_linear);
  llvm::Expected<ModelConfig> legacyType =
      parseHFConfig(llamaWith("rope_scaling", R"({"type": "llama3", "factor": 8.0})"));
  ASSERT_TRUE(bool(legacyType)) << llvm::toString(legacyType.takeError());
  EXPECT_EQ(legacyType->rope_scaling_factor, 8);
}

TEST(HFConfigTest, ReadFile) {
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("frontends-test", "json", path));
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(path, ec);
    ASSERT_FALSE(ec);
    out << kGPT2Config;
  }
  llvm::Expected<ModelConfig> m = readHFConfigFile(path);
  EXPECT_TRUE(bool(m)) << llvm::toString(m.takeError());
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(path, ec);
    out << "{\"model_type\": \"gpt2\"}";
  }
  EXPECT_EQ(errorText(readHFConfigFile(path)),
            std::string(path.str()) + ": missing field 'n_embd'");
  llvm::sys::fs::remove(path);
  EXPECT_CONTAINS(errorText(readHFConfigFile("/nonexistent/config.json")),
                  "cannot read --hf-config file '/nonexistent/config.json': No such file");
  // A directory or a FIFO is refused before reading (reading a FIFO would block).
  EXPECT_EQ(errorText(readHFConfigFile("/tmp")),
            "--hf-config file '/tmp' is a directory, not a regular file");
  EXPECT_EQ(errorText(readHFConfigFile("/dev/null")),
            "--hf-config file '/dev/null' is a device, not a regular file");
}

TEST(TextLimitsTest, NestingDepth) {
  // Brackets inside strings and comments do not count; `->` is not a closing bracket.
  EXPECT_FALSE(bool(checkJsonDepth("{\"a\": \"[[[[\"}", "c.json", 2)));
  EXPECT_EQ(llvm::toString(checkJsonDepth("{\"a\": [[1]]}", "c.json", 2)),
            "c.json: JSON nested deeper than 2 levels at line 1, column 8");
  EXPECT_FALSE(bool(checkMlirDepth("func.func @f() -> (tensor<4xf32>) // [[[[[[\n", "m.mlir", 2)));
  EXPECT_EQ(llvm::toString(checkMlirDepth("x\n{ [ (", "m.mlir", 2)),
            "m.mlir: brackets nested deeper than 2 levels at line 2, column 5 (no model's "
            "attribute or type nests this deep)");
  // Closing brackets bring the depth back: a long flat file passes.
  std::string flat;
  for (int i = 0; i < 10000; ++i)
    flat += "[1],";
  EXPECT_FALSE(bool(checkJsonDepth("[" + flat + "2]", "c.json", 2)));
}

TEST(HFConfigErrorTest, Structure) {
  EXPECT_CONTAINS(hfError("{"), "config.json: invalid JSON: ");
  EXPECT_EQ(hfError("[1]"), "config.json: expected a JSON object at the top level");
  EXPECT_EQ(hfError("{}"), "config.json: missing field 'model_type'");
  EXPECT_EQ(hfError(R"({"model_type": 3})"), "config.json: field 'model_type' must be a string, "
                                             "got 3");
  EXPECT_EQ(hfError(R"({"model_type": "bert"})"),
            "config.json: unsupported model_type 'bert' (expected llama or gpt2)");
  EXPECT_EQ(errorText(parseHFConfig("{}", "model/config.json")),
            "model/config.json: missing field 'model_type'");
}

TEST(HFConfigErrorTest, FieldTypes) {
  EXPECT_EQ(hfError(R"({"model_type": "llama"})"), "config.json: missing field 'hidden_size'");
  EXPECT_EQ(hfError(llamaWith("num_attention_heads", "-1")),
            "config.json: field 'num_attention_heads' must be a positive integer, got -1");
  EXPECT_EQ(hfError(llamaWith("num_attention_heads", "\"4\"")),
            "config.json: field 'num_attention_heads' must be a positive integer, got \"4\"");
  EXPECT_EQ(hfError(llamaWith("num_hidden_layers", "2.5")),
            "config.json: field 'num_hidden_layers' must be a positive integer, got 2.5");
  EXPECT_EQ(hfError(llamaWith("num_hidden_layers", "null")),
            "config.json: missing field 'num_hidden_layers'");
  EXPECT_EQ(hfError(llamaWith("num_key_value_heads", "0")),
            "config.json: field 'num_key_value_heads' must be a positive integer, got 0");
  EXPECT_EQ(hfError(llamaWith("rope_theta", "\"big\"")),
            "config.json: field 'rope_theta' must be a number, got \"big\"");
  EXPECT_EQ(hfError(llamaWith("tie_word_embeddings", "1")),
            "config.json: field 'tie_word_embeddings' must be true or false, got 1");
  EXPECT_EQ(hfError(llamaWith("hidden_act", "1")),
            "config.json: field 'hidden_act' must be a string, got 1");
  EXPECT_EQ(hfError(gpt2With("n_embd", "0")),
            "config.json: field 'n_embd' must be a positive integer, got 0");
  EXPECT_EQ(hfError(R"({"model_type": "gpt2", "n_embd": 64})"),
            "config.json: missing field 'n_layer'");
}

TEST(HFConfigErrorTest, LlamaSemantics) {
  EXPECT_EQ(hfError(llamaWith("attention_bias", "true")),
            "config.json: attention_bias true and mlp_bias false differ; Megatron's "
            "add_bias_linear sets the biases of all linear layers");
  EXPECT_EQ(hfError(llamaWith("hidden_act", "\"gelu\"")),
            "config.json: unsupported hidden_act 'gelu' (expected silu)");
  EXPECT_EQ(hfError(llamaWith("rope_scaling", "3")),
            "config.json: field 'rope_scaling' must be an object or null");
  EXPECT_EQ(hfError(llamaWith("rope_scaling", R"({"rope_type": "yarn", "factor": 4.0})")),
            "config.json: unsupported rope_scaling type 'yarn' (expected llama3)");
  EXPECT_EQ(hfError(llamaWith("rope_scaling", R"({"factor": 4.0})")),
            "config.json: unsupported rope_scaling type '' (expected llama3)");
  EXPECT_EQ(hfError(llamaWith("rope_scaling",
                              R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 2})")),
            "config.json: rope_scaling.low_freq_factor 2 is not supported (Megatron's llama3 "
            "scaling uses 1)");
  EXPECT_EQ(hfError(llamaWith("rope_scaling", R"({"rope_type": "llama3",
                              "original_max_position_embeddings": 4096})")),
            "config.json: rope_scaling.original_max_position_embeddings 4096 is not supported "
            "(Megatron's llama3 scaling uses 8192)");
  EXPECT_EQ(hfError(llamaWith("rope_scaling", R"({"rope_type": "llama3", "factor": "x"})")),
            "config.json: field 'rope_scaling.factor' must be a number, got \"x\"");
  // ModelConfig::finalize() messages, prefixed.
  EXPECT_EQ(hfError(llamaWith("num_key_value_heads", "3")),
            "config.json: --num-attention-heads 4 is not divisible by --num-query-groups 3");
  EXPECT_EQ(hfError(llamaWith("attention_dropout", "1.0")),
            "config.json: --attention-dropout must be in [0, 1), got 1");
}

TEST(HFConfigErrorTest, GPT2Semantics) {
  EXPECT_EQ(hfError(gpt2With("activation_function", "\"relu\"")),
            "config.json: unsupported activation_function 'relu' (expected gelu_new, "
            "gelu_pytorch_tanh or gelu)");
  EXPECT_EQ(hfError(gpt2With("embd_pdrop", "0.2")),
            "config.json: embd_pdrop 0.2 differs from resid_pdrop 0.1; Megatron has one "
            "hidden_dropout for both");
  EXPECT_EQ(hfError(gpt2With("scale_attn_weights", "false")),
            "config.json: scale_attn_weights false is not supported (attention scores are "
            "scaled by 1/sqrt(head size))");
  EXPECT_EQ(hfError(gpt2With("scale_attn_by_inverse_layer_idx", "true")),
            "config.json: scale_attn_by_inverse_layer_idx true is not supported");
  EXPECT_EQ(hfError(gpt2With("n_head", "5")),
            "config.json: --hidden-size 64 is not divisible by --num-attention-heads 5");
}

} // namespace

//===----------------------------------------------------------------------===//
// Rank table
//===----------------------------------------------------------------------===//

TEST(RankTableTest, GoldenEightRanksTp2Pp2Dp2) {
  // Megatron's order tp-cp-ep-dp-pp: rank = tp + TP * dp + TP * DP * pp.
  RankTable t(/*tp=*/2, /*cp=*/1, /*ep=*/1, /*dp=*/2, /*pp=*/2);
  EXPECT_EQ(t.worldSize(), 8);
  using G = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(t.groups("tp"), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(t.groups("dp"), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(t.groups("pp"), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(t.groups("mp"), (G{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(t.groups("embd"), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(t.groups("cp"), (G{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_TRUE(t.groups("xx").empty());
  EXPECT_EQ(t.coords(6), (std::vector<int64_t>{0, 0, 0, 1, 1}));
  for (int64_t r = 0; r < 8; ++r)
    EXPECT_EQ(t.rankOf(t.coords(r)), r);
  std::vector<RankGroup> of5 = t.groupsOf(5);
  ASSERT_EQ(of5.size(), 7u);
  EXPECT_EQ(of5[0].name, "tp");
  EXPECT_EQ(of5[0].ranks, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(of5[3].name, "dp");
  EXPECT_EQ(of5[3].ranks, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(of5[4].ranks, (std::vector<int64_t>{1, 5}));
}

// groupsOf(r) computes each group of r directly; it must equal the groups of groups(kind) that
// contain r, in the same kind order.
TEST(RankTableTest, GroupsOfARankAreTheGroupsContainingIt) {
  for (auto [tp, cp, ep, dp, pp] : {std::array<int64_t, 5>{2, 1, 1, 2, 2},
                                    std::array<int64_t, 5>{2, 2, 1, 3, 4},
                                    std::array<int64_t, 5>{1, 1, 1, 5, 3}}) {
    RankTable t(tp, cp, ep, dp, pp);
    for (int64_t r = 0; r < t.worldSize(); ++r) {
      std::vector<RankGroup> expected;
      for (const char *kind : {"tp", "cp", "ep", "dp", "pp", "mp", "embd"})
        for (const std::vector<int64_t> &g : t.groups(kind))
          if (std::find(g.begin(), g.end(), r) != g.end())
            expected.push_back({kind, g});
      std::vector<RankGroup> got = t.groupsOf(r);
      ASSERT_EQ(got.size(), expected.size()) << "rank " << r;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].name, expected[i].name) << "rank " << r;
        EXPECT_EQ(got[i].ranks, expected[i].ranks) << "rank " << r << " " << got[i].name;
      }
    }
  }
}

TEST(RankTableTest, DataParallelOnlyAndEmbeddingGroupOfLongPipelines) {
  RankTable dp4(1, 1, 1, 4, 1);
  EXPECT_EQ(dp4.groups("dp"), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}}));
  EXPECT_EQ(dp4.groups("embd").size(), 4u); // pp = 1: each rank alone
  RankTable pp4(1, 1, 1, 1, 4);
  EXPECT_EQ(pp4.groups("embd"), (std::vector<std::vector<int64_t>>{{0, 3}}));
  // Ranks in the middle of the pipeline are in no embedding group.
  for (const RankGroup &g : pp4.groupsOf(1))
    EXPECT_NE(g.name, "embd");
}

namespace {

/// A value the placeholder accepts syntactically.
std::string sampleValue(const std::string &placeholder) {
  if (placeholder == "N" || placeholder == "V" || placeholder == "V...")
    return "2";
  if (placeholder == "INT")
    return "0";
  if (placeholder == "X")
    return "0.5";
  if (placeholder == "A,B,C")
    return "98,2,0";
  if (placeholder == "START INCR SAMPLES")
    return "1 1 4";
  if (placeholder.front() == '{')
    return placeholder.substr(1, placeholder.find_first_of(",}") - 1);
  return "some.txt"; // STR, PATH...
}

TEST(MegatronFlagsHelp, EveryTableFlagIsParsedAndListedWithItsDefaultAndKind) {
  // The help text and the parser's dispatch come from the same table: every entry must be
  // accepted by parseMegatronFlags (a value error or a finalize() rule is fine, "unknown flag"
  // or a placeholder the parser refuses as malformed is not), and the help must list exactly
  // the table's flags, each with its kind.
  std::set<std::string> names;
  FlagParseOptions noSupportCheck;
  noSupportCheck.check_supported = false;
  for (const FlagInfo &f : megatronFlagTable()) {
    EXPECT_TRUE(names.insert(f.name).second) << "duplicate " << f.name;
    std::vector<std::string> args = words(kMinimal);
    args.push_back(f.name);
    if (!f.value.empty())
      for (const std::string &w : words(sampleValue(f.value)))
        args.push_back(w);
    llvm::Expected<PlanConfig> r = parseMegatronFlags(args, noSupportCheck);
    if (!r) {
      std::string m = llvm::toString(r.takeError());
      EXPECT_EQ(m.find("unknown flag"), std::string::npos) << f.name << ": " << m;
      EXPECT_EQ(m.find(" expects "), std::string::npos) << f.name << ": " << m;
      EXPECT_EQ(m.find("does not take a value"), std::string::npos) << f.name << ": " << m;
    }
  }
  std::set<std::string> inHelp;
  std::istringstream help(megatronFlagHelp());
  for (std::string line; std::getline(help, line);)
    if (line.rfind("  --", 0) == 0) {
      inHelp.insert(line.substr(2, line.find(' ', 2) - 2));
      EXPECT_TRUE(line.find("[compile-time]") != std::string::npos ||
                  line.find("[run-time]") != std::string::npos ||
                  line.find("[ignored]") != std::string::npos)
          << line;
    }
  EXPECT_EQ(inHelp, names);
  // A few defaults as Megatron's arguments.py has them.
  auto dflt = [&](const std::string &name) {
    for (const FlagInfo &f : megatronFlagTable())
      if (f.name == name)
        return f.defaultValue;
    return std::string("<missing>");
  };
  EXPECT_EQ(dflt("--attention-dropout"), "0.1");
  EXPECT_EQ(dflt("--adam-beta2"), "0.999");
  EXPECT_EQ(dflt("--lr-decay-style"), "linear");
  EXPECT_EQ(dflt("--make-vocab-size-divisible-by"), "128");
  EXPECT_EQ(dflt("--timing-log-option"), "minmax");
  EXPECT_EQ(dflt("--swiglu"), "off");
}

TEST(MegatronFlagsTest, WeightDecayScheduleIsRecordedAndChecked) {
  PlanConfig c = parseOk(std::string(kMinimal) + " --weight-decay-incr-style cosine "
                                                 "--start-weight-decay 0.01 --end-weight-decay 0.1");
  EXPECT_EQ(c.runtime.weight_decay_incr_style, "cosine");
  EXPECT_EQ(c.runtime.start_weight_decay, 0.01);
  EXPECT_EQ(c.runtime.end_weight_decay, 0.1);
  EXPECT_EQ(c.runtime.toKeyValues().at("start_weight_decay"), "0.01");
  EXPECT_EQ(parseError(std::string(kMinimal) + " --end-weight-decay 0.1"),
            "--start-weight-decay and --end-weight-decay need --weight-decay-incr-style linear or "
            "cosine (with constant, --weight-decay applies throughout)");
  EXPECT_EQ(parseError(std::string(kMinimal) + " --weight-decay-incr-style linear "
                                               "--start-weight-decay 0.01"),
            "--weight-decay-incr-style linear needs both --start-weight-decay and "
            "--end-weight-decay");
  EXPECT_EQ(parseError(std::string(kMinimal) + " --weight-decay-incr-style exp"),
            "--weight-decay-incr-style expects one of constant, linear, cosine, got 'exp'");
}

TEST(MegatronFlagsHelp, NearestFlagForATypo) {
  EXPECT_EQ(nearestMegatronFlag("--hiden-size"), "--hidden-size");
  EXPECT_EQ(nearestMegatronFlag("--timing-log-levl"), "--timing-log-level");
  EXPECT_EQ(nearestMegatronFlag("--zzzzzzzzzzzzzzzzzzzzzzzzz"), "");
}

} // namespace

namespace {

TEST(GeluSelection, MegatronsRulePerFlagCombination) {
  // Megatron's MLP: the tanh form with --openai-gelu or with the bias-GELU fusion (default on,
  // off without biases); F.gelu's erf form otherwise.
  EXPECT_TRUE(parseOk(kMinimal).model.gelu_tanh);
  EXPECT_FALSE(parseOk(std::string(kMinimal) + " --no-bias-gelu-fusion").model.gelu_tanh);
  EXPECT_FALSE(parseOk(std::string(kMinimal) + " --disable-bias-linear").model.gelu_tanh);
  EXPECT_TRUE(parseOk(std::string(kMinimal) + " --openai-gelu --no-bias-gelu-fusion").model.gelu_tanh);
  EXPECT_FALSE(parseOk(std::string(kMinimal) + " --swiglu --ffn-hidden-size 32").model.gelu_tanh);
  // Hugging Face: gelu_new is the tanh form, "gelu" the exact erf form.
  llvm::Expected<ModelConfig> tanhModel = parseHFConfig(kGPT2Config);
  ASSERT_TRUE(bool(tanhModel)) << llvm::toString(tanhModel.takeError());
  ASSERT_FALSE(bool(tanhModel->finalize()));
  EXPECT_TRUE(tanhModel->gelu_tanh);
  std::string erfConfig = kGPT2Config;
  erfConfig.replace(erfConfig.find("gelu_new"), 8, "gelu");
  llvm::Expected<ModelConfig> erfModel = parseHFConfig(erfConfig);
  ASSERT_TRUE(bool(erfModel)) << llvm::toString(erfModel.takeError());
  ASSERT_FALSE(bool(erfModel->finalize()));
  EXPECT_FALSE(erfModel->gelu_tanh);
}

} // namespace

namespace {

// Tests that --rampup-batch-size records Megatron's three values and the num_microbatches a run
// reaches below the final one (GBS 8 from 2 by 2 over 12 samples, mbs 1, dp 2: batches 2, 2, 4,
// 6, 8 are 1, 1, 2, 3, 4 microbatches), and that a constant-batch plan's keys stay as before.
TEST(RampupConfig, RecordsTheRampAndTheProgramsItNeeds) {
  PlanConfig c = parseOk(std::string(kMinimal) + " --data-parallel-size 2 --global-batch-size 8 "
                                                 "--rampup-batch-size 2 2 12 --train-samples 60");
  EXPECT_EQ(c.training.rampup_batch_size, (std::vector<int64_t>{2, 2, 12}));
  EXPECT_EQ(c.training.num_microbatches, 4);
  EXPECT_EQ(c.training.rampup_num_microbatches, (std::vector<int64_t>{1, 2, 3}));
  KeyValues kv = c.training.toKeyValues();
  EXPECT_EQ(kv["rampup_batch_size"], "2 2 12");
  EXPECT_EQ(kv["rampup_num_microbatches"], "1 2 3");
  EXPECT_EQ(kv["decrease_batch_size_if_needed"], "false");
  PlanConfig plain = parseOk(std::string(kMinimal) + " --global-batch-size 8");
  EXPECT_EQ(plain.training.toKeyValues().count("rampup_batch_size"), 0u);
  EXPECT_EQ(parseError(std::string(kMinimal) + " --global-batch-size 8 --rampup-batch-size 2 2"),
            "expected the following format: --rampup-batch-size <start batch size> <batch size "
            "increment> <ramp-up samples>, got 2 values");
}

} // namespace

// Megatron's overlap_p2p_comm: --no-overlap-p2p-communication is store_false (on by default),
// and arguments.py turns it off without virtual stages (no interleaving).
TEST(MegatronFlagsTest, OverlapP2PCommFollowsMegatron) {
  const std::string pp2 = std::string(kMinimal) +
                          " --num-layers 4 --pipeline-model-parallel-size 2 --global-batch-size 4";
  EXPECT_TRUE(parseOk(pp2 + " --virtual-pipeline-model-parallel-size 2").parallel.overlap_p2p_comm);
  EXPECT_FALSE(parseOk(pp2 + " --virtual-pipeline-model-parallel-size 2 "
                             "--no-overlap-p2p-communication")
                   .parallel.overlap_p2p_comm);
  EXPECT_FALSE(parseOk(pp2).parallel.overlap_p2p_comm);
  EXPECT_FALSE(parseOk(pp2 + " --pipeline-schedule zb-h1").parallel.overlap_p2p_comm);
  EXPECT_FALSE(parseOk(kMinimal).parallel.overlap_p2p_comm);
  // A switch: it takes no value.
  llvm::Expected<PlanConfig> bad = parse(pp2 + " --no-overlap-p2p-communication=1");
  ASSERT_FALSE(bool(bad));
  EXPECT_CONTAINS(llvm::toString(bad.takeError()), "--no-overlap-p2p-communication");
}
