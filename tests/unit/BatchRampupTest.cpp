//===- BatchRampupTest.cpp - Megatron's batch-size ramp-up calculator -----===//
//
// Closed forms of RampupBatchsizeNumMicroBatchesCalculator and update_train_iters
// (runtime/control/BatchRampup.h), worked by hand below, and each of Megatron's messages.

#include "runtime/control/BatchRampup.h"

#include <gtest/gtest.h>

using trainc::rt::control::BatchRampup;

namespace {

// Tests that GBS 8 from 2 by 2 over 12 samples steps every 12 / 3 = 4 samples: 2 below 4
// consumed samples, 4 below 8, 6 below 12, 8 from 12 on (int(12 / 4) = 3 increments) and after.
TEST(BatchRampupTest, StepsEveryRampSamplesOverIncrements) {
  BatchRampup r(8, 2, 1, false, 2, 2, 12);
  const std::pair<int64_t, int64_t> cases[] = {{0, 2}, {3, 2}, {4, 4}, {7, 4}, {8, 6},
                                               {11, 6}, {12, 8}, {13, 8}, {1000, 8}};
  for (auto [consumed, gbs] : cases) {
    std::string e;
    BatchRampup::Step s = r.at(consumed, true, &e);
    EXPECT_EQ(e, "") << consumed;
    EXPECT_EQ(s.globalBatchSize, gbs) << consumed;
    EXPECT_EQ(s.runningGlobalBatchSize, gbs) << consumed;
    EXPECT_EQ(s.numMicrobatches, gbs / 2) << consumed;
  }
}

// Tests update_train_iters: the ramp's iterations read 2, 2, 4, 6 samples (consumed 0, 2, 4,
// 8 -> 14 > 12), then (60 - 14) // 8 = 5 more: 9. A run shorter than the ramp gets Python's
// floor division of a negative rest: (10 - 14) // 8 = -1, so 3.
TEST(BatchRampupTest, TrainItersIsMegatronsUpdateTrainIters) {
  BatchRampup r(8, 2, 1, false, 2, 2, 12);
  EXPECT_EQ(r.trainIters(60), 9);
  EXPECT_EQ(r.trainIters(14), 4);
  EXPECT_EQ(r.trainIters(21), 4);
  EXPECT_EQ(r.trainIters(22), 5);
  EXPECT_EQ(r.trainIters(10), 3);
}

// Tests that the programs a run needs are the num_microbatches the loop reaches: 1, 2, 3, 4
// here; when a batch is larger than the samples per increment some batch sizes are jumped
// over (GBS 16 from 4 by 4 over 6 samples, 2 per increment: 4 at consumed 0, then
// 4 + int(4 / 2) x 4 = 12 at consumed 4, then 16 at consumed 16 > 6; 8 is never run).
TEST(BatchRampupTest, NumMicrobatchesReached) {
  std::string e;
  EXPECT_EQ(BatchRampup(8, 2, 1, false, 2, 2, 12).numMicrobatchesReached(&e),
            (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(e, "");
  EXPECT_EQ(BatchRampup(16, 4, 1, false, 4, 4, 6).numMicrobatchesReached(&e),
            (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(e, "");
  // dp 2, mbs 1: the same batch sizes are half as many microbatches per rank.
  EXPECT_EQ(BatchRampup(8, 1, 2, false, 2, 2, 12).numMicrobatchesReached(&e),
            (std::vector<int64_t>{1, 2, 3, 4}));
}

// Tests Megatron's consistency check and --decrease-batch-size-if-needed: 3 is not a multiple
// of mbs 2 x dp 1; with the flag it runs as 2 (one microbatch), while update_train_iters still
// counts the un-rounded 3 (GBS 8 from 3 by 5 over 6: consumed 0 -> 3 -> 6 -> 14, 3 ramp
// iterations, then (30 - 14) // 8 = 2).
TEST(BatchRampupTest, ConsistencyCheckAndDecrease) {
  std::string e;
  BatchRampup strict(8, 2, 1, false, 3, 5, 6);
  strict.at(0, true, &e);
  EXPECT_EQ(e, "current global batch size (3) is not divisible by micro-batch-size (2) times "
               "data parallel size (1)");
  e.clear();
  strict.at(0, false, &e); // Megatron's consistency_check=False
  EXPECT_EQ(e, "");
  EXPECT_TRUE(strict.numMicrobatchesReached(&e).empty());
  EXPECT_NE(e.find("(at 0 consumed samples)"), std::string::npos) << e;

  BatchRampup loose(8, 2, 1, true, 3, 5, 6);
  e.clear();
  BatchRampup::Step s = loose.at(0, true, &e);
  EXPECT_EQ(e, "");
  EXPECT_EQ(s.globalBatchSize, 3);
  EXPECT_EQ(s.runningGlobalBatchSize, 2);
  EXPECT_EQ(s.numMicrobatches, 1);
  EXPECT_EQ(loose.trainIters(30), 5);
  EXPECT_EQ(loose.numMicrobatchesReached(&e), (std::vector<int64_t>{1, 4}));

  // Rounded down to nothing: refused (Megatron would run zero microbatches).
  BatchRampup zero(8, 4, 1, true, 2, 2, 12);
  e.clear();
  zero.at(0, true, &e);
  EXPECT_NE(e.find("rounds global batch size 2 down to 0 samples"), std::string::npos) << e;
}

// Tests each of the constructor's checks with Megatron's message (and trainc's two additions).
TEST(BatchRampupTest, MegatronMessages) {
  EXPECT_EQ(BatchRampup::check(8, 2, 2, 12), "");
  EXPECT_EQ(BatchRampup::check(8, 0, 2, 12), "start batch size should be positive, got 0.");
  EXPECT_EQ(BatchRampup::check(8, 2, 0, 12), "batch size increment should be positive, got 0.");
  EXPECT_EQ(BatchRampup::check(8, 2, 2, -1), "ramp-up samples should be non-negative, got -1.");
  EXPECT_EQ(BatchRampup::check(8, 10, 2, 12),
            "expected global batch size to be greater than or equal to start batch size, got 8 "
            "and 10");
  EXPECT_EQ(BatchRampup::check(8, 2, 4, 12),
            "expected global batch size interval (6) to be divisible by global batch size "
            "increment (4)");
  EXPECT_NE(BatchRampup::check(8, 2, 2, 0).find("ramp-up samples 0"), std::string::npos);
  EXPECT_NE(BatchRampup::check(8, 8, 2, 12).find("nothing to ramp up"), std::string::npos);
}

} // namespace
