//===- BatchRampup.h - Megatron's batch-size ramp-up calculator -----------===//
//
// Megatron's RampupBatchsizeNumMicroBatchesCalculator (megatron/core/
// num_microbatches_calculator.py) and update_train_iters (megatron/training/training.py) for
// --rampup-batch-size START INCR SAMPLES: the global batch size starts at START and grows by
// INCR every SAMPLES / ((GBS - START) / INCR) consumed samples (a float, as Megatron divides),
// reaching --global-batch-size once more than SAMPLES samples were consumed. With
// --decrease-batch-size-if-needed a batch size that is not a multiple of micro-batch-size x
// data-parallel-size runs rounded down to one ("running" batch size); otherwise it is an
// error. Header-only plain C++ so that the compiler's frontend (which checks the flags and
// chooses the programs to compile) and the runtime (which switches them) share one rule.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CONTROL_BATCHRAMPUP_H
#define TRAINC_RUNTIME_CONTROL_BATCHRAMPUP_H

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace trainc::rt::control {

class BatchRampup {
public:
  /// The batch sizes at one point of the ramp (samples; numMicrobatches per data-parallel rank).
  struct Step {
    int64_t globalBatchSize = 0;        // Megatron's current_global_batch_size
    int64_t runningGlobalBatchSize = 0; // current_running_global_batch_size (what one iteration reads)
    int64_t numMicrobatches = 0;        // running / (micro_batch_size x data_parallel_size)
  };

  /// Megatron's constructor checks, in its order and with its messages; "" when the values are
  /// valid. `start`, `increment`, `samples`: the three values of --rampup-batch-size.
  /// trainc adds two: SAMPLES == 0 and START == GBS (Megatron divides by zero there).
  static std::string check(int64_t globalBatchSize, int64_t start, int64_t increment,
                           int64_t samples) {
    if (globalBatchSize <= 0)
      return "global batch size should be positive, got " + std::to_string(globalBatchSize) + ".";
    if (start <= 0)
      return "start batch size should be positive, got " + std::to_string(start) + ".";
    if (increment <= 0)
      return "batch size increment should be positive, got " + std::to_string(increment) + ".";
    if (samples < 0)
      return "ramp-up samples should be non-negative, got " + std::to_string(samples) + ".";
    const int64_t diff = globalBatchSize - start;
    if (diff < 0)
      return "expected global batch size to be greater than or equal to start batch size, got " +
             std::to_string(globalBatchSize) + " and " + std::to_string(start);
    if (diff % increment != 0)
      return "expected global batch size interval (" + std::to_string(diff) +
             ") to be divisible by global batch size increment (" + std::to_string(increment) +
             ")";
    if (samples == 0)
      return "--rampup-batch-size ramp-up samples 0: the batch size would change at no sample "
             "(Megatron divides by zero here); give a positive number of samples";
    if (diff == 0)
      return "--rampup-batch-size start " + std::to_string(start) +
             " equals --global-batch-size: there is nothing to ramp up (drop "
             "--rampup-batch-size)";
    return "";
  }

  /// The values must pass check(). `microBatchSize * dataParallelSize` > 0.
  BatchRampup(int64_t globalBatchSize, int64_t microBatchSize, int64_t dataParallelSize,
              bool decreaseBatchSizeIfNeeded, int64_t start, int64_t increment, int64_t samples)
      : gbs_(globalBatchSize), mbs_(microBatchSize), dp_(dataParallelSize),
        decrease_(decreaseBatchSizeIfNeeded), start_(start), increment_(increment),
        samples_(samples),
        samplesPerIncrement_(double(samples) / double((globalBatchSize - start) / increment)) {}

  /// Megatron's update(consumed_samples, consistency_check): the batch sizes of the iteration
  /// that starts after `consumed` samples. With `consistencyCheck` and without
  /// --decrease-batch-size-if-needed a batch size that is not a multiple of micro-batch-size x
  /// data-parallel-size sets `error` (Megatron's message); a running batch size rounded down to
  /// 0 (trainc's check: Megatron would run no microbatch) sets it too.
  Step at(int64_t consumed, bool consistencyCheck, std::string *error = nullptr) const {
    Step s;
    if (consumed > samples_) {
      s.globalBatchSize = gbs_;
    } else {
      // int(consumed_samples / rampup_samples_per_increment): a float division, truncated.
      const auto steps = int64_t(double(consumed) / samplesPerIncrement_);
      s.globalBatchSize = start_ + steps * increment_;
    }
    const int64_t unit = mbs_ * dp_;
    if (consistencyCheck && !decrease_ && s.globalBatchSize % unit != 0 && error)
      *error = "current global batch size (" + std::to_string(s.globalBatchSize) +
               ") is not divisible by micro-batch-size (" + std::to_string(mbs_) +
               ") times data parallel size (" + std::to_string(dp_) + ")";
    s.runningGlobalBatchSize =
        decrease_ ? s.globalBatchSize / unit * unit : s.globalBatchSize;
    s.numMicrobatches = s.runningGlobalBatchSize / unit;
    if (s.numMicrobatches == 0 && error && error->empty())
      *error = "--decrease-batch-size-if-needed rounds global batch size " +
               std::to_string(s.globalBatchSize) + " down to 0 samples (micro-batch-size " +
               std::to_string(mbs_) + " x data parallel size " + std::to_string(dp_) +
               " is larger): raise the start batch size";
    return s;
  }

  /// Megatron's update_train_iters for --train-samples with ramp-up: the iterations of the
  /// ramp (counting each with its un-rounded current global batch size while consumed <=
  /// SAMPLES) plus (trainSamples - consumed) // GBS, Python's floor division.
  int64_t trainIters(int64_t trainSamples) const {
    int64_t iterations = 0, consumed = 0;
    while (consumed <= samples_) {
      consumed += at(consumed, false).globalBatchSize;
      ++iterations;
    }
    const int64_t rest = trainSamples - consumed;
    iterations += rest >= 0 ? rest / gbs_ : -((-rest + gbs_ - 1) / gbs_);
    return iterations;
  }

  /// The iterations a training run goes through, from consumed 0 as Megatron's train loop
  /// advances (consumed += running batch size): the first Step of each distinct
  /// numMicrobatches, ascending, the final one (GBS) included. The first error of at() with
  /// the consistency check stops the walk and sets `error`.
  std::vector<int64_t> numMicrobatchesReached(std::string *error) const {
    std::set<int64_t> ms;
    int64_t consumed = 0;
    while (consumed <= samples_) {
      std::string e;
      Step s = at(consumed, true, &e);
      if (!e.empty()) {
        if (error)
          *error = e + " (at " + std::to_string(consumed) + " consumed samples)";
        return {};
      }
      ms.insert(s.numMicrobatches);
      consumed += s.runningGlobalBatchSize;
    }
    std::string e;
    Step s = at(consumed, true, &e);
    if (!e.empty()) {
      if (error)
        *error = e;
      return {};
    }
    ms.insert(s.numMicrobatches);
    return {ms.begin(), ms.end()};
  }

  int64_t globalBatchSize() const { return gbs_; }
  int64_t start() const { return start_; }
  int64_t increment() const { return increment_; }
  int64_t samples() const { return samples_; }
  bool decreaseBatchSizeIfNeeded() const { return decrease_; }

private:
  int64_t gbs_, mbs_, dp_;
  bool decrease_;
  int64_t start_, increment_, samples_;
  double samplesPerIncrement_;
};

} // namespace trainc::rt::control

#endif
