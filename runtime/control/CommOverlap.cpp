//===- CommOverlap.cpp - How much communication the trace hid behind compute -===//

#include "runtime/control/CommOverlap.h"

#include "absl/strings/str_format.h"

#include <algorithm>
#include <map>
#include <utility>

namespace trainc::rt::control {

std::vector<CommOverlap> summarizeCommOverlap(const schema::Program &program,
                                              const std::vector<InstrTiming> &timings) {
  // The union of the compute kernels' intervals, merged and sorted.
  std::vector<std::pair<int64_t, int64_t>> compute;
  for (const InstrTiming &t : timings) {
    if (t.stream != 0 || t.function < 0 || t.function >= program.functions_size())
      continue;
    const schema::Function &fn = program.functions(t.function);
    if (t.index < 0 || t.index >= fn.body_size() || !fn.body(t.index).has_kernel())
      continue;
    compute.push_back({t.startNs, t.endNs});
  }
  std::sort(compute.begin(), compute.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto &iv : compute) {
    if (!merged.empty() && iv.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, iv.second);
    else
      merged.push_back(iv);
  }
  std::map<uint32_t, CommOverlap> byGroup;
  for (const InstrTiming &t : timings) {
    if (t.stream != 1 || t.function < 0 || t.function >= program.functions_size())
      continue;
    const schema::Function &fn = program.functions(t.function);
    if (t.index < 0 || t.index >= fn.body_size() || !fn.body(t.index).has_collective())
      continue;
    const schema::Collective &c = fn.body(t.index).collective();
    CommOverlap &s = byGroup[c.group()];
    if (s.group.empty())
      s.group = c.group() < uint32_t(program.groups_size()) ? program.groups(int(c.group())).name()
                                                            : "?";
    ++s.collectives;
    s.async += c.async();
    s.busyUs += double(t.endNs - t.startNs) / 1e3;
    // Intersection with the merged compute intervals (the first that may end after t starts).
    auto it = std::lower_bound(merged.begin(), merged.end(), t.startNs,
                               [](const std::pair<int64_t, int64_t> &iv, int64_t at) {
                                 return iv.second < at;
                               });
    double overlapped = 0;
    for (; it != merged.end() && it->first < t.endNs; ++it)
      overlapped += double(std::min(it->second, t.endNs) - std::max(it->first, t.startNs)) / 1e3;
    s.overlappedUs += overlapped;
    if (c.async()) {
      s.asyncBusyUs += double(t.endNs - t.startNs) / 1e3;
      s.asyncOverlappedUs += overlapped;
      s.asyncOverlapping += overlapped > 0;
    }
  }
  std::vector<CommOverlap> out;
  for (auto &[g, s] : byGroup)
    out.push_back(std::move(s));
  return out;
}

std::string commOverlapJson(const std::vector<CommOverlap> &summary) {
  std::string j = "{";
  for (size_t i = 0; i < summary.size(); ++i) {
    const CommOverlap &s = summary[i];
    j += absl::StrFormat("%s\"%s\":{\"collectives\":%d,\"async\":%d,\"async_overlapping\":%d,"
                         "\"busy_us\":%.3f,\"overlapped_us\":%.3f,\"overlapped_fraction\":%.4f,"
                         "\"async_busy_us\":%.3f,\"async_overlapped_us\":%.3f}",
                         i ? "," : "", s.group, s.collectives, s.async, s.asyncOverlapping,
                         s.busyUs, s.overlappedUs, s.overlappedFraction(), s.asyncBusyUs,
                         s.asyncOverlappedUs);
  }
  return j + "}";
}

} // namespace trainc::rt::control
