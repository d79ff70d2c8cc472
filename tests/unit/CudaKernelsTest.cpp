//===- CudaKernelsTest.cpp - Every CUDA kernel against the CPU backend ----===//
//
// Each case runs one kernel on the CPU backend (the reference, itself checked against f64 loops
// and finite differences in the other kernel tests) and on the CUDA backend with the same inputs,
// and compares the outputs with the norm-wise relative error of KernelTestUtil.h:
//   f32: 1e-5 (5e-5 for attention and the GEMMs with K >= 64: different summation orders and FMA
//   contraction on the GPU), bf16: 1e-2 (one bf16 ulp is 2^-8 ~ 3.9e-3 on a few elements), f64:
//   1e-12; integer outputs and dropout masks: bitwise.
// Without a GPU (or without libcudart / libcublasLt) every case is skipped (GTEST_SKIP, reported
// as skipped by ctest); NoDeviceErrorIsClear runs instead and checks the error message.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/DropoutRng.h"
#include "runtime/cuda/LtLayout.h"
#include "runtime/core/Philox.h"

#include <algorithm>
#include <cstdlib>

namespace trainc::rt::test {
namespace {

struct Gpu {
  std::unique_ptr<Backend> backend;
  std::string why;
};
Gpu &gpu() {
  static Gpu g = [] {
    Gpu r;
    if (!cudaBackendAvailable(&r.why))
      return r;
    auto b = createCudaBackend(0);
    if (!b.ok())
      r.why = std::string(b.status().message());
    else
      r.backend = std::move(*b);
    return r;
  }();
  return g;
}

#define REQUIRE_GPU()                                                                              \
  do {                                                                                             \
    if (!gpu().backend)                                                                            \
      GTEST_SKIP() << "no usable CUDA device: " << gpu().why;                                      \
  } while (0)

TEST(CudaBackend, NoDeviceErrorIsClear) {
  if (gpu().backend)
    GTEST_SKIP() << "a CUDA device is present";
  auto b = createCudaBackend(0);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  std::string m(b.status().message());
  EXPECT_EQ(m.rfind("--backend cuda: ", 0), 0u) << m;
  bool named = m.find("no CUDA device: cudaGetDeviceCount failed with cudaError") !=
                   std::string::npos ||
               m.find("cannot load libcudart.so.13") != std::string::npos ||
               m.find("built without CUDA") != std::string::npos;
  EXPECT_TRUE(named) << m;
}

// Runs without a device: the CUDA backend implements every kernel of Kernel.h's table, so the
// validator accepts on CUDA every program it accepts on CPU.
TEST(CudaBackend, ImplementsEveryKernelSignature) {
#ifndef TRAINC_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#endif
  std::vector<std::string> names = cudaKernelNames();
  std::sort(names.begin(), names.end());
  for (const KernelSignature &sig : allKernelSignatures())
    EXPECT_TRUE(std::binary_search(names.begin(), names.end(), std::string(sig.name)))
        << "no CUDA implementation of " << sig.name;
  EXPECT_EQ(names.size(), allKernelSignatures().size());
}

// Runs without a device: the CUDA attention kernels have no dropout, and the attention_dropout
// kernels refuse with a message naming p and what to do instead of running without the mask.
TEST(CudaBackend, RefusesAttentionDropout) {
#ifndef TRAINC_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  for (const char *name : {"attention_dropout", "attention_dropout_backward"}) {
    KernelFn fn = findCudaKernel(name);
    ASSERT_NE(fn, nullptr) << name;
    const KernelSignature *sig = findKernelSignature(name);
    ASSERT_NE(sig, nullptr) << name;
    google::protobuf::RepeatedPtrField<schema::Attr> pa;
    schema::Attr *a = pa.Add();
    a->set_name("p");
    AttrArg("p", 0.25).store(*a->mutable_value());
    Attrs attrs;
    ASSERT_EQ(decodeAttrs(*sig, pa, attrs), "");
    KernelCtx ctx{nullptr, 0, nullptr, 0, &attrs, nullptr};
    try {
      fn(ctx);
      ADD_FAILURE() << name << " did not refuse";
    } catch (const std::runtime_error &e) {
      EXPECT_EQ(std::string(e.what()),
                "CUDA attention: attention dropout (p = 0.250000) is not implemented on the CUDA "
                "backend; compile with --attention-dropout 0.0 or run with --backend cpu")
          << name;
    }
  }
#endif
}

// Runs without a device: the segment kernels (--reset-attention-mask) refuse at the first launch,
// naming the flag and what to do instead, rather than attend across documents.
TEST(CudaBackend, RefusesResetAttentionMask) {
#ifndef TRAINC_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  for (const char *name : {"attention_segments", "attention_segments_backward",
                           "attention_dropout_segments", "attention_dropout_segments_backward"}) {
    KernelFn fn = findCudaKernel(name);
    ASSERT_NE(fn, nullptr) << name;
    Attrs attrs;
    KernelCtx ctx{nullptr, 0, nullptr, 0, &attrs, nullptr};
    try {
      fn(ctx);
      ADD_FAILURE() << name << " did not refuse";
    } catch (const std::runtime_error &e) {
      EXPECT_EQ(std::string(e.what()),
                "CUDA attention: --reset-attention-mask (the attention_segments kernels, no "
                "attention across documents) is not implemented on the CUDA backend; compile "
                "without --reset-attention-mask or run with --backend cpu")
          << name;
    }
  }
#endif
}

// Runs without a device where the CUDA 13 libraries are installed: every entry point of the
// backend's dlsym table exists in libcudart.so.13, libcublasLt.so.13 and libnccl.so.2.
TEST(CudaBackend, SymbolTableResolvesInTheInstalledLibraries) {
#ifndef TRAINC_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#endif
  std::string e = probeCudaLibraries();
  if (e.rfind("missing library: ", 0) == 0)
    GTEST_SKIP() << e;
  EXPECT_EQ(e, "");
}

/// Column-major D = alpha op(A) op(B) + beta C as cuBLAS defines it, read through the LtGemm
/// descriptors: an independent model of what cuBLASLt computes for matmul's mapping. A and B are
/// cuBLAS's operands (our b and our a, as cublasLtMatmulRowMajor passes them).
void emulateLt(const cuda::LtGemm &g, const HostTensor &a, const HostTensor &b, HostTensor &c,
               double alpha, double beta) {
  auto at = [](const cuda::LtOperand &o, const HostTensor &t, int64_t bi, int64_t i, int64_t j) {
    // element (i, j) of op(X): X is rows x cols column-major, op transposes when trans
    int64_t r = o.trans ? j : i, col = o.trans ? i : j;
    return t.get(bi * o.stride + col * o.ld + r);
  };
  for (int64_t bi = 0; bi < g.batch; ++bi)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t k = 0; k < g.k; ++k)
          s += at(g.a, a, bi, i, k) * at(g.b, b, bi, k, j);
        int64_t ci = bi * g.c.stride + j * g.c.ld + i;
        c.set(ci, alpha * s + beta * c.get(ci));
      }
}

// Runs without a device: the row-major -> column-major mapping of matmul onto cuBLASLt gives the
// CPU backend's matmul for every transpose and batching case.
TEST(CudaBackend, LtLayoutMatchesTheCpuMatmul) {
  const int64_t M = 5, N = 4, K = 3, B = 2;
  for (int ta : {0, 1})
    for (int tb : {0, 1})
      for (bool batched : {false, true}) {
        for (int64_t batch : {int64_t(1), B}) {
          if (ta && !batched && batch > 1)
            continue; // issued one batch at a time (the batch-1 case)
          std::vector<int64_t> as = ta ? std::vector<int64_t>{batch, K, M}
                                       : std::vector<int64_t>{batch, M, K};
          std::vector<int64_t> bs = tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N};
          if (batched)
            bs.insert(bs.begin(), batch);
          HostTensor a = randomTensor(DType::F64, as, 70), b = randomTensor(DType::F64, bs, 71);
          HostTensor c0 = randomTensor(DType::F64, {batch, M, N}, 72), cpu = c0, lt = c0;
          runKernel("matmul", {&a, &b}, {&cpu},
                    {{"trans_a", ta}, {"trans_b", tb}, {"alpha", 0.5}, {"beta", 1.0}});
          emulateLt(cuda::ltGemmFor(batch, M, N, K, ta, tb, batched), b, a, lt, 0.5, 1.0);
          EXPECT_LE(relError(cpu, lt), 1e-14)
              << "ta " << ta << " tb " << tb << " batched " << batched << " batch " << batch;
        }
      }
}

// Runs without a device: the CUDA dropout kernel's uniform (DropoutRng.h, compiled here for the
// host) is bitwise the CPU backend's Philox (runtime/core/Philox.h), and the keep decision it
// gives reproduces the CPU dropout kernel's mask element by element.
TEST(CudaBackend, DropoutRngMatchesTheCpuPhilox) {
  std::mt19937_64 gen(5);
  for (int t = 0; t < 20000; ++t) {
    uint64_t seed = gen(), block = gen() >> (2 + t % 40); // g = 4 block + k fits 64 bits
    uint32_t opId = uint32_t(gen()), it = uint32_t(gen());
    float cpu[4];
    philoxUniform4(seed, opId, it, block, cpu);
    for (int k = 0; k < 4; ++k)
      ASSERT_EQ(cpu[k], cuda::dropoutUniform(seed, opId, it, block * 4 + uint64_t(k)))
          << "seed " << seed << " block " << block << " k " << k;
  }
  // The CPU kernel on a [3, 5, 7] tensor with an op_id offset: keep iff u(first + i) >= p.
  HostTensor x = randomTensor(DType::F32, {3, 5, 7}, 80, 0.5, 1.5), y(DType::F32, {3, 5, 7});
  HostTensor rng(DType::I64, {4});
  int64_t r[4] = {987654321, 12, 40, 3};
  std::memcpy(rng.bytes.data(), r, sizeof r);
  runKernel("dropout", {&x, &rng}, {&y}, {{"p", 0.3}, {"op_id", int64_t(5)}});
  const uint64_t first = 40 * 35;
  for (int64_t i = 0; i < x.numel(); ++i) {
    float u = cuda::dropoutUniform(987654321, 5 + 3, 12, first + uint64_t(i));
    EXPECT_EQ(y.get(i) != 0, double(u) >= 0.3) << "element " << i;
  }
  // A sequence shard ([3, 5, 7] holding positions 6..10 of 16): the CUDA kernel's element index
  // (dropoutElement) gives the CPU kernel's mask.
  runKernel("dropout", {&x, &rng}, {&y},
            {{"p", 0.3}, {"op_id", int64_t(5)}, {"seq_start", int64_t(6)},
             {"seq_length", int64_t(16)}});
  for (int64_t i = 0; i < x.numel(); ++i) {
    uint64_t g = cuda::dropoutElement(i, 40, 35, 16 * 7, 6 * 7);
    EXPECT_EQ(g, uint64_t((40 + i / 35) * 112 + 42 + i % 35)) << "element " << i;
    float u = cuda::dropoutUniform(987654321, 5 + 3, 12, g);
    EXPECT_EQ(y.get(i) != 0, double(u) >= 0.3) << "sequence shard element " << i;
  }
}

// Runs without a device: the NCCL communicator refuses a backend that is not the CUDA one.
TEST(CudaBackend, NcclNeedsTheCudaBackend) {
  std::unique_ptr<Backend> cpu = createCpuBackend();
  auto c = createNcclCommunicator(0, 2, *cpu, NcclStore{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
#ifdef TRAINC_HAVE_CUDA
  EXPECT_EQ(c.status().message(), "NCCL needs the CUDA backend (the backend is 'cpu')");
#else
  EXPECT_NE(std::string(c.status().message()).find("built without CUDA"), std::string::npos);
#endif
}

/// Runs `name` on the CUDA backend: inputs and initial outputs copied to device buffers, outputs
/// copied back into `out`.
void runOnGpu(const std::string &name, std::vector<HostTensor> &in, std::vector<HostTensor> &out,
              const std::vector<AttrArg> &attrs) {
  Backend &b = *gpu().backend;
  const KernelSignature *sig = findKernelSignature(name);
  ASSERT_NE(sig, nullptr);
  KernelFn fn = b.findKernel(name);
  ASSERT_NE(fn, nullptr) << "the CUDA backend lacks kernel " << name;
  google::protobuf::RepeatedPtrField<schema::Attr> pa;
  for (const AttrArg &a : attrs) {
    schema::Attr *x = pa.Add();
    x->set_name(a.name);
    a.store(*x->mutable_value());
  }
  Attrs decoded;
  ASSERT_EQ(decodeAttrs(*sig, pa, decoded), "");
  std::vector<TensorView> iv, ov;
  std::vector<void *> bufs;
  auto upload = [&](HostTensor &t) {
    TensorView v = t.view();
    void *d = b.allocateArena(std::max<size_t>(v.bytes(), 1));
    if (v.bytes())
      b.copyToDevice(d, v.data, v.bytes());
    v.data = d;
    bufs.push_back(d);
    return v;
  };
  for (HostTensor &t : in)
    iv.push_back(upload(t));
  for (HostTensor &t : out)
    ov.push_back(upload(t));
  KernelCtx ctx{iv.data(), int(iv.size()), ov.data(), int(ov.size()), &decoded,
                b.kernelData(kComputeStream)};
  ASSERT_EQ(sig->verify(ctx), "") << name;
  fn(ctx);
  b.synchronize(kComputeStream);
  for (size_t o = 0; o < out.size(); ++o)
    if (ov[o].bytes())
      b.copyToHost(out[o].bytes.data(), ov[o].data, ov[o].bytes());
  for (void *p : bufs)
    b.freeArena(p);
}

/// Runs `name` on both backends and compares each output within tol[o] (0: bitwise).
void compare(const std::string &name, std::vector<HostTensor> in, std::vector<HostTensor> outInit,
             std::vector<AttrArg> attrs, std::vector<double> tol) {
  std::vector<HostTensor> cpuIn = in, cpuOut = outInit, gpuIn = in, gpuOut = outInit;
  std::vector<HostTensor *> ip, op;
  for (HostTensor &t : cpuIn)
    ip.push_back(&t);
  for (HostTensor &t : cpuOut)
    op.push_back(&t);
  runKernel(name, ip, op, attrs);
  runOnGpu(name, gpuIn, gpuOut, attrs);
  for (size_t o = 0; o < cpuOut.size(); ++o) {
    double t = o < tol.size() ? tol[o] : tol.back();
    if (t == 0)
      EXPECT_EQ(cpuOut[o].bytes, gpuOut[o].bytes) << name << " output " << o << " not bitwise";
    else
      EXPECT_LE(relError(cpuOut[o], gpuOut[o]), t) << name << " output " << o;
  }
}

double tolFor(DType t, double f32 = 1e-5) {
  return t == DType::BF16 ? 1e-2 : t == DType::F64 ? 1e-12 : f32;
}

class CudaKernels : public ::testing::TestWithParam<DType> {
protected:
  void SetUp() override { REQUIRE_GPU(); }
  DType t() const { return GetParam(); }
  DType s() const { return statsDType(GetParam()); }
  HostTensor rnd(std::vector<int64_t> shape, uint32_t seed, double lo = -1, double hi = 1) {
    return randomTensor(t(), std::move(shape), seed, lo, hi);
  }
};

TEST_P(CudaKernels, Elementwise) {
  double tol = tolFor(t());
  HostTensor x = rnd({7, 33}, 1), y = rnd({7, 33}, 2), z(t(), {7, 33});
  compare("fill", {}, {z}, {{"value", 0.375}}, {0});
  compare("copy", {x}, {z}, {}, {0});
  compare("cast", {x}, {HostTensor(DType::F32, {7, 33})}, {}, {0});
  compare("cast", {x}, {HostTensor(DType::BF16, {7, 33})}, {}, {0});
  compare("add", {x, y}, {z}, {}, {tol});
  compare("add", {x, y}, {z}, {{"alpha", -0.5}}, {tol});
  compare("scale", {x}, {z}, {{"alpha", 3.0}}, {tol});
  compare("scale_by", {x, randomTensor(DType::F32, {}, 3, 0.5, 2)}, {z}, {}, {tol});
  compare("reciprocal", {rnd({}, 4, 0.5, 2)}, {HostTensor(t(), {})}, {}, {tol});
  compare("reciprocal", {HostTensor(t(), {})}, {HostTensor(t(), {})}, {}, {0});
  compare("add_bias", {x, rnd({33}, 5)}, {z}, {}, {tol});
  compare("sum_rows", {x}, {HostTensor(t(), {33})}, {}, {tol});
  compare("sum_rows", {x}, {rnd({33}, 6)}, {{"beta", 1.0}}, {tol});
  for (int approx : {0, 1}) {
    HostTensor g = rnd({7, 33}, 7, -4, 4);
    compare("gelu", {g}, {z}, {{"approximate", approx}}, {tol});
    compare("gelu_backward", {y, g}, {z}, {{"approximate", approx}}, {tol});
  }
  HostTensor sx = rnd({5, 2, 48}, 8, -3, 3), sdy = rnd({5, 2, 24}, 9);
  compare("swiglu", {sx}, {HostTensor(t(), {5, 2, 24})}, {}, {tol});
  compare("swiglu_backward", {sdy, sx}, {HostTensor(t(), {5, 2, 48})}, {}, {tol});
}

// Masks and kept values bitwise equal to the CPU backend's (the same Philox counters).
TEST_P(CudaKernels, DropoutBitwise) {
  HostTensor x = rnd({6, 17, 40}, 10), z(t(), {6, 17, 40});
  HostTensor rng3(DType::I64, {3}), rng4(DType::I64, {4});
  int64_t r3[3] = {1234567890123LL, 17, 96}, r4[4] = {42, 3, 8, 5};
  std::memcpy(rng3.bytes.data(), r3, sizeof r3);
  std::memcpy(rng4.bytes.data(), r4, sizeof r4);
  for (double p : {0.1, 0.5})
    for (HostTensor *r : {&rng3, &rng4}) {
      compare("dropout", {x, *r}, {z}, {{"p", p}, {"op_id", int64_t(7)}}, {0});
      compare("dropout_backward", {x, *r}, {z}, {{"p", p}, {"op_id", int64_t(9)}}, {0});
      // A sequence shard: positions 3..19 of 40 (sequence parallelism).
      std::vector<AttrArg> shard = {{"p", p}, {"op_id", int64_t(7)}, {"seq_start", int64_t(3)},
                                    {"seq_length", int64_t(40)}};
      compare("dropout", {x, *r}, {z}, shard, {0});
      compare("dropout_backward", {x, *r}, {z}, shard, {0});
    }
  compare("rng_offset", {rng3}, {HostTensor(DType::I64, {4})}, {{"offset", int64_t(11)}}, {0});
  compare("rng_offset", {rng4}, {HostTensor(DType::I64, {4})}, {{"offset", int64_t(2)}}, {0});
}

TEST_P(CudaKernels, Matmul) {
  double tol = tolFor(t(), 5e-5);
  const int64_t M = 37, N = 29, K = 70, B = 3;
  for (int ta : {0, 1})
    for (int tb : {0, 1}) {
      std::vector<int64_t> as = ta ? std::vector<int64_t>{B, K, M} : std::vector<int64_t>{B, M, K};
      std::vector<int64_t> bs2 = tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N};
      std::vector<int64_t> bs3 = tb ? std::vector<int64_t>{B, N, K} : std::vector<int64_t>{B, K, N};
      HostTensor a = rnd(as, 20 + ta), bw = rnd(bs2, 22 + tb), bb = rnd(bs3, 24 + tb);
      HostTensor c0(t(), {B, M, N}), c1 = rnd({B, M, N}, 26);
      std::vector<AttrArg> at = {{"trans_a", ta}, {"trans_b", tb}};
      compare("matmul", {a, bw}, {c0}, at, {tol}); // shared weight
      compare("matmul", {a, bb}, {c0}, at, {tol}); // batched
      at.push_back({"beta", 1.0});                 // main_grad accumulation
      at.push_back({"alpha", 0.5});
      compare("matmul", {a, bw}, {c1}, at, {tol});
    }
}

TEST_P(CudaKernels, NormsRopeEmbedding) {
  double tol = tolFor(t());
  const int64_t R = 13, H = 96;
  HostTensor x = rnd({R, H}, 30), g = rnd({H}, 31, 0.5, 1.5), be = rnd({H}, 32), dy = rnd({R, H}, 33);
  HostTensor y(t(), {R, H}), mean(s(), {R}), rstd(s(), {R});
  compare("layer_norm", {x, g, be}, {y, mean, rstd}, {}, {tol, tol, tol});
  std::vector<HostTensor *> ip = {&x, &g, &be}, op = {&y, &mean, &rstd};
  runKernel("layer_norm", ip, op); // statistics for the backward
  compare("layer_norm_backward", {dy, x, g, mean, rstd},
          {HostTensor(t(), {R, H}), HostTensor(t(), {H}), HostTensor(t(), {H})}, {}, {tol});
  compare("rms_norm", {x, g}, {y, rstd}, {}, {tol, tol});
  std::vector<HostTensor *> ip2 = {&x, &g}, op2 = {&y, &rstd};
  runKernel("rms_norm", ip2, op2);
  compare("rms_norm_backward", {dy, x, g, rstd}, {HostTensor(t(), {R, H}), HostTensor(t(), {H})},
          {}, {tol});
  HostTensor q = rnd({2, 11, 3, 16}, 34), pos = randomInts(DType::I32, {2, 11}, 35, 0, 4096);
  for (int64_t rd : {int64_t(0), int64_t(8)}) {
    compare("rope", {q, pos}, {HostTensor(t(), {2, 11, 3, 16})}, {{"rotary_dim", rd}}, {tol});
    compare("rope_backward", {q, pos}, {HostTensor(t(), {2, 11, 3, 16})},
            {{"rotary_dim", rd}, {"base", 500000.0}}, {tol});
  }
  const int64_t V = 50;
  HostTensor table = rnd({V, H}, 36), ids = randomInts(DType::I32, {4, 9}, 37, -5, V + 20);
  compare("embedding", {table, ids}, {HostTensor(t(), {4, 9, H})},
          {{"vocab_start", int64_t(10)}}, {0});
  HostTensor edy = rnd({4, 9, H}, 38);
  compare("embedding_backward", {ids, edy}, {HostTensor(t(), {V, H})},
          {{"vocab_start", int64_t(10)}}, {tol});
  compare("embedding_backward", {ids, edy}, {rnd({V, H}, 39)}, {{"beta", 1.0}}, {tol});
}

TEST_P(CudaKernels, AttentionGqaCausal) {
  double tol = tolFor(t(), 5e-5);
  for (int causal : {1, 0}) {
    const int64_t B = 2, S = 70, NH = 4, NG = 2, D = 32;
    HostTensor q = rnd({B, S, NH, D}, 40), k = rnd({B, S, NG, D}, 41), v = rnd({B, S, NG, D}, 42);
    HostTensor o(t(), {B, S, NH, D}), lse(s(), {B, NH, S});
    std::vector<AttrArg> at = {{"causal", causal}};
    compare("attention", {q, k, v}, {o, lse}, at, {tol, tol});
    std::vector<HostTensor *> ip = {&q, &k, &v}, op = {&o, &lse};
    runKernel("attention", ip, op, at);
    HostTensor dout = rnd({B, S, NH, D}, 43);
    compare("attention_backward", {q, k, v, o, lse, dout},
            {HostTensor(t(), {B, S, NH, D}), HostTensor(t(), {B, S, NG, D}),
             HostTensor(t(), {B, S, NG, D})},
            at, {tol});
  }
}

TEST_P(CudaKernels, CrossEntropy) {
  double tol = tolFor(t());
  const int64_t N = 19, V = 300;
  HostTensor x = rnd({N, V}, 50, -4, 4), labels = randomInts(DType::I32, {N}, 51, 0, V);
  HostTensor mask = randomInts(s(), {N}, 52, 0, 2);
  for (auto shard : {std::vector<AttrArg>{}, std::vector<AttrArg>{{"vocab_start", int64_t(100)},
                                                                   {"valid_vocab", int64_t(350)}}}) {
    HostTensor loss(s(), {}), tok(s(), {}), lse(s(), {N});
    compare("cross_entropy", {x, labels, mask}, {loss, tok, lse}, shard, {tolFor(s()), 0, tol});
    std::vector<HostTensor *> ip = {&x, &labels, &mask}, op = {&loss, &tok, &lse};
    runKernel("cross_entropy", ip, op, shard);
    compare("cross_entropy_backward", {x, labels, mask, lse, randomTensor(s(), {}, 53, 0.1, 1)},
            {HostTensor(t(), {N, V})}, shard, {tol});
    HostTensor mx(s(), {N});
    compare("ce_local_max", {x}, {mx}, shard, {0});
    std::vector<HostTensor *> ip2 = {&x}, op2 = {&mx};
    runKernel("ce_local_max", ip2, op2, shard);
    compare("ce_local_sumexp", {x, mx}, {HostTensor(s(), {N})}, shard, {tol});
    compare("ce_target_logit", {x, labels}, {HostTensor(s(), {N})}, shard, {0});
  }
  HostTensor mx = randomTensor(s(), {N}, 54), se = randomTensor(s(), {N}, 55, 1, 50),
             tg = randomTensor(s(), {N}, 56);
  compare("ce_combine", {mx, se, tg, mask},
          {HostTensor(s(), {}), HostTensor(s(), {}), HostTensor(s(), {N})}, {},
          {tolFor(s()), 0, tolFor(s())});
}

TEST_P(CudaKernels, OptimizerPieces) {
  double tol = tolFor(t());
  compare("sum_squares", {rnd({1000, 37}, 60)}, {HostTensor(s(), {})}, {}, {tolFor(s(), 1e-6)});
  compare("sum_squares", {rnd({1000, 37}, 61)}, {randomTensor(s(), {}, 62, 1, 2)},
          {{"beta", 1.0}}, {tolFor(s(), 1e-6)});
  if (t() == DType::BF16)
    return; // adamw and grad_norm_finalize take f32/f64 master state
  for (double sumsq : {4.0, 1e6}) {
    HostTensor ss(t(), {});
    ss.set(0, sumsq);
    compare("grad_norm_finalize", {ss}, {HostTensor(t(), {}), HostTensor(t(), {}), HostTensor(t(), {})},
            {{"max_norm", 1.0}}, {tol, tol, 0});
  }
  const int64_t n = 5000;
  auto scalar = [&](double v) {
    HostTensor h(t(), {});
    h.set(0, v);
    return h;
  };
  for (double update : {1.0, 0.0})
    for (auto seg : {std::vector<int64_t>{}, std::vector<int64_t>{0, 1000, 1, 2000, 4500, 0}}) {
      std::vector<HostTensor> in = {rnd({n}, 63), rnd({n}, 64), rnd({n}, 65), rnd({n}, 66, 0, 1),
                                    scalar(1e-3), scalar(0.1), scalar(7), scalar(0.5),
                                    scalar(update)};
      std::vector<AttrArg> at = {{"beta2", 0.95}};
      if (!seg.empty())
        at.push_back({"segments", seg});
      compare("adamw", in, {HostTensor(t(), {n}), HostTensor(t(), {n}), HostTensor(t(), {n})}, at,
              {tol});
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaKernels,
                         ::testing::Values(DType::F32, DType::BF16, DType::F64),
                         [](const ::testing::TestParamInfo<DType> &i) {
                           return std::string(dtypeName(i.param));
                         });

} // namespace
} // namespace trainc::rt::test
