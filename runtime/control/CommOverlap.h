//===- CommOverlap.h - How much communication the trace hid behind compute -===//
#ifndef TRAINC_RUNTIME_CONTROL_COMMOVERLAP_H
#define TRAINC_RUNTIME_CONTROL_COMMOVERLAP_H

#include "runtime/core/Executor.h"
#include "runtime/schema/program.pb.h"

#include <string>
#include <vector>

namespace trainc::rt::control {

/// One communicator group's collectives in a trace window.
struct CommOverlap {
  std::string group;         // the group's name ("tp", "dp", ...)
  int64_t collectives = 0;   // collective instructions run
  int64_t async = 0;         // of them started asynchronously (a token, waited later)
  double busyUs = 0;         // microseconds the communication stream spent in them
  double overlappedUs = 0;   // of busyUs, microseconds during which a compute kernel ran
  /// The async collectives alone: how many ran while at least one compute kernel did, their
  /// busy time and its part overlapped by compute kernels.
  int64_t asyncOverlapping = 0;
  double asyncBusyUs = 0, asyncOverlappedUs = 0;
  double overlappedFraction() const { return busyUs > 0 ? overlappedUs / busyUs : 0; }
};

/// Per group (in group-table order, groups without collectives left out): the collectives of
/// `timings` (stream 1) and how much of their time intersects the union of the compute
/// stream's kernel intervals (stream 0, kernels only: calls, waits and host I/O are not
/// compute). A synchronous collective blocks the compute stream, so its overlap is ~0; an
/// async one overlaps the kernels issued between its start and its wait.
std::vector<CommOverlap> summarizeCommOverlap(const schema::Program &program,
                                              const std::vector<InstrTiming> &timings);

/// `{"tp": {"collectives": N, "async": n, "async_overlapping": k, "busy_us": x,
/// "overlapped_us": y, "overlapped_fraction": y / x, "async_busy_us": ax,
/// "async_overlapped_us": ay}, ...}` (a JSON object; the trace's otherData.comm_overlap).
std::string commOverlapJson(const std::vector<CommOverlap> &summary);

} // namespace trainc::rt::control

#endif
