//===- Driver.cpp - trainc compile ----------------------------------------===//

#include "compiler/Driver.h"

#include "compiler/Export.h"
#include "compiler/Pipelines.h"
#include "dialects/Model/ModelDialect.h"
#include "dialects/Rt/RtDialect.h"
#include "dialects/Sched/SchedDialect.h"
#include "models/ModelBuilder.h"
#include "runtime/core/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::trainc;
namespace cfgns = ::trainc::config;
namespace schema = ::trainc::schema;

void mlir::trainc::loadTraincDialects(MLIRContext &ctx) {
  ctx.loadDialect<func::FuncDialect, model::ModelDialect, sched::SchedDialect, rt::RtDialect>();
}

OwningOpRef<ModuleOp> mlir::trainc::buildModelModule(MLIRContext &ctx,
                                                     const cfgns::PlanConfig &cfg,
                                                     const CompileOptions &options) {
  loadTraincDialects(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&ctx));
  BuildOptions b;
  b.microBatchSize = cfg.training.micro_batch_size;
  b.dtype = options.dtype;
  if (failed(buildModel(*module, cfg.model, b)) || failed(verify(*module)))
    return nullptr;
  return module;
}

namespace {

PlanOptions planOptions(const cfgns::PlanConfig &cfg) {
  PlanOptions o;
  o.numMicrobatches = cfg.training.num_microbatches;
  o.normalization = cfg.training.calculate_per_token_loss ? "per_token" : "per_microbatch";
  o.adamBeta1 = cfg.training.adam_beta1;
  o.adamBeta2 = cfg.training.adam_beta2;
  o.adamEps = cfg.training.adam_eps;
  o.clipGrad = cfg.training.clip_grad;
  return o;
}

llvm::json::Object keyValues(const cfgns::KeyValues &kv) {
  llvm::json::Object o;
  for (const auto &[k, v] : kv)
    o[k] = v;
  return o;
}

LogicalResult writeFile(MLIRContext &ctx, const std::string &path, llvm::StringRef data) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return emitError(UnknownLoc::get(&ctx)) << "cannot write '" << path << "': " << ec.message();
  os << data;
  return success();
}

LogicalResult writePlan(MLIRContext &ctx, const std::string &dir, const cfgns::PlanConfig &cfg,
                        const schema::Program &program) {
  std::string bytes = ::trainc::rt::serializeProgram(program);
  if (failed(writeFile(ctx, dir + "/rank0.pb", bytes)))
    return failure();
  const schema::Reports &r = program.reports();
  llvm::json::Object mem{{"persistent_bytes", int64_t(r.memory().persistent_bytes())},
                         {"flowing_peak_bytes", int64_t(r.memory().flowing_peak_bytes())},
                         {"arena_bytes", int64_t(r.memory().arena_bytes())}};
  llvm::json::Object byKind;
  for (const schema::KindBytes &kb : r.memory().by_kind())
    byKind[llvm::StringRef(schema::BufferKind_Name(kb.kind())).lower()] = int64_t(kb.bytes());
  mem["by_kind"] = std::move(byKind);
  int64_t numParams = 0;
  for (const schema::Parameter &p : program.parameters()) {
    int64_t n = 1;
    for (int64_t d : p.global_shape())
      n *= d;
    numParams += n;
  }
  size_t instructions = 0;
  for (const schema::Function &f : program.functions())
    instructions += size_t(f.body_size());
  llvm::json::Array ignored, warnings;
  for (const std::string &s : cfg.ignoredFlags)
    ignored.push_back(s);
  for (const std::string &s : cfg.warnings)
    warnings.push_back(s);
  llvm::json::Object plan{
      {"format_version", int64_t(program.format_version())},
      {"producer", program.producer()},
      {"world_size", int64_t(1)},
      {"mesh", llvm::json::Object{{"tp", int64_t(1)}, {"dp", int64_t(1)}, {"pp", int64_t(1)}}},
      {"ranks", llvm::json::Array{llvm::json::Object{{"rank", int64_t(0)},
                                                     {"coords", llvm::json::Object{{"tp", 0}, {"dp", 0}, {"pp", 0}}},
                                                     {"program", "rank0.pb"},
                                                     {"instructions", int64_t(instructions)}}}},
      {"model", keyValues(cfg.model.toKeyValues())},
      {"parallel", keyValues(cfg.parallel.toKeyValues())},
      {"training", keyValues(cfg.training.toKeyValues())},
      {"runtime_defaults", keyValues(cfg.runtime.toKeyValues())},
      {"ignored_flags", std::move(ignored)},
      {"warnings", std::move(warnings)},
      {"num_parameters", numParams},
      {"reports",
       llvm::json::Object{{"memory", std::move(mem)},
                          {"flops_per_iteration", r.flops().flops_per_iteration()},
                          {"schedule", r.schedule().schedule()},
                          {"num_microbatches", r.schedule().num_microbatches()}}},
  };
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(plan))) << "\n";
  return writeFile(ctx, dir + "/plan.json", os.str());
}

} // namespace

FailureOr<schema::Program> mlir::trainc::compileModule(ModuleOp module,
                                                       const cfgns::PlanConfig &cfg,
                                                       const CompileOptions &options) {
  MLIRContext &ctx = *module.getContext();
  PlanOptions plan = planOptions(cfg);
  if (!options.dumpIRDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(options.dumpIRDir))
      return emitError(module.getLoc())
             << "cannot create --dump-ir-dir '" << options.dumpIRDir << "': " << ec.message();
  }
  struct Phase {
    const char *name;
    void (*build)(OpPassManager &, const PlanOptions &);
  };
  const Phase phases[] = {{"autodiff", buildAutodiffPhase},
                          {"schedule", buildSchedulePhase},
                          {"lower", buildLowerPhase},
                          {"memory", buildMemoryPhase}};
  auto dump = [&](int n, const char *name) -> LogicalResult {
    if (options.dumpIRDir.empty())
      return success();
    std::string text;
    llvm::raw_string_ostream os(text);
    module.print(os);
    return writeFile(ctx, options.dumpIRDir + "/" + std::to_string(n) + "-" + name + ".mlir",
                     os.str());
  };
  if (failed(dump(0, "model")))
    return failure();
  int n = 1;
  for (const Phase &ph : phases) {
    PassManager pm(&ctx);
    if (options.printIRAfterAll) {
      ctx.disableMultithreading();
      pm.enableIRPrinting([](Pass *, Operation *) { return false; },
                          [](Pass *, Operation *) { return true; }, /*printModuleScope=*/true,
                          /*printAfterOnlyOnChange=*/false);
    }
    ph.build(pm, plan);
    if (failed(pm.run(module)))
      return failure();
    if (failed(dump(n++, ph.name)))
      return failure();
  }
  FailureOr<schema::Program> program = exportProgram(module);
  if (failed(program))
    return failure();
  // The plan records its configuration: runtime flag defaults that trainrun uses and may
  // override, and the compile-time values trainrun checks its flags against.
  auto &meta = *program->mutable_metadata();
  for (const auto &[k, v] : cfg.runtime.toKeyValues())
    meta["runtime." + k] = v;
  for (const auto &[k, v] : cfg.model.toKeyValues())
    meta["model." + k] = v;
  for (const auto &[k, v] : cfg.training.toKeyValues())
    meta["training." + k] = v;
  for (const auto &[k, v] : cfg.parallel.toKeyValues())
    meta["parallel." + k] = v;
  if (absl::Status s = ::trainc::rt::validateProgram(*program); !s.ok())
    return emitError(module.getLoc())
           << "internal error: the exported program fails runtime validation: "
           << std::string(s.message());
  if (!options.outputDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(options.outputDir))
      return emitError(module.getLoc())
             << "cannot create output directory '" << options.outputDir << "': " << ec.message();
    if (failed(writePlan(ctx, options.outputDir, cfg, *program)))
      return failure();
  }
  return program;
}

FailureOr<schema::Program> mlir::trainc::compilePlan(MLIRContext &ctx,
                                                     const cfgns::PlanConfig &cfg,
                                                     const CompileOptions &options) {
  OwningOpRef<ModuleOp> module = buildModelModule(ctx, cfg, options);
  if (!module)
    return failure();
  return compileModule(*module, cfg, options);
}
