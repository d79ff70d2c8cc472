// Tests the trace's communication-overlap summary (runtime/control/CommOverlap.h) against
// hand-computed interval intersections.
#include "runtime/control/CommOverlap.h"

#include <gtest/gtest.h>

namespace {

using trainc::rt::InstrTiming;
using trainc::rt::control::CommOverlap;
using trainc::rt::control::commOverlapJson;
using trainc::rt::control::summarizeCommOverlap;
namespace schema = trainc::schema;

/// One function: 0 kernel, 1 async tp collective, 2 kernel, 3 sync dp collective, 4 wait,
/// 5 call; groups tp (0) and dp (1).
schema::Program program() {
  schema::Program p;
  p.add_groups()->set_name("tp");
  p.add_groups()->set_name("dp");
  schema::Function *f = p.add_functions();
  f->set_name("f");
  f->add_body()->mutable_kernel()->set_kernel("matmul");
  schema::Collective *c = f->add_body()->mutable_collective();
  c->set_group(0);
  c->set_async(true);
  f->add_body()->mutable_kernel()->set_kernel("add");
  f->add_body()->mutable_collective()->set_group(1);
  f->add_body()->mutable_wait();
  f->add_body()->mutable_call();
  return p;
}

TEST(CommOverlapTest, IntersectsCommWithTheUnionOfComputeKernels) {
  const int64_t us = 1000; // timings are nanoseconds
  std::vector<InstrTiming> t = {
      {0, 0, 0, 0 * us, 100 * us},   // kernel
      {0, 2, 0, 80 * us, 120 * us},  // kernel, overlapping the first: union [0, 120)
      {0, 2, 0, 150 * us, 200 * us}, // kernel
      {0, 4, 0, 120 * us, 150 * us}, // wait: not compute
      {0, 5, 0, 0 * us, 400 * us},   // call: not compute
      {0, 1, 1, 50 * us, 160 * us},  // async tp: overlaps [50, 120) and [150, 160) = 80 us
      {0, 1, 1, 300 * us, 310 * us}, // async tp: no kernel runs
      {0, 3, 1, 190 * us, 250 * us}, // sync dp: overlaps [190, 200) = 10 us
  };
  std::vector<CommOverlap> s = summarizeCommOverlap(program(), t);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].group, "tp");
  EXPECT_EQ(s[0].collectives, 2);
  EXPECT_EQ(s[0].async, 2);
  EXPECT_EQ(s[0].asyncOverlapping, 1);
  EXPECT_DOUBLE_EQ(s[0].busyUs, 120);
  EXPECT_DOUBLE_EQ(s[0].overlappedUs, 80);
  EXPECT_DOUBLE_EQ(s[0].asyncBusyUs, 120);
  EXPECT_DOUBLE_EQ(s[0].asyncOverlappedUs, 80);
  EXPECT_DOUBLE_EQ(s[0].overlappedFraction(), 80.0 / 120.0);
  EXPECT_EQ(s[1].group, "dp");
  EXPECT_EQ(s[1].async, 0);
  EXPECT_DOUBLE_EQ(s[1].overlappedUs, 10);
  EXPECT_DOUBLE_EQ(s[1].asyncBusyUs, 0);
  EXPECT_EQ(commOverlapJson(s).rfind(
                "{\"tp\":{\"collectives\":2,\"async\":2,\"async_overlapping\":1,\"busy_us\":120.000,"
                "\"overlapped_us\":80.000,",
                0),
            0u)
      << commOverlapJson(s);
}

TEST(CommOverlapTest, NoCollectivesNoGroups) {
  std::vector<InstrTiming> t = {{0, 0, 0, 0, 1000}};
  EXPECT_TRUE(summarizeCommOverlap(program(), t).empty());
  EXPECT_EQ(commOverlapJson({}), "{}");
}

} // namespace
