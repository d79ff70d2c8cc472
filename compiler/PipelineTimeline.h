//===- PipelineTimeline.h - A pipeline schedule on a cost model ----------===//
//
// Plays each pipeline stage's ordered forward/backward units on a cost model: a unit starts when
// its stage is free and its input is there (a forward of microbatch i after stage s - 1's
// forward of i, a backward after stage s + 1's backward of i; transfers take no time). With
// model chunks (interleaved 1F1B) chunk c of stage 0 follows chunk c - 1 of stage P - 1 in the
// forward and chunk c of stage P - 1 follows chunk c + 1 of stage 0 in the backward. Gives the
// timeline `trainc inspect --schedule` prints and draws, and the bubble fraction.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_COMPILER_PIPELINETIMELINE_H
#define TRAINC_COMPILER_PIPELINETIMELINE_H

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::trainc {

struct TimelineUnit {
  bool forward = true;
  int64_t microbatch = 0;
  /// The model chunk (0 without interleaving); the last chunk is the largest in the stages.
  int64_t chunk = 0;
  /// ZB-H1's weight-gradient unit W (with forward false); a backward unit is then the input
  /// gradient part B only.
  bool weight = false;
  /// The unit's own cost (e.g. its FLOPs) when >= 0; else the cost of its kind given to
  /// playTimeline.
  double cost = -1;
  double start = 0, end = 0; // filled by playTimeline
};

struct Timeline {
  /// Per stage, its units in order with start and end times.
  std::vector<std::vector<TimelineUnit>> stages;
  /// The end of the last unit.
  double makespan = 0;
  /// 1 - (sum of busy time) / (stages x makespan): the idle share of the pipeline.
  double bubble = 0;
};

/// `stages[s]` is stage s's unit order (forward flag and microbatch); a forward costs
/// `forwardCost`, a backward `backwardCost` (> 0). Returns "" and fills `out`, or an error naming
/// the stage and unit whose input never arrives (an order that cannot run).
/// A W unit (ZB-H1) costs `weightCost` and starts after its stage's B of the same microbatch
/// and chunk. A unit with a cost of its own (TimelineUnit::cost >= 0) takes that instead.
std::string playTimeline(const std::vector<std::vector<TimelineUnit>> &stages, double forwardCost,
                         double backwardCost, Timeline &out, double weightCost = 1);

/// ZB-H1's idle share with unit costs F = B = W = 1 and m >= P: (P - 1) / (3 m + P - 1), i.e. the
/// bubble (P - 1)(T_F + T_B - T_W) of Qi et al. 2023 (arXiv 2401.10241, section 3.1) over the
/// stage's busy time 3 m plus that bubble. For m < P the schedule is not in steady state and
/// the played timeline is longer.
double zeroBubbleH1Bubble(int64_t numStages, int64_t m);

/// Parses a schedule report step ("F microbatch 3 chunk 1 f.forward", or without the chunk:
/// chunk 0; "B ..." and ZB-H1's "W ..." alike); false for other steps.
bool parseScheduleStep(const std::string &step, TimelineUnit &unit);

} // namespace mlir::trainc

#endif
