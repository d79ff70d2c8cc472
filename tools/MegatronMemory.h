//===- MegatronMemory.h - Megatron's theoretical memory next to a plan's --===//
//
// `trainc inspect --memory`'s comparison with Megatron-LM's
// megatron/training/theoretical_memory_usage.py (issue 12 item 6).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_TOOLS_MEGATRONMEMORY_H
#define TRAINC_TOOLS_MEGATRONMEMORY_H

#include "runtime/schema/program.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace trainc::tools {

/// The arguments of Megatron's compute_activation_memory (sizes in elements, counts in units).
struct MegatronActivationArgs {
  double seq_length = 0, micro_batch_size = 0, hidden_size = 0, ffn_hidden_size = 0;
  double num_layers = 0, padded_vocab_size = 0;
  int64_t tensor_model_parallel_size = 1, pipeline_model_parallel_size = 1;
  int64_t virtual_pipeline_model_parallel_size = 0; // 0: Megatron's None (no interleaving)
  int64_t num_microbatches = 1;
  bool sequence_parallel = false;
  std::string recompute_granularity = "none"; // "none", "selective", "full"
};

/// Megatron's theoretical activation memory of the first pipeline stage, in bytes, as
/// report_theoretical_memory chooses it: with --sequence-parallel and selective recompute
/// compute_activation_memory (Korthikanti et al. 2022 table 2: per layer
/// s*b*h*(18 + 4*ffn/h), times num_layers (the first stage's L/pp layers times pp microbatches
/// in flight), plus the embedding's 8*s*b*pp + s*b*h*pp, times the interleaved penalty
/// 1 + (pp-1)/(pp*vpp) or min(1, num_microbatches/pp), plus the output layer's
/// 4*s*b*h*(1 + v/h) when pp == 1, all over tp); otherwise compute_activation_memory_without_sp
/// (per layer s*b*h*(10 + 24/tp), the same embedding and pipeline terms, the output layer's
/// 2*(s*b*v/tp + s*b*h) when pp == 1, times 1.05, not divided by tp). `formula` receives the
/// function's name, `inFlight` the in-flight microbatches Megatron reports.
double megatronActivationBytes(const MegatronActivationArgs &a, std::string *formula,
                               double *inFlight);

/// Prints, for the plan directory `dir` whose rank 0 program is `rank0`: Megatron's weight and
/// optimizer bytes per parameter (18, or 6 + 12/DP with the distributed optimizer: bf16/fp16
/// parameters 2, fp32 main grads 4, master weights 4 and Adam states 8, the last two over DP
/// with the distributed optimizer) applied to the heaviest pipeline stage's parameters (the rank
/// with the most parameter + main_grad + master_param + optimizer_state bytes), kind by kind
/// next to the plan's exact bytes; Megatron's own parameter count of its most loaded shard;
/// and megatronActivationBytes next to the plan's activation bytes of the first stage and the
/// heaviest one. Returns an error message when a rank file cannot be read, else "".
std::string printMegatronMemory(const std::string &dir, const ::trainc::schema::Program &rank0);

} // namespace trainc::tools

#endif // TRAINC_TOOLS_MEGATRONMEMORY_H
