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
std::string playTimeline(const std::vector<std::vector<TimelineUnit>> &stages, double forwardCost,
                         double backwardCost, Timeline &out);

/// Parses a schedule report step ("F microbatch 3 chunk 1 f.forward", or without the chunk:
/// chunk 0); false for other steps.
bool parseScheduleStep(const std::string &step, TimelineUnit &unit);

} // namespace mlir::trainc

#endif
