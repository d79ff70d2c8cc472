//===- Communicator.h - Collectives and point-to-point for one rank ------===//
//
// A communicator implements collectives over groups of global ranks. Gloo (CPU) and NCCL (CUDA)
// implement it; LocalCommunicator serves single-rank programs. All calls are blocking from the
// caller's point of view; the executor runs them on the communication stream to make them async.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_COMM_COMMUNICATOR_H
#define TRAINC_RUNTIME_COMM_COMMUNICATOR_H

#include "runtime/core/DType.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trainc::rt {

enum class ReduceOp { Sum = 0, Max = 1, Min = 2 };

/// A group as written in the program: name and member global ranks (group-rank order).
struct GroupSpec {
  std::string name;
  std::vector<int64_t> ranks;
};

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t worldSize() const = 0;

  /// Prepares the groups a program uses (index = Program.groups index). Returns "" or an error.
  virtual std::string setupGroups(const std::vector<GroupSpec> &groups) = 0;

  /// `count` elements of `dtype`. In-place when in == out. Buffers are device pointers.
  virtual void allReduce(int group, const void *in, void *out, int64_t count, DType dtype,
                         ReduceOp op) = 0;
  /// `in` holds groupSize * count elements; `out` receives this rank's `count`-element chunk.
  virtual void reduceScatter(int group, const void *in, void *out, int64_t count, DType dtype,
                             ReduceOp op) = 0;
  /// `in` holds `count` elements; `out` receives groupSize * count, chunks in group-rank order.
  virtual void allGather(int group, const void *in, void *out, int64_t count, DType dtype) = 0;
  virtual void broadcast(int group, void *buf, int64_t count, DType dtype, int64_t root) = 0;
  /// Point-to-point: `bytes` bytes of `dtype` (U8: untyped) to / from group rank `peer`; the
  /// k-th send from a to b meets b's k-th receive from a. A communicator that can check it
  /// (Gloo: a header with each message) refuses a receive whose size or dtype differs from the
  /// send's, naming both, instead of waiting for its timeout.
  virtual void send(int group, int64_t peer, const void *buf, size_t bytes,
                    DType dtype = DType::U8) = 0;
  virtual void recv(int group, int64_t peer, void *buf, size_t bytes,
                    DType dtype = DType::U8) = 0;
  /// A send to group rank `sendPeer` and a receive from `recvPeer` of the same group started
  /// together (Megatron's batch_isend_irecv of a send/receive pair): neither waits for the
  /// other's peer to reach its half. The executor calls it for an async send immediately
  /// followed by an async receive (--overlap-p2p-comm's pairs). Default: send, then receive
  /// (Gloo's sends are eager: that is the pair already). NCCL groups the two calls.
  virtual void sendRecv(int group, int64_t sendPeer, const void *sendBuf, size_t sendBytes,
                        DType sendDtype, int64_t recvPeer, void *recvBuf, size_t recvBytes,
                        DType recvDtype) {
    send(group, sendPeer, sendBuf, sendBytes, sendDtype);
    recv(group, recvPeer, recvBuf, recvBytes, recvDtype);
  }
  virtual void barrier(int group) = 0;
};

/// A communicator for a world of one rank: every group must be {0}; collectives copy.
std::unique_ptr<Communicator> createLocalCommunicator();

} // namespace trainc::rt

#endif
