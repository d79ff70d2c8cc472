//===- InitAllPasses.h - Register every trainc pass -----------------------===//
#ifndef TRAINC_PASSES_INITALLPASSES_H
#define TRAINC_PASSES_INITALLPASSES_H

#include "passes/Autodiff/Passes.h"
#include "passes/Export/Passes.h"
#include "passes/Grad/Passes.h"
#include "passes/Graph/Passes.h"
#include "passes/Memory/Passes.h"
#include "passes/Optimizer/Passes.h"
#include "passes/Pipeline/Passes.h"
#include "passes/Recompute/Passes.h"
#include "passes/Sharding/Passes.h"

namespace mlir::trainc {
inline void registerAllPasses() {
  registerAutodiffPasses();
  registerRecomputePasses();
  registerGradPasses();
  registerPipelinePasses();
  registerOptimizerPasses();
  registerExportPasses();
  registerMemoryPasses();
  registerShardingPasses();
  registerGraphPasses();
}
} // namespace mlir::trainc

#endif
