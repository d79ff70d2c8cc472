//===- Rampup.cpp - One plan per num_microbatches of a batch-size ramp-up --===//
//
// Megatron's --rampup-batch-size changes num_microbatches during training; a trainc program
// has its microbatches unrolled, so the ramp needs one program per distinct value. The plan
// directory keeps the final (full --global-batch-size) programs where a constant-batch plan
// has them, and each smaller value m gets a complete plan directory rampup/m<m>/ (its own
// plan.json and rank files: it can be run by hand with trainrun). docs/design.md "Batch-size
// ramp-up" records why the programs are not merged into one file.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver.h"

#include "runtime/control/ProgramSwitch.h"
#include "runtime/core/Files.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace mlir;
using namespace mlir::trainc;
namespace cfgns = ::trainc::config;
namespace schema = ::trainc::schema;

FailureOr<schema::Program>
mlir::trainc::compileRampupModule(ModuleOp module, const cfgns::PlanConfig &cfg,
                                  const CompileOptions &options) {
  const cfgns::TrainingConfig &t = cfg.training;
  const int64_t dp = cfg.parallel.data_parallel_size;
  auto subDir = [](const std::string &root, int64_t m) {
    return root.empty() ? std::string() : root + "/rampup/m" + std::to_string(m);
  };
  // Ramp-up plans of an earlier compile into this directory must not be mixed with these.
  if (!options.outputDir.empty())
    if (std::error_code ec = llvm::sys::fs::remove_directories(options.outputDir + "/rampup");
        ec && ec != std::errc::no_such_file_or_directory)
      return emitError(module.getLoc()) << "cannot remove the old '" << options.outputDir
                                        << "/rampup': " << ec.message();
  std::vector<std::pair<int64_t, schema::Program>> ramp;
  for (int64_t m : t.rampup_num_microbatches) {
    cfgns::PlanConfig sub = cfg;
    sub.training.rampup_batch_size.clear();
    sub.training.rampup_num_microbatches.clear();
    sub.training.decrease_batch_size_if_needed = false;
    sub.training.num_microbatches = m;
    sub.training.global_batch_size = m * t.micro_batch_size * dp;
    CompileOptions o = options;
    o.outputDir = subDir(options.outputDir, m);
    o.dumpIRDir = subDir(options.dumpIRDir, m);
    o.allRanks = nullptr;
    OwningOpRef<ModuleOp> clone = cast<ModuleOp>(module->clone());
    FailureOr<schema::Program> p = compileConstantBatchModule(*clone, sub, o);
    if (failed(p))
      return emitError(module.getLoc())
             << "the batch-size ramp-up's plan of " << m << " microbatches (global batch size "
             << sub.training.global_batch_size << ") failed to compile (errors above)";
    ramp.emplace_back(m, std::move(*p));
  }
  FailureOr<schema::Program> final = compileConstantBatchModule(module, cfg, options);
  if (failed(final))
    return failure();
  for (const auto &[m, p] : ramp)
    if (std::string e = ::trainc::rt::control::trainingStateMismatch(*final, p); !e.empty())
      return emitError(module.getLoc())
             << "internal error: rank 0's program of " << m
             << " microbatches cannot continue the final program's training state: " << e;
  if (options.outputDir.empty())
    return final;
  // plan.json's "rampup" section: Megatron's three values and the programs, by num_microbatches.
  const std::string planPath = options.outputDir + "/plan.json";
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> text = llvm::MemoryBuffer::getFile(planPath);
  if (!text)
    return emitError(module.getLoc()) << "cannot read back '" << planPath << "'";
  llvm::Expected<llvm::json::Value> plan = llvm::json::parse((*text)->getBuffer());
  if (!plan || !plan->getAsObject()) {
    if (!plan)
      llvm::consumeError(plan.takeError());
    return emitError(module.getLoc()) << "internal error: '" << planPath << "' is not a JSON object";
  }
  llvm::json::Array programs;
  for (const auto &[m, p] : ramp)
    programs.push_back(llvm::json::Object{{"num_microbatches", m},
                                          {"global_batch_size", m * t.micro_batch_size * dp},
                                          {"plan", "rampup/m" + std::to_string(m)}});
  programs.push_back(llvm::json::Object{{"num_microbatches", t.num_microbatches},
                                        {"global_batch_size", t.global_batch_size},
                                        {"plan", "."}});
  llvm::json::Array values;
  for (int64_t v : t.rampup_batch_size)
    values.push_back(v);
  (*plan->getAsObject())["rampup"] = llvm::json::Object{
      {"rampup_batch_size", std::move(values)},
      {"decrease_batch_size_if_needed", t.decrease_batch_size_if_needed},
      {"programs", std::move(programs)}};
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::formatv("{0:2}", *plan) << "\n";
  if (absl::Status s = ::trainc::rt::writeFileAtomically(planPath, os.str()); !s.ok())
    return emitError(module.getLoc()) << s.message();
  return final;
}
