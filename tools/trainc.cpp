//===- trainc.cpp - The trainc compiler driver -----------------------------===//
//
//   trainc compile [--preset NAME | --hf-config FILE | MODEL.mlir] [Megatron-LM flags...] -o DIR
//                  [--dtype fp32|fp64] [--mlir-print-ir-after-all] [--dump-ir-dir DIR]
//   trainc inspect DIR [--memory] [--flops] [--schedule] [--schedule-svg FILE [--unit-costs]] [--ranks]
//                      [--buckets]
//   trainc presets
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver.h"
#include "compiler/PipelineTimeline.h"
#include "frontends/HFConfig.h"
#include "frontends/MegatronFlags.h"
#include "frontends/ModelModule.h"
#include "frontends/ModelConfig.h"
#include "runtime/core/Program.h"
#include "tools/MegatronMemory.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "frontends/TextLimits.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

using namespace mlir;
namespace cfgns = ::trainc::config;

namespace {

int usage(const std::string &msg = "") {
  if (!msg.empty())
    llvm::errs() << "trainc: " << msg << "\n";
  llvm::errs()
      << "usage: trainc compile [--preset NAME | --hf-config FILE | MODEL.mlir] [Megatron-LM "
         "flags...] -o DIR\n"
         "                      [--dtype fp32|fp64] [--mlir-print-ir-after-all] [--dump-ir-dir "
         "DIR]\n"
         "       trainc inspect DIR [--memory] [--flops] [--schedule] [--schedule-svg FILE [--unit-costs]]\n"
         "                          [--ranks] [--buckets]\n"
         "       trainc presets\n"
         "       trainc compile --help   (every flag with its default)\n";
  return 2;
}

int fail(const std::string &msg) {
  llvm::errs() << "trainc: error: " << msg << "\n";
  return 1;
}

/// Checkpoint, exit, timeout and rerun flags that only trainrun takes (docs/checkpoint.md,
/// docs/design.md "Rerun state machine").
const llvm::StringRef kRunTimeOnlyFlags[] = {
    "--no-save-optim", "--no-load-optim", "--no-load-rng", "--finetune", "--ckpt-step",
    "--exit-signal-handler", "--exit-interval", "--exit-duration-in-mins", "--async-save",
    "--override-opt_param-scheduler", "--distributed-timeout-minutes",
    "--rerun-mode", "--error-injection-rate", "--error-injection-type",
    "--result-rejected-tracker-filename", "--check-for-spiky-loss", "--check-for-large-grads"};

/// trainc compile's own flags (the driver's, not Megatron's), for --help.
struct DriverFlag {
  const char *name, *value, *help;
};
const DriverFlag kDriverFlags[] = {
    {"-o, --output", "DIR", "the plan directory to write (required)"},
    {"--preset", "NAME", "a built-in model (trainc presets)"},
    {"--hf-config", "FILE", "a Hugging Face config.json"},
    {"MODEL.mlir", "", "a model-dialect module"},
    {"--dtype", "{fp32,fp64}", "the compute dtype (default fp32)"},
    {"--mlir-print-ir-after-all", "", "print the IR after every pass"},
    {"--dump-ir-dir", "DIR", "write the IR after each phase"},
    {"-h, --help", "", "this text"},
};

/// `trainc compile --help`: the driver's flags, then every Megatron-LM flag of the parser's
/// table by group with its default and kind, then the run-time-only flags it refuses.
void printCompileHelp() {
  llvm::outs() << "usage: trainc compile [--preset NAME | --hf-config FILE | MODEL.mlir] "
                  "[Megatron-LM flags...] -o DIR\n\ntrainc compile:\n";
  for (const DriverFlag &f : kDriverFlags) {
    std::string head = std::string("  ") + f.name + (*f.value ? " " : "") + f.value;
    head.resize(std::max<size_t>(head.size() + 2, 44), ' ');
    llvm::outs() << head << f.help << "\n";
  }
  llvm::outs() << ::trainc::config::megatronFlagHelp();
  llvm::outs() << "\nrun-time only (refused here: give them to trainrun PLAN -- ...):\n ";
  for (llvm::StringRef f : kRunTimeOnlyFlags)
    llvm::outs() << " " << f;
  llvm::outs() << "\n\n[compile-time]: fixed in the program; [run-time]: the plan records the "
                  "value as trainrun's default (trainrun --help); [ignored]: accepted, no effect\n";
}

/// Activation recompute at compile time: with --recompute-memory-budget the compiler's choice
/// (written into `cfg`), and with any recompute the plan without it, for `trainc inspect`'s
/// "with and without" lines (Program.metadata "recompute.*"). Fails after a diagnostic.
mlir::LogicalResult recomputeReport(mlir::ModuleOp module, cfgns::PlanConfig &cfg,
                                    mlir::trainc::CompileOptions &opts) {
  cfgns::TrainingConfig &t = cfg.training;
  if (t.recompute_memory_budget > 0) {
    mlir::FailureOr<mlir::trainc::PlanCost> chosen =
        mlir::trainc::chooseRecompute(module, cfg, opts);
    if (mlir::failed(chosen))
      return mlir::failure();
    std::string what = t.recompute_granularity == "full"
                           ? "full, " + t.recompute_method + ", " +
                                 std::to_string(t.recompute_num_layers) + " layers"
                           : t.recompute_granularity;
    if (t.recompute_granularity == "selective")
      what += " (" + llvm::join(t.recompute_modules, ",") + ")";
    llvm::outs() << "trainc: --recompute-memory-budget " << t.recompute_memory_budget
                 << ": recompute " << what << " (arena " << chosen->arenaBytes
                 << " bytes, adds " << llvm::formatv("{0:e4}", chosen->flops - chosen->modelFlops)
                 << " hardware flops)\n";
    opts.metadata["recompute.memory_budget"] = std::to_string(t.recompute_memory_budget);
  }
  if (t.recompute_granularity == "none")
    return mlir::success();
  cfgns::PlanConfig plain = cfg;
  plain.training.recompute_granularity = "none";
  plain.training.recompute_method.clear();
  plain.training.recompute_num_layers = 0;
  mlir::FailureOr<mlir::trainc::PlanCost> base = mlir::trainc::planCost(module, plain, opts);
  if (mlir::failed(base))
    return mlir::failure();
  opts.metadata["recompute.arena_bytes_without"] = std::to_string(base->arenaBytes);
  return mlir::success();
}

int cmdCompile(std::vector<std::string> args) {
  if (llvm::is_contained(args, "--help") || llvm::is_contained(args, "-h")) {
    printCompileHelp();
    return 0;
  }
  mlir::trainc::CompileOptions opts;
  std::string preset, hfConfig, mlirFile;
  bool dtypeGiven = false; // --dtype on the command line (else a .mlir plan's, else fp32)
  std::vector<std::string> flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    auto value = [&](std::string &out) -> bool {
      if (i + 1 >= args.size() || llvm::StringRef(args[i + 1]).starts_with("--"))
        return false;
      out = args[++i];
      return true;
    };
    if (a == "-o" || a == "--output") {
      if (!value(opts.outputDir))
        return fail(a + " expects a directory");
    } else if (a == "--preset") {
      if (!value(preset))
        return fail("--preset expects a name (see `trainc presets`)");
    } else if (a == "--hf-config") {
      if (!value(hfConfig))
        return fail("--hf-config expects a config.json path");
    } else if (a == "--dtype") {
      if (!value(opts.dtype) || (opts.dtype != "fp32" && opts.dtype != "fp64"))
        return fail("--dtype expects fp32 or fp64");
      dtypeGiven = true;
    } else if (a == "--mlir-print-ir-after-all") {
      opts.printIRAfterAll = true;
    } else if (a == "--dump-ir-dir") {
      if (!value(opts.dumpIRDir))
        return fail("--dump-ir-dir expects a directory");
    } else if (llvm::is_contained(kRunTimeOnlyFlags, llvm::StringRef(a).split('=').first)) {
      // The plan records --save, --load and --save-interval (trainrun's defaults); these it
      // does not, so they are refused rather than dropped.
      std::string flag = llvm::StringRef(a).split('=').first.str();
      return fail(flag + " is a run-time flag that a plan does not record: give it to trainrun "
                  "(trainrun PLAN -- " + flag + " ...)");
    } else if (!llvm::StringRef(a).starts_with("-") && llvm::StringRef(a).ends_with(".mlir") &&
               mlirFile.empty() && (flags.empty() || !llvm::StringRef(flags.back()).starts_with("--data-path"))) {
      mlirFile = a;
    } else {
      flags.push_back(a);
    }
  }
  if (opts.outputDir.empty())
    return fail("missing -o DIR (the plan directory to write)");
  int sources = !preset.empty() + !hfConfig.empty() + !mlirFile.empty();
  if (sources > 1)
    return fail("give at most one of --preset, --hf-config and a .mlir file");

  MLIRContext ctx;
  mlir::trainc::loadTraincDialects(ctx);
  SourceMgrDiagnosticHandler diag(*new llvm::SourceMgr(), &ctx, llvm::errs());
  OwningOpRef<ModuleOp> module;
  std::optional<cfgns::ModelConfig> base;
  std::optional<int64_t> mbs; // a .mlir model's tokens shape fixes it
  std::optional<cfgns::PlanConfig> modulePlan; // a .mlir model's own sched.plan
  if (!preset.empty()) {
    base = cfgns::findPreset(preset);
    if (!base)
      return fail("unknown preset '" + preset + "' (expected one of: " +
                  llvm::join(cfgns::presetNames(), ", ") + ")");
  } else if (!hfConfig.empty()) {
    llvm::Expected<cfgns::ModelConfig> m = cfgns::readHFConfigFile(hfConfig);
    if (!m)
      return fail(llvm::toString(m.takeError()));
    base = *m;
  } else if (!mlirFile.empty()) {
    llvm::Expected<cfgns::ModelModule> in = cfgns::readModelModule(ctx, mlirFile);
    if (!in)
      return fail(llvm::toString(in.takeError()));
    module = std::move(in->module);
    base = in->base;
    mbs = in->micro_batch_size;
    modulePlan = std::move(in->plan);
    // The module's plan gives the compute dtype unless --dtype does.
    if (modulePlan && !dtypeGiven)
      opts.dtype = modulePlan->training.params_dtype;
  }
  cfgns::FlagParseOptions po;
  if (base)
    po.base_model = &*base;
  po.base_micro_batch_size = mbs;
  if (modulePlan)
    po.base_plan = &*modulePlan;
  llvm::Expected<cfgns::PlanConfig> cfg = cfgns::parseMegatronFlags(flags, po);
  if (!cfg)
    return fail(llvm::toString(cfg.takeError()));
  if (cfg->training.params_dtype != "fp32" && opts.dtype == "fp64" && dtypeGiven)
    return fail("--" + cfg->training.params_dtype + " and --dtype fp64 are mutually exclusive (--" +
                cfg->training.params_dtype + " gives " +
                (cfg->training.params_dtype == "bf16" ? "bf16" : "f16") +
                " parameters with fp32 master weights; fp64 is for gradient checks)");
  if (mbs && cfg->training.micro_batch_size != *mbs)
    return fail("--micro-batch-size " + std::to_string(cfg->training.micro_batch_size) +
                " differs from the micro batch of '" + mlirFile + "' (its tokens input has " +
                std::to_string(*mbs) + " rows)");
  // A .mlir model is its own model: the configuration records the IR's shape, not the base's
  // placeholders.
  if (module)
    if (llvm::Error e = cfgns::adoptModelShapeOfIR(*module, mlirFile, flags, *cfg))
      return fail(llvm::toString(std::move(e)));
  for (const std::string &w : cfg->warnings)
    llvm::errs() << "trainc: warning: " << w << "\n";
  if (!cfg->ignoredFlags.empty())
    llvm::errs() << "trainc: note: ignored flags (logging/profiling only): "
                 << llvm::join(cfg->ignoredFlags, " ") << "\n";
  if (!module) {
    module = mlir::trainc::buildModelModule(ctx, *cfg, opts);
    if (!module)
      return 1;
  }
  if (mlir::failed(recomputeReport(*module, *cfg, opts)))
    return 1;
  FailureOr<::trainc::schema::Program> program = mlir::trainc::compileModule(*module, *cfg, opts);
  if (failed(program))
    return 1;
  size_t instructions = 0;
  for (const auto &f : program->functions())
    instructions += size_t(f.body_size());
  int64_t world = program->mesh().world_size();
  llvm::outs() << "trainc: wrote " << opts.outputDir << "/plan.json and "
               << (world == 1 ? std::string("rank0.pb: 1 rank, ")
                              : "rank0.pb .. rank" + std::to_string(world - 1) + ".pb: " +
                                    std::to_string(world) + " ranks, ")
               << program->functions_size() << " functions, " << instructions
               << " instructions, arena " << program->arena_bytes() << " bytes, "
               << cfg->training.num_microbatches << " microbatches\n";
  return 0;
}


/// The communication of one rank's program (rank 0's: every rank's has the same instructions):
/// per function, the collectives by group (mesh axis), kind and reduction, and how many
/// parameters are slices of a larger global tensor (tensor parallelism).
static void printCollectives(const ::trainc::schema::Program &p) {
  int sliced = 0;
  for (const auto &q : p.parameters())
    for (int d = 0; d < q.global_shape_size(); ++d)
      if (q.slice_size(d) != q.global_shape(d)) {
        ++sliced;
        break;
      }
  llvm::outs() << "parameters: " << p.parameters_size() << ", " << sliced
               << " of them slices of a global tensor\n";
  llvm::outs() << "collectives of rank 0 (per function call, by group):\n";
  for (const auto &f : p.functions()) {
    std::map<std::string, int> counts;
    for (const auto &ins : f.body()) {
      if (!ins.has_collective())
        continue;
      const auto &c = ins.collective();
      std::string kind = ::trainc::schema::CollectiveKind_Name(c.kind());
      std::transform(kind.begin(), kind.end(), kind.begin(), ::tolower);
      std::string key = p.groups(int(c.group())).name() + " " + kind;
      if (c.kind() == ::trainc::schema::ALL_REDUCE || c.kind() == ::trainc::schema::REDUCE_SCATTER) {
        std::string op = ::trainc::schema::ReduceOp_Name(c.op());
        std::transform(op.begin(), op.end(), op.begin(), ::tolower);
        key += "(" + op + ")";
      }
      ++counts[key];
    }
    if (counts.empty())
      continue;
    llvm::outs() << "  " << f.name() << ":";
    for (const auto &[key, n] : counts)
      llvm::outs() << " " << key << " x" << n;
    llvm::outs() << "\n";
  }
}

int cmdInspect(std::vector<std::string> args) {
  if (args.empty())
    return usage("inspect takes a plan directory");
  std::string dir = args[0];
  bool all = args.size() == 1;
  auto want = [&](const char *f) {
    return all || llvm::is_contained(args, std::string(f));
  };
  std::string svgPath;
  bool unitCosts = false;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--schedule-svg") {
      if (i + 1 >= args.size())
        return usage("--schedule-svg takes an output file");
      svgPath = args[++i];
      continue;
    }
    if (args[i] == "--unit-costs") { // --schedule-svg on the unit-cost model
      unitCosts = true;
      continue;
    }
    if (args[i] != "--memory" && args[i] != "--flops" && args[i] != "--schedule" &&
        args[i] != "--ranks" && args[i] != "--buckets")
      return usage("unknown inspect option '" + args[i] + "'");
  }
  all = all && svgPath.empty();
  if (llvm::Error e = ::trainc::config::checkRegularFile(dir + "/plan.json", "plan"))
    return fail(llvm::toString(std::move(e)));
  auto text = llvm::MemoryBuffer::getFile(dir + "/plan.json");
  if (!text)
    return fail("cannot read '" + dir + "/plan.json': " + text.getError().message());
  if (llvm::Error e = ::trainc::config::checkJsonDepth((*text)->getBuffer(), dir + "/plan.json"))
    return fail(llvm::toString(std::move(e)));
  llvm::Expected<llvm::json::Value> plan = llvm::json::parse((*text)->getBuffer());
  if (!plan)
    return fail(dir + "/plan.json: " + llvm::toString(plan.takeError()));
  absl::StatusOr<::trainc::schema::Program> p = ::trainc::rt::readProgramFile(dir + "/rank0.pb");
  if (!p.ok())
    return fail(std::string(p.status().message()));
  const auto &r = p->reports();
  // Batch-size ramp-up: the programs by num_microbatches (plan.json's "rampup").
  const llvm::json::Object *root = plan->getAsObject();
  if (const llvm::json::Object *ramp = root ? root->getObject("rampup") : nullptr) {
    llvm::outs() << "batch-size ramp-up (--rampup-batch-size";
    if (const llvm::json::Array *v = ramp->getArray("rampup_batch_size"))
      for (const llvm::json::Value &x : *v)
        llvm::outs() << " " << x.getAsInteger().value_or(0);
    llvm::outs() << "), one plan per num_microbatches:\n";
    if (const llvm::json::Array *progs = ramp->getArray("programs"))
      for (const llvm::json::Value &e : *progs)
        if (const llvm::json::Object *o = e.getAsObject())
          llvm::outs() << "  " << o->getInteger("num_microbatches").value_or(0)
                       << " microbatches, global batch size "
                       << o->getInteger("global_batch_size").value_or(0) << ": "
                       << o->getString("plan").value_or("?") << "\n";
  }
  if (want("--ranks")) {
    // The rank table (Megatron's order tp-cp-ep-dp-pp, tp fastest) and, per rank, its program's
    // coordinates and communicator groups, read from every rank<r>.pb.
    llvm::outs() << "ranks: world size " << p->mesh().world_size() << ", mesh";
    for (int i = 0; i < p->mesh().axis_names_size(); ++i)
      llvm::outs() << " " << p->mesh().axis_names(i) << "=" << p->mesh().axis_sizes(i);
    llvm::outs() << " (rank order " ;
    for (int i = 0; i < p->mesh().axis_names_size(); ++i)
      llvm::outs() << (i ? "-" : "") << p->mesh().axis_names(i);
    llvm::outs() << ", first fastest)\n";
    for (int64_t rank = 0; rank < p->mesh().world_size(); ++rank) {
      std::string file = "rank" + std::to_string(rank) + ".pb";
      absl::StatusOr<::trainc::schema::Program> rp =
          rank == 0 ? p : ::trainc::rt::readProgramFile(dir + "/" + file);
      if (!rp.ok())
        return fail(std::string(rp.status().message()));
      if (rp->mesh().rank() != rank)
        return fail(dir + "/" + file + " holds the program of rank " +
                    std::to_string(rp->mesh().rank()) + ", expected " + std::to_string(rank));
      llvm::outs() << "  rank " << rank << " (" << file << "):";
      for (int i = 0; i < rp->mesh().axis_names_size() && i < rp->mesh().coords_size(); ++i)
        llvm::outs() << " " << rp->mesh().axis_names(i) << "=" << rp->mesh().coords(i);
      llvm::outs() << " |";
      for (const auto &g : rp->groups()) {
        llvm::outs() << " " << g.name() << "=[";
        for (int k = 0; k < g.ranks_size(); ++k)
          llvm::outs() << (k ? "," : "") << g.ranks(k);
        llvm::outs() << "]";
      }
      llvm::outs() << "\n";
    }
    printCollectives(*p);
  }
  if (want("--buckets")) {
    // The main-grad buffer (Megatron's _ParamAndGradBuffer): buckets in the order their
    // reductions start, the parameters in each, and with the distributed optimizer each DP
    // rank's shard.
    auto it = p->metadata().find("plan.grad_bucket_bounds");
    if (it != p->metadata().end()) {
      llvm::SmallVector<llvm::StringRef> parts;
      llvm::StringRef(it->second).split(parts, ',');
      std::vector<int64_t> bounds;
      for (llvm::StringRef s : parts) {
        int64_t v;
        if (!s.getAsInteger(10, v))
          bounds.push_back(v);
      }
      int64_t dp = 1;
      for (int i = 0; i < p->mesh().axis_names_size(); ++i)
        if (p->mesh().axis_names(i) == "dp")
          dp = p->mesh().axis_sizes(i);
      bool zero = p->metadata().count("parallel.use_distributed_optimizer") &&
                  p->metadata().at("parallel.use_distributed_optimizer") == "true";
      llvm::outs() << "gradient buckets: " << (bounds.empty() ? 0 : bounds.size() - 1)
                   << " over " << (bounds.empty() ? 0 : bounds.back())
                   << " fp32 main-grad elements" << (zero ? " (distributed optimizer)" : "")
                   << "\n";
      for (size_t b = 0; b + 1 < bounds.size(); ++b) {
        int64_t size = bounds[b + 1] - bounds[b];
        llvm::outs() << "  bucket " << b << ": [" << bounds[b] << ", " << bounds[b + 1] << ") "
                     << size << " elements";
        if (zero)
          llvm::outs() << ", shard of " << size / dp << " per DP rank";
        llvm::outs() << "\n   ";
        std::vector<std::pair<uint64_t, std::string>> in; // (offset, name), in layout order
        for (const auto &q : p->parameters())
          if (q.has_grad_buffer() && int64_t(q.grad_offset()) >= bounds[b] &&
              int64_t(q.grad_offset()) < bounds[b + 1])
            in.push_back({q.grad_offset(), q.name()});
        llvm::sort(in);
        for (const auto &[offset, name] : in)
          llvm::outs() << " " << name << "@" << offset;
        llvm::outs() << "\n";
      }
    } else {
      llvm::outs() << "gradient buckets: none recorded\n";
    }
  }
  if (want("--memory")) {
    llvm::outs() << "memory (bytes): arena " << r.memory().arena_bytes() << ", persistent "
                 << r.memory().persistent_bytes() << ", flowing peak "
                 << r.memory().flowing_peak_bytes() << "\n";
    for (const auto &kb : r.memory().by_kind())
      llvm::outs() << "  " << llvm::StringRef(::trainc::schema::BufferKind_Name(kb.kind())).lower()
                   << ": " << kb.bytes() << "\n";
    if (r.memory().stash_slots() > 0)
      llvm::outs() << "  stash: " << r.memory().stash_bytes_per_microbatch()
                   << " per microbatch x " << r.memory().stash_slots()
                   << " in flight (activations saved from forward for backward)\n";
    if (r.memory().stash_b_slots() > 0) // ZB-H1: the part only B reads, freed at B
      llvm::outs() << "  stash freed at B (zb-h1): " << r.memory().stash_b_bytes_per_microbatch()
                   << " per microbatch x " << r.memory().stash_b_slots()
                   << " in flight (the rest, above, is held until W)\n";
    // Activation recompute: the plan's settings and the arena the same plan has without them.
    auto meta = [&](const std::string &k) {
      auto it = p->metadata().find(k);
      return it == p->metadata().end() ? std::string() : it->second;
    };
    const std::string granularity = meta("training.recompute_granularity");
    if (!granularity.empty() && granularity != "none") {
      llvm::outs() << "  recompute: " << granularity;
      if (granularity == "full")
        llvm::outs() << ", " << meta("training.recompute_method") << ", "
                     << meta("training.recompute_num_layers") << " layers";
      else
        llvm::outs() << " (" << meta("training.recompute_modules") << ")";
      if (!meta("recompute.memory_budget").empty())
        llvm::outs() << " (chosen for --recompute-memory-budget "
                     << meta("recompute.memory_budget") << ")";
      if (!meta("recompute.arena_bytes_without").empty())
        llvm::outs() << "; arena without recompute " << meta("recompute.arena_bytes_without");
      llvm::outs() << "\n";
    }
    if (std::string err = ::trainc::tools::printMegatronMemory(dir, *p); !err.empty())
      return fail(err);
  }
  if (want("--flops")) {
    llvm::outs() << "flops per iteration: " << llvm::formatv("{0:e4}", r.flops().flops_per_iteration())
                 << " (the IR's matmuls and attention on this rank; fwd + bwd + recompute)\n";
    if (r.flops().megatron_flops_per_iteration() > 0)
      llvm::outs() << "megatron flops per iteration: "
                   << llvm::formatv("{0:e4}", r.flops().megatron_flops_per_iteration())
                   << " (num_floating_point_operations per rank; the log's TFLOP/s)\n";
    // 6ND: N = the model's parameters, D = the tokens of one iteration's global batch, per rank.
    double n = 0;
    for (const auto &prm : p->parameters()) {
      double numel = 1;
      for (int64_t d : prm.global_shape())
        numel *= double(d);
      n += numel;
    }
    double tokens = double(p->plan().global_batch_size()) * double(p->plan().seq_length());
    if (n > 0 && tokens > 0)
      llvm::outs() << "6ND per iteration: "
                   << llvm::formatv("{0:e4}", 6 * n * tokens / double(p->mesh().world_size()))
                   << " (N = " << llvm::formatv("{0}", int64_t(n)) << " parameters)\n";
    // Hardware FLOPs include what activation recompute replays; model FLOPs (MFU) do not.
    const double model = r.flops().model_flops_per_iteration();
    const double added = r.flops().flops_per_iteration() - model;
    llvm::outs() << "model flops per iteration: " << llvm::formatv("{0:e4}", model)
                 << ", recompute adds " << llvm::formatv("{0:e4}", added) << " hardware flops ("
                 << llvm::formatv("{0:f1}", model > 0 ? 100 * added / model : 0.0) << "%)\n";
  }
  if (want("--schedule")) {
    llvm::outs() << "schedule: " << r.schedule().schedule() << ", "
                 << r.schedule().num_microbatches() << " microbatches\n";
    // Each rank's ordered units (F/B, microbatch, chunk, function).
    for (int64_t rank = 0; rank < p->mesh().world_size(); ++rank) {
      absl::StatusOr<::trainc::schema::Program> rp =
          rank == 0 ? p
                    : ::trainc::rt::readProgramFile(dir + "/rank" + std::to_string(rank) + ".pb");
      if (!rp.ok())
        return fail(std::string(rp.status().message()));
      std::string indent = "  ";
      if (p->mesh().world_size() > 1) {
        llvm::outs() << "  rank " << rank << ":\n";
        indent = "    ";
      }
      for (const std::string &s : rp->reports().schedule().steps())
        llvm::outs() << indent << s << "\n";
    }
  }
  if (want("--schedule") || !svgPath.empty()) {
    // The pipeline on the cost model: one rank per stage (the ranks of a stage run the same
    // order). Unit costs, and the FLOPs ratio of a backward to a forward (2).
    std::vector<std::vector<mlir::trainc::TimelineUnit>> stages;
    std::vector<int64_t> stageRank;
    int ppAxis = -1;
    for (int a = 0; a < p->mesh().axis_names_size(); ++a)
      if (p->mesh().axis_names(a) == "pp")
        ppAxis = a;
    for (int64_t rank = 0; rank < p->mesh().world_size(); ++rank) {
      absl::StatusOr<::trainc::schema::Program> rp =
          rank == 0 ? p
                    : ::trainc::rt::readProgramFile(dir + "/rank" + std::to_string(rank) + ".pb");
      if (!rp.ok())
        return fail(std::string(rp.status().message()));
      size_t stage = ppAxis < 0 ? 0 : size_t(rp->mesh().coords(ppAxis));
      if (stage < stages.size())
        continue;
      stages.resize(stage + 1);
      stageRank.resize(stage + 1, rank);
      stageRank[stage] = rank;
      const auto &sched = rp->reports().schedule();
      for (int k = 0; k < sched.steps_size(); ++k) {
        mlir::trainc::TimelineUnit u;
        if (!mlir::trainc::parseScheduleStep(sched.steps(k), u))
          continue;
        // The call's FLOPs (the lowering's count), where the compiler recorded them.
        if (sched.step_flops_size() == sched.steps_size() && sched.step_flops(k) > 0)
          u.cost = sched.step_flops(k);
        stages[stage].push_back(u);
      }
    }
    // The stages' FLOPs as costs, in units of stage 0's first forward; unit costs elsewhere.
    std::vector<std::vector<mlir::trainc::TimelineUnit>> costed = stages;
    bool haveFlops = !stages.empty() && !stages.front().empty();
    for (const auto &stage : stages)
      for (const mlir::trainc::TimelineUnit &u : stage)
        haveFlops &= u.cost > 0;
    for (auto &stage : stages)
      for (mlir::trainc::TimelineUnit &u : stage)
        u.cost = -1;
    const double firstForwardFlops = haveFlops ? costed.front().front().cost : 1;
    if (haveFlops) {
      const double ref = firstForwardFlops;
      for (auto &stage : costed)
        for (mlir::trainc::TimelineUnit &u : stage)
          u.cost /= ref;
    }
    bool interleaved = false; // label boxes "F<microbatch>.<chunk>"
    for (const auto &stage : stages)
      for (const mlir::trainc::TimelineUnit &u : stage)
        interleaved |= u.chunk > 0;
    mlir::trainc::Timeline unit, flops;
    if (std::string e = mlir::trainc::playTimeline(stages, 1, 1, unit); !e.empty())
      return fail("the plan's schedule cannot run: " + e);
    // ZB-H1 (W units): a backward of 2 F is B + W, one F each.
    bool zeroBubble = false;
    for (const auto &stage : stages)
      for (const mlir::trainc::TimelineUnit &u : stage)
        zeroBubble |= u.weight;
    if (std::string e = mlir::trainc::playTimeline(stages, 1, zeroBubble ? 1 : 2, flops); !e.empty())
      return fail("the plan's schedule cannot run: " + e);
    if (want("--schedule") && !zeroBubble)
      llvm::outs() << llvm::formatv("bubble fraction (cost model, {0} stages): {1:f4} with unit "
                                    "costs (F = B = 1), {2:f4} with B = 2 F\n",
                                    stages.size(), unit.bubble, flops.bubble);
    if (want("--schedule") && zeroBubble) {
      const int64_t P = int64_t(stages.size()), m = r.schedule().num_microbatches();
      llvm::outs() << llvm::formatv(
          "bubble fraction (cost model, {0} stages): {1:f4} with unit costs (F = B = W = 1); "
          "ZB-H1's (P - 1) / (3 m + P - 1) = {2:f4} (m >= P); 1F1B at this m (B + W = 2 F): "
          "(P - 1) / (m + P - 1) = {3:f4}\n",
          P, unit.bubble, mlir::trainc::zeroBubbleH1Bubble(P, m),
          double(P - 1) / double(m + P - 1));
    }
    if (want("--schedule") && stages.size() > 1 && !zeroBubble) {
      // The literature's figure: bubble time over ideal time, (P - 1) / (V m) for Megatron's
      // (interleaved) 1F1B (Narayanan et al. 2021, section 2.2), next to the cost model's.
      int64_t chunks = 1;
      for (const auto &stage : stages)
        for (const mlir::trainc::TimelineUnit &u : stage)
          chunks = std::max(chunks, u.chunk + 1);
      const double P = double(stages.size()), m = double(r.schedule().num_microbatches());
      const double ideal = stages.front().empty() ? 0 : double(stages.front().size());
      llvm::outs() << llvm::formatv("bubble time / ideal time (unit costs): {0:f4}; (P - 1) / (V m) "
                                    "= {1:f4} (P {2}, V {3}, m {4})\n",
                                    ideal > 0 ? unit.makespan / ideal - 1 : 0.0,
                                    m > 0 ? (P - 1) / (double(chunks) * m) : 0.0, stages.size(),
                                    chunks, int64_t(m));
    }
    mlir::trainc::Timeline byFlops;
    if (haveFlops)
      if (std::string e = mlir::trainc::playTimeline(costed, 1, 1, byFlops); !e.empty())
        return fail("the plan's schedule cannot run: " + e);
    if (want("--schedule") && haveFlops) {
      // Each unit costs its stage function's FLOPs (transfers free): uneven stages (the
      // embedding, the output layer and loss) and B/W splits show in the bubble.
      llvm::outs() << llvm::formatv("bubble fraction (the stages' FLOPs): {0:f4}; FLOPs of "
                                    "microbatch 0's units:",
                                    byFlops.bubble);
      for (size_t s = 0; s < costed.size(); ++s) {
        llvm::outs() << (s ? ";" : "") << " stage " << s;
        for (const char *kind : {"F", "B", "W"})
          for (const mlir::trainc::TimelineUnit &u : costed[s])
            if (u.microbatch == 0 && u.chunk == 0 &&
                (kind[0] == 'F' ? u.forward : kind[0] == 'W' ? u.weight : !u.forward && !u.weight)) {
              llvm::outs() << " " << kind << " "
                           << llvm::formatv("{0:e3}", u.cost * firstForwardFlops);
              break;
            }
      }
      llvm::outs() << "\n";
    }
    if (!svgPath.empty()) {
      // One row per stage, boxes sized by the stages' FLOPs (stage 0's first F is one box unit)
      // or, with --unit-costs or without recorded FLOPs, by the unit-cost model (B = 2 F; ZB-H1
      // F = B = W); F blue, B green, W yellow.
      const bool drawFlops = haveFlops && !unitCosts;
      const mlir::trainc::Timeline &drawn = drawFlops ? byFlops : flops;
      const double scale = 24, row = 28;
      std::string svg;
      llvm::raw_string_ostream os(svg);
      os << llvm::formatv("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" "
                          "height=\"{1}\" font-family=\"monospace\" font-size=\"11\">\n",
                          int(drawn.makespan * scale + 90), int(row * double(stages.size()) + 30));
      for (size_t s = 0; s < drawn.stages.size(); ++s) {
        double y = 10 + row * double(s);
        os << llvm::formatv("<text x=\"2\" y=\"{0}\">rank {1}</text>\n", int(y + 17),
                            stageRank[s]);
        for (const mlir::trainc::TimelineUnit &u : drawn.stages[s]) {
          double x = 80 + u.start * scale, w = (u.end - u.start) * scale;
          os << llvm::formatv("<rect x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{3}\" "
                              "fill=\"{4}\" stroke=\"black\"/><text x=\"{5}\" y=\"{6}\">"
                              "{7}{8}{9}</text>\n",
                              x, y, w, row - 4,
                              u.forward ? "#8ab4f8" : u.weight ? "#fdd663" : "#81c995", x + 3,
                              int(y + 17), u.forward ? "F" : u.weight ? "W" : "B", u.microbatch,
                              u.chunk > 0 || interleaved ? "." + std::to_string(u.chunk) : "");
        }
      }
      os << llvm::formatv("<text x=\"2\" y=\"{0}\">bubble {1:f4} ({2})</text>\n",
                          int(row * double(stages.size()) + 24), drawn.bubble,
                          drawFlops ? "stage FLOPs" : zeroBubble ? "F = B = W" : "B = 2 F");
      os << "</svg>\n";
      std::error_code ec;
      llvm::raw_fd_ostream f(svgPath, ec);
      if (ec)
        return fail("cannot write '" + svgPath + "': " + ec.message());
      f << os.str();
    }
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "--help" || cmd == "-h") {
    usage();
    return 0;
  }
  if (cmd == "compile")
    return cmdCompile(args);
  if (cmd == "inspect")
    return cmdInspect(args);
  if (cmd == "presets") {
    for (const std::string &n : cfgns::presetNames())
      llvm::outs() << n << "\n";
    return 0;
  }
  return usage("unknown command '" + cmd + "'");
}
