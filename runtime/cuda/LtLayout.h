//===- LtLayout.h - Row-major matmul as a column-major cuBLASLt GEMM ------===//
//
// matmul's c[..., M, N] = op(a)[..., M, K] op(b)[..., K, N] (row-major, b shared by all batches
// unless batched) is computed by cuBLASLt, which is column-major, as C^T = op(B)^T op(A)^T: a
// row-major X is the column-major X^T, so cuBLAS's first operand is our b and its second our a.
// Pure arithmetic (no CUDA types), so the mapping is tested without a GPU against the CPU backend
// (tests/unit/CudaKernelsTest.cpp, LtLayoutMatchesTheCpuMatmul).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CUDA_LTLAYOUT_H
#define TRAINC_RUNTIME_CUDA_LTLAYOUT_H

#include <cstdint>

namespace trainc::rt::cuda {

/// One column-major operand: rows x cols stored with leading dimension ld (elements), batches
/// `stride` elements apart (0: shared); `trans`: cuBLAS applies op = transpose to it.
struct LtOperand {
  int64_t rows, cols, ld, stride;
  bool trans;
};

/// The cuBLASLt problem: D (= C, in place) = alpha op(A) op(B) + beta C over `batch` batches, each
/// m x n with contraction k (cuBLAS's names: m = our N, n = our M, k = K).
struct LtGemm {
  LtOperand a, b, c;
  int64_t batch, m, n, k;
};

/// The mapping for `batch` x [M, K] @ [K, N] with our transposes; a shared weight with an
/// untransposed a folds the batch into M (one GEMM). (The caller issues a transposed a against a
/// shared weight one batch at a time; here its b stride would be 0.)
inline LtGemm ltGemmFor(int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                        bool bBatched) {
  if (!ta && !bBatched && batch > 1) {
    M *= batch;
    batch = 1;
  }
  LtGemm g;
  g.batch = batch;
  g.m = N;
  g.n = M;
  g.k = K;
  int64_t bStride = bBatched && batch > 1 ? K * N : 0;
  // cuBLAS's A = our b: stored [K, N] (col-major N x K, ld N), or [N, K] with tb (K x N, ld K).
  g.a = tb ? LtOperand{K, N, K, bStride, true} : LtOperand{N, K, N, bStride, false};
  // cuBLAS's B = our a: stored [M, K] (col-major K x M, ld K), or [K, M] with ta (M x K, ld M).
  g.b = ta ? LtOperand{M, K, M, M * K, true} : LtOperand{K, M, K, M * K, false};
  g.c = LtOperand{N, M, N, M * N, false};
  return g;
}

} // namespace trainc::rt::cuda

#endif
