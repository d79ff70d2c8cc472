//===- RecomputeBudget.cpp - The recompute set under a memory budget ------===//
//
// --recompute-memory-budget: compiles candidate recompute settings and keeps the one of least
// added FLOPs whose planned arena fits (compiler/Driver.h).
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <optional>
#include <vector>

using namespace mlir;
using namespace mlir::trainc;
namespace cfgns = ::trainc::config;

FailureOr<PlanCost> mlir::trainc::planCost(ModuleOp model, const cfgns::PlanConfig &cfg,
                                           const CompileOptions &options) {
  CompileOptions o = options;
  o.outputDir.clear();
  o.dumpIRDir.clear();
  o.printIRAfterAll = false;
  o.allRanks = nullptr;
  OwningOpRef<ModuleOp> clone(cast<ModuleOp>(model->clone()));
  FailureOr<::trainc::schema::Program> p = compileModule(*clone, cfg, o);
  if (failed(p))
    return failure();
  PlanCost c;
  c.arenaBytes = p->arena_bytes();
  c.flops = p->reports().flops().flops_per_iteration();
  c.modelFlops = p->reports().flops().model_flops_per_iteration();
  return c;
}

namespace {
/// Megatron's flags for one candidate.
struct Candidate {
  std::string granularity, method;
  int64_t numLayers = 0;
  std::vector<std::string> modules = {"core_attn"};
  std::string describe() const {
    if (granularity == "selective")
      return "--recompute-granularity selective --recompute-modules " + llvm::join(modules, " ");
    if (granularity != "full")
      return "--recompute-granularity " + granularity;
    return "--recompute-granularity full --recompute-method " + method +
           " --recompute-num-layers " + std::to_string(numLayers);
  }
};
} // namespace

FailureOr<PlanCost> mlir::trainc::chooseRecompute(ModuleOp model, cfgns::PlanConfig &cfg,
                                                  const CompileOptions &options) {
  const int64_t budget = cfg.training.recompute_memory_budget;
  const int64_t layers = cfg.model.num_layers / cfg.parallel.pipeline_model_parallel_size;
  std::optional<std::pair<Candidate, PlanCost>> best, smallest;
  auto tryOne = [&](const Candidate &c) -> FailureOr<bool> {
    cfgns::PlanConfig trial = cfg;
    trial.training.recompute_granularity = c.granularity;
    trial.training.recompute_method = c.method;
    trial.training.recompute_num_layers = c.numLayers;
    trial.training.recompute_modules = c.modules;
    FailureOr<PlanCost> cost = planCost(model, trial, options);
    if (failed(cost))
      return failure();
    if (!smallest || cost->arenaBytes < smallest->second.arenaBytes)
      smallest = {c, *cost};
    const bool fits = cost->arenaBytes <= uint64_t(budget);
    if (fits) {
      const double added = cost->flops - cost->modelFlops;
      const bool better =
          !best || added < best->second.flops - best->second.modelFlops ||
          (added == best->second.flops - best->second.modelFlops &&
           cost->arenaBytes < best->second.arenaBytes);
      if (better)
        best = {c, *cost};
    }
    return fits;
  };
  FailureOr<bool> fits = tryOne({"none", "", 0});
  if (failed(fits))
    return failure();
  if (!*fits) {
    for (std::vector<std::string> modules :
         {std::vector<std::string>{"core_attn"}, {"mlp"}, {"core_attn", "mlp"}})
      if (failed(tryOne({"selective", "", 0, modules})))
        return failure();
    for (int64_t k = 1; k <= layers; ++k) {
      fits = tryOne({"full", "block", k});
      if (failed(fits))
        return failure();
      if (*fits)
        break;
    }
  }
  if (!best)
    return emitError(model.getLoc())
           << "--recompute-memory-budget " << budget
           << " bytes is below every plan's arena; the smallest feasible budget is "
           << smallest->second.arenaBytes << " bytes (" << smallest->first.describe() << ")";
  cfg.training.recompute_granularity = best->first.granularity;
  cfg.training.recompute_method = best->first.method;
  cfg.training.recompute_num_layers = best->first.numLayers;
  cfg.training.recompute_modules = best->first.modules;
  return best->second;
}
