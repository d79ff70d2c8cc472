//===- Driver.cpp - trainc compile ----------------------------------------===//

#include "compiler/Driver.h"

#include "compiler/Export.h"
#include "compiler/Pipelines.h"
#include "compiler/VerifyPlan.h"
#include "passes/Graph/Passes.h"
#include "passes/Pipeline/Passes.h"
#include "dialects/Model/ModelDialect.h"
#include "dialects/Rt/RtDialect.h"
#include "dialects/Sched/SchedDialect.h"
#include "dialects/Trainc/TraincDialect.h"
#include "frontends/RankTable.h"
#include "models/ModelBuilder.h"
#include "runtime/core/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "runtime/core/Files.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using namespace mlir;
using namespace mlir::trainc;
namespace cfgns = ::trainc::config;
namespace schema = ::trainc::schema;

void mlir::trainc::registerTraincDialects(DialectRegistry &registry) {
  registry.insert<func::FuncDialect, mesh::MeshDialect, model::ModelDialect, sched::SchedDialect,
                  rt::RtDialect, top::TraincDialect>();
  model::registerCollectiveInterfaces(registry);
}

void mlir::trainc::loadTraincDialects(MLIRContext &ctx) {
  DialectRegistry registry;
  registerTraincDialects(registry);
  ctx.appendDialectRegistry(registry);
  ctx.loadDialect<func::FuncDialect, mesh::MeshDialect, model::ModelDialect, sched::SchedDialect,
                  rt::RtDialect, top::TraincDialect>();
}

std::string mlir::trainc::modelDtype(const cfgns::PlanConfig &cfg, const CompileOptions &options) {
  const std::string &p = cfg.training.params_dtype;
  return p == "bf16" || p == "fp16" ? p : options.dtype;
}

OwningOpRef<ModuleOp> mlir::trainc::buildModelModule(MLIRContext &ctx,
                                                     const cfgns::PlanConfig &cfg,
                                                     const CompileOptions &options) {
  loadTraincDialects(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&ctx));
  BuildOptions b;
  b.microBatchSize = cfg.training.micro_batch_size;
  b.dtype = modelDtype(cfg, options);
  if (failed(buildModel(*module, cfg.model, b)) || failed(verify(*module)))
    return nullptr;
  // Megatron's FLOPs count of the model the builder built (a .mlir model has none).
  (*module)->setAttr("trainc.megatron_flops_per_token",
                     FloatAttr::get(Float64Type::get(&ctx), cfgns::megatronFlopsPerToken(cfg.model)));
  return module;
}

namespace {

} // namespace

sched::PlanAttr mlir::trainc::makePlanAttr(MLIRContext &ctx, const cfgns::PlanConfig &cfg,
                                           const CompileOptions &options) {
  loadTraincDialects(ctx);
  Builder b(&ctx);
  const cfgns::ModelConfig &m = cfg.model;
  const cfgns::ParallelConfig &par = cfg.parallel;
  const cfgns::TrainingConfig &t = cfg.training;
  auto f64 = [&](double v) { return b.getF64FloatAttr(v); };
  const int64_t one = 1;
  const StringRef lossMode = t.calculate_per_token_loss ? "per_token" : "per_microbatch";
  sched::RecomputeSpec spec;
  if (!t.recompute_granularity.empty())
    spec.granularity = t.recompute_granularity;
  if (spec.granularity == "full") {
    spec.method = t.recompute_method;
    spec.numLayers = t.recompute_num_layers;
  }
  if (spec.granularity == "selective")
    spec.modules = t.recompute_modules;
  const std::string recompute = spec.str();
  // Megatron pipelines with 1F1B whenever pp > 1, interleaved with virtual stages (finalize()
  // resolved --pipeline-schedule).
  const std::string schedule =
      par.pipeline_model_parallel_size > 1 && options.unitSchedule == "no-pipelining"
          ? (par.pipeline_schedule.empty() ? std::string("1f1b") : par.pipeline_schedule)
          : options.unitSchedule;
  return sched::PlanAttr::getChecked(
      [&] { return emitError(UnknownLoc::get(&ctx)) << "internal error: the config's plan: "; },
      &ctx, m.num_layers, m.hidden_size, m.num_attention_heads,
      m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads, m.ffn_hidden_size,
      m.seq_length, m.padded_vocab_size, par.tensor_model_parallel_size, /*cp=*/one, /*ep=*/one,
      par.data_parallel_size, par.pipeline_model_parallel_size,
      std::max<int64_t>(1, par.virtual_pipeline_model_parallel_size), t.micro_batch_size,
      t.global_batch_size, t.num_microbatches, StringRef(modelDtype(cfg, options)), StringRef(t.optimizer),
      f64(t.adam_beta1), f64(t.adam_beta2), f64(t.adam_eps), f64(t.clip_grad),
      f64(t.weight_decay), lossMode, par.ddp_bucket_size,
      b.getBoolAttr(par.use_distributed_optimizer),
      // With one rank there is nothing to gather (Megatron's flag is then a no-op too).
      b.getBoolAttr(par.overlap_param_gather && par.data_parallel_size > 1),
      StringRef(schedule),
      StringRef(recompute));
}

namespace {

llvm::json::Object keyValues(const cfgns::KeyValues &kv) {
  llvm::json::Object o;
  for (const auto &[k, v] : kv)
    o[k] = v;
  return o;
}

/// Writes `data` to `path` atomically (a temporary renamed over it: never through a symlink,
/// never half a file); the error names the path and errno.
LogicalResult writeFile(MLIRContext &ctx, const std::string &path, llvm::StringRef data) {
  if (absl::Status s = ::trainc::rt::writeFileAtomically(path, std::string_view(data.data(),
                                                                                 data.size()));
      !s.ok())
    return emitError(UnknownLoc::get(&ctx)) << s.message();
  return success();
}

/// What plan.json says about one rank.
struct RankEntry {
  int64_t rank = 0;
  std::vector<std::pair<std::string, int64_t>> coords;
  std::string file;
  int64_t instructions = 0;
  /// The global (unsharded) element count of each parameter the rank holds a slice of; filled
  /// for the first rank of each pipeline stage only (the other ranks of a stage hold slices or
  /// copies of the same global tensors).
  std::vector<std::pair<std::string, int64_t>> parameters;
};

RankEntry rankEntry(const schema::Program &p) {
  RankEntry e;
  e.rank = p.mesh().rank();
  for (int a = 0; a < p.mesh().axis_names_size(); ++a)
    e.coords.push_back({p.mesh().axis_names(a), p.mesh().coords(a)});
  e.file = "rank" + std::to_string(e.rank) + ".pb";
  for (const schema::Function &f : p.functions())
    e.instructions += f.body_size();
  for (const auto &[axis, c] : e.coords)
    if (axis != "pp" && c != 0)
      return e;
  for (const schema::Parameter &q : p.parameters()) {
    int64_t n = 1;
    for (int64_t d : q.global_shape())
      n *= d;
    e.parameters.push_back({q.name(), n});
  }
  return e;
}

/// FNV-1a 64 of the configuration and the producer, as 16 hex digits.
std::string planFingerprint(const cfgns::PlanConfig &cfg, const CompileOptions &options) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](llvm::StringRef text) {
    for (unsigned char c : text.bytes()) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0xff;
    h *= 1099511628211ull;
  };
  for (const cfgns::KeyValues &kv :
       {cfg.model.toKeyValues(), cfg.training.toKeyValues(), cfg.parallel.toKeyValues(),
        cfg.runtime.toKeyValues()})
    for (const auto &[k, v] : kv) {
      mix(k);
      mix(v);
    }
  mix(options.dtype);
  mix(std::to_string(::trainc::rt::kFormatVersion));
  return llvm::utohexstr(h, /*LowerCase=*/true, /*Width=*/16);
}

/// plan.json (the rank files are already written). `program` is rank 0's.
LogicalResult writePlan(MLIRContext &ctx, const std::string &dir, const cfgns::PlanConfig &cfg,
                        const schema::Program &program, const std::vector<RankEntry> &entries) {
  // Rank files of an earlier compile into the same directory would be mixed with this plan's.
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    uint64_t r;
    if (name.consume_front("rank") && name.consume_back(".pb") && !name.getAsInteger(10, r) &&
        r >= uint64_t(entries.size()))
      (void)llvm::sys::fs::remove(it->path());
  }
  llvm::json::Array ranks;
  for (const RankEntry &e : entries) {
    llvm::json::Object coords;
    for (const auto &[axis, c] : e.coords)
      coords[axis] = c;
    ranks.push_back(llvm::json::Object{{"rank", e.rank},
                                       {"coords", std::move(coords)},
                                       {"program", e.file},
                                       {"instructions", e.instructions}});
  }
  llvm::json::Object mesh;
  for (int a = 0; a < program.mesh().axis_names_size(); ++a)
    mesh[program.mesh().axis_names(a)] = program.mesh().axis_sizes(a);
  const schema::Reports &r = program.reports();
  llvm::json::Object mem{{"persistent_bytes", int64_t(r.memory().persistent_bytes())},
                         {"flowing_peak_bytes", int64_t(r.memory().flowing_peak_bytes())},
                         {"arena_bytes", int64_t(r.memory().arena_bytes())}};
  llvm::json::Object byKind;
  for (const schema::KindBytes &kb : r.memory().by_kind())
    byKind[llvm::StringRef(schema::BufferKind_Name(kb.kind())).lower()] = int64_t(kb.bytes());
  mem["by_kind"] = std::move(byKind);
  // The whole model's parameters: every stage's, each global tensor once (a TP slice stands for
  // its global tensor; the tied embedding's copy on the last pipeline stage is the same name).
  std::map<std::string, int64_t> globalParams;
  for (const RankEntry &e : entries)
    for (const auto &[name, n] : e.parameters)
      globalParams.emplace(name, n);
  int64_t numParams = 0;
  for (const auto &[name, n] : globalParams)
    numParams += n;
  llvm::json::Array ignored, warnings;
  for (const std::string &s : cfg.ignoredFlags)
    ignored.push_back(s);
  for (const std::string &s : cfg.warnings)
    warnings.push_back(s);
  llvm::json::Object plan{
      {"format_version", int64_t(program.format_version())},
      {"producer", program.producer()},
      {"world_size", program.mesh().world_size()},
      {"mesh", std::move(mesh)},
      {"ranks", std::move(ranks)},
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
  if (!cfg.training.rampup_batch_size.empty())
    return compileRampupModule(module, cfg, options);
  return compileConstantBatchModule(module, cfg, options);
}

FailureOr<schema::Program>
mlir::trainc::compileConstantBatchModule(ModuleOp module, const cfgns::PlanConfig &cfg,
                                         const CompileOptions &options) {
  MLIRContext &ctx = *module.getContext();
  // The plan: the passes read it. A .mlir input may carry its own: the frontend started the
  // configuration from it (frontends/ModelModule.h), so `cfg` is that plan with the command
  // line's flags applied; its model-shape fields describe the module's own model and stay.
  sched::PlanAttr fromFlags = makePlanAttr(ctx, cfg, options);
  if (!fromFlags)
    return failure();
  if (auto existing = module->getAttrOfType<sched::PlanAttr>(sched::kPlanAttrName)) {
    static const llvm::StringSet<> shape = {"num_layers",      "hidden_size", "num_attention_heads",
                                            "num_query_groups", "ffn_hidden_size", "seq_length",
                                            "padded_vocab_size"};
    llvm::StringMap<Attribute> fields;
    for (auto [a, c] : llvm::zip(existing.getFields(), fromFlags.getFields()))
      fields[a.first] = shape.contains(a.first) ? a.second : c.second;
    sched::PlanAttr merged = sched::PlanAttr::fromFields(
        &ctx, fields, [&] { return emitError(module.getLoc()) << "the module's sched.plan: "; });
    if (!merged)
      return failure();
    module->setAttr(sched::kPlanAttrName, merged);
  } else {
    module->setAttr(sched::kPlanAttrName, fromFlags);
  }
  // --fp16: Megatron's grad scaler, which trainc-lower-to-rt turns into program instructions
  // (docs/design.md "Mixed precision"): a static --loss-scale (ConstantGradScaler) or the dynamic
  // one (DynamicGradScaler, growth 2, backoff 0.5).
  if (cfg.training.params_dtype == "fp16") {
    const cfgns::TrainingConfig &t = cfg.training;
    Builder b(&ctx);
    const bool dynamic = !(t.loss_scale > 0);
    module->setAttr(
        "trainc.loss_scaler",
        b.getDictionaryAttr(
            {b.getNamedAttr("dynamic", b.getBoolAttr(dynamic)),
             b.getNamedAttr("initial_loss_scale",
                            b.getF64FloatAttr(dynamic ? t.initial_loss_scale : t.loss_scale)),
             b.getNamedAttr("min_loss_scale", b.getF64FloatAttr(t.min_loss_scale)),
             b.getNamedAttr("loss_scale_window", b.getI64IntegerAttr(t.loss_scale_window)),
             b.getNamedAttr("hysteresis", b.getI64IntegerAttr(t.hysteresis))}));
  }
  // --grad-reduce-in-bf16: trainc-lower-to-rt reduces the gradient buckets in bf16.
  if (cfg.parallel.grad_reduce_in_bf16)
    module->setAttr("trainc.grad_reduce_in_bf16", UnitAttr::get(&ctx));
  // --tp-reduce-in-bf16: trainc-shard and trainc-autodiff keep Megatron's bf16 tensor-parallel
  // reductions (by default the partial sums are reduced in fp32).
  if (cfg.parallel.tp_reduce_in_bf16)
    module->setAttr("trainc.tp_reduce_in_bf16", UnitAttr::get(&ctx));
  // The rank table (Megatron's tp-cp-ep-dp-pp order) and the device mesh: a mesh.mesh symbol
  // with its axes, the one the tensor collectives name and the export derives its groups from.
  cfgns::RankTable table(cfg.parallel);
  {
    SmallVector<int64_t> shape(table.axisSizes().begin(), table.axisSizes().end());
    Builder b(&ctx);
    SmallVector<Attribute> names;
    for (const std::string &n : cfgns::RankTable::axisNames())
      names.push_back(b.getStringAttr(n));
    if (auto existing = module.lookupSymbol<mesh::MeshOp>(model::kMeshName)) {
      if (existing.getShape() != ArrayRef<int64_t>(shape) ||
          existing->getAttr(model::kAxisNamesAttr) != b.getArrayAttr(names))
        return emitError(existing.getLoc())
               << "the module's mesh @" << model::kMeshName
               << " differs from the command line's: axes tp, cp, ep, dp, pp of sizes "
               << llvm::join(llvm::map_range(shape, [](int64_t v) { return std::to_string(v); }),
                             "x");
    } else {
      OpBuilder ob(&ctx);
      ob.setInsertionPointToStart(module.getBody());
      auto m = ob.create<mesh::MeshOp>(module.getLoc(), model::kMeshName, shape);
      m->setAttr(model::kAxisNamesAttr, ob.getArrayAttr(names));
    }
  }
  // --sequence-parallel: trainc-shard reads it from the module (docs/design.md "Tensor
  // parallelism"); finalize turned it off at tp 1.
  if (cfg.parallel.sequence_parallel)
    module->setAttr(model::kSequenceParallelAttr, UnitAttr::get(&ctx));
  // --overlap-p2p-comm (Megatron's default with virtual stages): trainc-lower-to-rt posts the
  // interleaved units' receives async (docs/design.md "Pipeline parallelism").
  if (cfg.parallel.overlap_p2p_comm && cfg.parallel.pipeline_model_parallel_size > 1)
    module->setAttr("trainc.overlap_p2p_comm", UnitAttr::get(&ctx));
  if (!cfg.parallel.async_tensor_model_parallel_allreduce)
    module->setAttr(sched::kNoAsyncTpCommAttrName, UnitAttr::get(&ctx));
  // --cuda-graph-impl local --cuda-graph-scope full_iteration: trainc-cuda-graph reads it.
  if (cfg.training.fullIterationGraph())
    module->setAttr(kCudaGraphImplAttrName, StringAttr::get(&ctx, "full_iteration"));
  PlanOptions plan; // no overrides: every pass reads the plan
  if (!options.dumpIRDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(options.dumpIRDir))
      return emitError(module.getLoc())
             << "cannot create --dump-ir-dir '" << options.dumpIRDir << "': " << ec.message();
  }
  struct Phase {
    const char *name;
    void (*build)(OpPassManager &, const PlanOptions &);
  };
  const Phase shared[] = {{"autodiff", buildAutodiffPhase}, {"schedule", buildSchedulePhase}};
  const Phase lowering[] = {{"lower", buildLowerPhase}, {"memory", buildMemoryPhase}};
  auto dump = [&](ModuleOp m, int n, const char *name) -> LogicalResult {
    if (options.dumpIRDir.empty())
      return success();
    std::string text;
    llvm::raw_string_ostream os(text);
    m.print(os);
    return writeFile(ctx, options.dumpIRDir + "/" + std::to_string(n) + "-" + name + ".mlir",
                     os.str());
  };
  auto runPhase = [&](ModuleOp m, const Phase &ph, const PlanOptions &o) -> LogicalResult {
    PassManager pm(&ctx);
    if (options.printIRAfterAll) {
      ctx.disableMultithreading();
      pm.enableIRPrinting([](Pass *, Operation *) { return false; },
                          [](Pass *, Operation *) { return true; }, /*printModuleScope=*/true,
                          /*printAfterOnlyOnChange=*/false);
    }
    ph.build(pm, o);
    return pm.run(m);
  };
  if (failed(dump(module, 0, "model")))
    return failure();

  const int64_t world = table.worldSize();
  auto placementOf = [&](int64_t rank) {
    RankPlacement place;
    place.rank = rank;
    place.axisNames = cfgns::RankTable::axisNames();
    place.axisSizes = table.axisSizes();
    place.coords = table.coords(rank);
    place.groups.clear();
    for (const cfgns::RankGroup &g : table.groupsOf(rank))
      place.groups.push_back({g.name, g.ranks});
    return place;
  };
  // One lowering per pipeline stage (stages differ in structure; the ranks of one stage only in
  // data, which ExportedPlan::specialise rewrites). Without pipelining the module itself is the
  // one stage.
  const size_t ppAxis = size_t(llvm::find(cfgns::RankTable::axisNames(), "pp") -
                               cfgns::RankTable::axisNames().begin());
  const int64_t numStages = table.axisSizes()[ppAxis];
  OwningOpRef<ModuleOp> stageCopy;
  auto stageModule = [&](int64_t stage) -> FailureOr<ModuleOp> {
    ModuleOp m = module;
    if (numStages > 1) {
      stageCopy = cast<ModuleOp>(module->clone());
      m = *stageCopy;
      PassManager pm(&ctx);
      // The stage count is the plan's (not set here).
      std::unique_ptr<Pass> split = createPipelineSplitPass();
      // The uneven split's counts, or those of --account-for-embedding/loss-in-pipeline-split.
      const auto [firstLayers, lastLayers] =
          cfg.parallel.firstAndLastStageLayers(cfg.model.num_layers);
      const std::string text =
          "stage=" + std::to_string(stage) + " first-stage-layers=" +
          std::to_string(firstLayers) + " last-stage-layers=" + std::to_string(lastLayers) +
          " microbatch-group-size=" +
          std::to_string(cfg.parallel.microbatch_group_size_per_vp_stage);
      if (failed(split->initializeOptions(text,
                                          [](const Twine &) { return failure(); })))
        return emitError(module.getLoc()) << "internal error: trainc-pipeline-split options";
      pm.addPass(std::move(split));
      if (failed(pm.run(m)))
        return failure();
    }
    const std::string suffix = numStages > 1 ? ".stage" + std::to_string(stage) : "";
    int n = 1;
    for (const Phase &ph : shared)
      if (failed(runPhase(m, ph, plan)) ||
          failed(dump(m, n++, (ph.name + suffix).c_str())))
        return failure();
    // Lower and plan memory once per stage: the rt IR is the same for every rank of the stage (a
    // DP rank's shard is a view on the dp axis), and the export specialises it per rank
    // (DESIGN.md: specialise per rank last). The dumped IR is every rank's, with the offsets of
    // coordinate 0.
    for (const Phase &ph : lowering)
      if (failed(runPhase(m, ph, plan)) ||
          failed(dump(m, n++, (ph.name + suffix).c_str())))
        return failure();
    return m;
  };
  // The plan records its configuration: runtime flag defaults that trainrun uses and may
  // override, and the compile-time values trainrun checks its flags against. One fingerprint
  // for every rank file of this compile (the configuration and the producer), so that the
  // runtime refuses rank files of different compiles mixed in one plan directory.
  auto describe = [&](ModuleOp m, schema::Program &program) -> LogicalResult {
    if (auto f = m->getAttrOfType<FloatAttr>("trainc.megatron_flops_per_token"))
      program.mutable_reports()->mutable_flops()->set_megatron_flops_per_iteration(
          f.getValueAsDouble() * double(cfg.training.global_batch_size) *
          double(cfg.model.seq_length) / double(world));
    auto &meta = *program.mutable_metadata();
    for (const auto &[k, v] : cfg.runtime.toKeyValues())
      meta["runtime." + k] = v;
    for (const auto &[k, v] : cfg.model.toKeyValues())
      meta["model." + k] = v;
    for (const auto &[k, v] : cfg.training.toKeyValues())
      meta["training." + k] = v;
    for (const auto &[k, v] : cfg.parallel.toKeyValues())
      meta["parallel." + k] = v;
    meta["plan.fingerprint"] = planFingerprint(cfg, options);
    if (cfg.training.params_dtype == "fp16") {
      // The loss scaler's initial state, which trainrun writes before the first iteration.
      const cfgns::TrainingConfig &t = cfg.training;
      auto exact = [](double v) { return llvm::formatv("{0:e16}", v).str(); };
      meta["training.loss_scale"] = exact(t.loss_scale);
      meta["training.initial_loss_scale"] = exact(t.initial_loss_scale);
      meta["training.hysteresis"] = std::to_string(t.hysteresis);
    }
    for (const auto &[k, v] : options.metadata)
      meta[k] = v;
    // What the training loop reads (typed, the same for every rank; the DP size and rank are the
    // mesh's). The export tagged the input buffers (Buffer.host_input); the validator checks
    // them against this plan.
    const cfgns::TrainingConfig &t = cfg.training;
    for (auto [field, v] : {std::pair<const char *, int64_t>{"micro_batch_size", t.micro_batch_size},
                            {"num_microbatches", t.num_microbatches},
                            {"seq_length", cfg.model.seq_length},
                            {"vocab_size", cfg.model.vocab_size}})
      if (v <= 0 || v > int64_t(UINT32_MAX))
        return emitError(module.getLoc())
               << "internal error: the finalized config's " << field << " is " << v
               << ", expected 1 to 2^32-1";
    if (cfg.training.fullIterationGraph())
      program.set_cuda_graph_warmup_steps(uint32_t(cfg.training.cuda_graph_warmup_steps));
    schema::PlanInfo &info = *program.mutable_plan();
    info.set_micro_batch_size(uint32_t(t.micro_batch_size));
    info.set_num_microbatches(uint32_t(t.num_microbatches));
    info.set_global_batch_size(uint64_t(t.global_batch_size));
    info.set_seq_length(uint32_t(cfg.model.seq_length));
    info.set_vocab_size(uint32_t(cfg.model.vocab_size));
    return success();
  };
  // One rank at a time: specialise, validate with the runtime's own validator, feed the
  // whole-plan verifier, write. Only one program per stage is held (plus allRanks' copies when
  // asked).
  if (!options.outputDir.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(options.outputDir))
      return emitError(module.getLoc())
             << "cannot create output directory '" << options.outputDir << "': " << ec.message();
  PlanVerifier verifier;
  std::vector<RankEntry> entries(static_cast<size_t>(world));
  if (options.allRanks) {
    options.allRanks->clear();
    options.allRanks->resize(static_cast<size_t>(world));
  }
  std::vector<std::string> written;
  auto fail = [&](const Twine &message) {
    for (const std::string &f : written)
      (void)llvm::sys::fs::remove(f);
    return emitError(module.getLoc()) << message;
  };
  std::optional<ExportedPlan> first; // stage 0's, which holds rank 0
  for (int64_t stage = 0; stage < numStages; ++stage) {
    FailureOr<ModuleOp> m = stageModule(stage);
    if (failed(m))
      return failure();
    std::vector<int64_t> ranks;
    for (int64_t r = 0; r < world; ++r)
      if (table.coords(r)[ppAxis] == stage)
        ranks.push_back(r);
    FailureOr<ExportedPlan> exported = exportPlan(*m, placementOf(ranks.front()));
    if (failed(exported) || failed(describe(*m, exported->program)))
      return failure();
    // The tied copies of later stages: the first stage's copy is the one checkpoints write.
    if (auto sharedParams = (*m)->getAttrOfType<ArrayAttr>("trainc.pipeline_shared");
        sharedParams && stage > 0) {
      std::string names;
      for (Attribute a : sharedParams)
        names += (names.empty() ? "" : ",") + cast<FlatSymbolRefAttr>(a).getValue().str();
      (*exported->program.mutable_metadata())["pipeline.shared_copies"] = names;
    }
    schema::Program &program = exported->program;
    // A plan too large for the runtime is the user's sizes, not a compiler bug: say which
    // buffer. Buffers are the same on every rank of a stage (specialising changes data only).
    for (const auto &buf : program.buffers()) {
      constexpr double kMaxElements = double(int64_t(1) << 50);
      double numel = 1;
      for (int64_t d : buf.shape())
        numel *= double(d);
      if (numel > kMaxElements)
        return fail(llvm::formatv("the plan needs buffer '{0}' of {1:e} elements, more than the "
                                  "runtime's 2^50 per buffer (a stash holds one microbatch's "
                                  "activations of every layer): reduce --micro-batch-size, "
                                  "--seq-length or the model size",
                                  buf.name(), numel)
                        .str());
    }
    for (int64_t rank : ranks) {
      if (std::string e = exported->specialise(placementOf(rank)); !e.empty())
        return fail("internal error: " + e);
      if (absl::Status st = ::trainc::rt::validateProgram(program); !st.ok())
        return fail("internal error: the exported program of rank " + Twine(rank) +
                    " fails runtime validation: " + std::string(st.message()));
      verifier.addRank(program);
      entries[size_t(rank)] = rankEntry(program);
      if (!options.outputDir.empty()) {
        std::string path = options.outputDir + "/" + entries[size_t(rank)].file;
        if (failed(writeFile(ctx, path, ::trainc::rt::serializeProgram(program))))
          return fail("cannot write the plan");
        written.push_back(path);
      }
      if (options.allRanks)
        (*options.allRanks)[size_t(rank)] = program;
    }
    if (stage == 0)
      first = std::move(*exported);
  }
  // DESIGN.md phase 12: the ranks' programs together, so that a plan that could deadlock or
  // mismatch its collectives is a compile error rather than a hang.
  if (std::string e = verifier.finish(); !e.empty())
    return fail("internal error: plan verification failed: " + e);
  if (std::string e = first->specialise(placementOf(0)); !e.empty())
    return fail("internal error: " + e);
  schema::Program &program = first->program;
  // Pipeline transfers that NCCL's semantics could deadlock (docs/cuda.md "Pipeline transfers
  // under NCCL"): the Gloo plan is fine; every rank's program says so, and trainrun refuses it
  // with --backend cuda before any communication.
  if (std::string nccl = verifier.ncclDeadlock(); !nccl.empty()) {
    (*program.mutable_metadata())[kNcclDeadlockMetadata] = nccl;
    if (options.allRanks)
      for (schema::Program &p : *options.allRanks)
        (*p.mutable_metadata())[kNcclDeadlockMetadata] = nccl;
    for (const std::string &path : written) {
      absl::StatusOr<schema::Program> p = ::trainc::rt::readProgramFile(path);
      if (!p.ok())
        return fail("cannot read back " + path + ": " + std::string(p.status().message()));
      (*p->mutable_metadata())[kNcclDeadlockMetadata] = nccl;
      if (failed(writeFile(ctx, path, ::trainc::rt::serializeProgram(*p))))
        return fail("cannot write the plan");
    }
  }
  if (!options.outputDir.empty() &&
      failed(writePlan(ctx, options.outputDir, cfg, program, entries)))
    return failure();
  return std::move(program);
}

FailureOr<schema::Program> mlir::trainc::compilePlan(MLIRContext &ctx,
                                                     const cfgns::PlanConfig &cfg,
                                                     const CompileOptions &options) {
  OwningOpRef<ModuleOp> module = buildModelModule(ctx, cfg, options);
  if (!module)
    return failure();
  if (cfg.training.recompute_memory_budget > 0) {
    cfgns::PlanConfig chosen = cfg;
    if (failed(chooseRecompute(*module, chosen, options)))
      return failure();
    return compileModule(*module, chosen, options);
  }
  return compileModule(*module, cfg, options);
}
