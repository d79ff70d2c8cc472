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

/// Parses `path` in `ctx` (the trainc dialects loaded; parse errors are printed to stderr with
/// the offending line). Errors name the file: unreadable, not parseable, no func.func @forward, no argument
/// tagged model.input = "tokens", tokens not a rank-2 tensor [micro batch, seq], or a
/// `sched.plan` module attribute that is not a #sched.plan.
llvm::Expected<ModelModule> readModelModule(mlir::MLIRContext &ctx, llvm::StringRef path);

} // namespace trainc::config

#endif
