//===- PipelineTimeline.cpp - A pipeline schedule on a cost model --------===//

#include "compiler/PipelineTimeline.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace mlir::trainc {

double zeroBubbleH1Bubble(int64_t numStages, int64_t m) {
  return double(numStages - 1) / double(3 * m + numStages - 1);
}

std::string playTimeline(const std::vector<std::vector<TimelineUnit>> &stages, double forwardCost,
                         double backwardCost, Timeline &out, double weightCost) {
  const size_t P = stages.size();
  out.stages = stages;
  std::vector<size_t> next(P, 0);
  std::vector<double> free(P, 0);
  int64_t lastChunk = 0;
  for (const auto &stage : stages)
    for (const TimelineUnit &u : stage)
      lastChunk = std::max(lastChunk, u.chunk);
  auto chunkName = [&](const TimelineUnit &u) {
    return lastChunk > 0 ? " chunk " + std::to_string(u.chunk) : std::string();
  };
  // (stage, kind (0 F, 1 B, 2 W), chunk, microbatch) -> end time.
  std::map<std::tuple<size_t, int, int64_t, int64_t>, double> ended;
  auto kindOf = [](const TimelineUnit &u) { return u.forward ? 0 : u.weight ? 2 : 1; };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < P; ++s)
      while (next[s] < stages[s].size()) {
        TimelineUnit &u = out.stages[s][next[s]];
        double ready = 0;
        if (u.weight) {
          auto it = ended.find({s, 1, u.chunk, u.microbatch});
          if (it == ended.end())
            return "stage " + std::to_string(s) + " runs the W of microbatch " +
                   std::to_string(u.microbatch) + chunkName(u) + " before its B";
          u.start = std::max(free[s], it->second);
          u.end = u.start + (u.cost >= 0 ? u.cost : weightCost);
          free[s] = u.end;
          ended[{s, 2, u.chunk, u.microbatch}] = u.end;
          ++next[s];
          progress = true;
          continue;
        }
        // The unit producing this one's input: the neighbouring stage's same chunk, or across
        // the wrap from the last stage (forward) / first stage (backward) the adjacent chunk.
        bool needs = true;
        size_t from = s;
        int64_t chunk = u.chunk;
        if (u.forward) {
          if (s > 0)
            from = s - 1;
          else if ((needs = u.chunk > 0))
            from = P - 1, chunk = u.chunk - 1;
        } else {
          if (s + 1 < P)
            from = s + 1;
          else if ((needs = u.chunk < lastChunk))
            from = 0, chunk = u.chunk + 1;
        }
        if (needs) {
          auto it = ended.find({from, kindOf(u), chunk, u.microbatch});
          if (it == ended.end())
            break;
          ready = it->second;
        }
        if (!u.forward) {
          auto it = ended.find({s, 0, u.chunk, u.microbatch});
          if (it == ended.end())
            return "stage " + std::to_string(s) + " runs the backward of microbatch " +
                   std::to_string(u.microbatch) + chunkName(u) + " before its forward";
          ready = std::max(ready, it->second);
        }
        u.start = std::max(free[s], ready);
        u.end = u.start + (u.cost >= 0 ? u.cost : u.forward ? forwardCost : backwardCost);
        free[s] = u.end;
        ended[{s, kindOf(u), u.chunk, u.microbatch}] = u.end;
        ++next[s];
        progress = true;
      }
  }
  double busy = 0;
  out.makespan = 0;
  for (size_t s = 0; s < P; ++s) {
    if (next[s] < stages[s].size()) {
      const TimelineUnit &u = stages[s][next[s]];
      return "stage " + std::to_string(s) + " waits forever for the " +
             (u.forward ? "activation" : "gradient") + " of microbatch " +
             std::to_string(u.microbatch) + chunkName(u);
    }
    for (const TimelineUnit &u : out.stages[s]) {
      busy += u.end - u.start;
      out.makespan = std::max(out.makespan, u.end);
    }
  }
  out.bubble = out.makespan > 0 ? 1 - busy / (double(P) * out.makespan) : 0;
  return "";
}

bool parseScheduleStep(const std::string &step, TimelineUnit &unit) {
  char kind = 0;
  long long mb = 0, chunk = 0;
  int n = std::sscanf(step.c_str(), "%c microbatch %lld chunk %lld", &kind, &mb, &chunk);
  if (n < 2 || (kind != 'F' && kind != 'B' && kind != 'W') || step.size() < 2 || step[1] != ' ' ||
      chunk < 0)
    return false;
  unit.forward = kind == 'F';
  unit.weight = kind == 'W';
  unit.microbatch = mb;
  unit.chunk = n == 3 ? chunk : 0;
  return true;
}

} // namespace mlir::trainc
