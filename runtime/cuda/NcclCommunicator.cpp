//===- NcclCommunicator.cpp - Collectives and p2p over NCCL ---------------===//
//
// One ncclComm_t per program group this rank belongs to, all created inside one
// ncclGroupStart/ncclGroupEnd so that ranks sharing several groups cannot deadlock on the order.
// Device buffers: the call enqueues on the backend's communication stream and returns (the
// executor's events order it, docs/cuda.md). send/recv run on the p2p stream, which first waits
// for the communication stream and is then joined back into it, so the executor's token event on
// the communication stream covers them. Host buffers (the trainer's control-plane scalars) are
// staged through device memory and the call synchronises. Peers and roots are group ranks, as in
// the Gloo communicator.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaInternal.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <cstring>

namespace trainc::rt {
namespace cuda {
namespace {

ncclDataType_t ncclType(DType t) {
  switch (t) {
  case DType::F64:
    return ncclFloat64;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F16:
    return ncclFloat16;
  case DType::I32:
    return ncclInt32;
  case DType::I64:
    return ncclInt64;
  case DType::U8:
    return ncclUint8;
  default:
    return ncclFloat32;
  }
}

ncclRedOp_t ncclOp(ReduceOp op) {
  return op == ReduceOp::Max ? ncclMax : op == ReduceOp::Min ? ncclMin : ncclSum;
}

class NcclCommunicator final : public Communicator {
public:
  NcclCommunicator(int64_t rank, int64_t world, const CudaStreams &s, NcclStore store,
                   std::string job)
      : rank_(rank), world_(world), s_(s), api_(*s.api), store_(std::move(store)),
        job_(std::move(job)) {}
  ~NcclCommunicator() override {
    api_.cudaStreamSynchronize(s_.comm);
    api_.cudaStreamSynchronize(s_.p2p);
    for (Group &g : groups_)
      if (g.comm)
        api_.ncclCommDestroy(g.comm);
    if (stage_)
      api_.cudaFree(stage_);
    for (cudaEvent_t e : {commDone_, p2pDone_})
      if (e)
        api_.cudaEventDestroy(e);
  }

  std::string init() {
    try {
      check(api_, api_.cudaEventCreateWithFlags(&commDone_, cudaEventDisableTiming),
            "cudaEventCreateWithFlags");
      check(api_, api_.cudaEventCreateWithFlags(&p2pDone_, cudaEventDisableTiming),
            "cudaEventCreateWithFlags");
    } catch (const std::exception &e) {
      return e.what();
    }
    return "";
  }

  int64_t rank() const override { return rank_; }
  int64_t worldSize() const override { return world_; }

  std::string setupGroups(const std::vector<GroupSpec> &groups) override {
    api_.cudaSetDevice(s_.device);
    // A second setup (another executor on this communicator) replaces the communicators; every
    // rank counts its setups alike, so the generation keeps the store keys apart.
    api_.cudaStreamSynchronize(s_.comm);
    for (Group &g : groups_)
      if (g.comm)
        api_.ncclCommDestroy(g.comm);
    const int generation = setups_++;
    groups_.assign(groups.size(), Group{});
    std::vector<ncclUniqueId> ids(groups.size());
    for (size_t i = 0; i < groups.size(); ++i) {
      const GroupSpec &gs = groups[i];
      Group &g = groups_[i];
      g.name = gs.name;
      g.size = int(gs.ranks.size());
      for (size_t r = 0; r < gs.ranks.size(); ++r)
        if (gs.ranks[r] == rank_)
          g.groupRank = int(r);
      if (g.groupRank < 0 || g.size == 1)
        continue;
      std::string key = absl::StrCat("nccl/", job_, "/", generation, "/", gs.name, "/",
                                     absl::StrJoin(gs.ranks, ","));
      if (g.groupRank == 0) {
        if (ncclResult_t r = api_.ncclGetUniqueId(&ids[i]); r != ncclSuccess)
          return absl::StrCat("NCCL: ncclGetUniqueId for group ", gs.name, " failed: ",
                              api_.ncclGetErrorString(r));
        std::vector<char> v(sizeof(ncclUniqueId));
        std::memcpy(v.data(), &ids[i], sizeof(ncclUniqueId));
        store_.set(key, v);
      } else {
        std::vector<char> v = store_.get(key);
        if (v.size() != sizeof(ncclUniqueId))
          return absl::StrCat("NCCL: the unique id of group ", gs.name, " in the store has ",
                              v.size(), " bytes, expected ", sizeof(ncclUniqueId));
        std::memcpy(&ids[i], v.data(), sizeof(ncclUniqueId));
      }
    }
    bool any = false;
    for (const Group &g : groups_)
      any = any || (g.groupRank >= 0 && g.size > 1);
    if (!any) // a world of one rank: no NCCL call (and libnccl need not be loaded)
      return "";
    if (!api_.haveNccl)
      return "NCCL: a group of several ranks, but libnccl.so.2 was not loaded";
    api_.ncclGroupStart();
    std::vector<ncclResult_t> results(groups.size(), ncclSuccess);
    for (size_t i = 0; i < groups.size(); ++i) {
      Group &g = groups_[i];
      if (g.groupRank >= 0 && g.size > 1)
        results[i] = api_.ncclCommInitRank(&g.comm, g.size, ids[i], g.groupRank);
    }
    ncclResult_t end = api_.ncclGroupEnd();
    for (size_t i = 0; i < groups.size(); ++i)
      if (results[i] != ncclSuccess || (end != ncclSuccess && groups_[i].comm))
        return absl::StrCat("NCCL: ncclCommInitRank for group ", groups[i].name, " (rank ",
                            groups_[i].groupRank, " of ", groups_[i].size, ") failed: ",
                            api_.ncclGetErrorString(results[i] != ncclSuccess ? results[i] : end));
    return "";
  }

  void allReduce(int group, const void *in, void *out, int64_t count, DType dtype,
                 ReduceOp op) override {
    Group &g = at(group, "all_reduce");
    size_t bytes = size_t(count) * dtypeSize(dtype);
    if (g.size == 1)
      return localCopy(in, out, bytes);
    Staged st(*this, in, out, bytes, bytes);
    ncclCheck(api_.ncclAllReduce(st.in, st.out, size_t(count), ncclType(dtype), ncclOp(op),
                                 g.comm, s_.comm),
              "ncclAllReduce", g);
  }
  void reduceScatter(int group, const void *in, void *out, int64_t count, DType dtype,
                     ReduceOp op) override {
    Group &g = at(group, "reduce_scatter");
    size_t bytes = size_t(count) * dtypeSize(dtype);
    if (g.size == 1)
      return localCopy(in, out, bytes);
    Staged st(*this, in, out, bytes * g.size, bytes);
    ncclCheck(api_.ncclReduceScatter(st.in, st.out, size_t(count), ncclType(dtype), ncclOp(op),
                                     g.comm, s_.comm),
              "ncclReduceScatter", g);
  }
  void allGather(int group, const void *in, void *out, int64_t count, DType dtype) override {
    Group &g = at(group, "all_gather");
    size_t bytes = size_t(count) * dtypeSize(dtype);
    if (g.size == 1)
      return localCopy(in, out, bytes);
    Staged st(*this, in, out, bytes, bytes * g.size);
    ncclCheck(api_.ncclAllGather(st.in, st.out, size_t(count), ncclType(dtype), g.comm, s_.comm),
              "ncclAllGather", g);
  }
  void broadcast(int group, void *buf, int64_t count, DType dtype, int64_t root) override {
    Group &g = at(group, "broadcast");
    if (root < 0 || root >= g.size)
      throw std::runtime_error(absl::StrCat("rank ", rank_, ": broadcast root ", root,
                                            " outside group ", g.name, " of ", g.size, " ranks"));
    if (g.size == 1)
      return;
    size_t bytes = size_t(count) * dtypeSize(dtype);
    Staged st(*this, buf, buf, bytes, bytes);
    ncclCheck(api_.ncclBroadcast(st.in, st.out, size_t(count), ncclType(dtype), int(root), g.comm,
                                 s_.comm),
              "ncclBroadcast", g);
  }
  void send(int group, int64_t peer, const void *buf, size_t bytes, DType) override {
    p2p(group, peer, const_cast<void *>(buf), bytes, true);
  }
  void recv(int group, int64_t peer, void *buf, size_t bytes, DType) override {
    p2p(group, peer, buf, bytes, false);
  }
  // One ncclGroupStart/End around the pair: an ungrouped ncclSend may wait for its peer's
  // receive, so two stages sending to each other first (1F1B's steady state) could deadlock.
  // Untested: one GPU cannot hold two NCCL ranks.
  void sendRecv(int group, int64_t sendPeer, const void *sendBuf, size_t sendBytes, DType,
                int64_t recvPeer, void *recvBuf, size_t recvBytes, DType) override {
    Group &g = at(group, "send/recv pair");
    checkPeer(g, sendPeer, "send");
    checkPeer(g, recvPeer, "recv");
    check(api_, api_.cudaEventRecord(commDone_, s_.comm), "cudaEventRecord");
    check(api_, api_.cudaStreamWaitEvent(s_.p2p, commDone_, 0), "cudaStreamWaitEvent");
    ncclCheck(api_.ncclGroupStart(), "ncclGroupStart", g);
    ncclResult_t rs = api_.ncclSend(sendBuf, sendBytes, ncclUint8, int(sendPeer), g.comm, s_.p2p);
    ncclResult_t rr = api_.ncclRecv(recvBuf, recvBytes, ncclUint8, int(recvPeer), g.comm, s_.p2p);
    ncclResult_t end = api_.ncclGroupEnd();
    ncclCheck(rs, "ncclSend", g);
    ncclCheck(rr, "ncclRecv", g);
    ncclCheck(end, "ncclGroupEnd", g);
    check(api_, api_.cudaEventRecord(p2pDone_, s_.p2p), "cudaEventRecord");
    check(api_, api_.cudaStreamWaitEvent(s_.comm, p2pDone_, 0), "cudaStreamWaitEvent");
  }
  void barrier(int group) override {
    Group &g = at(group, "barrier");
    if (g.size == 1)
      return;
    float one = 1;
    allReduce(group, &one, &one, 1, DType::F32, ReduceOp::Sum); // host buffer: synchronous
  }

private:
  struct Group {
    std::string name;
    int size = 0, groupRank = -1;
    ncclComm_t comm = nullptr;
  };

  Group &at(int group, const char *what) {
    if (group < 0 || size_t(group) >= groups_.size() || groups_[group].groupRank < 0)
      throw std::runtime_error(absl::StrCat("rank ", rank_, ": ", what, " on group ", group,
                                            ", which this rank is not a member of"));
    return groups_[group];
  }
  void ncclCheck(ncclResult_t r, const char *what, const Group &g) {
    if (r != ncclSuccess)
      throw std::runtime_error(absl::StrCat("rank ", rank_, ": ", what, " on group ", g.name,
                                            " failed: ", api_.ncclGetErrorString(r)));
  }
  bool isHost(const void *p) {
    cudaPointerAttributes a{};
    if (api_.cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      api_.cudaGetLastError();
      return true;
    }
    return a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged;
  }
  void localCopy(const void *in, void *out, size_t bytes) {
    if (in == out || bytes == 0)
      return;
    bool host = isHost(in) && isHost(out);
    if (host) {
      std::memmove(out, in, bytes);
      return;
    }
    check(api_, api_.cudaMemcpyAsync(out, in, bytes, cudaMemcpyDefault, s_.comm),
          "cudaMemcpyAsync");
  }
  void *stage(size_t bytes) {
    if (bytes > stageBytes_) {
      if (stage_)
        api_.cudaFree(stage_);
      stage_ = nullptr;
      check(api_, api_.cudaMalloc(&stage_, bytes), "cudaMalloc (NCCL staging)");
      stageBytes_ = bytes;
    }
    return stage_;
  }

  /// Device views of a call's buffers: the buffers themselves, or (host memory) a staging block
  /// holding in at offset 0 and out after it; the destructor copies out back and synchronises.
  struct Staged {
    NcclCommunicator &c;
    const void *in;
    void *out;
    void *hostOut = nullptr;
    size_t outBytes;
    Staged(NcclCommunicator &c, const void *hin, void *hout, size_t inBytes, size_t outBytes)
        : c(c), in(hin), out(hout), outBytes(outBytes) {
      if (!c.isHost(hin) && !c.isHost(hout))
        return;
      size_t inAligned = (inBytes + 255) / 256 * 256;
      char *s = static_cast<char *>(c.stage(inAligned + outBytes));
      check(c.api_, c.api_.cudaMemcpyAsync(s, hin, inBytes, cudaMemcpyDefault, c.s_.comm),
            "cudaMemcpyAsync (NCCL staging)");
      in = s;
      out = hin == hout ? static_cast<void *>(s) : s + inAligned;
      hostOut = hout;
    }
    ~Staged() noexcept(false) {
      if (!hostOut)
        return;
      check(c.api_, c.api_.cudaMemcpyAsync(hostOut, out, outBytes, cudaMemcpyDefault, c.s_.comm),
            "cudaMemcpyAsync (NCCL staging)");
      check(c.api_, c.api_.cudaStreamSynchronize(c.s_.comm), "cudaStreamSynchronize");
    }
  };

  void checkPeer(const Group &g, int64_t peer, const char *what) {
    if (peer < 0 || peer >= g.size || peer == g.groupRank)
      throw std::runtime_error(absl::StrCat("rank ", rank_, ": ", what, " peer ", peer,
                                            " is not another rank of group ", g.name, " (",
                                            g.size, " ranks)"));
  }
  void p2p(int group, int64_t peer, void *buf, size_t bytes, bool isSend) {
    Group &g = at(group, isSend ? "send" : "recv");
    checkPeer(g, peer, isSend ? "send" : "recv");
    check(api_, api_.cudaEventRecord(commDone_, s_.comm), "cudaEventRecord");
    check(api_, api_.cudaStreamWaitEvent(s_.p2p, commDone_, 0), "cudaStreamWaitEvent");
    ncclResult_t r = isSend ? api_.ncclSend(buf, bytes, ncclUint8, int(peer), g.comm, s_.p2p)
                            : api_.ncclRecv(buf, bytes, ncclUint8, int(peer), g.comm, s_.p2p);
    ncclCheck(r, isSend ? "ncclSend" : "ncclRecv", g);
    check(api_, api_.cudaEventRecord(p2pDone_, s_.p2p), "cudaEventRecord");
    check(api_, api_.cudaStreamWaitEvent(s_.comm, p2pDone_, 0), "cudaStreamWaitEvent");
  }

  int64_t rank_, world_;
  CudaStreams s_;
  const CudaApi &api_;
  NcclStore store_;
  std::string job_;
  std::vector<Group> groups_;
  int setups_ = 0;
  void *stage_ = nullptr;
  size_t stageBytes_ = 0;
  cudaEvent_t commDone_ = nullptr, p2pDone_ = nullptr;
};

} // namespace
} // namespace cuda

absl::StatusOr<std::unique_ptr<Communicator>>
createNcclCommunicator(int64_t rank, int64_t worldSize, Backend &backend, NcclStore store,
                       std::string job) {
  const cuda::CudaStreams *s = cuda::cudaStreamsOf(backend);
  if (!s)
    return absl::FailedPreconditionError(absl::StrCat(
        "NCCL needs the CUDA backend (the backend is '", std::string(backend.name()), "')"));
  if (worldSize > 1)
    if (std::string e = cuda::loadNccl(); !e.empty())
      return absl::FailedPreconditionError("NCCL: " + e);
  auto c = std::make_unique<cuda::NcclCommunicator>(rank, worldSize, *s, std::move(store),
                                                    std::move(job));
  if (std::string e = c->init(); !e.empty())
    return absl::InternalError(e);
  return std::unique_ptr<Communicator>(std::move(c));
}

} // namespace trainc::rt
