//===- ModelModule.h - The .mlir model frontend ---------------------------===//
//
// `trainc compile MODEL.mlir`: a module whose func.func @forward is a model-dialect forward
// function (arguments tagged model.param / model.input, as models/ModelBuilder.h builds them).
// The module itself is the model; what the configuration needs from it (micro-batch size and
// sequence length, from the tokens input) is read here rather than passed on as flag strings.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_FRONTENDS_MODELMODULE_H
#define TRAINC_FRONTENDS_MODELMODULE_H

#include "frontends/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace trainc::config {

struct ModelModule {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// The model fields the rest of the configuration starts from: seq_length and
  /// max_position_embeddings from the tokens input; the others are placeholders (the module's
  /// own ops define the model, and its plan records their shape).
  ModelConfig base;
  /// The tokens input's first dimension.
  int64_t micro_batch_size = 0;
  /// The module's own `sched.plan`, when it has one, as the configuration the command line's
  /// flags start from (parallel sizes, batch, optimizer and loss mode; `model` is `base`).
  std::optional<PlanConfig> plan;
};

/// One model-shape field of `#sched.plan` as a module's model IR fixes it: the plan's field name
/// (num_layers, hidden_size, ...), its value and where in the IR it was read (for messages).
struct IRShapeField {
  std::string field;
  int64_t value = 0;
  std::string source;
};

/// The model-shape fields that the model IR of `module` (its func.func @forward and what that
/// calls) fixes, in #sched.plan's field order: micro_batch_size and seq_length from the tokens
/// input [micro batch, seq]; padded_vocab_size and hidden_size from the model.embedding of the
/// tokens (its table [vocab, hidden]); num_layers = the number of distinct `decoder.layers.<i>.`
/// parameters of @forward; num_attention_heads and num_query_groups from the first
/// model.attention (query [b, s, heads, d], key [b, s, groups, d]); ffn_hidden_size from an
/// `mlp.linear_fc2.weight` parameter [hidden, ffn]. A field the IR does not have (a model without
/// decoder layers has no heads) is left out; `module` without @forward or tokens gives nothing.
std::vector<IRShapeField> modelShapeOfIR(mlir::ModuleOp module);

/// Makes `config.model` (parsed and finalized from a .mlir input's placeholder base) the model of
/// `module` where its IR fixes the shape: num_layers, hidden_size, num_attention_heads,
/// num_query_groups (group_query_attention when fewer than the heads), kv_channels (the query's
/// head dim), ffn_hidden_size, padded_vocab_size and vocab_size (the model.cross_entropy's
/// valid_vocab, or the padded size without one). So the recorded configuration (metadata,
/// PlanInfo.vocab_size, which bounds the training data's token ids, and the plan) is the module's
/// model, not the placeholder. `flags` is the command line: a model flag given there
/// (--num-layers, --hidden-size, --num-attention-heads, --num-query-groups, --ffn-hidden-size,
/// --vocab-size, --seq-length) whose value differs from the IR's is an error naming the flag, both
/// values and where the IR's is read.
llvm::Error adoptModelShapeOfIR(mlir::ModuleOp module, llvm::StringRef path,
                                llvm::ArrayRef<std::string> flags, PlanConfig &config);

/// Parses `path` in `ctx` (the trainc dialects loaded; parse errors are printed to stderr with
/// the offending line). Errors name the file: unreadable, not parseable, no func.func @forward, no argument
/// tagged model.input = "tokens", tokens not a rank-2 tensor [micro batch, seq], or a
/// `sched.plan` module attribute that is not a #sched.plan, or whose model-shape fields
/// (or micro_batch_size) disagree with modelShapeOfIR (the message names the field, the plan's
/// value and the IR's, and where the IR's comes from).
llvm::Expected<ModelModule> readModelModule(mlir::MLIRContext &ctx, llvm::StringRef path);

} // namespace trainc::config

#endif
