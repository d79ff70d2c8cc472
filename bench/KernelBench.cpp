//===- KernelBench.cpp - elementwise, optimizer, loss kernels and init ----===//
//
// Prints ns per element (and GB/s where a kernel is memory-bound) of the non-GEMM kernels that
// issue 17 names: gelu and gelu_backward (erf and tanh forms), adamw, sum_squares, cross_entropy
// and its backward, layer_norm / rms_norm (+ backward), embedding_backward, dropout, and
// initializeParameters (ns per parameter and s per 100M parameters). Each
// kernel runs as a one-instruction program through the executor, as in an iteration; min and
// median of several repetitions after one warm-up, measured in one run. The thread count is OpenMP's (OMP_NUM_THREADS).
//
// usage: bench_kernels [filter]   (runs only the lines whose name contains `filter`)
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Communicator.h"
#include "runtime/core/Executor.h"
#include "runtime/core/Init.h"
#include "runtime/core/ProgramBuilder.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace trainc::rt;
namespace schema = trainc::schema;

namespace {

const char *gFilter = nullptr;

/// Minimum and median (upper median for an even count) of the repetitions' wall times, seconds.
struct Timing {
  double min = 0, median = 0;
};

template <typename F> Timing bestSeconds(int reps, F &&f) {
  f(); // warm-up (page faults, first-touch)
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

bool selected(const std::string &name) { return !gFilter || name.find(gFilter) != std::string::npos; }

std::unique_ptr<Executor> make(const schema::Program &p, Backend &backend, Communicator &comm) {
  auto ex = Executor::create(p, backend, comm);
  if (!ex.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ex.status().message()).c_str());
    std::exit(1);
  }
  return std::move(*ex);
}

void fillBuffer(Executor &ex, int buf, size_t n, float lo, float hi, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v[i] = lo + (hi - lo) * float(s >> 8) * (1.0f / 16777216.0f);
  }
  (void)ex.writeBuffer(buf, v.data(), n * 4);
}

/// One line: min and median ms, ns per element and GB/s (both from the minimum).
void report(const std::string &name, Timing t, double elements, double bytes) {
  std::printf("%-34s min %9.3f ms  median %9.3f ms  %7.3f ns/element", name.c_str(), t.min * 1e3,
              t.median * 1e3, t.min / elements * 1e9);
  if (bytes > 0)
    std::printf("  %6.1f GB/s", bytes / t.min * 1e-9);
  std::printf("\n");
}

void benchGelu(Backend &backend, Communicator &comm, int64_t n, int approx, bool backward) {
  std::string name = std::string(backward ? "gelu_backward" : "gelu") +
                     (approx ? " tanh" : " erf") + " f32 n=" + std::to_string(n);
  if (!selected(name))
    return;
  ProgramBuilder b;
  int x = b.addBuffer("x", schema::ACTIVATION, DType::F32, {n});
  int dy = b.addBuffer("dy", schema::ACTIVATION, DType::F32, {n});
  int y = b.addBuffer("y", schema::ACTIVATION, DType::F32, {n});
  int fn = b.addFunction("main");
  if (backward)
    b.kernel(fn, "gelu_backward", {ProgramBuilder::buf(dy), ProgramBuilder::buf(x)},
             {ProgramBuilder::buf(y)}, {AttrArg("approximate", approx)});
  else
    b.kernel(fn, "gelu", {ProgramBuilder::buf(x)}, {ProgramBuilder::buf(y)},
             {AttrArg("approximate", approx)});
  auto ex = make(b.finish(), backend, comm);
  fillBuffer(*ex, x, size_t(n), -4, 4, 1);
  fillBuffer(*ex, dy, size_t(n), -1, 1, 2);
  Timing t = bestSeconds(10, [&] { (void)ex->run(); });
  report(name, t, double(n), double(n) * 4 * (backward ? 3 : 2));
}

void benchAdamw(Backend &backend, Communicator &comm, int64_t n) {
  std::string name = "adamw f32 n=" + std::to_string(n);
  if (!selected(name))
    return;
  ProgramBuilder b;
  int p = b.addBuffer("p", schema::PARAMETER, DType::F32, {n});
  int g = b.addBuffer("g", schema::MAIN_GRAD, DType::F32, {n});
  int m = b.addBuffer("m", schema::OPTIMIZER_STATE, DType::F32, {n});
  int v = b.addBuffer("v", schema::OPTIMIZER_STATE, DType::F32, {n});
  int sc[5];
  const char *names[5] = {"lr", "wd", "step", "gs", "upd"};
  for (int k = 0; k < 5; ++k)
    sc[k] = b.addBuffer(names[k], schema::ACTIVATION, DType::F32, {});
  int fn = b.addFunction("main");
  std::vector<schema::Operand> in = {ProgramBuilder::buf(p), ProgramBuilder::buf(g),
                                     ProgramBuilder::buf(m), ProgramBuilder::buf(v)};
  for (int k = 0; k < 5; ++k)
    in.push_back(ProgramBuilder::buf(sc[k]));
  b.kernel(fn, "adamw", in, {ProgramBuilder::buf(p), ProgramBuilder::buf(m), ProgramBuilder::buf(v)},
           {}, {0, 2, 3});
  auto ex = make(b.finish(), backend, comm);
  fillBuffer(*ex, p, size_t(n), -0.1f, 0.1f, 3);
  fillBuffer(*ex, g, size_t(n), -1e-3f, 1e-3f, 4);
  float vals[5] = {1e-4f, 0.1f, 10.0f, 1.0f, 1.0f};
  for (int k = 0; k < 5; ++k)
    (void)ex->writeBuffer(sc[k], &vals[k], 4);
  Timing t = bestSeconds(10, [&] { (void)ex->run(); });
  report(name, t, double(n), double(n) * 4 * 7);
}

void benchSumSquares(Backend &backend, Communicator &comm, int64_t n) {
  std::string name = "sum_squares f32 n=" + std::to_string(n);
  if (!selected(name))
    return;
  ProgramBuilder b;
  int x = b.addBuffer("x", schema::MAIN_GRAD, DType::F32, {n});
  int o = b.addBuffer("o", schema::ACTIVATION, DType::F32, {});
  int fn = b.addFunction("main");
  b.kernel(fn, "sum_squares", {ProgramBuilder::buf(x)}, {ProgramBuilder::buf(o)});
  auto ex = make(b.finish(), backend, comm);
  fillBuffer(*ex, x, size_t(n), -1, 1, 5);
  Timing t = bestSeconds(10, [&] { (void)ex->run(); });
  report(name, t, double(n), double(n) * 4);
}

void benchCrossEntropy(Backend &backend, Communicator &comm, int64_t N, int64_t V, bool backward) {
  std::string name = std::string(backward ? "cross_entropy_backward" : "cross_entropy") +
                     " f32 " + std::to_string(N) + "x" + std::to_string(V);
  if (!selected(name))
    return;
  ProgramBuilder b;
  int x = b.addBuffer("logits", schema::ACTIVATION, DType::F32, {N, V});
  int lab = b.addBuffer("labels", schema::ACTIVATION, DType::I32, {N});
  int mask = b.addBuffer("mask", schema::ACTIVATION, DType::F32, {N});
  int lse = b.addBuffer("lse", schema::ACTIVATION, DType::F32, {N});
  int ls = b.addBuffer("loss_sum", schema::ACTIVATION, DType::F32, {});
  int nt = b.addBuffer("num_tokens", schema::ACTIVATION, DType::F32, {});
  int dl = b.addBuffer("dloss", schema::ACTIVATION, DType::F32, {});
  int dx = b.addBuffer("dlogits", schema::ACTIVATION, DType::F32, {N, V});
  int fn = b.addFunction("main");
  if (backward)
    b.kernel(fn, "cross_entropy_backward",
             {ProgramBuilder::buf(x), ProgramBuilder::buf(lab), ProgramBuilder::buf(mask),
              ProgramBuilder::buf(lse), ProgramBuilder::buf(dl)},
             {ProgramBuilder::buf(dx)});
  else
    b.kernel(fn, "cross_entropy",
             {ProgramBuilder::buf(x), ProgramBuilder::buf(lab), ProgramBuilder::buf(mask)},
             {ProgramBuilder::buf(ls), ProgramBuilder::buf(nt), ProgramBuilder::buf(lse)});
  auto ex = make(b.finish(), backend, comm);
  fillBuffer(*ex, x, size_t(N * V), -4, 4, 6);
  std::vector<int32_t> labels(static_cast<size_t>(N));
  std::vector<float> ones(size_t(N), 1.0f), lses(size_t(N), 11.0f);
  for (int64_t i = 0; i < N; ++i)
    labels[size_t(i)] = int32_t((i * 7919) % V);
  (void)ex->writeBuffer(lab, labels.data(), size_t(N) * 4);
  (void)ex->writeBuffer(mask, ones.data(), size_t(N) * 4);
  (void)ex->writeBuffer(lse, lses.data(), size_t(N) * 4);
  float d = 1.0f / float(N);
  (void)ex->writeBuffer(dl, &d, 4);
  Timing t = bestSeconds(5, [&] { (void)ex->run(); });
  report(name, t, double(N * V), double(N * V) * 4 * (backward ? 2 : 1));
}

void benchInit(Backend &backend, Communicator &comm, int64_t rows, int64_t cols) {
  std::string name = "init normal f32 " + std::to_string(rows) + "x" + std::to_string(cols);
  if (!selected(name))
    return;
  ProgramBuilder b;
  int w = b.addBuffer("w", schema::PARAMETER, DType::F32, {rows, cols});
  b.addFunction("main");
  schema::Program p = b.finish();
  schema::Parameter *q = p.add_parameters();
  q->set_name("layers.0.mlp.fc1.weight");
  q->add_global_shape(rows);
  q->add_global_shape(cols);
  q->add_slice_start(0);
  q->add_slice_start(0);
  q->add_slice_size(rows);
  q->add_slice_size(cols);
  q->set_buffer(uint32_t(w));
  q->set_buffer_offset(0);
  q->set_init("normal");
  q->set_init_std(0.02);
  auto ex = make(p, backend, comm);
  // The process's CPU time too: on a loaded machine the wall time measures the scheduler; CPU
  // seconds / threads is what an idle machine's wall time would be.
  auto cpuNow = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  double cpu0 = cpuNow();
  Timing t = bestSeconds(5, [&] { (void)initializeParameters(*ex, 1234); });
  double cpuPerRun = (cpuNow() - cpu0) / 6; // 5 repetitions and the warm-up
  report(name, t, double(rows * cols), 0);
  const double per100M = 1e8 / double(rows * cols);
  std::printf("%-34s min %9.3f s  median %9.3f s  per 100M parameters; CPU %.3f s per 100M "
              "parameters\n",
              "", t.min * per100M, t.median * per100M, cpuPerRun * per100M);
}

/// A buffer of a one-kernel program: name, dtype, shape, and the fill range of its values
/// (ids: integers in [lo, hi)).
struct BenchBuf {
  const char *name;
  DType dtype;
  std::vector<int64_t> shape;
  float lo = -1, hi = 1;
};

/// Runs `kernel` (inputs `in`, outputs `out` as indices into bufs) as a one-instruction program and
/// reports it; `elements` and `bytes` give the per-element and GB/s columns.
void benchKernel(Backend &backend, Communicator &comm, const std::string &name,
                 const std::string &kernel, const std::vector<BenchBuf> &bufs,
                 const std::vector<int> &in, const std::vector<int> &out,
                 const std::vector<AttrArg> &attrs, double elements, double bytes) {
  if (!selected(name))
    return;
  ProgramBuilder b;
  std::vector<int> ids;
  for (const BenchBuf &x : bufs)
    ids.push_back(b.addBuffer(x.name, schema::ACTIVATION, x.dtype, x.shape));
  int fn = b.addFunction("main");
  std::vector<schema::Operand> iv, ov;
  for (int i : in)
    iv.push_back(ProgramBuilder::buf(ids[size_t(i)]));
  for (int o : out)
    ov.push_back(ProgramBuilder::buf(ids[size_t(o)]));
  b.kernel(fn, kernel, iv, ov, attrs);
  auto ex = make(b.finish(), backend, comm);
  for (size_t i = 0; i < bufs.size(); ++i) {
    size_t n = 1;
    for (int64_t d : bufs[i].shape)
      n *= size_t(d);
    if (bufs[i].dtype == DType::F32) {
      fillBuffer(*ex, ids[i], n, bufs[i].lo, bufs[i].hi, uint32_t(7 + i));
    } else if (bufs[i].dtype == DType::I32) {
      std::vector<int32_t> v(n);
      uint32_t st = 99;
      for (size_t k = 0; k < n; ++k) {
        st = st * 1664525u + 1013904223u;
        v[k] = int32_t(bufs[i].lo) + int32_t((st >> 8) % uint32_t(bufs[i].hi - bufs[i].lo));
      }
      (void)ex->writeBuffer(ids[i], v.data(), n * 4);
    } else if (bufs[i].dtype == DType::I64) {
      std::vector<int64_t> v(n, 1);
      (void)ex->writeBuffer(ids[i], v.data(), n * 8);
    }
  }
  Timing t = bestSeconds(7, [&] { (void)ex->run(); });
  report(name, t, elements, bytes);
}

/// The norms (forward and backward), embedding backward and dropout at GPT-2 124M's activation
/// shape: 4096 tokens (micro batch 4 x seq 1024) x hidden 768, vocabulary 50257.
void benchRowKernels(Backend &backend, Communicator &comm) {
  const int64_t R = 4096, H = 768, V = 50257;
  const double n = double(R * H);
  const DType F = DType::F32;
  benchKernel(backend, comm, "layer_norm f32 4096x768", "layer_norm",
              {{"x", F, {R, H}}, {"g", F, {H}, 0.5f, 1.5f}, {"b", F, {H}}, {"y", F, {R, H}},
               {"mean", F, {R}}, {"rstd", F, {R}}},
              {0, 1, 2}, {3, 4, 5}, {}, n, n * 4 * 2);
  benchKernel(backend, comm, "layer_norm_backward f32 4096x768", "layer_norm_backward",
              {{"dy", F, {R, H}}, {"x", F, {R, H}}, {"g", F, {H}, 0.5f, 1.5f},
               {"mean", F, {R}, -0.1f, 0.1f}, {"rstd", F, {R}, 0.9f, 1.1f}, {"dx", F, {R, H}},
               {"dg", F, {H}}, {"db", F, {H}}},
              {0, 1, 2, 3, 4}, {5, 6, 7}, {}, n, n * 4 * 3);
  benchKernel(backend, comm, "rms_norm f32 4096x768", "rms_norm",
              {{"x", F, {R, H}}, {"g", F, {H}, 0.5f, 1.5f}, {"y", F, {R, H}}, {"rstd", F, {R}}},
              {0, 1}, {2, 3}, {}, n, n * 4 * 2);
  benchKernel(backend, comm, "rms_norm_backward f32 4096x768", "rms_norm_backward",
              {{"dy", F, {R, H}}, {"x", F, {R, H}}, {"g", F, {H}, 0.5f, 1.5f},
               {"rstd", F, {R}, 0.9f, 1.1f}, {"dx", F, {R, H}}, {"dg", F, {H}}},
              {0, 1, 2, 3}, {4, 5}, {}, n, n * 4 * 3);
  // Bytes: the table written once plus the tokens' rows read.
  benchKernel(backend, comm, "embedding_backward f32 4096 x 50257x768", "embedding_backward",
              {{"ids", DType::I32, {R}, 0, float(V)}, {"dy", F, {R, H}}, {"dtable", F, {V, H}}},
              {0, 1}, {2}, {}, double(V * H), double(V * H) * 4 + n * 4);
  benchKernel(backend, comm, "dropout f32 4096x768 p=0.1", "dropout",
              {{"x", F, {4, 1024, H}}, {"rng", DType::I64, {3}}, {"y", F, {4, 1024, H}}}, {0, 1},
              {2}, {AttrArg("p", 0.1)}, n, n * 4 * 2);
}

} // namespace

int main(int argc, char **argv) {
  if (argc > 1)
    gFilter = argv[1];
  const char *threads = std::getenv("OMP_NUM_THREADS");
  std::printf("OMP_NUM_THREADS=%s\n", threads ? threads : "(unset)");
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  // GPT-style MLP activations: 4 x 256 tokens x 4 x 768 (gpt2-small width, micro batch 4, seq 256).
  const int64_t act = 4 * 256 * 3072;
  for (int approx : {1, 0})
    for (bool bwd : {false, true})
      benchGelu(*backend, *comm, act, approx, bwd);
  benchAdamw(*backend, *comm, 16 << 20);
  benchSumSquares(*backend, *comm, 16 << 20);
  benchCrossEntropy(*backend, *comm, 512, 50257, false);
  benchCrossEntropy(*backend, *comm, 512, 50257, true);
  benchRowKernels(*backend, *comm);
  benchInit(*backend, *comm, 2048, 2048);
  return 0;
}
