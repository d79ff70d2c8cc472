//===- Kernel.h - Kernel signatures, attributes and the call ABI ----------===//
//
// Every kernel a program may call is declared once here, independent of any backend: its name,
// operand counts, attributes (with defaults) and a `verify` function that checks dtypes and shapes.
// The validator checks every KernelCall against this table before anything runs; a backend then
// provides an implementation (KernelFn) for each name it supports.
//
// The full list of kernels and their operand conventions is in docs/kernels.md.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_KERNEL_H
#define TRAINC_RUNTIME_CORE_KERNEL_H

#include "runtime/core/Tensor.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainc::rt {

enum class AttrType : uint8_t { Int, Float, Ints };

/// An attribute declaration: name, type and default. Attributes with `required` set must be given.
struct AttrSpec {
  const char *name;
  AttrType type;
  double defaultValue = 0; // Int and Float defaults
  bool required = false;
};

/// Decoded attribute values of one call, in the order of the kernel's AttrSpec list.
struct Attrs {
  std::vector<double> scalars;             // Int and Float attributes (ints are exact up to 2^53)
  std::vector<std::vector<int64_t>> lists; // Ints attributes (empty for scalar ones)
  int64_t i(int k) const { return int64_t(scalars[k]); }
  double f(int k) const { return scalars[k]; }
  const std::vector<int64_t> &ints(int k) const { return lists[k]; }
};

/// What a kernel receives: input and output views, decoded attributes, and an opaque backend
/// stream/workspace pointer. Outputs may alias inputs only where the program declared it.
struct KernelCtx {
  const TensorView *in = nullptr;
  int numIn = 0;
  TensorView *out = nullptr;
  int numOut = 0;
  const Attrs *attrs = nullptr;
  void *backendData = nullptr;
};

using KernelFn = void (*)(const KernelCtx &);

/// Verifies dtypes, shapes and attributes of a call (views carry no data). Returns "" when valid,
/// otherwise a message naming the operand and the expected value.
using VerifyFn = std::string (*)(const KernelCtx &);

struct KernelSignature {
  const char *name;
  int numIn;
  int numOut;
  std::vector<AttrSpec> attrs;
  VerifyFn verify;
  const char *summary;
  /// Outputs that the kernel reads before writing when the named attribute is non-zero
  /// (e.g. matmul's beta accumulation); informational for the validator's overlap rule.
  const char *readsOutputAttr = nullptr;
};

/// Looks up a signature by name; null if unknown.
const KernelSignature *findKernelSignature(std::string_view name);
/// All known signatures (for docs and tests).
const std::vector<KernelSignature> &allKernelSignatures();
/// Index of attribute `name` in `sig.attrs`, or -1.
int attrIndex(const KernelSignature &sig, std::string_view name);

} // namespace trainc::rt

#endif
