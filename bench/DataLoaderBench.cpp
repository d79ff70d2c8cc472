//===- DataLoaderBench.cpp - The .bin/.idx data loader's cost per batch ---===//
//
// bench_data_loader PREFIX SEQ_LENGTH GLOBAL_BATCH ITERS [CACHE_DIR]
//
// Builds the GPTDataset splits of PREFIX (as trainrun does: --split 969,30,1, ITERS x
// GLOBAL_BATCH train samples) twice, the first time building the indices and writing them to
// CACHE_DIR (default: a fresh temporary directory), the second time loading them; then reads
// ITERS global batches of samples in order (Trainer's readSample per sample plus the EOD loss
// mask and reset position ids of --eod-mask-loss --reset-position-ids) and prints milliseconds
// per global batch. bench/preprocess_throughput.sh divides that by trainrun's iteration time
// for the data loader's share.
//
//===----------------------------------------------------------------------===//

#include "runtime/control/Dataset.h"
#include "runtime/data/MegatronDatasets.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

using namespace trainc::rt;

int main(int argc, char **argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: bench_data_loader PREFIX SEQ_LENGTH GLOBAL_BATCH ITERS [CACHE]\n");
    return 2;
  }
  control::DataOptions o;
  o.dataPath = {argv[1]};
  o.seqLength = std::atoll(argv[2]);
  int64_t gbs = std::atoll(argv[3]), iters = std::atoll(argv[4]);
  o.vocabSize = int64_t(1) << 30;
  o.split = "969,30,1";
  o.numSamples = {gbs * iters, gbs, gbs};
  std::filesystem::path cache =
      argc > 5 ? std::filesystem::path(argv[5])
               : std::filesystem::temp_directory_path() /
                     ("trainc-bench-cache-" + std::to_string(::getpid()));
  o.dataCachePath = cache.string();
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  auto t0 = clock::now();
  auto built = control::buildDatasets(o);
  auto t1 = clock::now();
  if (!built.ok()) {
    std::fprintf(stderr, "bench_data_loader: %s\n", std::string(built.status().message()).c_str());
    return 1;
  }
  auto loaded = control::buildDatasets(o);
  auto t2 = clock::now();
  if (!loaded.ok())
    return 1;
  const control::Dataset &ds = *loaded->train;
  std::vector<int32_t> sample(size_t(o.seqLength + 1)), pos(size_t(o.seqLength));
  std::vector<float> mask(size_t(o.seqLength));
  int32_t eod = 0;
  double checksum = 0;
  auto t3 = clock::now();
  for (int64_t it = 0; it < iters; ++it)
    for (int64_t b = 0; b < gbs; ++b) {
      if (!ds.readSample(it * gbs + b, sample.data()).ok())
        return 1;
      int32_t p = 0;
      for (int64_t j = 0; j < o.seqLength; ++j) {
        bool isEod = sample[size_t(j)] == eod;
        mask[size_t(j)] = isEod ? 0.0f : 1.0f;
        pos[size_t(j)] = p;
        p = isEod ? 0 : p + 1;
        checksum += mask[size_t(j)] + pos[size_t(j)];
      }
    }
  auto t4 = clock::now();
  std::error_code ec;
  if (argc <= 5)
    std::filesystem::remove_all(cache, ec);
  std::printf("  indices: built and cached in %.1f ms, loaded from the cache in %.1f ms (%lld train "
              "samples)\n",
              ms(t0, t1), ms(t1, t2), (long long)ds.numSamples());
  std::printf("  loader: %.3f ms per global batch of %lld samples x %lld tokens (%.0f samples/s; "
              "checksum %.0f)\n",
              ms(t3, t4) / double(iters), (long long)gbs, (long long)o.seqLength + 1,
              double(gbs * iters) / (ms(t3, t4) / 1e3), checksum);
  return 0;
}
