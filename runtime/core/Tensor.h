//===- Tensor.h - Views of buffers passed to kernels ----------------------===//
#ifndef TRAINC_RUNTIME_CORE_TENSOR_H
#define TRAINC_RUNTIME_CORE_TENSOR_H

#include "runtime/core/DType.h"

#include <cstdint>
#include <string>
#include <vector>

namespace trainc::rt {

constexpr int kMaxRank = 6;

/// A contiguous row-major view of `numel` elements of `dtype` at `data` with shape dims[0..rank).
/// A scalar has rank 0 and numel 1. `data` is null during validation.
struct TensorView {
  void *data = nullptr;
  DType dtype = DType::Invalid;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t numel = 1;

  int64_t dim(int i) const { return dims[i < 0 ? rank + i : i]; }
  size_t bytes() const { return size_t(numel) * dtypeSize(dtype); }
  /// Product of all dims but the last (the "rows" of a [..., N] tensor); 1 for rank <= 1.
  int64_t rows() const {
    int64_t r = 1;
    for (int i = 0; i + 1 < rank; ++i)
      r *= dims[i];
    return r;
  }
  template <typename T> T *as() const { return static_cast<T *>(data); }
  std::string shapeString() const;
};

/// Builds a view; returns false if the rank exceeds kMaxRank or a dim is negative.
bool makeView(DType dtype, const int64_t *dims, int rank, TensorView &out);
inline TensorView makeView(DType dtype, std::initializer_list<int64_t> dims,
                           void *data = nullptr) {
  TensorView v;
  makeView(dtype, dims.begin(), int(dims.size()), v);
  v.data = data;
  return v;
}

std::string shapeString(const int64_t *dims, int rank);

} // namespace trainc::rt

#endif
