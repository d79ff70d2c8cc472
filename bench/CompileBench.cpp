//===- CompileBench.cpp - Compile time and program size of the 8B preset --===//
//
// Compiles the llama3-8b preset (32 layers, hidden 4096) for one rank with 64 microbatches
// (micro batch 1, global batch 64, seq 8192) and prints the wall time of each step, the number of
// instructions, the serialized program size and the planned arena. No target; the figure to watch
// is that program size stays O(layers + microbatches).
//
//   bench_compile [PRESET [GLOBAL_BATCH]]          the above for another preset / batch
//   bench_compile --preset P [MEGATRON FLAGS...]   any plan; every rank is compiled, nothing
//                                                  written (each rank's program is built,
//                                                  validated and verified, one at a time);
//                                                  also prints the peak RSS
// bench/compile_scaling.sh runs the structured-IR issue's matrix with the second form.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver.h"
#include "frontends/MegatronFlags.h"
#include "frontends/RankTable.h"
#include "runtime/core/Program.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace mlir;
namespace cfgns = ::trainc::config;

int main(int argc, char **argv) {
  std::string preset = argc > 1 ? argv[1] : "llama3-8b";
  std::string gbs = argc > 2 ? argv[2] : "64";
  std::vector<std::string> flags = {"--micro-batch-size", "1", "--global-batch-size", gbs};
  if (preset == "--preset") {
    if (argc < 3) {
      std::fprintf(stderr, "usage: bench_compile --preset P [flags...]\n");
      return 2;
    }
    preset = argv[2];
    flags.assign(argv + 3, argv + argc);
  }
  std::optional<cfgns::ModelConfig> base = cfgns::findPreset(preset);
  if (!base) {
    std::fprintf(stderr, "unknown preset %s\n", preset.c_str());
    return 2;
  }
  cfgns::FlagParseOptions po;
  po.base_model = &*base;
  llvm::Expected<cfgns::PlanConfig> cfg = cfgns::parseMegatronFlags(flags, po);
  if (!cfg) {
    std::fprintf(stderr, "%s\n", llvm::toString(cfg.takeError()).c_str());
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  MLIRContext ctx;
  mlir::trainc::CompileOptions opts;
  OwningOpRef<ModuleOp> module = mlir::trainc::buildModelModule(ctx, *cfg, opts);
  auto t1 = std::chrono::steady_clock::now();
  FailureOr<::trainc::schema::Program> p = mlir::trainc::compileModule(*module, *cfg, opts);
  auto t2 = std::chrono::steady_clock::now();
  if (failed(p))
    return 1;
  std::string bytes = ::trainc::rt::serializeProgram(*p);
  auto t3 = std::chrono::steady_clock::now();
  size_t instructions = 0;
  for (const auto &f : p->functions())
    instructions += size_t(f.body_size());
  auto s = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  std::printf("compile %s, %zu rank(s), %lld layers, %lld microbatches (seq %lld): build model IR "
              "%.2f s, passes + export + validation %.2f s, serialize %.3f s, total %.2f s, peak "
              "RSS %.0f MiB\n",
              preset.c_str(), size_t(::trainc::config::RankTable(cfg->parallel).worldSize()), (long long)cfg->model.num_layers,
              (long long)cfg->training.num_microbatches,
              (long long)cfg->model.seq_length, s(t0, t1), s(t1, t2), s(t2, t3), s(t0, t3),
              double(ru.ru_maxrss) / 1024.0);
  std::printf("program: %d functions, %zu instructions, %d buffers, %zu bytes serialized; arena "
              "%.2f GiB (persistent %.2f GiB, flowing peak %.2f GiB)\n",
              p->functions_size(), instructions, p->buffers_size(), bytes.size(),
              double(p->arena_bytes()) / (1 << 30),
              double(p->reports().memory().persistent_bytes()) / (1 << 30),
              double(p->reports().memory().flowing_peak_bytes()) / (1 << 30));
  return 0;
}
