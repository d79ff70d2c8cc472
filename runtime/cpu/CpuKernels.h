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

/// Tests: the instruction set of attention's fused f32 tiles (AttentionKernels.cpp): 2 AVX-512F,
/// 1 AVX2 with FMA, 0 portable, clamped to what the CPU has; returns the previous setting. Every
/// setting gives the same bits.
int setAttentionIsaForTesting(int isa);

} // namespace trainc::rt::cpu

#endif
