//===- Init.h - Parameter initialisation from the plan's parameter table --===//
//
// Megatron's init rules as recorded by the compiler in each schema::Parameter: "normal" draws
// N(0, init_std^2), "ones" and "zeros" fill. Normal values come from Philox4x32-10 keyed by
// (seed, 64-bit FNV-1a hash of the parameter's global name) at counter = global element index / 2
// (Box-Muller pairs, runtime/core/Philox.h), so a rank holding a slice of a sharded parameter
// generates exactly its part of the same global tensor, and every plan starts from the same weights.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_INIT_H
#define TRAINC_RUNTIME_CORE_INIT_H

#include "runtime/core/Executor.h"

#include <string_view>

namespace trainc::rt {

/// FNV-1a 64-bit hash of a parameter name (the Philox key's second half).
uint64_t parameterKey(std::string_view name);

/// Value of element `globalIndex` (row-major in the global shape) of parameter `p` for `seed`.
double initialValue(const schema::Parameter &p, uint64_t seed, uint64_t globalIndex);

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
