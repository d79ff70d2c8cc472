//===- LossKernels.cpp ---------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/Dispatch.h"

namespace trainc::rt::cpu {

void registerLossKernels(KernelTable &t) {}

} // namespace trainc::rt::cpu
