//===- ModelBuilder.h - GPT and Llama on the model dialect -----------------===//
//
// Builds `func.func @forward` of a GPT (learned absolute positions, LayerNorm, GELU, biases, tied
// input/output embeddings) or a Llama (RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases,
// untied) from one ModelConfig, following Megatron-LM's GPTModel and its parameter names.
//
// Parameters are declared once at module level (model.parameter @<Megatron name>: init =
// "normal" | "ones" | "zeros", init_std, no_weight_decay on biases and norm weights).
// Arguments: every parameter (model.param = @its name), then the
// inputs of one microbatch (model.input = "tokens", "position_ids", "labels", "loss_mask" and,
// with hidden or attention dropout, "rng"; with --reset-attention-mask, "doc_start": i32 [b, s],
// each token's first attended key). Results: (loss_sum, num_tokens) of cross entropy over the padded
// vocabulary with padding columns masked out.
//
// The decoder layer is built once, as `func.func private @decoder_layer(x, the layer's
// parameters in state-dict order, [position_ids], [doc_start], [dropout key: tensor<4xi64>]) -> x`,
// and @forward calls it once per layer (`model.layer_index`) with layer i's parameters and the key
// `model.rng_offset(rng, sites per layer x i)`, so each dropout site keeps the op id of a flat
// model: embedding 1, layer i's attention and MLP outputs 2 + 2i and 3 + 2i. With attention
// dropout a layer has three sites: attention output 2 + 3i, MLP output 3 + 3i and the attention
// probabilities (inside model.attention) 4 + 3i.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_MODELS_MODELBUILDER_H
#define TRAINC_MODELS_MODELBUILDER_H

#include "frontends/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"

namespace mlir::trainc {

struct BuildOptions {
  int64_t microBatchSize = 1;
  /// Element type of parameters and activations: "fp32", "fp64" (gradient checks), "fp16" or "bf16"
  /// (--bf16: statistics, the loss mask, the loss and the logits it reads stay f32).
  std::string dtype = "fp32";
  std::string functionName = "forward";
};

/// Appends the forward function for `cfg` (finalized) to `module`. Errors (emitted on the module):
/// configurations the builder cannot express (an odd rotary dimension). `--attention-dropout` p > 0
/// gives each layer's model.attention dropout p with the layer's key (op id: the layer's third
/// dropout site; docs/design.md "Dropout keys").
LogicalResult buildModel(ModuleOp module, const ::trainc::config::ModelConfig &cfg,
                         const BuildOptions &options);

} // namespace mlir::trainc

#endif
