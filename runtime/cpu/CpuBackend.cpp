//===- CpuBackend.cpp - Host memory, inline compute, a communication thread ===//
//
// Stream 0 (compute) runs inline on the calling thread, so work enqueued on it is complete when
// enqueue returns. Stream 1 (communication) is a worker thread that runs tasks in order. Events
// are generation counters: recording on the compute stream completes immediately; recording on the
// communication stream completes when the worker reaches it.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Backend.h"
#include "runtime/cpu/CpuKernels.h"

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace trainc::rt {
namespace {

class Worker {
public:
  Worker() : thread([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> l(mu);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }
  void enqueue(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mu);
      tasks.push_back(std::move(fn));
      ++enqueued;
    }
    cv.notify_all();
  }
  uint64_t enqueuedCount() {
    std::lock_guard<std::mutex> l(mu);
    return enqueued;
  }
  void waitFor(uint64_t n) {
    std::unique_lock<std::mutex> l(mu);
    done_cv.wait(l, [&] { return completed >= n; });
  }

private:
  void loop() {
    std::unique_lock<std::mutex> l(mu);
    for (;;) {
      cv.wait(l, [&] { return stop || !tasks.empty(); });
      if (tasks.empty() && stop)
        return;
      std::function<void()> fn = std::move(tasks.front());
      tasks.pop_front();
      l.unlock();
      fn();
      l.lock();
      ++completed;
      done_cv.notify_all();
    }
  }
  std::mutex mu;
  std::condition_variable cv, done_cv;
  std::deque<std::function<void()>> tasks;
  uint64_t enqueued = 0, completed = 0;
  bool stop = false;
  std::thread thread;
};

class CpuBackend final : public Backend {
public:
  std::string_view name() const override { return "cpu"; }
  bool hostAddressable() const override { return true; }

  void *allocateArena(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    void *p = std::aligned_alloc(64, rounded);
    if (p)
      std::memset(p, 0, rounded);
    return p;
  }
  void freeArena(void *p) override { std::free(p); }
  void copyToDevice(void *dst, const void *src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void copyToHost(void *dst, const void *src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  KernelFn findKernel(std::string_view name) const override {
    const cpu::KernelTable &t = cpu::cpuKernelTable();
    auto it = t.find(name);
    return it == t.end() ? nullptr : it->second;
  }
  void *kernelData(unsigned) override { return nullptr; }

  void enqueue(unsigned stream, std::function<void()> fn) override {
    if (stream == kComputeStream)
      fn();
    else
      comm.enqueue(std::move(fn));
  }
  void synchronize(unsigned stream) override {
    if (stream != kComputeStream)
      comm.waitFor(comm.enqueuedCount());
  }
  // An event on the communication stream is the worker's task count when it was recorded.
  void recordEvent(unsigned event, unsigned stream) override {
    events[event] = stream == kComputeStream ? 0 : comm.enqueuedCount();
  }
  void streamWaitEvent(unsigned stream, unsigned event) override {
    if (stream == kComputeStream)
      hostWaitEvent(event);
    // Work enqueued on the communication stream runs after everything the (inline) compute stream
    // has done so far, and after earlier communication work: nothing to wait for.
  }
  void hostWaitEvent(unsigned event) override {
    if (events[event])
      comm.waitFor(events[event]);
  }
  void resizeEvents(unsigned count) override { events.assign(count, 0); }

  void beginCapture(std::string_view region) override {
    if (capturing)
      throw std::logic_error("nested graph capture"); // the validator rejects this first
    capturing = true;
  }
  void endCapture(std::string_view) override { capturing = false; }

private:
  Worker comm;
  std::vector<uint64_t> events;
  bool capturing = false;
};

} // namespace

std::unique_ptr<Backend> createCpuBackend() { return std::make_unique<CpuBackend>(); }

namespace cpu {
const KernelTable &cpuKernelTable() {
  static const KernelTable table = [] {
    KernelTable t;
    registerElementwiseKernels(t);
    registerMatmulKernels(t);
    registerNormKernels(t);
    registerAttentionKernels(t);
    registerLossKernels(t);
    registerOptimizerKernels(t);
    return t;
  }();
  return table;
}
} // namespace cpu

} // namespace trainc::rt
