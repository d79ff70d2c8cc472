//===- Passes.h - CUDA graph capture regions ------------------------------===//
#ifndef TRAINC_PASSES_GRAPH_PASSES_H
#define TRAINC_PASSES_GRAPH_PASSES_H

#include "dialects/Rt/RtDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::trainc {
#define GEN_PASS_DECL
#include "passes/Graph/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/Graph/Passes.h.inc"

/// The module attribute that asks trainc-cuda-graph for a mode ("none" or "full_iteration").
inline constexpr llvm::StringLiteral kCudaGraphImplAttrName = "trainc.cuda_graph_impl";
} // namespace mlir::trainc

#endif
