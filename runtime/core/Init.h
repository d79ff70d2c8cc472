//===- Init.h - Parameter initialisation from the plan's parameter table --===//
//
// Megatron's init rules as recorded by the compiler in each schema::Parameter: "normal" draws
// N(0, init_std^2), "ones" and "zeros" fill. Normal values come from Philox4x32-10 keyed by
// (seed, 64-bit FNV-1a hash of the parameter's global name) at counter = global element index / 2
// (Box-Muller pairs, initNormalPair), so a rank holding a slice of a sharded parameter
// generates exactly its part of the same global tensor, and every plan starts from the same weights.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_INIT_H
#define TRAINC_RUNTIME_CORE_INIT_H

#include "runtime/core/Executor.h"

#include <string_view>

namespace trainc::rt {

/// The two standard normals of Box-Muller pair `pair` of a normal parameter: Philox4x32-10 under
/// key `seed` at counter (lo32(pair), hi32(pair), lo32(key), hi32(key)) with key =
/// parameterKey(name), then u1 = (53 bits + 1) / 2^53 in (0, 1], a = 2 pi (53 bits / 2^53),
/// out = sqrt(-2 log u1) (cos a, sin a) in double, with initmath's log and sincos (not libm's:
/// docs/design.md "Initialisation"). Elements 2 pair and 2 pair + 1 of the parameter are
/// init_std * out[0], init_std * out[1].
void initNormalPair(uint64_t seed, uint64_t key, uint64_t pair, double out[2]);

namespace initmath {
/// Natural log of u in [2^-53, 1] (the Box-Muller uniform): argument reduction to
/// m in [sqrt(1/2), sqrt(2)), atanh series; within a few ulp of double (tests: against libm's log).
/// Outside that range the result is not specified.
double logUnit(double u);
/// sin and cos of 2 pi x / 2^53 radians for an integer 0 <= x < 2^53 (x / 2^53 turns): exact
/// reduction to the nearest quarter turn, Taylor series on [-pi/4, pi/4]; within a few ulp of
/// double of the exact values.
void sinCosTurns(uint64_t x, double *sinOut, double *cosOut);
} // namespace initmath

/// FNV-1a 64-bit hash of a parameter name (the Philox key's second half).
uint64_t parameterKey(std::string_view name);

/// Value of element `globalIndex` (row-major in the global shape) of parameter `p` for `seed`.
double initialValue(const schema::Parameter &p, uint64_t seed, uint64_t globalIndex);

/// Testing: the Philox batch initializeParameters uses: 2 AVX-512F intrinsics, 1 AVX2 intrinsics,
/// 0 the portable loop; clamped to what the CPU has (the default is the best). Returns the
/// previous setting. Every path gives the same bits; the tests compare them.
int setPhiloxIsaForTesting(int isa);

/// Testing: whether initializeParameters stages every buffer on the host (as on a device
/// backend) even where it could write the CPU arena in place. Returns the previous setting.
bool setInitStagingForTesting(bool on);

/// Initialises every parameter of the executor's program. Errors: an unknown init rule (names the
/// parameter and the rule) or a parameter buffer whose dtype is not a float type.
/// Then sets the fp32 master weights of bf16 and f16 parameters from them (initializeMasterWeights).
absl::Status initializeParameters(Executor &ex, uint64_t seed);

/// Mixed precision: master = float(param) for every `adamw_master` instruction of the program
/// (its input 0, f32, and output 3, bf16 or f16, the same element count), as Megatron's optimizer makes
/// its fp32 main params from the bf16 model params, so param = bf16(master) from the start. The
/// instruction's operands name both ranges, also for a distributed-optimizer shard. Errors: an
/// operand that is a function argument or that does not resolve (names the function and the
/// instruction).
absl::Status initializeMasterWeights(Executor &ex);

} // namespace trainc::rt

#endif
