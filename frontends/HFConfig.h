//===- HFConfig.h - Hugging Face config.json frontend --------------------===//
//
// Reads a Hugging Face transformers config.json (LlamaConfig or GPT2Config) into a ModelConfig
// with the Megatron meaning of every field.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_FRONTENDS_HFCONFIG_H
#define TRAINC_FRONTENDS_HFCONFIG_H

#include "frontends/ModelConfig.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace trainc::config {

/// Parses config.json text. Fields (absent or null ones take transformers' defaults):
///  - model_type "llama": hidden_size, intermediate_size, num_hidden_layers,
///    num_attention_heads, vocab_size (required); num_key_value_heads, head_dim,
///    max_position_embeddings (2048), rope_theta (10000), rms_norm_eps (1e-6),
///    tie_word_embeddings (false), attention_bias / mlp_bias (false; they must agree: Megatron's
///    add_bias_linear covers both), initializer_range (0.02), attention_dropout (0),
///    hidden_act ("silu" only), rope_scaling (null, or rope_type "llama3" with Megatron's fixed
///    low/high frequency factors 1 / 4 and original context 8192).
///  - model_type "gpt2": n_embd, n_layer, n_head, n_positions, vocab_size (required); n_inner
///    (null: 4 * n_embd), layer_norm_epsilon (1e-5), activation_function ("gelu_new" or
///    "gelu_pytorch_tanh": tanh GELU; "gelu": erf GELU), initializer_range (0.02),
///    attn_pdrop / resid_pdrop / embd_pdrop (0.1; embd_pdrop must equal resid_pdrop),
///    tie_word_embeddings (true).
/// Other fields are ignored. seq_length is set to the model's maximum (max_position_embeddings
/// or n_positions); override it with --seq-length. The result holds the file's values only;
/// it has passed ModelConfig::finalize() on a copy, and the caller finalizes it again for its
/// tensor-model-parallel size.
///
/// Errors start with "<sourceName>: ", e.g. "config.json: missing field 'hidden_size'",
/// "config.json: unsupported model_type 'bert' (expected llama or gpt2)",
/// "config.json: field 'num_attention_heads' must be a positive integer, got -1",
/// "config.json: invalid JSON: ...", or a ModelConfig::finalize() message.
llvm::Expected<ModelConfig> parseHFConfig(llvm::StringRef jsonText,
                                          llvm::StringRef sourceName = "config.json");

/// Reads and parses the file at `path`; messages start with the path. Also reports
/// "cannot read '<path>': <reason>".
llvm::Expected<ModelConfig> readHFConfigFile(llvm::StringRef path);

} // namespace trainc::config

#endif // TRAINC_FRONTENDS_HFCONFIG_H
