//===- trainc-opt.cpp - mlir-opt with every trainc dialect and pass ------===//
//
// Runs any trainc pass or phase pipeline alone on a .mlir file, like mlir-opt:
//   trainc-opt model.mlir --trainc-autodiff
//   trainc-opt model.mlir --pass-pipeline='builtin.module(trainc-phase-autodiff)'
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver.h"
#include "compiler/Pipelines.h"
#include "dialects/Model/ModelDialect.h"
#include "dialects/Rt/RtDialect.h"
#include "dialects/Sched/SchedDialect.h"
#include "passes/InitAllPasses.h"

#include "frontends/TextLimits.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::trainc::registerTraincDialects(registry);
  mlir::registerTransformsPasses();
  mlir::trainc::registerAllPasses();
  mlir::trainc::registerPipelines();
  auto [input, output] =
      mlir::registerAndParseCLIOptions(argc, argv, "trainc optimizer driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::errs() << "trainc-opt: " << error << "\n";
    return 1;
  }
  // MLIR's parser recurses per nesting level: a deeply nested attribute would overflow the stack.
  if (llvm::Error e = ::trainc::config::checkMlirDepth(file->getBuffer(), input)) {
    llvm::errs() << "trainc-opt: error: " << llvm::toString(std::move(e)) << "\n";
    return 1;
  }
  std::unique_ptr<llvm::ToolOutputFile> out = mlir::openOutputFile(output, &error);
  if (!out) {
    llvm::errs() << "trainc-opt: " << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(out->os(), std::move(file), registry, config)))
    return 1;
  out->keep();
  return 0;
}
