//===- Init.cpp - Parameter initialisation --------------------------------===//

#include "runtime/core/Init.h"

#include "runtime/core/Philox.h"
#include "runtime/core/Resolve.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace trainc::rt {

uint64_t parameterKey(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) {
    h ^= uint8_t(c);
    h *= 1099511628211ull;
  }
  return h;
}

double initialValue(const schema::Parameter &p, uint64_t seed, uint64_t globalIndex) {
  if (p.init() == "ones")
    return 1.0;
  if (p.init() == "zeros" || p.init().empty())
    return 0.0;
  double z[2];
  philoxNormal2(seed, parameterKey(p.name()), globalIndex / 2, z);
  return p.init_std() * z[globalIndex % 2];
}

namespace {

/// Stores v as dtype t at dst.
inline void storeValue(char *dst, DType t, double v) {
  if (t == DType::F64) {
    std::memcpy(dst, &v, 8);
  } else if (t == DType::F32) {
    float f = float(v);
    std::memcpy(dst, &f, 4);
  } else if (t == DType::F16) {
    f16 h = f16(float(v));
    std::memcpy(dst, &h, 2);
  } else {
    bf16 h = bf16(float(v));
    std::memcpy(dst, &h, 2);
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// AVX-512 and AVX2 clones of the integer Philox loop, chosen at load time by what the CPU has
// (16 or 8 lanes of 32-bit state). Integer arithmetic only: every clone gives the same bits.
#define TRAINC_INIT_AVX2_CLONE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRAINC_INIT_AVX2_CLONE
#endif

/// Pairs per batch: the Philox state of a batch (4 x 32-bit words per pair) stays in L1.
constexpr int kPairBatch = 128;

/// Philox4x32-10 (runtime/core/Philox.h's philox4x32, the same rounds and constants) on `n` <=
/// kPairBatch counters at once, structure-of-arrays so the loops vectorise: counter j is
/// (lo32(firstPair + j), hi32(firstPair + j), lo32(ctrHi), hi32(ctrHi)) under key (k0, k1), and
/// its outputs replace c0..c3[j].
TRAINC_INIT_AVX2_CLONE void philoxBatch(uint32_t k0, uint32_t k1, uint64_t firstPair,
                                        uint64_t ctrHi, int n, uint32_t *__restrict c0,
                                        uint32_t *__restrict c1, uint32_t *__restrict c2,
                                        uint32_t *__restrict c3) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int j = 0; j < n; ++j) {
    uint64_t ctr = firstPair + uint64_t(j);
    c0[j] = uint32_t(ctr);
    c1[j] = uint32_t(ctr >> 32);
    c2[j] = uint32_t(ctrHi);
    c3[j] = uint32_t(ctrHi >> 32);
  }
  for (int r = 0; r < 10; ++r) {
    for (int j = 0; j < n; ++j) {
      uint64_t p0 = uint64_t(M0) * c0[j], p1 = uint64_t(M1) * c2[j];
      uint32_t n0 = uint32_t(p1 >> 32) ^ c1[j] ^ k0, n2 = uint32_t(p0 >> 32) ^ c3[j] ^ k1;
      c0[j] = n0;
      c1[j] = uint32_t(p1);
      c2[j] = n2;
      c3[j] = uint32_t(p0);
    }
    k0 += W0;
    k1 += W1;
  }
}

template <typename T> inline void storeAs(T *dst, double v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
    *dst = T(float(v)); // f64 -> f32 -> 16 bits, as torch's normal_ on a half tensor
  else
    *dst = T(v);
}

/// cos(x) and sin(x) into *c, *s. glibc's sincos shares
/// sin's and cos's code (the same reductions and polynomials; checked equal on 2e7 arguments in
/// [0, 2 pi), and the Init tests compare against philoxNormal2's sin and cos), at the cost of one
/// call.
inline void sinCos(double x, double *c, double *s) {
#ifdef __GLIBC__
  sincos(x, s, c);
#else
  *c = __builtin_cos(x);
  *s = __builtin_sin(x);
#endif
}

/// Writes `len` consecutive elements starting at global index `g` of a normal parameter (std
/// `stdDev`, Philox key `seed`, counter high half `key`) to dst[0..len). Bit for bit the values of
/// initialValue: Philox runs in batches (philoxBatch), then the same Box-Muller expressions as
/// philoxNormal2 (library log, IEEE sqrt, sin and cos through sincos, in double) give both elements
/// of each pair into a staging array, from which the run's part is stored as T.
template <typename T>
void normalRun(uint64_t seed, uint64_t key, double stdDev, uint64_t g, int64_t len, T *dst) {
  alignas(64) uint32_t c0[kPairBatch], c1[kPairBatch], c2[kPairBatch], c3[kPairBatch];
  alignas(64) double z[2 * kPairBatch], u1[kPairBatch], ang[kPairBatch], r[kPairBatch];
  alignas(64) double sn[kPairBatch], cs[kPairBatch];
  uint64_t end = g + uint64_t(len);
  while (g < end) {
    uint64_t firstPair = g / 2;
    uint64_t lastPair = (end - 1) / 2; // inclusive
    int n = int(std::min<uint64_t>(lastPair - firstPair + 1, kPairBatch));
    philoxBatch(uint32_t(seed), uint32_t(seed >> 32), firstPair, key, n, c0, c1, c2, c3);
    // The Box-Muller steps as separate loops over the batch: the uniforms, the square root and
    // the products vectorise (IEEE sqrt and products: the same bits as one element at a time),
    // and the library calls run back to back.
    for (int j = 0; j < n; ++j) {
      // 53-bit uniforms in (0, 1], as philoxNormal2 (the integers are < 2^53: converting them as
      // signed is exact and one instruction).
      u1[j] = (double(int64_t((uint64_t(c0[j]) << 21) ^ (c1[j] >> 11))) + 1.0) *
              (1.0 / 9007199254740992.0);
      ang[j] = 6.283185307179586 *
               (double(int64_t((uint64_t(c2[j]) << 21) ^ (c3[j] >> 11))) *
                (1.0 / 9007199254740992.0));
    }
    for (int j = 0; j < n; ++j)
      r[j] = __builtin_log(u1[j]);
    for (int j = 0; j < n; ++j)
      r[j] = __builtin_sqrt(-2.0 * r[j]);
    for (int j = 0; j < n; ++j)
      sinCos(ang[j], cs + j, sn + j);
    for (int j = 0; j < n; ++j) {
      z[2 * j] = r[j] * cs[j];
      z[2 * j + 1] = r[j] * sn[j];
    }
    // Elements [g, stop) of this batch: z[g - 2 firstPair] onwards.
    uint64_t stop = std::min(end, (firstPair + uint64_t(n)) * 2);
    const double *src = z + (g - 2 * firstPair);
    int64_t count = int64_t(stop - g);
    for (int64_t e = 0; e < count; ++e)
      storeAs(dst + e, stdDev * src[e]);
    dst += count;
    g = stop;
  }
}

/// Writes the local elements [begin, end) of parameter p (row-major over its slice) into `base`
/// (the parameter's first element) as dtype t. Element values are initialValue's, bit for bit:
/// the rule and the key are taken once per tensor, and the slice is walked in runs along its last
/// dimension (consecutive global indices), each generated by normalRun.
void initRange(const schema::Parameter &p, DType t, uint64_t seed, uint64_t key, int64_t begin,
               int64_t end, char *base) {
  size_t es = dtypeSize(t);
  int rank = p.global_shape_size();
  bool normal = p.init() == "normal";
  if (!normal) {
    double v = p.init() == "ones" ? 1.0 : 0.0;
    for (int64_t local = begin; local < end; ++local)
      storeValue(base + uint64_t(local) * es, t, v);
    return;
  }
  double stdDev = p.init_std();
  // A rank-0 parameter is one element at global index 0.
  int64_t rowLen = rank > 0 ? p.slice_size(rank - 1) : 1;
  if (rowLen <= 0 || end <= begin)
    return;
  for (int64_t local = begin; local < end;) {
    int64_t row = local / rowLen, col = local % rowLen;
    int64_t len = std::min(end - local, rowLen - col);
    // Global index of (row, col): the row's multi-index over dims [0, rank - 1), then the column.
    uint64_t g = 0;
    if (rank > 0) {
      std::vector<int64_t> idx(size_t(rank), 0);
      for (int64_t d = rank - 2, r = row; d >= 0; --d) {
        idx[size_t(d)] = r % p.slice_size(int(d));
        r /= p.slice_size(int(d));
      }
      idx[size_t(rank - 1)] = col;
      for (int d = 0; d < rank; ++d)
        g = g * uint64_t(p.global_shape(d)) + uint64_t(p.slice_start(d) + idx[size_t(d)]);
    }
    char *dst = base + uint64_t(local) * es;
    if (t == DType::F64)
      normalRun(seed, key, stdDev, g, len, reinterpret_cast<double *>(dst));
    else if (t == DType::F32)
      normalRun(seed, key, stdDev, g, len, reinterpret_cast<float *>(dst));
    else if (t == DType::F16)
      normalRun(seed, key, stdDev, g, len, reinterpret_cast<f16 *>(dst));
    else
      normalRun(seed, key, stdDev, g, len, reinterpret_cast<bf16 *>(dst));
    local += len;
  }
}

} // namespace

absl::Status initializeParameters(Executor &ex, uint64_t seed) {
  const schema::Program &prog = ex.program();
  // The buffer of the parameters being initialised, read once and written back when the next
  // parameter lives in another buffer (or at the end, or before an error is returned).
  int current = -1;
  std::vector<char> bytes;
  auto flush = [&]() -> absl::Status {
    if (current < 0)
      return absl::OkStatus();
    absl::Status s = ex.writeBuffer(current, bytes.data(), bytes.size());
    current = -1;
    return s;
  };
  for (const schema::Parameter &p : prog.parameters()) {
    if (p.init() != "normal" && p.init() != "ones" && p.init() != "zeros" && !p.init().empty()) {
      (void)flush();
      return absl::InvalidArgumentError(absl::StrCat("parameter '", p.name(), "': init rule '",
                                                     p.init(),
                                                     "' is not one of normal, ones, zeros"));
    }
    const schema::Buffer &buf = prog.buffers(int(p.buffer()));
    DType t = DType(int(buf.dtype()));
    if (!isFloat(t)) {
      (void)flush();
      return absl::InvalidArgumentError(absl::StrCat("parameter '", p.name(), "': buffer '",
                                                     buf.name(), "' is not a float buffer"));
    }
    if (current != int(p.buffer())) {
      if (absl::Status s = flush(); !s.ok())
        return s;
      bytes.assign(buf.byte_size(), 0);
      if (absl::Status s = ex.readBuffer(int(p.buffer()), bytes.data(), bytes.size()); !s.ok())
        return s;
      current = int(p.buffer());
    }
    int rank = p.global_shape_size();
    int64_t n = 1;
    for (int d = 0; d < rank; ++d)
      n *= p.slice_size(d);
    uint64_t key = parameterKey(p.name());
    char *base = bytes.data() + p.buffer_offset() * dtypeSize(t);
    // Every element is a pure function of (seed, parameter, global index): any split of the
    // local range over the threads gives the same bytes. Chunks start at even local indices, so
    // a chunk boundary rarely splits a Box-Muller pair (which would only cost one extra call).
    constexpr int64_t kChunk = 1 << 14;
    int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t ch = 0; ch < chunks; ++ch)
      initRange(p, t, seed, key, ch * kChunk, std::min(n, (ch + 1) * kChunk), base);
  }
  if (absl::Status s = flush(); !s.ok())
    return s;
  return initializeMasterWeights(ex);
}

absl::Status initializeMasterWeights(Executor &ex) {
  const schema::Program &prog = ex.program();
  for (const schema::Function &fn : prog.functions())
    for (int k = 0; k < fn.body_size(); ++k) {
      const schema::Instruction &ins = fn.body(k);
      if (ins.op_case() != schema::Instruction::kKernel ||
          ins.kernel().kernel() != "adamw_master")
        continue;
      const schema::KernelCall &kc = ins.kernel();
      std::string where = absl::StrCat("function '", fn.name(), "' instruction ", k,
                                       " (adamw_master)");
      ResolvedOperand master, param;
      if (kc.inputs_size() < 1 || kc.outputs_size() < 4)
        return absl::InvalidArgumentError(where + ": expected 9 inputs and 4 outputs");
      std::string e = resolveOperand(prog, fn, kc.inputs(0), master);
      if (e.empty())
        e = resolveOperand(prog, fn, kc.outputs(3), param);
      if (e.empty() && (master.isArg || param.isArg))
        e = "the master weights and the parameter must be buffers, not function arguments";
      const DType pt = param.view.dtype;
      if (e.empty() && (master.view.dtype != DType::F32 ||
                        (pt != DType::BF16 && pt != DType::F16) ||
                        master.view.numel != param.view.numel))
        e = "expected f32 master weights and a bf16 or f16 parameter of as many elements";
      if (!e.empty())
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", e));
      const schema::Buffer &mb = prog.buffers(int(master.base)), &pb = prog.buffers(int(param.base));
      std::vector<char> mbytes(mb.byte_size()), pbytes(pb.byte_size());
      if (absl::Status s = ex.readBuffer(int(master.base), mbytes.data(), mbytes.size()); !s.ok())
        return s;
      if (absl::Status s = ex.readBuffer(int(param.base), pbytes.data(), pbytes.size()); !s.ok())
        return s;
      float *m = reinterpret_cast<float *>(mbytes.data()) + master.elemOffset;
      const char *pp = pbytes.data() + param.elemOffset * 2;
      for (int64_t i = 0; i < master.view.numel; ++i) {
        uint16_t h;
        std::memcpy(&h, pp + 2 * i, 2);
        bf16 b;
        b.bits = h;
        m[i] = pt == DType::F16 ? f16::toFloat(h) : float(b);
      }
      if (absl::Status s = ex.writeBuffer(int(master.base), mbytes.data(), mbytes.size()); !s.ok())
        return s;
    }
  return absl::OkStatus();
}

} // namespace trainc::rt
