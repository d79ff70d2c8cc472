//===- MultiRank.h - Several ranks of one plan in one test process -------===//
//
// What the multi-rank e2e tests (data, pipeline and mixed-precision plans) share: the job token,
// a Gloo communicator per rank thread, and Megatron's split of a global batch over DP ranks.
//
//===----------------------------------------------------------------------===//

#ifndef TRAINC_TESTS_E2E_MULTIRANK_H
#define TRAINC_TESTS_E2E_MULTIRANK_H

#include "CompiledPlan.h"
#include "runtime/comm/GlooCommunicator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace trainc::test {

/// The job token of every test job's store.
inline constexpr const char *kToken = "0123456789abcdef0123456789abcdef";

/// Rank r of a `world`-rank job meeting at the test's store on `port` (loopback, 60 s timeouts);
/// null (with a test failure) when Gloo cannot connect.
inline std::unique_ptr<rt::Communicator> glooRank(int64_t r, int64_t world, int port) {
  rt::GlooOptions o;
  o.rank = r;
  o.worldSize = world;
  o.storePort = port;
  o.token = kToken;
  o.timeout = std::chrono::seconds(60);
  auto c = rt::createGlooCommunicator(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

/// The samples DP rank r reads, in its microbatch order (Megatron's pretraining sampler:
/// microbatch j covers the block [j * mbs * dp, (j + 1) * mbs * dp) of the global batch and rank r
/// takes [r * mbs, (r + 1) * mbs) of it).
inline Samples rankSamples(const Samples &global, int64_t dp, int64_t r, int64_t mbs) {
  Samples s;
  s.seq = global.seq;
  int64_t m = global.n / (mbs * dp);
  for (int64_t j = 0; j < m; ++j)
    for (int64_t b = 0; b < mbs; ++b) {
      int64_t g = (j * dp + r) * mbs + b;
      auto take = [&](auto &dst, const auto &src) {
        dst.insert(dst.end(), src.begin() + g * s.seq, src.begin() + (g + 1) * s.seq);
      };
      take(s.tokens, global.tokens);
      take(s.labels, global.labels);
      take(s.mask, global.mask);
      ++s.n;
    }
  return s;
}

/// The Megatron flags of a multi-rank test plan: micro and global batch, the DP size, no dropout
/// (hidden and attention), then `extra`.
inline std::vector<std::string> multiRankFlags(int64_t dp, int64_t mbs, int64_t gbs,
                                               std::vector<std::string> extra = {}) {
  std::vector<std::string> f = {"--micro-batch-size",   std::to_string(mbs),
                                "--global-batch-size",  std::to_string(gbs),
                                "--data-parallel-size", std::to_string(dp),
                                "--hidden-dropout",     "0",
                                "--attention-dropout",  "0"};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

/// `n` global batches of `gbs` random samples (sequence 9, vocabulary 37), seeds seed, seed + 1...
inline std::vector<Samples> makeBatches(int64_t n, int64_t gbs, uint32_t seed) {
  std::vector<Samples> b;
  for (int64_t i = 0; i < n; ++i)
    b.push_back(randomSamples(gbs, 9, 37, seed + uint32_t(i)));
  return b;
}

/// |a - b| / |b| (|b| at least 1e-30).
inline double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

} // namespace trainc::test

#endif // TRAINC_TESTS_E2E_MULTIRANK_H
