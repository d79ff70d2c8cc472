//===- VerifyPlan.h - Whole-plan check across the ranks' programs --------===//
//
// DESIGN.md phase 12: simulate all ranks' programs together. Every communicator group's members
// must issue the same collectives in the same order (kind, reduce op, element count, dtype),
// per entry function (train_step, eval_step), or the plan could deadlock or mix up buffers at
// run time. With point-to-point transfers (pipeline parallelism) all ranks' programs are then
// simulated together: sends are eager (the runtime's Gloo sends are buffered), receives and
// collectives block; every receive must meet the matching send (same element count and dtype,
// in order) and the simulation must finish, or the plan could deadlock: the error names both
// ranks and their instruction paths. Async sends and receives (--overlap-p2p-comm) are
// simulated where they start (the runtime's communication stream runs a rank's transfers in
// issue order); each of their tokens must be waited once before the entry ends. ncclDeadlock
// simulates the same orders under NCCL's semantics (the CUDA backend's communicator): a send
// completes only once its receive is posted, except that a send directly followed by a receive
// on the same group (runsAsSendRecvPair, Megatron's batch_isend_irecv) is posted together with
// it. The compile records a deadlock there in the programs (metadata "nccl.p2p_deadlock"), and
// trainrun refuses such a plan with --backend cuda (docs/cuda.md).
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_COMPILER_VERIFYPLAN_H
#define TRAINC_COMPILER_VERIFYPLAN_H

#include "runtime/schema/program.pb.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlir::trainc {

/// `programs[r]` is rank r's program (all validated). Returns "" or the first disagreement, naming
/// the group and its member ranks, the entry, the position in the group's sequence, the two ranks
/// and their ops with the function/instruction path that issued them, e.g.
///   "group 'dp' [0,1], entry 'train_step', collective #3: rank 0 issues ALL_REDUCE sum of 2048
///    f32 elements (train_step -> forward_backward_last.backward#41), rank 1 issues ALL_REDUCE sum of 400
///    f32 elements (train_step -> forward_backward_last.backward#52)"
std::string verifyPlan(const std::vector<::trainc::schema::Program> &programs);

/// verifyPlan's error if any, else "" or how the plan can deadlock under NCCL's semantics, e.g.
///   "entry 'train_step' can deadlock under NCCL (a send completes only once its receive is
///    posted; only a send directly followed by a receive on the same group is posted with it):
///    rank 0 sends 144 f32 elements to rank 1 (train_step#19), while rank 1 sends 144 f32
///    elements to rank 0 (train_step#18) grouped with its next, which receives ..."
std::string ncclDeadlock(const std::vector<::trainc::schema::Program> &programs);

/// The program metadata key under which the compile records ncclDeadlock's message.
inline constexpr const char *kNcclDeadlockMetadata = "nccl.p2p_deadlock";

/// verifyPlan one rank at a time, so that the programs of a large plan need not be held at once:
/// addRank(p) for ranks 0, 1, ... in order keeps only each entry's collective sequence per group
/// (interned); finish() returns what verifyPlan would.
class PlanVerifier {
public:
  void addRank(const ::trainc::schema::Program &program);
  std::string finish() const;
  /// After finish() returned "": "" or how the plan can deadlock under NCCL (ncclDeadlock).
  std::string ncclDeadlock() const;

private:
  /// Per entry, per group member list: (what id, where id) per collective.
  using Rank = std::map<std::string, std::map<std::vector<int64_t>, std::vector<uint32_t>>>;
  std::vector<Rank> ranks;
  /// Per rank, per entry, in program order: the communication events of the deadlock
  /// simulation (only kept for plans with point-to-point transfers).
  struct Event {
    enum Kind : uint8_t { Collective, Send, Recv } kind = Collective;
    bool paired = false; // Send: posted together with the Recv after it (runsAsSendRecvPair)
    int64_t peer = 0;   // Send/Recv: the peer's global rank
    uint32_t group = 0; // Collective: index into groupList
    uint32_t what = 0, where = 0;
  };
  std::vector<std::map<std::string, std::vector<Event>>> events;
  std::vector<std::vector<int64_t>> groupList;
  bool anyPointToPoint = false;
  /// The first async send/receive never waited or started on a token still in flight.
  std::string asyncError;
  /// Per rank: the entry's events (an empty sequence for a rank without the entry).
  std::vector<const std::vector<Event> *> sequences(const std::string &entry) const;
  /// A member of the group of collective `e` (rank r's next event) that is not at a collective
  /// of that group: finished, or at another event (pos[m] is each rank's next event); r if none.
  size_t memberElsewhere(const std::vector<const std::vector<Event> *> &seq,
                         const std::vector<size_t> &pos, size_t r, const Event &e) const;
  /// "waits in <what> on [<ranks>] (<where>)": a collective event for a deadlock message.
  std::string collectiveText(const Event &e) const;
  std::string simulate(const std::string &entry) const;
  /// The same orders under NCCL's semantics: sends complete only once the receive is posted,
  /// a paired send and receive are posted together. "" or the deadlock, naming both ranks.
  std::string simulateNccl(const std::string &entry) const;
  std::map<std::vector<int64_t>, std::string> names;
  std::map<std::string, uint32_t> whatIds;
  std::vector<std::string> whats, wheres;
};

} // namespace mlir::trainc

#endif
