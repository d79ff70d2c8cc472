//===- ModelModule.cpp - The .mlir model frontend -------------------------===//

#include "frontends/ModelModule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "frontends/TextLimits.h"
#include "dialects/Sched/SchedDialect.h"

using namespace mlir;

namespace trainc::config {

llvm::Expected<ModelModule> readModelModule(MLIRContext &ctx, llvm::StringRef path) {
  auto error = [&](const llvm::Twine &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
  };
  if (llvm::Error e = ::trainc::config::checkRegularFile(path, "model"))
    return std::move(e);
  auto file = llvm::MemoryBuffer::getFile(path);
  if (!file)
    return error("cannot read '" + path + "': " + file.getError().message());
  if (llvm::Error e = ::trainc::config::checkMlirDepth((*file)->getBuffer(), path))
    return std::move(e);
  llvm::SourceMgr sm;
  sm.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
  ModelModule out;
  {
    // Parse errors quote the offending line of the file.
    SourceMgrDiagnosticHandler handler(sm, &ctx, llvm::errs());
    out.module = parseSourceFile<ModuleOp>(sm, &ctx);
  }
  if (!out.module)
    return error("cannot parse '" + path + "'");
  auto fwd = out.module->lookupSymbol<func::FuncOp>("forward");
  if (!fwd)
    return error("'" + path + "' has no func.func @forward");
  for (unsigned i = 0; i < fwd.getNumArguments(); ++i) {
    auto n = fwd.getArgAttrOfType<StringAttr>(i, "model.input");
    if (!n || n.getValue() != "tokens")
      continue;
    auto t = llvm::dyn_cast<RankedTensorType>(fwd.getArgument(i).getType());
    if (!t || t.getRank() != 2)
      return error("@forward's tokens input must be a rank-2 tensor [micro batch, seq]");
    std::optional<ModelConfig> base = findPreset("tiny-gpt");
    out.base = *base;
    out.base.seq_length = t.getDimSize(1);
    out.base.max_position_embeddings = t.getDimSize(1);
    out.micro_batch_size = t.getDimSize(0);
    if (Attribute a = out.module->getOperation()->getAttr(mlir::trainc::sched::kPlanAttrName)) {
      auto plan = llvm::dyn_cast<mlir::trainc::sched::PlanAttr>(a);
      if (!plan)
        return error("'" + path + "': the module attribute sched.plan is not a #sched.plan<...>");
      // The module's plan is where the configuration starts; the command line's flags override
      // single fields (the model-shape fields describe the module's own model).
      PlanConfig c;
      c.model = out.base;
      c.parallel.tensor_model_parallel_size = plan.getTp();
      c.parallel.data_parallel_size = plan.getDp();
      c.parallel.pipeline_model_parallel_size = plan.getPp();
      c.parallel.virtual_pipeline_model_parallel_size =
          plan.getVirtualStages() > 1 ? plan.getVirtualStages() : 0;
      c.parallel.ddp_bucket_size = plan.getBucketSize();
      c.parallel.use_distributed_optimizer = plan.getDistributedOptimizer().getValue();
      c.parallel.overlap_param_gather = plan.getOverlapParamGather().getValue();
      c.training.micro_batch_size = plan.getMicroBatchSize();
      c.training.global_batch_size = plan.getGlobalBatchSize();
      c.training.params_dtype = plan.getParamsDtype().str();
      c.training.optimizer = plan.getOptimizer().str();
      c.training.adam_beta1 = plan.getAdamBeta1().getValueAsDouble();
      c.training.adam_beta2 = plan.getAdamBeta2().getValueAsDouble();
      c.training.adam_eps = plan.getAdamEps().getValueAsDouble();
      c.training.clip_grad = plan.getClipGrad().getValueAsDouble();
      c.training.weight_decay = plan.getWeightDecay().getValueAsDouble();
      c.training.calculate_per_token_loss = plan.getLossMode() == "per_token";
      out.plan = std::move(c);
    }
    return out;
  }
  return error("@forward in '" + path + "' has no argument tagged model.input = \"tokens\"");
}

} // namespace trainc::config
