//===- Driver.h - trainc compile: config -> model IR -> per-rank programs --===//
#ifndef TRAINC_COMPILER_DRIVER_H
#define TRAINC_COMPILER_DRIVER_H

#include "dialects/Sched/SchedDialect.h"
#include "frontends/ModelConfig.h"
#include "runtime/schema/program.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace mlir::trainc {

struct CompileOptions {
  /// Output directory for plan.json and rank<N>.pb; empty = do not write files.
  std::string outputDir;
  /// "fp32" or "fp64" (gradient checks).
  std::string dtype = "fp32";
  /// Print the IR after every pass to stderr.
  bool printIRAfterAll = false;
  /// Write the IR after each phase to <dir>/<NN>-<phase>.mlir (rank 0's for per-rank phases).
  std::string dumpIRDir;
  /// Order of the forward/backward units; "all-forward-first" exists for tests (it holds every
  /// microbatch's stash at once).
  std::string unitSchedule = "no-pipelining";
  /// If set, receives every rank's program, in rank order (the functions return rank 0's).
  std::vector<::trainc::schema::Program> *allRanks = nullptr;
  /// Extra Program.metadata entries (e.g. the recompute report's "recompute.*").
  std::map<std::string, std::string> metadata;
};

/// The element type of the model's parameters and activations: "bf16" with --bf16, "fp16" with --fp16, else
/// options.dtype ("fp32", or "fp64" for gradient checks).
std::string modelDtype(const ::trainc::config::PlanConfig &cfg, const CompileOptions &options);

/// The plan attribute (`#sched.plan`) of a finalized config: model shape, parallel sizes,
/// batch, optimizer, loss mode, buckets, schedule. Set on the module by compileModule. Null after
/// an error (an inconsistent config; the frontends' finalize() refuses those first).
sched::PlanAttr makePlanAttr(MLIRContext &ctx, const ::trainc::config::PlanConfig &cfg,
                             const CompileOptions &options);

/// Registers the dialects trainc uses (func, mesh, model, sched, rt) and the model dialect's
/// interfaces on the mesh dialect's collectives (trainc-opt uses this too).
void registerTraincDialects(DialectRegistry &registry);
/// Loads them into `ctx`.
void loadTraincDialects(MLIRContext &ctx);

/// Builds the model IR (@forward) for a finalized config.
OwningOpRef<ModuleOp> buildModelModule(MLIRContext &ctx, const ::trainc::config::PlanConfig &cfg,
                                       const CompileOptions &options);

/// Runs every phase on `module` (in place) and exports one program per rank of the config's
/// rank table. Writes plan.json, rank<r>.pb for every rank and, with dumpIRDir, the IR of each
/// phase. Diagnostics go to the context's handler. With --rampup-batch-size
/// (cfg.training.rampup_batch_size) also one plan per smaller num_microbatches the ramp
/// reaches (compileRampupModule).
FailureOr<::trainc::schema::Program> compileModule(ModuleOp module,
                                                   const ::trainc::config::PlanConfig &cfg,
                                                   const CompileOptions &options);
/// compileModule for one num_microbatches (cfg.training's), ignoring the ramp-up fields.
FailureOr<::trainc::schema::Program>
compileConstantBatchModule(ModuleOp module, const ::trainc::config::PlanConfig &cfg,
                           const CompileOptions &options);
/// Batch-size ramp-up (compiler/lib/Rampup.cpp): for each m of
/// cfg.training.rampup_num_microbatches a complete plan of global batch size m x mbs x dp in
/// <outputDir>/rampup/m<m>/ (compiled on a clone of `module`), then the final plan in
/// <outputDir>; checks that every program of a rank holds the training state in the same
/// buffers as the final one (runtime/control/ProgramSwitch.h) and adds plan.json's "rampup"
/// section. Returns rank 0's final program.
FailureOr<::trainc::schema::Program>
compileRampupModule(ModuleOp module, const ::trainc::config::PlanConfig &cfg,
                    const CompileOptions &options);

/// The planned arena (bytes of one rank) and hardware FLOPs of one iteration of a compile.
struct PlanCost {
  uint64_t arenaBytes = 0;
  double flops = 0;      // hardware: forward, backward and recompute
  double modelFlops = 0; // without recompute
};

/// Compiles a clone of `model` (the model IR, untouched) under `cfg` without writing anything
/// and returns its cost. Diagnostics go to the context's handler.
FailureOr<PlanCost> planCost(ModuleOp model, const ::trainc::config::PlanConfig &cfg,
                             const CompileOptions &options);

/// --recompute-memory-budget: sets cfg.training's recompute fields to the candidate of least
/// added (hardware) FLOPs whose planned arena is <= cfg.training.recompute_memory_budget bytes,
/// ties to the smaller arena. Candidates, each compiled (planCost): no recompute, selective
/// recompute of every layer's core_attn, mlp, or both (Megatron's --recompute-modules), and full recompute of the first k layers of the stage
/// (Megatron's block method, k = 1 .. layers per stage; the block method's added FLOPs grow with
/// k, so the first k that fits is the cheapest full one). Returns the chosen plan's cost; an
/// impossible budget is an error naming the smallest feasible arena and its settings.
FailureOr<PlanCost> chooseRecompute(ModuleOp model, ::trainc::config::PlanConfig &cfg,
                                    const CompileOptions &options);

/// Compiles a finalized config end to end (buildModelModule + compileModule; with
/// --recompute-memory-budget after chooseRecompute).
FailureOr<::trainc::schema::Program> compilePlan(MLIRContext &ctx,
                                                 const ::trainc::config::PlanConfig &cfg,
                                                 const CompileOptions &options);

} // namespace mlir::trainc

#endif
