//===- BlockProgram.h - A hand-assembled one-block transformer program ---===//
//
// Builds, without the compiler, the program of one training iteration of a one-layer Llama-style
// model (embedding, RMSNorm, attention with RoPE and GQA, SwiGLU MLP, final RMSNorm, output layer,
// cross entropy), its backward pass, gradient accumulation over microbatches (one function called
// once per microbatch with different input bindings), per-token loss normalisation, global
// grad-norm clipping and AdamW. It exercises every runtime mechanism the compiler will rely on and
// serves as the runtime demo until the compiler exists.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_TESTING_BLOCKPROGRAM_H
#define TRAINC_RUNTIME_TESTING_BLOCKPROGRAM_H

#include "runtime/core/DType.h"
#include "runtime/core/Executor.h"
#include "runtime/schema/program.pb.h"

#include <cstdint>
#include <vector>

namespace trainc::rt::testing {

struct BlockConfig {
  int64_t vocab = 64;
  int64_t hidden = 32;
  int64_t heads = 4;
  int64_t groups = 2;     // query groups (kv heads)
  int64_t ffn = 48;       // SwiGLU hidden size F (fc1 produces 2F)
  int64_t seq = 16;
  int64_t microBatch = 2; // samples per microbatch
  int64_t numMicrobatches = 2;
  DType dtype = DType::F32; // f32 or f64
  double ropeBase = 10000;
  double maxGradNorm = 1.0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};

/// Builds the iteration program. Buffers the host fills at FILL_INPUTS: "tokens.<mb>",
/// "labels.<mb>" (i32 [b, s]), "loss_mask.<mb>" (dtype [b, s]), "position_ids" (i32 [b, s]),
/// "lr", "weight_decay", "step" (dtype scalars). At READ_OUTPUTS: "loss_sum", "num_tokens",
/// "grad_norm", "update_successful". Parameters are named like Megatron's state dict.
schema::Program buildBlockProgram(const BlockConfig &c);

/// Fills the parameters with N(0, 0.02) from a counter-based generator (Philox keyed by seed and
/// parameter index) and norm weights with 1.
void initBlockParameters(Executor &ex, const BlockConfig &c, uint64_t seed);

/// Runs one iteration on deterministic synthetic data (a next-token rule the model can learn) and
/// returns the per-token loss (loss_sum / num_tokens) of the iteration.
double runBlockIteration(Executor &ex, const BlockConfig &c, int64_t iteration, double lr);

} // namespace trainc::rt::testing

#endif
