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
};

/// The element type of the model's parameters and activations: "bf16" with --bf16, else
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
/// phase. Diagnostics go to the context's handler.
FailureOr<::trainc::schema::Program> compileModule(ModuleOp module,
                                                   const ::trainc::config::PlanConfig &cfg,
                                                   const CompileOptions &options);

/// Compiles a finalized config end to end (buildModelModule + compileModule).
FailureOr<::trainc::schema::Program> compilePlan(MLIRContext &ctx,
                                                 const ::trainc::config::PlanConfig &cfg,
                                                 const CompileOptions &options);

} // namespace mlir::trainc

#endif
