//===- KernelTestUtil.h - Host tensors, direct kernel calls, finite differences ===//
#ifndef TRAINC_TESTS_UNIT_KERNELTESTUTIL_H
#define TRAINC_TESTS_UNIT_KERNELTESTUTIL_H

#include "runtime/core/Backend.h"
#include "runtime/core/Kernel.h"
#include "runtime/core/ProgramBuilder.h"
#include "runtime/core/Resolve.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <vector>

namespace trainc::rt::test {

/// A host tensor of any dtype, elements read and written as double.
struct HostTensor {
  DType dtype = DType::F64;
  std::vector<int64_t> shape;
  std::vector<char> bytes;

  HostTensor() = default;
  HostTensor(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
    bytes.assign(size_t(numel()) * dtypeSize(t), 0);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  double get(int64_t i) const {
    const char *p = bytes.data() + i * dtypeSize(dtype);
    switch (dtype) {
    case DType::F32: return *reinterpret_cast<const float *>(p);
    case DType::F64: return *reinterpret_cast<const double *>(p);
    case DType::BF16: return float(*reinterpret_cast<const bf16 *>(p));
    case DType::F16: return float(*reinterpret_cast<const f16 *>(p));
    case DType::I32: return *reinterpret_cast<const int32_t *>(p);
    case DType::I64: return double(*reinterpret_cast<const int64_t *>(p));
    default: return 0;
    }
  }
  void set(int64_t i, double v) {
    char *p = bytes.data() + i * dtypeSize(dtype);
    switch (dtype) {
    case DType::F32: *reinterpret_cast<float *>(p) = float(v); break;
    case DType::F64: *reinterpret_cast<double *>(p) = v; break;
    case DType::BF16: *reinterpret_cast<bf16 *>(p) = bf16(float(v)); break;
    case DType::F16: *reinterpret_cast<f16 *>(p) = f16(float(v)); break;
    case DType::I32: *reinterpret_cast<int32_t *>(p) = int32_t(v); break;
    case DType::I64: *reinterpret_cast<int64_t *>(p) = int64_t(v); break;
    default: break;
    }
  }
  /// The same values in another dtype.
  HostTensor as(DType t) const {
    HostTensor r(t, shape);
    for (int64_t i = 0; i < numel(); ++i)
      r.set(i, get(i));
    return r;
  }
  TensorView view() {
    TensorView v;
    makeView(dtype, shape.data(), int(shape.size()), v);
    v.data = bytes.data();
    return v;
  }
};

/// Uniform random values in [lo, hi) from a fixed seed.
inline HostTensor randomTensor(DType t, std::vector<int64_t> shape, uint32_t seed, double lo = -1,
                               double hi = 1) {
  HostTensor r(t, std::move(shape));
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < r.numel(); ++i)
    r.set(i, u(g));
  return r;
}

/// Random integers in [lo, hi).
inline HostTensor randomInts(DType t, std::vector<int64_t> shape, uint32_t seed, int64_t lo,
                             int64_t hi) {
  HostTensor r(t, std::move(shape));
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int64_t> u(lo, hi - 1);
  for (int64_t i = 0; i < r.numel(); ++i)
    r.set(i, double(u(g)));
  return r;
}

/// Runs kernel `name` of the CPU backend directly on host tensors after checking its signature
/// (Kernel.h). A signature error fails the calling test and leaves the outputs untouched.
inline void runKernel(const std::string &name, std::vector<HostTensor *> in,
                      std::vector<HostTensor *> out, std::vector<AttrArg> attrs = {}) {
  static std::unique_ptr<Backend> backend = createCpuBackend();
  const KernelSignature *sig = findKernelSignature(name);
  ASSERT_NE(sig, nullptr) << "unknown kernel " << name;
  KernelFn fn = backend->findKernel(name);
  ASSERT_NE(fn, nullptr) << "the CPU backend lacks kernel " << name;
  ASSERT_EQ(int(in.size()), sig->numIn) << name;
  ASSERT_EQ(int(out.size()), sig->numOut) << name;
  google::protobuf::RepeatedPtrField<schema::Attr> pa;
  for (const AttrArg &a : attrs) {
    schema::Attr *x = pa.Add();
    x->set_name(a.name);
    a.store(*x->mutable_value());
  }
  Attrs decoded;
  std::string e = decodeAttrs(*sig, pa, decoded);
  ASSERT_EQ(e, "") << name;
  std::vector<TensorView> iv, ov;
  for (HostTensor *t : in)
    iv.push_back(t->view());
  for (HostTensor *t : out)
    ov.push_back(t->view());
  KernelCtx ctx{iv.data(), int(iv.size()), ov.data(), int(ov.size()), &decoded, nullptr};
  e = sig->verify(ctx);
  ASSERT_EQ(e, "") << name;
  fn(ctx);
}

/// Runs f() with the OpenMP thread count set to `threads`, then restores it (the threaded kernels'
/// results must not depend on it).
template <typename F> void withOmpThreads(int threads, F &&f) {
  int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  f();
  omp_set_num_threads(saved);
}

/// Signature check only: returns "" or the verifier's message.
inline std::string verifyKernel(const std::string &name, std::vector<HostTensor *> in,
                                std::vector<HostTensor *> out, std::vector<AttrArg> attrs = {}) {
  const KernelSignature *sig = findKernelSignature(name);
  google::protobuf::RepeatedPtrField<schema::Attr> pa;
  for (const AttrArg &a : attrs) {
    schema::Attr *x = pa.Add();
    x->set_name(a.name);
    a.store(*x->mutable_value());
  }
  Attrs decoded;
  if (std::string e = decodeAttrs(*sig, pa, decoded); !e.empty())
    return e;
  std::vector<TensorView> iv, ov;
  for (HostTensor *t : in)
    iv.push_back(t->view());
  for (HostTensor *t : out)
    ov.push_back(t->view());
  KernelCtx ctx{iv.data(), int(iv.size()), ov.data(), int(ov.size()), &decoded, nullptr};
  return sig->verify(ctx);
}

/// ||a - b|| / max(||a||, ||b||, 1e-30): the norm-wise relative error used by every tolerance in
/// the kernel tests.
inline double relError(const HostTensor &a, const HostTensor &b) {
  double d = 0, na = 0, nb = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    d += (a.get(i) - b.get(i)) * (a.get(i) - b.get(i));
    na += a.get(i) * a.get(i);
    nb += b.get(i) * b.get(i);
  }
  return std::sqrt(d) / std::max({std::sqrt(na), std::sqrt(nb), 1e-30});
}

/// A forward function for finite differences: f64 inputs -> f64 outputs.
using ForwardFn = std::function<std::vector<HostTensor>(std::vector<HostTensor> &)>;

/// Central finite differences of the scalar objective L(x) = sum_o <weights[o], forward(x)[o]>
/// with respect to input `which`, step h (f64). Returns dL/dx[which].
inline HostTensor finiteDifference(const ForwardFn &forward, std::vector<HostTensor> inputs,
                                   const std::vector<HostTensor> &weights, int which,
                                   double h = 1e-5) {
  auto objective = [&](std::vector<HostTensor> &x) {
    std::vector<HostTensor> outs = forward(x);
    double l = 0;
    for (size_t o = 0; o < weights.size(); ++o)
      for (int64_t i = 0; i < weights[o].numel(); ++i)
        l += weights[o].get(i) * outs[o].get(i);
    return l;
  };
  HostTensor g(DType::F64, inputs[which].shape);
  for (int64_t i = 0; i < inputs[which].numel(); ++i) {
    double x0 = inputs[which].get(i);
    inputs[which].set(i, x0 + h);
    double lp = objective(inputs);
    inputs[which].set(i, x0 - h);
    double lm = objective(inputs);
    inputs[which].set(i, x0);
    g.set(i, (lp - lm) / (2 * h));
  }
  return g;
}

} // namespace trainc::rt::test

#endif
