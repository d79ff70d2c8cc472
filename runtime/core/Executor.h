//===- Executor.h - Runs a validated program on a backend ----------------===//
//
// The executor prepares a program once (resolving operands, decoding attributes, binding kernel
// implementations) and then runs one iteration per `run` call: the entry function's instructions in
// order, compute on stream 0 and communication on stream 1, async collectives as start + wait on a
// token, calls binding argument operands to the caller's views.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_EXECUTOR_H
#define TRAINC_RUNTIME_CORE_EXECUTOR_H

#include "runtime/comm/Communicator.h"
#include "runtime/core/Backend.h"
#include "runtime/schema/program.pb.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace trainc::rt {

/// One timed instruction execution, in nanoseconds of the steady clock (shared by the processes
/// of one machine).
struct InstrTiming {
  int function;
  int index;
  unsigned stream;
  int64_t startNs;
  int64_t endNs;
};

struct ExecutorOptions {
  /// Record start/end of every instruction (compute and communication stream).
  bool timing = false;
};

/// Called at each HostIO point with its kind and name. Return a non-OK status to abort the run.
using HostCallback = std::function<absl::Status(schema::HostIOKind, const std::string &)>;

class Executor {
public:
  /// Validates `program` (validateProgram, with `backend`'s kernel set), allocates the arena and
  /// prepares every instruction. `backend` and `comm` must outlive the executor. Errors: the
  /// validator's message, an arena allocation failure, or a communicator that cannot serve the
  /// program's groups.
  static absl::StatusOr<std::unique_ptr<Executor>>
  create(schema::Program program, Backend &backend, Communicator &comm,
         ExecutorOptions options = {});
  ~Executor();

  /// Runs one iteration (the entry function). `host` may be empty if the program has no HostIO.
  /// Errors: the host callback's status, or UnavailableError("communication failed: ...") when a
  /// collective failed (a peer died, a timeout). The communication stream is drained at the end
  /// unless the program carries tokens into the next run (Program.carried_tokens); readBuffer and
  /// writeBuffer of non-input buffers drain it first.
  /// Graph-capture regions (Region instructions): on a backend that captures graphs (CUDA) the
  /// first Program.cuda_graph_warmup_steps runs of a region are eager, the next one captures it
  /// (and launches the graph), later runs replay the graph with one launch; the host must have
  /// written every varying value (inputs, lr, step) into its device buffer before the region
  /// (trainc-cuda-graph checks the program for this). Replayed runs record no per-instruction
  /// timings inside the region. On the CPU backend every run is eager.
  absl::Status run(const HostCallback &host = {});
  /// Runs the named entry point (Program.entry_points, e.g. "eval_step"). NotFound if absent.
  absl::Status runEntry(const std::string &name, const HostCallback &host = {});
  bool hasEntry(const std::string &name) const { return program_.entry_points().count(name) > 0; }

  const schema::Program &program() const { return program_; }
  /// Index of the buffer called `name`, or -1.
  int findBuffer(std::string_view name) const;
  /// Device pointer of buffer `index` (a host pointer on the CPU backend).
  void *bufferData(int index) const;
  /// Buffer `index` as host memory the caller may write in place, or null when the backend's
  /// memory is not host memory (Backend::hostAddressable) or the index is out of range. Drains
  /// the communication stream first, as writeBuffer does for non-input buffers.
  void *hostWritableBuffer(int index);
  /// Copies host data into / out of buffer `index`; `bytes` must equal the buffer's byte size.
  absl::Status writeBuffer(int index, const void *src, size_t bytes);
  absl::Status readBuffer(int index, void *dst, size_t bytes) const;
  /// Blocks until everything enqueued on the communication stream has completed (e.g. the
  /// distributed optimizer's carried parameter all-gathers), so that the host may read every
  /// buffer and use the communicator itself (checkpoints, exit decisions).
  void drainCommunication() const;

  /// Highest arena byte offset (exclusive) that any executed instruction has touched.
  uint64_t highWaterMark() const { return hwm_; }
  /// Timings of the runs so far (if enabled); cleared by clearTimings.
  std::vector<InstrTiming> timings() const;
  /// A position in the recorded timings (they are only appended to until clearTimings), and
  /// the timings recorded from `from` up to `to` (default: now), sorted by start. A run's
  /// communication timings may land after the next run's mark when its collectives are still in
  /// flight (carried tokens); they stay in the interval in which they completed.
  struct TimingMark {
    size_t compute = 0, comm = 0;
  };
  TimingMark timingMark() const;
  std::vector<InstrTiming> timingsBetween(TimingMark from,
                                          std::optional<TimingMark> to = std::nullopt) const;
  void clearTimings();
  /// Starts or stops recording timings (ExecutorOptions::timing is the initial state).
  void setTiming(bool on);
  /// Number of instructions executed by the last run (all calls expanded).
  uint64_t lastInstructionCount() const { return executed_; }

  struct Impl;

private:
  Executor() = default;
  schema::Program program_;
  Backend *backend_ = nullptr;
  Communicator *comm_ = nullptr;
  void *arena_ = nullptr;
  uint64_t hwm_ = 0;
  uint64_t executed_ = 0;
  std::unique_ptr<Impl> impl_;
};

} // namespace trainc::rt

#endif
