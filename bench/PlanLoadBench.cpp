//===- PlanLoadBench.cpp - Plan load and validation time ------------------===//
//
// What trainrun does with a plan before it allocates the arena: read and parse rankR.pb
// (readProgramFile) and validate it against the CPU backend (validateProgram: every buffer, view,
// kernel signature and in-place declaration). Issue 17 asks for well under a second for the 8B
// preset's programs. Prints the min and median of the repetitions, seconds, and the program's size.
//
// usage: bench_plan_load PLAN_DIR [RANK [REPS]]   (e.g. a `trainc compile --preset llama3-8b` dir)
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Program.h"
#include "runtime/core/Backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace trainc::rt;

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_plan_load PLAN_DIR [RANK [REPS]]\n");
    return 2;
  }
  const std::string path =
      std::string(argv[1]) + "/rank" + (argc > 2 ? argv[2] : "0") + ".pb";
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  auto backend = createCpuBackend();
  std::vector<double> load, validate;
  size_t instructions = 0, buffers = 0, functions = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<trainc::schema::Program> p = readProgramFile(path);
    auto t1 = std::chrono::steady_clock::now();
    if (!p.ok()) {
      std::fprintf(stderr, "%s\n", std::string(p.status().message()).c_str());
      return 1;
    }
    absl::Status s = validateProgram(*p, backend.get());
    auto t2 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "validation failed: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    load.push_back(std::chrono::duration<double>(t1 - t0).count());
    validate.push_back(std::chrono::duration<double>(t2 - t1).count());
    functions = size_t(p->functions_size());
    buffers = size_t(p->buffers_size());
    instructions = 0;
    for (const auto &f : p->functions())
      instructions += size_t(f.body_size());
  }
  auto stat = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return std::pair<double, double>{v.front(), v[v.size() / 2]};
  };
  auto [lmin, lmed] = stat(load);
  auto [vmin, vmed] = stat(validate);
  std::printf("%s: %zu functions, %zu instructions, %zu buffers\n", path.c_str(), functions,
              instructions, buffers);
  std::printf("load (read + parse)   min %8.4f s  median %8.4f s\n", lmin, lmed);
  std::printf("validate (CPU)        min %8.4f s  median %8.4f s\n", vmin, vmed);
  std::printf("load + validate       min %8.4f s  median %8.4f s\n", lmin + vmin, lmed + vmed);
  return 0;
}
