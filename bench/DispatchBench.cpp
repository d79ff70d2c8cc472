//===- DispatchBench.cpp - Executor dispatch overhead per instruction ----===//
//
// Runs a program of 100,000 tiny instructions (scale of one f32 element, alternating between two
// buffers) and prints the executor's dispatch overhead in ns per instruction, both for instructions
// in the entry function and for instructions inside a called function (argument binding).
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Communicator.h"
#include "runtime/core/Executor.h"
#include "runtime/core/ProgramBuilder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

using namespace trainc::rt;
namespace schema = trainc::schema;

namespace {

double bestNsPerInstruction(const schema::Program &p, int reps) {
  auto backend = createCpuBackend();
  auto comm = createLocalCommunicator();
  auto ex = Executor::create(p, *backend, *comm);
  if (!ex.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ex.status().message()).c_str());
    return -1;
  }
  (void)(*ex)->run();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    (void)(*ex)->run();
    best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
  }
  return best / double((*ex)->lastInstructionCount());
}

} // namespace

int main() {
  const int kInstructions = 100000;
  {
    ProgramBuilder b;
    int x = b.addBuffer("x", schema::ACTIVATION, DType::F32, {1});
    int y = b.addBuffer("y", schema::ACTIVATION, DType::F32, {1});
    int fn = b.addFunction("main");
    for (int i = 0; i < kInstructions; ++i)
      b.kernel(fn, "scale", {ProgramBuilder::buf(i % 2 ? x : y)}, {ProgramBuilder::buf(i % 2 ? y : x)},
               {AttrArg("alpha", 1.0)});
    std::printf("executor dispatch: %d tiny kernel instructions in the entry function: %.1f ns per "
                "instruction\n",
                kInstructions, bestNsPerInstruction(b.finish(), 10));
  }
  {
    // 1000 calls of a 100-instruction function on argument-bound views.
    ProgramBuilder b;
    int x = b.addBuffer("x", schema::ACTIVATION, DType::F32, {2});
    int fn = b.addFunction("main");
    int f = b.addFunction("layer", {{"a", DType::F32, {1}}, {"b", DType::F32, {1}}});
    for (int i = 0; i < 99; ++i)
      b.kernel(f, "scale", {ProgramBuilder::arg(i % 2)}, {ProgramBuilder::arg(1 - i % 2)},
               {AttrArg("alpha", 1.0)});
    for (int i = 0; i < kInstructions / 100; ++i)
      b.call(fn, f, {ProgramBuilder::buf(x, 0, {1}), ProgramBuilder::buf(x, 1, {1})});
    std::printf("executor dispatch: %d calls x 100 instructions with argument binding: %.1f ns per "
                "instruction\n",
                kInstructions / 100, bestNsPerInstruction(b.finish(), 10));
  }
  return 0;
}
