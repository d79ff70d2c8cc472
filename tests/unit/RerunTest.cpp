//===- RerunTest.cpp - The rerun state machine's decisions ----------------===//

#include "runtime/control/Rerun.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace trainc::rt::control;

namespace {

const double kNaN = std::nan("");

TEST(RerunTest, NonFiniteResultsAreSuspiciousWhenTheNanCheckIsOn) {
  RerunStateMachine on(RerunOptions{}, /*checkNan=*/true, 0);
  EXPECT_EQ(on.suspicion(1, {kNaN, 1.0}), "NaN in the loss");
  EXPECT_EQ(on.suspicion(1, {2.0, INFINITY}), "Inf in the grad norm");
  EXPECT_EQ(on.suspicion(1, {2.0, 1.0}), "");
  RerunStateMachine off(RerunOptions{}, /*checkNan=*/false, 0);
  EXPECT_EQ(off.suspicion(1, {kNaN, 1.0}), "");
  RerunOptions disabled;
  disabled.mode = RerunMode::Disabled;
  EXPECT_EQ(RerunStateMachine(disabled, true, 0).suspicion(1, {kNaN, 1.0}), "");
  // A NaN/Inf result skipped its update: no snapshot is needed for it.
  EXPECT_FALSE(on.needsSnapshot(1));
}

TEST(RerunTest, SpikyLossAndLargeGradsCompareWithTheRecentMaximum) {
  RerunOptions o;
  o.checkSpikyLoss = o.checkLargeGrads = true;
  RerunStateMachine m(o, true, 0);
  EXPECT_EQ(m.suspicion(1, {100.0, 100.0}), ""); // nothing recent yet
  m.accept({3.0, 1.0});
  m.accept({2.0, 0.5});
  EXPECT_EQ(m.suspicion(3, {30.0, 10.0}), ""); // exactly 10x is not more than 10x
  EXPECT_EQ(m.suspicion(3, {30.5, 1.0}),
            "spiky loss 30.5, more than 10x the recent maximum 3");
  EXPECT_EQ(m.suspicion(3, {3.0, 10.5}),
            "large grad norm 10.5, more than 10x the recent maximum 1");
  EXPECT_TRUE(m.needsSnapshot(3)); // a finite result's step was applied
}

TEST(RerunTest, InjectionScheduleAndKinds) {
  RerunOptions o;
  o.errorInjectionRate = 3;
  RerunStateMachine transient(o, true, 0);
  EXPECT_TRUE(std::isnan(transient.observed(3, 0, {2.0, 1.0}).loss));
  EXPECT_EQ(transient.observed(3, 1, {2.0, 1.0}).loss, 2.0);
  EXPECT_EQ(transient.observed(4, 0, {2.0, 1.0}).loss, 2.0);
  EXPECT_TRUE(transient.needsSnapshot(6));
  EXPECT_FALSE(transient.needsSnapshot(7));
  o.errorInjectionType = ErrorInjection::PersistentError;
  RerunStateMachine persistent(o, true, 0);
  EXPECT_TRUE(std::isnan(persistent.observed(6, 1, {2.0, 1.0}).loss));
  o.errorInjectionType = ErrorInjection::CorrectResult;
  RerunStateMachine correct(o, true, 0);
  EXPECT_EQ(correct.observed(3, 0, {2.0, 1.0}).loss, 2.0);
  EXPECT_NE(correct.suspicion(3, {2.0, 1.0}), "");
  EXPECT_EQ(correct.suspicion(4, {2.0, 1.0}), "");
}

TEST(RerunTest, ReproducedMeansBitwiseEqualWithNanEqualToNan) {
  EXPECT_TRUE(RerunStateMachine::reproduced({kNaN, 1.0}, {kNaN, 1.0}));
  EXPECT_TRUE(RerunStateMachine::reproduced({2.0, 1.0}, {2.0, 1.0}));
  EXPECT_FALSE(RerunStateMachine::reproduced({2.0, 1.0}, {std::nextafter(2.0, 3.0), 1.0}));
  EXPECT_FALSE(RerunStateMachine::reproduced({kNaN, 1.0}, {2.0, 1.0}));
}

TEST(RerunTest, DeterminismReport) {
  RerunOptions o;
  o.mode = RerunMode::ReportDeterminismStats;
  RerunStateMachine m(o, true, 0);
  EXPECT_TRUE(m.needsSnapshot(1));
  m.addDeterminismSample({2.0, 1.0}, {2.0, 1.0});
  m.addDeterminismSample({2.0, 1.0}, {2.002, 1.0});
  EXPECT_EQ(m.determinismReport(), "rerun determinism over 2 iterations: max relative difference "
                                   "lm loss 0.000999001, grad norm 0");
}

} // namespace
