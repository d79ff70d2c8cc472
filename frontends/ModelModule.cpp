//===- ModelModule.cpp - The .mlir model frontend -------------------------===//

#include "frontends/ModelModule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "frontends/TextLimits.h"

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
    return out;
  }
  return error("@forward in '" + path + "' has no argument tagged model.input = \"tokens\"");
}

} // namespace trainc::config
