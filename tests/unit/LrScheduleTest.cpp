//===- LrScheduleTest.cpp - Megatron's LR schedule against closed forms ---===//

#include "runtime/control/LrSchedule.h"

#include <gtest/gtest.h>

#include <cmath>

using trainc::rt::control::LrSchedule;

namespace {

constexpr double kMax = 3e-4, kMin = 3e-5;

TEST(LrSchedule, WarmupThenCosineInSamples) {
  // 100 warmup samples, decay over 1100 samples.
  auto s = LrSchedule::create(kMax, kMin, 100, 1100, "cosine");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->lr(0), 0.0);
  EXPECT_DOUBLE_EQ(s->lr(25), kMax * 0.25);
  EXPECT_DOUBLE_EQ(s->lr(100), kMax);
  // Half way through the decay: cos(pi/2) = 0 -> the midpoint of max and min.
  EXPECT_NEAR(s->lr(600), kMin + 0.5 * (kMax - kMin), 1e-18);
  // A quarter: (cos(pi/4) + 1) / 2.
  EXPECT_NEAR(s->lr(350), kMin + 0.5 * (std::cos(M_PI / 4) + 1) * (kMax - kMin), 1e-18);
  EXPECT_DOUBLE_EQ(s->lr(1100), kMin);
  EXPECT_DOUBLE_EQ(s->lr(5000), kMin);
}

TEST(LrSchedule, WarmupThenCosineInIterations) {
  // Megatron converts iterations to samples with the global batch size: 10 warmup iterations and
  // 50 decay iterations at a global batch of 16.
  const int64_t gbs = 16;
  auto s = LrSchedule::create(kMax, kMin, 10 * gbs, 50 * gbs, "cosine");
  ASSERT_TRUE(s.ok());
  // Iteration i (1-based) uses the rate after (i - 1) * gbs samples.
  EXPECT_DOUBLE_EQ(s->lr(0 * gbs), 0.0);
  EXPECT_DOUBLE_EQ(s->lr(5 * gbs), kMax / 2);
  EXPECT_DOUBLE_EQ(s->lr(10 * gbs), kMax);
  EXPECT_NEAR(s->lr(30 * gbs), kMin + 0.5 * (kMax - kMin), 1e-18);
  EXPECT_DOUBLE_EQ(s->lr(50 * gbs), kMin);
}

TEST(LrSchedule, Linear) {
  auto s = LrSchedule::create(kMax, kMin, 0, 1000, "linear");
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->lr(0), kMax);
  EXPECT_NEAR(s->lr(250), kMin + 0.75 * (kMax - kMin), 1e-18);
  EXPECT_NEAR(s->lr(1000), kMin, 1e-18);
  auto w = LrSchedule::create(kMax, 0, 200, 1200, "linear");
  ASSERT_TRUE(w.ok());
  EXPECT_DOUBLE_EQ(w->lr(100), kMax / 2);
  EXPECT_NEAR(w->lr(700), kMax / 2, 1e-18);
}

TEST(LrSchedule, Constant) {
  auto s = LrSchedule::create(kMax, kMin, 64, 0, "constant");
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->lr(32), kMax / 2);
  EXPECT_DOUBLE_EQ(s->lr(64), kMax);
  EXPECT_DOUBLE_EQ(s->lr(1 << 20), kMax);
}

TEST(LrSchedule, InverseSquareRoot) {
  auto s = LrSchedule::create(kMax, kMin, 100, 0, "inverse-square-root");
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->lr(400), kMax * std::sqrt(100.0) / std::sqrt(400.0));
  EXPECT_DOUBLE_EQ(s->lr(100000000), kMin);
}

TEST(LrSchedule, Errors) {
  auto bad = LrSchedule::create(kMax, kMin, 0, 100, "step");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--lr-decay-style 'step' is not one of constant, linear, cosine, inverse-square-root");
  auto inverted = LrSchedule::create(1e-4, 1e-3, 0, 100, "cosine");
  ASSERT_FALSE(inverted.ok());
  EXPECT_EQ(inverted.status().message(), "--min-lr 0.001 is larger than --lr 0.0001");
  auto shortDecay = LrSchedule::create(kMax, kMin, 100, 100, "cosine");
  ASSERT_FALSE(shortDecay.ok());
  EXPECT_EQ(shortDecay.status().message(),
            "the decay length (100 samples) must exceed the warmup (100 samples) for "
            "--lr-decay-style cosine");
  auto negative = LrSchedule::create(-1, 0, 0, 100, "linear");
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().message(), "learning rates must be >= 0 (--lr -1, --min-lr 0)");
}

} // namespace
