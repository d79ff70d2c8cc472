//===- CpuKernels.h - Registration of the CPU backend's kernels ----------===//
//
// Each kernel family registers its implementations (one KernelFn per kernel name in Kernel.h's
// table) into the CPU backend's table. A KernelFn dispatches on the operand dtype (f32, f64, bf16).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CPU_CPUKERNELS_H
#define TRAINC_RUNTIME_CPU_CPUKERNELS_H

#include "runtime/core/Kernel.h"

#include <map>
#include <string>

namespace trainc::rt::cpu {

using KernelTable = std::map<std::string, KernelFn, std::less<>>;

void registerElementwiseKernels(KernelTable &t); // fill copy cast add scale scale_by reciprocal
                                                 // add_bias sum_rows gelu swiglu dropout
void registerMatmulKernels(KernelTable &t);      // matmul (oneDNN for f32/bf16)
void registerNormKernels(KernelTable &t);        // layer_norm rms_norm rope embedding (+ bwd)
void registerAttentionKernels(KernelTable &t);   // attention attention_backward
void registerLossKernels(KernelTable &t);        // cross_entropy and vocab-parallel pieces
void registerOptimizerKernels(KernelTable &t);   // adamw sum_squares grad_norm_finalize

/// The complete table (all families).
const KernelTable &cpuKernelTable();

/// Tests and bench_attention: the f32 / bf16 attention path without dropout (AttentionKernels.cpp):
/// the fused tiles for 2 AVX-512F, 1 AVX2 with FMA, 0 portable (the three give the same bits), or
/// -1 the row panels through oneDNN's sgemm (the path before the tiles, as dropout and f64 still
/// use); clamped to what the CPU has. Returns the previous setting.
int setAttentionPathForTesting(int path);

} // namespace trainc::rt::cpu

#endif
