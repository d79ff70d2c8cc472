//===- MegatronMemory.cpp - Megatron's theoretical memory next to a plan's ===//
//
// The formulas are Megatron-LM's megatron/training/theoretical_memory_usage.py
// (compute_weight_and_optimizer_memory, compute_activation_memory,
// compute_activation_memory_without_sp), re-derived here; docs/design.md "Mixed precision
// (issue 12)" records what they count and how the plan's bytes compare.
//
//===----------------------------------------------------------------------===//
#include "tools/MegatronMemory.h"

#include "runtime/core/Program.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace trainc::tools {
namespace sch = ::trainc::schema;

double megatronActivationBytes(const MegatronActivationArgs &a, std::string *formula,
                               double *inFlight) {
  const double s = a.seq_length, b = a.micro_batch_size, h = a.hidden_size;
  const double tp = double(a.tensor_model_parallel_size);
  const double pp = double(a.pipeline_model_parallel_size);
  const bool withSp = a.sequence_parallel && a.recompute_granularity == "selective";
  if (formula)
    *formula = withSp ? "compute_activation_memory" : "compute_activation_memory_without_sp";
  // Per transformer layer: with SP and selective recompute everything is partitioned by TP
  // (the division comes at the end); without SP the layer norms, dropouts and residuals are
  // replicated (10) and the rest is partitioned (24 / tp).
  double act = s * b * h * (withSp ? 18 + 4 * (a.ffn_hidden_size / h) : 10 + 24 / tp);
  act *= a.num_layers;
  act += 8 * s * b * pp;  // the embedding's input ids, pp microbatches in flight
  act += s * b * h * pp;  // the embedding's dropout mask
  double flight = pp;
  if (a.virtual_pipeline_model_parallel_size > 0) {
    double penalty = 1 + (pp - 1) / (pp * double(a.virtual_pipeline_model_parallel_size));
    flight = std::ceil(penalty * pp);
    act *= penalty;
  } else if (a.pipeline_model_parallel_size > 1) {
    act *= std::min(1.0, double(a.num_microbatches) / pp);
    flight = std::min(double(a.num_microbatches), pp);
  }
  if (a.pipeline_model_parallel_size == 1) {
    if (withSp)
      act += s * b * h * 4 * (1 + a.padded_vocab_size / h);
    else
      act += (s * b * a.padded_vocab_size / tp + s * b * h) * 2;
  }
  if (inFlight)
    *inFlight = flight;
  return withSp ? act / tp : act * 1.05;
}

namespace {

int64_t axisSize(const sch::Program &p, const char *name) {
  for (int i = 0; i < p.mesh().axis_names_size(); ++i)
    if (p.mesh().axis_names(i) == name)
      return p.mesh().axis_sizes(i);
  return 1;
}

int64_t axisCoord(const sch::Program &p, const char *name) {
  for (int i = 0; i < p.mesh().axis_names_size() && i < p.mesh().coords_size(); ++i)
    if (p.mesh().axis_names(i) == name)
      return p.mesh().coords(i);
  return 0;
}

std::string meta(const sch::Program &p, const std::string &k) {
  auto it = p.metadata().find(k);
  return it == p.metadata().end() ? std::string() : it->second;
}

double metaNum(const sch::Program &p, const std::string &k) {
  std::string v = meta(p, k);
  return v.empty() ? 0.0 : std::strtod(v.c_str(), nullptr);
}

int64_t rankParameters(const sch::Program &p) {
  int64_t n = 0;
  for (const auto &q : p.parameters()) {
    int64_t e = 1;
    for (int64_t d : q.slice_size())
      e *= d;
    n += e;
  }
  return n;
}

uint64_t kindBytes(const sch::Program &p, sch::BufferKind k) {
  for (const auto &kb : p.reports().memory().by_kind())
    if (kb.kind() == k)
      return kb.bytes();
  return 0;
}

/// Megatron's num_parameters_on_most_loaded_model_shard for a dense model without MTP (the
/// only models trainc compiles): (block / pp + embedding) / tp, plus the output layer / tp
/// when untied and pp == 1. Norm weights are counted as if split by TP.
double megatronMostLoadedShardParameters(const sch::Program &p) {
  const double h = metaNum(p, "model.hidden_size"), ffn = metaNum(p, "model.ffn_hidden_size");
  const double heads = metaNum(p, "model.num_attention_heads");
  double groups = metaNum(p, "model.num_query_groups");
  if (meta(p, "model.group_query_attention") != "true" || groups <= 0)
    groups = heads;
  double kv = metaNum(p, "model.kv_channels");
  if (kv <= 0 && heads > 0)
    kv = h / heads;
  const double gated = meta(p, "model.swiglu") == "true" ? 1.5 : 1.0;
  const double norm = meta(p, "model.normalization") == "RMSNorm" ? 1 : 2;
  const double attn = 2 * h * h * ((1 + groups / heads) * (kv * heads / h));
  const double layer = 2 * h * (ffn * gated + norm) + attn;
  const double embedding = h * metaNum(p, "model.padded_vocab_size");
  const double block = layer * metaNum(p, "model.num_layers") + norm * h;
  const double tp = double(axisSize(p, "tp")), pp = double(axisSize(p, "pp"));
  double shard = (block / pp + embedding) / tp;
  if (meta(p, "model.untie_embeddings_and_output_weights") == "true" && pp == 1)
    shard += embedding / tp;
  return shard;
}

} // namespace

std::string printMegatronMemory(const std::string &dir, const sch::Program &rank0) {
  // Every rank's program: the stages differ (embedding, output layer), the ranks of a stage
  // differ only in their DP/TP coordinate.
  std::vector<sch::Program> ranks;
  const int64_t world = std::max<int64_t>(1, rank0.mesh().world_size());
  ranks.reserve(world);
  for (int64_t r = 0; r < world; ++r) {
    if (r == 0) {
      ranks.push_back(rank0);
      continue;
    }
    absl::StatusOr<sch::Program> rp =
        ::trainc::rt::readProgramFile(dir + "/rank" + std::to_string(r) + ".pb");
    if (!rp.ok())
      return std::string(rp.status().message());
    ranks.push_back(std::move(*rp));
  }
  const sch::BufferKind kinds[] = {sch::PARAMETER, sch::MAIN_GRAD, sch::MASTER_PARAM,
                                   sch::OPTIMIZER_STATE};
  auto persistent = [&](const sch::Program &p) {
    uint64_t s = 0;
    for (sch::BufferKind k : kinds)
      s += kindBytes(p, k);
    return s;
  };
  size_t heavy = 0;
  for (size_t r = 1; r < ranks.size(); ++r)
    if (persistent(ranks[r]) > persistent(ranks[heavy]))
      heavy = r;
  const sch::Program &hp = ranks[heavy];
  const int64_t dp = axisSize(rank0, "dp"), pp = axisSize(rank0, "pp");
  const bool zero = meta(rank0, "parallel.use_distributed_optimizer") == "true";
  const int64_t n = rankParameters(hp);
  const double perParam = zero ? 6.0 + 12.0 / double(dp) : 18.0;
  llvm::outs() << "weights and optimizer, Megatron's formula: " << n << " parameters x "
               << llvm::formatv("{0:f2}", perParam) << " bytes"
               << (zero ? " (6 + 12/" + std::to_string(dp) + ", distributed optimizer)"
                        : std::string(" (without the distributed optimizer)"))
               << " = " << llvm::formatv("{0:f0}", perParam * double(n))
               << " (assumes bf16/fp16 parameters; heaviest pipeline stage " << axisCoord(hp, "pp")
               << " of " << pp << ", rank " << heavy << ")\n";
  const uint64_t exact = persistent(hp);
  llvm::outs() << "weights and optimizer, this plan: " << exact << " bytes = "
               << llvm::formatv("{0:f4}", n ? double(exact) / double(n) : 0.0)
               << " bytes per parameter (parameter + main_grad + master_param + "
                  "optimizer_state; bucket padding included)\n";
  // Kind by kind: 2 (bf16/fp16 parameter), 4 (fp32 main_grad), 4 (fp32 master), 8 (Adam's two
  // fp32 moments); the last two over DP with the distributed optimizer.
  const double formulaBytes[] = {2.0 * double(n), 4.0 * double(n),
                                 4.0 * double(n) / double(zero ? dp : 1),
                                 8.0 * double(n) / double(zero ? dp : 1)};
  const char *names[] = {"parameter", "main_grad", "master_param", "optimizer_state"};
  for (int i = 0; i < 4; ++i) {
    const double plan = double(kindBytes(hp, kinds[i]));
    llvm::outs() << "  " << names[i] << ": plan " << llvm::formatv("{0:f0}", plan) << ", formula "
                 << llvm::formatv("{0:f0}", formulaBytes[i])
                 << (plan == formulaBytes[i] ? " (equal)"
                                             : llvm::formatv(" (plan - formula = {0:f0})",
                                                             plan - formulaBytes[i])
                                                   .str())
                 << "\n";
  }
  llvm::outs() << "  Megatron's most loaded shard: "
               << llvm::formatv("{0:f0}", megatronMostLoadedShardParameters(rank0))
               << " parameters (its count divides the replicated norm weights by TP)\n";

  // Activations: Megatron's estimate is for the first pipeline stage.
  MegatronActivationArgs a;
  a.seq_length = metaNum(rank0, "model.seq_length");
  a.micro_batch_size = double(rank0.plan().micro_batch_size());
  a.hidden_size = metaNum(rank0, "model.hidden_size");
  a.ffn_hidden_size = metaNum(rank0, "model.ffn_hidden_size");
  a.num_layers = metaNum(rank0, "model.num_layers");
  a.padded_vocab_size = metaNum(rank0, "model.padded_vocab_size");
  a.tensor_model_parallel_size = axisSize(rank0, "tp");
  a.pipeline_model_parallel_size = pp;
  a.virtual_pipeline_model_parallel_size =
      int64_t(metaNum(rank0, "parallel.virtual_pipeline_model_parallel_size"));
  a.num_microbatches = int64_t(rank0.plan().num_microbatches());
  a.sequence_parallel = meta(rank0, "parallel.sequence_parallel") == "true";
  a.recompute_granularity = meta(rank0, "training.recompute_granularity");
  std::string formula;
  double inFlight = 0;
  const double est = megatronActivationBytes(a, &formula, &inFlight);
  llvm::outs() << "activations, Megatron's formula (" << formula << ", first pipeline stage, "
               << llvm::formatv("{0:f0}", inFlight)
               << " microbatches in flight): " << llvm::formatv("{0:f0}", est) << " bytes\n";
  // The plan's: its flowing peak (activations, stashes and workspace at their peak in the
  // arena) of the first stage's rank 0 and of the stage with the largest one.
  size_t peakRank = 0;
  for (size_t r = 1; r < ranks.size(); ++r)
    if (ranks[r].reports().memory().flowing_peak_bytes() >
        ranks[peakRank].reports().memory().flowing_peak_bytes())
      peakRank = r;
  auto planAct = [&](size_t r) {
    const auto &m = ranks[r].reports().memory();
    std::string s = llvm::formatv("{0} bytes (stage {1}, rank {2}; stash {3} per microbatch x "
                                  "{4})",
                                  m.flowing_peak_bytes(), axisCoord(ranks[r], "pp"), r,
                                  m.stash_bytes_per_microbatch(), m.stash_slots())
                        .str();
    return s;
  };
  llvm::outs() << "activations, this plan's flowing peak: first stage " << planAct(0);
  if (axisCoord(ranks[peakRank], "pp") != 0)
    llvm::outs() << ", largest " << planAct(peakRank);
  llvm::outs() << "\n";
  return "";
}

} // namespace trainc::tools
