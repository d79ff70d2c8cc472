//===- GlooCommunicator.h - Collectives over Gloo's TCP transport --------===//
//
// The CPU communicator of multi-rank jobs. Ranks meet through the job's TcpStore (see TcpStore.h);
// setupGroups creates one Gloo context per distinct group (member list) this rank belongs to, and
// the collectives run on Gloo's TCP transport with a finite timeout. Failures (a peer died, a
// timeout, a peer that never arrived) throw std::runtime_error naming the rank, the collective and
// the group; they never hang past the timeout.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_COMM_GLOOCOMMUNICATOR_H
#define TRAINC_RUNTIME_COMM_GLOOCOMMUNICATOR_H

#include "runtime/comm/Communicator.h"

#include "absl/status/statusor.h"

#include <chrono>
#include <memory>
#include <string>

namespace trainc::rt {

struct GlooOptions {
  int64_t rank = 0;      // this process's global rank, 0 <= rank < worldSize
  int64_t worldSize = 1; // number of ranks in the job
  /// The job's TcpStore (see TcpStoreServer) and the token it expects.
  std::string storeHost = "127.0.0.1";
  int storePort = 0;
  std::string token;
  /// Bound for every blocking step: reaching the store, the rendezvous of a group, and each
  /// collective or point-to-point transfer. Megatron uses 10 min for NCCL; 300 s suits CPU jobs.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  /// Where the other ranks reach this rank's Gloo transport: `iface` (a network interface name
  /// such as "eth0") wins over `hostname` (a name or address); both empty = loopback (127.0.0.1),
  /// which serves every job on one machine.
  std::string hostname;
  std::string iface;
  /// Namespace of this job's keys in the store (lets tests run several jobs on one store).
  std::string storePrefix = "trainc";
};

/// Connects to the store and opens Gloo's TCP device. Errors: invalid rank/world size, an
/// unreachable store, a wrong token (message from TcpStore::connect), a transport device that
/// cannot be created for the hostname/interface (named).
absl::StatusOr<std::unique_ptr<Communicator>> createGlooCommunicator(const GlooOptions &options);

/// Ends a job cleanly: every rank announces through the store that it finished, waits until all
/// ranks have (so no rank closes its Gloo connections while a peer still reads from them), and
/// rank 0 (which may host the store) additionally waits until every rank has seen that. A no-op
/// for other communicators. Errors: the store is gone, or a rank did not finish within the
/// timeout (the keys of the missing ranks are named).
absl::Status finishGlooCommunicator(Communicator &comm);

} // namespace trainc::rt

#endif
