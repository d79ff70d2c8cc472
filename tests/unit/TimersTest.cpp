//===- TimersTest.cpp - Megatron's timers text -----------------------------===//
//
// formatTimers against Megatron's Timers.log layout (megatron/core/timers.py: the three
// headers, NAME + ' ' left-justified to 48 columns with dots, two decimals, a timer shown only
// when a rank has a positive value, the minimum over the ranks that have one).
//
//===----------------------------------------------------------------------===//

#include "runtime/control/Timers.h"

#include <gtest/gtest.h>

using trainc::rt::control::formatTimers;

namespace {

const std::vector<std::string> kNames = {"forward-backward", "forward-compute", "params-all-gather"};
// Rank 1 never ran params-all-gather.
const std::vector<std::vector<double>> kValues = {{12.3456, 4.0, 0.5}, {13.0, 3.999, 0.0}};

TEST(Timers, MinMaxIsMegatronsLayout) {
  EXPECT_EQ(formatTimers(kNames, kValues, "minmax"),
            "(min, max) time across ranks (ms):"
            "\n    forward-backward ...............................: (12.35, 13.00)"
            "\n    forward-compute ................................: (4.00, 4.00)"
            "\n    params-all-gather ..............................: (0.50, 0.50)");
}

TEST(Timers, MaxOnly) {
  EXPECT_EQ(formatTimers(kNames, kValues, "max"),
            "max time across ranks (ms):"
            "\n    forward-backward ...............................: 13.00"
            "\n    forward-compute ................................: 4.00"
            "\n    params-all-gather ..............................: 0.50");
}

TEST(Timers, AllRanks) {
  EXPECT_EQ(formatTimers(kNames, kValues, "all"),
            "times across ranks (ms):"
            "\n  forward-backward:"
            "\n     rank  0: 12.35"
            "\n     rank  1: 13.00"
            "\n  forward-compute:"
            "\n     rank  0: 4.00"
            "\n     rank  1: 4.00"
            "\n  params-all-gather:"
            "\n     rank  0: 0.50");
}

TEST(Timers, NothingTimedPrintsNothing) {
  EXPECT_EQ(formatTimers(kNames, {{0, 0, 0}}, "minmax"), "");
  EXPECT_EQ(formatTimers({}, {{}}, "all"), "");
}

} // namespace
