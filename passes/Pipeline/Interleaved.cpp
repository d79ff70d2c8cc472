//===- Interleaved.cpp - Megatron's interleaved 1F1B unit order -----------===//
//
// The unit order of forward_backward_pipelining_with_interleaving (Megatron-LM
// megatron/core/pipeline_parallel/schedules.py: get_schedule_table, get_pp_rank_microbatches,
// get_model_chunk_id) and the checks Megatron makes before running it. See Passes.h.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/Passes.h"

#include "llvm/ADT/Twine.h"

#include <deque>
#include <map>
#include <tuple>
#include <vector>

using namespace mlir;
using namespace mlir::trainc;

std::string mlir::trainc::checkInterleavedSchedule(int64_t numStages, int64_t numChunks,
                                                   int64_t m, int64_t groupSize) {
  const int64_t P = numStages, G = groupSize > 0 ? groupSize : numStages;
  if (P < 2 || numChunks < 2)
    return ("the interleaved schedule needs more than one pipeline stage and more than one "
            "model chunk per stage, not " +
            Twine(P) + " and " + Twine(numChunks))
        .str();
  // Megatron-LM (commit e03878b5f) schedules.py, before running the interleaved schedule.
  if (m % P != 0)
    return ("number of microbatches (" + Twine(m) +
            ") is not divisible by pipeline-model-parallel-size (" + Twine(P) +
            ") when using interleaved schedule")
        .str();
  if (G > m || G < P)
    return ("The number of contiguous micro-batches in a virtual pipeline stage should range "
            "in [PP=" +
            Twine(P) + " , M=" + Twine(m) + "] (--microbatch-group-size-per-vp-stage " +
            Twine(G) + ")")
        .str();
  if (int64_t rest = m % G; rest > 0 && rest < P)
    return ("The remainder of M (the total micro-batches) divided by N (number of contiguous "
            "micro-batches in a virtual pipeline stage) should be 0, or larger than or equal to "
            "the pipeline-parallel size, but it is " +
            Twine(rest) + ". Otherwise, it introduces dependency bubbles in the pipeline and "
                          "reduces throughput.")
        .str();
  // trainc's own: the order must pass every activation and gradient to the unit that expects it.
  if (std::string e = checkInterleavedMessages(P, numChunks, m, G); !e.empty())
    return "--microbatch-group-size-per-vp-stage " + std::to_string(G) + " with " +
           std::to_string(P) + " pipeline stages, " + std::to_string(numChunks) +
           " model chunks and " + std::to_string(m) + " microbatches: " + e;
  return "";
}

std::string mlir::trainc::checkInterleavedMessages(int64_t numStages, int64_t numChunks,
                                                   int64_t m, int64_t groupSize) {
  const int64_t P = numStages, V = numChunks;
  // What a message is: (backward?, receiving chunk, microbatch).
  using Message = std::tuple<bool, int64_t, int64_t>;
  struct Event {
    bool send;
    int64_t peer;
    Message msg;
  };
  std::vector<std::vector<Event>> events(static_cast<size_t>(P));
  for (int64_t r = 0; r < P; ++r)
    for (ScheduleStep st : interleavedOneForwardOneBackward(P, r, V, m, groupSize)) {
      std::vector<Event> &e = events[size_t(r)];
      const int64_t c = st.chunk, i = st.microbatch;
      if (st.forward) {
        if (r > 0 || c > 0)
          e.push_back({false, (r + P - 1) % P, Message{false, c, i}});
        if (r < P - 1 || c < V - 1)
          e.push_back({true, (r + 1) % P, Message{false, r < P - 1 ? c : c + 1, i}});
      } else {
        if (r < P - 1 || c < V - 1)
          e.push_back({false, (r + 1) % P, Message{true, c, i}});
        if (r > 0 || c > 0)
          e.push_back({true, (r + P - 1) % P, Message{true, r > 0 ? c : c - 1, i}});
      }
    }
  // Eager sends, blocking receives, the k-th message from a to b meeting b's k-th receive from
  // a (the runtime's p2p).
  std::map<std::pair<int64_t, int64_t>, std::deque<Message>> inFlight;
  std::vector<size_t> next(static_cast<size_t>(P), 0);
  auto name = [](const Message &x) {
    return ((std::get<0>(x) ? "the gradient for chunk " : "the activation for chunk ") +
            Twine(std::get<1>(x)) + " of microbatch " + Twine(std::get<2>(x)))
        .str();
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < P; ++r)
      for (size_t &k = next[size_t(r)]; k < events[size_t(r)].size(); ++k) {
        const Event &e = events[size_t(r)][k];
        if (e.send) {
          inFlight[{r, e.peer}].push_back(e.msg);
        } else {
          std::deque<Message> &q = inFlight[{e.peer, r}];
          if (q.empty())
            break;
          if (q.front() != e.msg)
            return ("pipeline rank " + Twine(r) + " receives " + name(q.front()) + " from rank " +
                    Twine(e.peer) + " where it expects " + name(e.msg) +
                    " (activations and gradients between two ranks are matched in order)")
                .str();
          q.pop_front();
        }
        progress = true;
      }
  }
  for (int64_t r = 0; r < P; ++r)
    if (next[size_t(r)] < events[size_t(r)].size())
      return ("pipeline rank " + Twine(r) + " waits forever for " +
              name(events[size_t(r)][next[size_t(r)]].msg))
          .str();
  return "";
}

SmallVector<ScheduleStep> mlir::trainc::interleavedOneForwardOneBackward(int64_t numStages,
                                                                        int64_t stage,
                                                                        int64_t numChunks,
                                                                        int64_t m,
                                                                        int64_t groupSize) {
  const int64_t P = numStages, V = numChunks, G = groupSize > 0 ? groupSize : numStages;
  // Megatron's schedule table: microbatch groups of G, each run chunk by chunk (the last group
  // takes what is left). Entry k is the k-th forward's (microbatch, chunk); the k-th backward
  // runs the same microbatch on chunk V - 1 - chunk.
  SmallVector<std::pair<int64_t, int64_t>> table;
  for (int64_t lo = 0; lo < m; lo += G) {
    const int64_t hi = lo + G >= m ? m : lo + G;
    for (int64_t c = 0; c < V; ++c)
      for (int64_t i = lo; i < hi; ++i)
        table.push_back({i, c});
  }
  const int64_t total = m * V;
  const int64_t warmup = std::min((P - stage - 1) * 2 + (V - 1) * G, total);
  SmallVector<ScheduleStep> order;
  auto fwd = [&](int64_t k) { order.push_back({true, table[size_t(k)].second, table[size_t(k)].first}); };
  auto bwd = [&](int64_t k) {
    order.push_back({false, V - 1 - table[size_t(k)].second, table[size_t(k)].first});
  };
  for (int64_t k = 0; k < warmup; ++k)
    fwd(k);
  // Steady state: each step one forward then one backward (Megatron's order without
  // --overlap-p2p-comm), then the cooldown backwards.
  for (int64_t k = 0; k < total - warmup; ++k) {
    fwd(k + warmup);
    bwd(k);
  }
  for (int64_t k = total - warmup; k < total; ++k)
    bwd(k);
  return order;
}
