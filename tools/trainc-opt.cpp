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

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::trainc::registerTraincDialects(registry);
  mlir::registerTransformsPasses();
  mlir::trainc::registerAllPasses();
  mlir::trainc::registerPipelines();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "trainc optimizer driver\n", registry));
}
