//===- GlooCommunicator.cpp - Collectives over Gloo's TCP transport ------===//
//
// One Gloo context per distinct member list; groups of one rank need none (collectives copy).
// Implementation notes:
//  - all_reduce out of place copies `in` to `out` first and reduces `out` in place.
//  - reduce_scatter is an all-reduce of a scratch copy of `in` followed by a copy of this rank's
//    chunk to `out` (Gloo 0.5's new-style API has no reduce-scatter; its old-style algorithm needs
//    per-rank receive counts and typed templates). It moves twice the bytes of a ring
//    reduce-scatter; `out` may alias any part of `in` (the compiler issues it in place).
//  - all_gather is in place when `in` is this rank's chunk of `out` (the compiler's form).
//  - send/recv use unbound buffers; the slot of the k-th message from rank a to rank b of a
//    context is a per-(context, peer, direction) sequence number, so both sides agree without
//    tags in the program. Each message is preceded by a 24-byte header (P2PHeader: magic,
//    sequence number, bytes, dtype) on a slot of its own; the receiver reads it first and
//    refuses a message whose size or dtype is not the one it expects (ranks running programs
//    of different plans, or a corrupted program), where Gloo would wait for the timeout.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/GlooCommunicator.h"
#include "runtime/comm/TcpStore.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <cstring>
#include <deque>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <net/if.h>
#include <netdb.h>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

namespace trainc::rt {
namespace {

/// Prefixes keys and passes the communicator's timeout to every wait (Gloo's PrefixStore uses its
/// 30 s default for the one-argument wait).
class KeyPrefixStore final : public gloo::rendezvous::Store {
public:
  KeyPrefixStore(std::string prefix, TcpStore &store, std::chrono::milliseconds timeout)
      : prefix_(std::move(prefix)), store_(store), timeout_(timeout) {}
  void set(const std::string &key, const std::vector<char> &data) override {
    store_.set(prefix_ + key, data);
  }
  std::vector<char> get(const std::string &key) override { return store_.get(prefix_ + key); }
  void wait(const std::vector<std::string> &keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override {
    std::vector<std::string> full;
    for (const std::string &k : keys)
      full.push_back(prefix_ + k);
    store_.wait(full, std::max(timeout, timeout_));
  }

private:
  std::string prefix_;
  TcpStore &store_;
  std::chrono::milliseconds timeout_;
};

/// Element-wise reduction o[i] = a[i] (op) b[i] over storage type T computed in type C.
template <typename T, typename C, C (*Load)(T), T (*Put)(C)>
void reduceLoop(void *o, const void *a, const void *b, size_t n, ReduceOp op) {
  T *O = static_cast<T *>(o);
  const T *A = static_cast<const T *>(a), *B = static_cast<const T *>(b);
  switch (op) {
  case ReduceOp::Sum:
    for (size_t i = 0; i < n; ++i)
      O[i] = Put(Load(A[i]) + Load(B[i]));
    break;
  case ReduceOp::Max:
    for (size_t i = 0; i < n; ++i)
      O[i] = Put(std::max(Load(A[i]), Load(B[i])));
    break;
  case ReduceOp::Min:
    for (size_t i = 0; i < n; ++i)
      O[i] = Put(std::min(Load(A[i]), Load(B[i])));
    break;
  }
}

template <typename T> T same(T x) { return x; }
float bf16Load(uint16_t x) {
  bf16 v;
  v.bits = x;
  return float(v);
}
uint16_t bf16Put(float f) { return bf16::fromFloat(f); }
float f16Load(gloo::float16 x) { return gloo::cpu_half2float(x); }
gloo::float16 f16Put(float f) { return gloo::cpu_float2half_rn(f); }

/// A Gloo context shared by every program group with the same members.
struct Ctx {
  std::vector<int64_t> ranks;
  int groupRank = 0;
  std::shared_ptr<gloo::Context> gloo; // null for a group of one rank
  std::map<int64_t, uint32_t> sendSeq, recvSeq;
  /// Sends posted and not yet known to be complete, oldest first: the unbound buffer and the
  /// copy of the message it sends from.
  struct PendingSend {
    /// The header's and the payload's sends (payload: null for an empty message).
    std::unique_ptr<gloo::transport::UnboundBuffer> header, ub;
    std::unique_ptr<char[]> data; // header, then the payload's copy
  };
  std::deque<PendingSend> pending;
};

/// Eager sends in flight per context before send() waits for the oldest (a pipeline stage has
/// at most a few microbatches' activations in flight).
constexpr size_t kMaxPendingSends = 256;

struct Group {
  std::string name;
  std::shared_ptr<Ctx> ctx;
};

constexpr uint8_t kP2PSlotPrefix = 0x40; // above Gloo's collective prefixes (0x01..0x08)
constexpr uint8_t kP2PHeaderSlotPrefix = 0x41;

/// What precedes every point-to-point message (on slot (kP2PHeaderSlotPrefix, seq)); the
/// receiver checks it against its own receive before posting the payload's.
struct P2PHeader {
  uint32_t magic;
  uint32_t seq;    // the sender's message number to this peer
  uint64_t bytes;  // payload size
  uint32_t dtype;  // DType of the sender's buffer (U8: untyped)
  uint32_t unused;
};
static_assert(sizeof(P2PHeader) == 24);
constexpr uint32_t kP2PMagic = 0x74703270; // "tp2p"

/// "576 bytes (144 x f32)", or "576 bytes" when untyped.
std::string describeMessage(uint64_t bytes, uint32_t dtype) {
  DType t = DType(dtype);
  if (t == DType::U8 || dtypeSize(t) == 0)
    return absl::StrCat(bytes, " bytes");
  return absl::StrCat(bytes, " bytes (", bytes / dtypeSize(t), " x ", dtypeName(t), ")");
}

/// Waits for both sends of a pending message.
bool waitPendingSend(Ctx::PendingSend &ps, std::chrono::milliseconds timeout) {
  bool ok = ps.header->waitSend(timeout);
  if (ps.ub)
    ok = ps.ub->waitSend(timeout) && ok;
  return ok;
}

class GlooCommunicator final : public Communicator {
public:
  GlooCommunicator(GlooOptions o, std::unique_ptr<TcpStore> store,
                   std::shared_ptr<gloo::transport::Device> dev)
      : o_(std::move(o)), store_(std::move(store)), dev_(std::move(dev)) {}

  ~GlooCommunicator() override {
    // Eager sends still in flight complete before the connections close (their peers receive
    // them or time out).
    // Groups with the same members share a context: each pending send is waited for once.
    for (Group &g : groups_)
      while (g.ctx && !g.ctx->pending.empty()) {
        try {
          waitPendingSend(g.ctx->pending.front(), o_.timeout);
        } catch (const std::exception &) {
        }
        g.ctx->pending.pop_front();
      }
  }

  int64_t rank() const override { return o_.rank; }
  int64_t worldSize() const override { return o_.worldSize; }

  std::string setupGroups(const std::vector<GroupSpec> &groups) override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<Group> out;
    std::map<std::vector<int64_t>, std::shared_ptr<Ctx>> fresh;
    for (const GroupSpec &g : groups) {
      std::string where = absl::StrCat("group '", g.name, "' [", absl::StrJoin(g.ranks, ","), "]");
      if (g.ranks.empty())
        return where + " has no ranks";
      std::vector<int64_t> sorted = g.ranks;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        return where + " lists a rank twice";
      if (sorted.front() < 0 || sorted.back() >= o_.worldSize)
        return absl::StrCat(where, " has a rank outside 0..", o_.worldSize - 1,
                            " (the job has ", o_.worldSize, " ranks)");
      auto me = std::find(g.ranks.begin(), g.ranks.end(), o_.rank);
      if (me == g.ranks.end())
        return absl::StrCat(where, " does not contain this rank (", o_.rank, ")");
      std::shared_ptr<Ctx> &c = contexts_[g.ranks];
      if (!c) {
        c = std::make_shared<Ctx>();
        c->ranks = g.ranks;
        c->groupRank = int(me - g.ranks.begin());
        fresh[g.ranks] = c;
      }
      out.push_back({g.name, c});
    }
    // Rendezvous in one global order (lexicographic by member list, which every member computes
    // identically): each group's members reach it after the same smaller groups, so no cycle of
    // ranks waiting for each other can form.
    for (auto &[ranks, c] : fresh) {
      if (ranks.size() == 1)
        continue;
      std::string prefix =
          absl::StrCat(o_.storePrefix, "/group/", absl::StrJoin(ranks, ","), "/");
      try {
        auto ctx = std::make_shared<gloo::rendezvous::Context>(c->groupRank, int(ranks.size()));
        ctx->setTimeout(o_.timeout);
        KeyPrefixStore ps(prefix, *store_, o_.timeout);
        ctx->connectFullMesh(ps, dev_);
        c->gloo = ctx;
      } catch (const std::exception &e) {
        for (auto &[r, _] : fresh)
          contexts_.erase(r);
        return absl::StrCat("rank ", o_.rank, ": connecting group [", absl::StrJoin(ranks, ","),
                            "] failed: ", e.what());
      }
    }
    groups_ = std::move(out);
    return "";
  }

  void allReduce(int group, const void *in, void *out, int64_t count, DType dtype,
                 ReduceOp op) override {
    std::lock_guard<std::mutex> l(mu_);
    const Group &g = get(group, "all_reduce");
    size_t bytes = size_t(count) * dtypeSize(dtype);
    if (in != out)
      std::memmove(out, in, bytes);
    if (!g.ctx->gloo || count == 0)
      return;
    guarded("all_reduce", g, [&] { reduceInPlace(g, out, count, dtype, op); });
  }

  void reduceScatter(int group, const void *in, void *out, int64_t count, DType dtype,
                     ReduceOp op) override {
    std::lock_guard<std::mutex> l(mu_);
    const Group &g = get(group, "reduce_scatter");
    size_t chunk = size_t(count) * dtypeSize(dtype);
    size_t n = g.ctx->ranks.size();
    if (!g.ctx->gloo || count == 0) {
      if (in != out)
        std::memmove(out, in, chunk);
      return;
    }
    scratch_.resize(chunk * n);
    std::memcpy(scratch_.data(), in, chunk * n);
    guarded("reduce_scatter", g,
            [&] { reduceInPlace(g, scratch_.data(), count * int64_t(n), dtype, op); });
    std::memcpy(out, scratch_.data() + chunk * size_t(g.ctx->groupRank), chunk);
  }

  void allGather(int group, const void *in, void *out, int64_t count, DType dtype) override {
    std::lock_guard<std::mutex> l(mu_);
    const Group &g = get(group, "all_gather");
    size_t chunk = size_t(count) * dtypeSize(dtype);
    size_t n = g.ctx->ranks.size();
    char *o = static_cast<char *>(out);
    char *mine = o + chunk * size_t(g.ctx->groupRank);
    if (!g.ctx->gloo || count == 0) {
      if (in != mine)
        std::memmove(mine, in, chunk);
      return;
    }
    guarded("all_gather", g, [&] {
      gloo::AllgatherOptions opts(g.ctx->gloo);
      opts.setTimeout(o_.timeout);
      const char *src = static_cast<const char *>(in);
      if (src != mine) {
        // Not the in-place form: place this rank's chunk first (via a copy when `in` overlaps
        // `out` elsewhere), then gather in place.
        if (src + chunk > o && src < o + chunk * n) {
          std::vector<char> tmp(src, src + chunk);
          std::memcpy(mine, tmp.data(), chunk);
        } else {
          std::memcpy(mine, src, chunk);
        }
      }
      opts.setOutput<char>(o, chunk * n);
      gloo::allgather(opts);
    });
  }

  void broadcast(int group, void *buf, int64_t count, DType dtype, int64_t root) override {
    std::lock_guard<std::mutex> l(mu_);
    const Group &g = get(group, "broadcast");
    if (root < 0 || root >= int64_t(g.ctx->ranks.size()))
      throw std::runtime_error(absl::StrCat("rank ", o_.rank, ": broadcast root ", root,
                                            " is outside group '", g.name, "' of ",
                                            g.ctx->ranks.size(), " ranks"));
    if (!g.ctx->gloo || count == 0)
      return;
    guarded("broadcast", g, [&] {
      gloo::BroadcastOptions opts(g.ctx->gloo);
      opts.setTimeout(o_.timeout);
      opts.setOutput<char>(static_cast<char *>(buf), size_t(count) * dtypeSize(dtype));
      opts.setRoot(int(root));
      gloo::broadcast(opts);
    });
  }

  void send(int group, int64_t peer, const void *buf, size_t bytes, DType dtype) override {
    std::lock_guard<std::mutex> l(mu_);
    const Group &g = get(group, "send");
    checkPeer(g, peer, "send");
    uint32_t seq = g.ctx->sendSeq[peer]++;
    // Eager (buffered) send, as MPI_Bsend: the message is copied and posted, and send returns
    // before the peer receives it, so that two stages sending to each other (1F1B's steady
    // state) do not wait on each other; receives block. The copy is released when the send is
    // known complete (waited for once kMaxPendingSends are in flight, and at destruction).
    guarded("send", g, [&] {
      Ctx::PendingSend ps;
      ps.data.reset(new char[sizeof(P2PHeader) + bytes]);
      P2PHeader h{kP2PMagic, seq, uint64_t(bytes), uint32_t(dtype), 0};
      std::memcpy(ps.data.get(), &h, sizeof h);
      std::memcpy(ps.data.get() + sizeof h, buf, bytes);
      ps.header = g.ctx->gloo->createUnboundBuffer(ps.data.get(), sizeof h);
      ps.header->send(int(peer), uint64_t(gloo::Slot::build(kP2PHeaderSlotPrefix, seq)));
      if (bytes > 0) {
        ps.ub = g.ctx->gloo->createUnboundBuffer(ps.data.get() + sizeof h, bytes);
        ps.ub->send(int(peer), uint64_t(gloo::Slot::build(kP2PSlotPrefix, seq)));
      }
      g.ctx->pending.push_back(std::move(ps));
      while (g.ctx->pending.size() > kMaxPendingSends) {
        if (!waitPendingSend(g.ctx->pending.front(), o_.timeout))
          throw std::runtime_error("send aborted");
        g.ctx->pending.pop_front();
      }
    });
  }

  void recv(int group, int64_t peer, void *buf, size_t bytes, DType dtype) override {
    std::lock_guard<std::mutex> l(mu_);
    const Group &g = get(group, "recv");
    checkPeer(g, peer, "recv");
    uint32_t seq = g.ctx->recvSeq[peer]++;
    P2PHeader h{};
    guarded("recv", g, [&] {
      auto hub = g.ctx->gloo->createUnboundBuffer(&h, sizeof h);
      hub->recv(int(peer), uint64_t(gloo::Slot::build(kP2PHeaderSlotPrefix, seq)));
      if (!hub->waitRecv(o_.timeout))
        throw std::runtime_error("recv aborted");
    });
    // Checked outside `guarded`: a disagreement is not a dead peer or a timeout.
    // Untyped (U8) on either side matches any dtype of the same size.
    const bool dtypesDiffer = h.dtype != uint32_t(dtype) && dtype != DType::U8 &&
                              DType(h.dtype) != DType::U8;
    if (h.magic != kP2PMagic || h.seq != seq || h.bytes != bytes || dtypesDiffer)
      throw std::runtime_error(absl::StrCat(
          "rank ", o_.rank, ": recv from rank ", g.ctx->ranks[size_t(peer)], " (peer ", peer,
          " of group '", g.name, "' [", absl::StrJoin(g.ctx->ranks, ","), "]), message ", seq,
          ": ",
          h.magic != kP2PMagic
              ? std::string("the header is not a trainc p2p header")
              : absl::StrCat("the sender sent ", describeMessage(h.bytes, h.dtype),
                             h.seq != seq ? absl::StrCat(" as its message ", h.seq) : "",
                             ", this rank expects ",
                             describeMessage(bytes, uint32_t(dtype))),
          "; the two ranks' programs disagree (programs of different plans, or a corrupted "
          "program)"));
    if (bytes == 0)
      return;
    guarded("recv", g, [&] {
      auto ub = g.ctx->gloo->createUnboundBuffer(buf, bytes);
      ub->recv(int(peer), uint64_t(gloo::Slot::build(kP2PSlotPrefix, seq)));
      if (!ub->waitRecv(o_.timeout))
        throw std::runtime_error("recv aborted");
    });
  }

  void barrier(int group) override {
    std::lock_guard<std::mutex> l(mu_);
    const Group &g = get(group, "barrier");
    if (!g.ctx->gloo)
      return;
    guarded("barrier", g, [&] {
      gloo::BarrierOptions opts(g.ctx->gloo);
      opts.setTimeout(o_.timeout);
      gloo::barrier(opts);
    });
  }

  absl::Status finish() {
    std::string base = absl::StrCat(o_.storePrefix, "/finished/");
    if (absl::Status s = store_->trySet(absl::StrCat(base, o_.rank), {'1'}); !s.ok())
      return s;
    std::vector<std::string> keys;
    for (int64_t r = 0; r < o_.worldSize; ++r)
      keys.push_back(absl::StrCat(base, r));
    if (absl::Status s = store_->tryWait(keys, o_.timeout); !s.ok())
      return s;
    base = absl::StrCat(o_.storePrefix, "/left/");
    if (absl::Status s = store_->trySet(absl::StrCat(base, o_.rank), {'1'}); !s.ok())
      return s;
    if (o_.rank != 0)
      return absl::OkStatus();
    keys.clear();
    for (int64_t r = 0; r < o_.worldSize; ++r)
      keys.push_back(absl::StrCat(base, r));
    return store_->tryWait(keys, o_.timeout);
  }

private:
  const Group &get(int group, const char *what) const {
    if (group < 0 || size_t(group) >= groups_.size())
      throw std::runtime_error(absl::StrCat("rank ", o_.rank, ": ", what, " on group index ",
                                            group, ", but setupGroups prepared ", groups_.size(),
                                            " groups"));
    return groups_[size_t(group)];
  }

  void checkPeer(const Group &g, int64_t peer, const char *what) const {
    if (peer < 0 || peer >= int64_t(g.ctx->ranks.size()) || peer == g.ctx->groupRank)
      throw std::runtime_error(absl::StrCat("rank ", o_.rank, ": ", what, " peer ", peer,
                                            " is not another rank of group '", g.name, "' (",
                                            g.ctx->ranks.size(), " ranks, this rank is ",
                                            g.ctx->groupRank, ")"));
  }

  template <typename F> void guarded(const char *what, const Group &g, F &&f) {
    try {
      f();
    } catch (const std::exception &e) {
      throw std::runtime_error(absl::StrCat("rank ", o_.rank, ": ", what, " on group '", g.name,
                                            "' [", absl::StrJoin(g.ctx->ranks, ","),
                                            "] failed (a peer rank died or timed out after ",
                                            o_.timeout.count() / 1000.0, " s?): ", e.what()));
    }
  }

  void reduceInPlace(const Group &g, void *buf, int64_t count, DType dtype, ReduceOp op) {
    gloo::AllreduceOptions opts(g.ctx->gloo);
    opts.setTimeout(o_.timeout);
    size_t n = size_t(count);
    switch (dtype) {
    case DType::F32:
      opts.setOutput(static_cast<float *>(buf), n);
      opts.setReduceFunction([op](void *o, const void *a, const void *b, size_t k) {
        reduceLoop<float, float, same<float>, same<float>>(o, a, b, k, op);
      });
      break;
    case DType::F64:
      opts.setOutput(static_cast<double *>(buf), n);
      opts.setReduceFunction([op](void *o, const void *a, const void *b, size_t k) {
        reduceLoop<double, double, same<double>, same<double>>(o, a, b, k, op);
      });
      break;
    case DType::I32:
      opts.setOutput(static_cast<int32_t *>(buf), n);
      opts.setReduceFunction([op](void *o, const void *a, const void *b, size_t k) {
        reduceLoop<int32_t, int32_t, same<int32_t>, same<int32_t>>(o, a, b, k, op);
      });
      break;
    case DType::I64:
      opts.setOutput(static_cast<int64_t *>(buf), n);
      opts.setReduceFunction([op](void *o, const void *a, const void *b, size_t k) {
        reduceLoop<int64_t, int64_t, same<int64_t>, same<int64_t>>(o, a, b, k, op);
      });
      break;
    case DType::U8:
      opts.setOutput(static_cast<uint8_t *>(buf), n);
      opts.setReduceFunction([op](void *o, const void *a, const void *b, size_t k) {
        reduceLoop<uint8_t, uint8_t, same<uint8_t>, same<uint8_t>>(o, a, b, k, op);
      });
      break;
    case DType::BF16:
      opts.setOutput(static_cast<uint16_t *>(buf), n);
      opts.setReduceFunction([op](void *o, const void *a, const void *b, size_t k) {
        reduceLoop<uint16_t, float, bf16Load, bf16Put>(o, a, b, k, op);
      });
      break;
    case DType::F16:
      opts.setOutput(static_cast<gloo::float16 *>(buf), n);
      opts.setReduceFunction([op](void *o, const void *a, const void *b, size_t k) {
        reduceLoop<gloo::float16, float, f16Load, f16Put>(o, a, b, k, op);
      });
      break;
    default:
      throw std::runtime_error(absl::StrCat("cannot reduce dtype ", dtypeName(dtype)));
    }
    gloo::allreduce(opts);
  }

  GlooOptions o_;
  std::unique_ptr<TcpStore> store_;
  std::shared_ptr<gloo::transport::Device> dev_;
  std::mutex mu_;
  std::map<std::vector<int64_t>, std::shared_ptr<Ctx>> contexts_;
  std::vector<Group> groups_;
  std::vector<char> scratch_;
};

} // namespace

absl::StatusOr<std::unique_ptr<Communicator>> createGlooCommunicator(const GlooOptions &o) {
  if (o.worldSize < 1 || o.rank < 0 || o.rank >= o.worldSize)
    return absl::InvalidArgumentError(absl::StrCat("rank ", o.rank, " is outside 0..",
                                                   o.worldSize - 1, " (world size ", o.worldSize,
                                                   ")"));
  if (o.timeout.count() <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("communicator timeout must be positive, got ", o.timeout.count(), " ms"));
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::connect(o.storeHost, o.storePort, o.token, o.timeout);
  if (!store.ok())
    return absl::Status(store.status().code(),
                        absl::StrCat("rank ", o.rank, ": ", store.status().message()));
  std::shared_ptr<gloo::transport::Device> dev;
  gloo::transport::tcp::attr attr;
  std::string what;
  // Gloo 0.5 crashes (instead of throwing) on a name it cannot resolve: check first.
  if (!o.iface.empty()) {
    attr.iface = o.iface;
    what = absl::StrCat("interface '", o.iface, "'");
    if (::if_nametoindex(o.iface.c_str()) == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", o.rank, ": cannot open Gloo's TCP transport on ", what,
          ": no such network interface (see `ip -brief address`)"));
  } else {
    attr.hostname = o.hostname.empty() ? "127.0.0.1" : o.hostname;
    what = absl::StrCat("host '", attr.hostname, "'");
    addrinfo hints{}, *ai = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (int e = ::getaddrinfo(attr.hostname.c_str(), nullptr, &hints, &ai))
      return absl::InvalidArgumentError(absl::StrCat("rank ", o.rank,
                                                     ": cannot open Gloo's TCP transport on ",
                                                     what, ": ", gai_strerror(e)));
    ::freeaddrinfo(ai);
  }
  try {
    dev = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception &e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", o.rank, ": cannot open Gloo's TCP transport on ", what, ": ", e.what()));
  }
  return std::unique_ptr<Communicator>(
      new GlooCommunicator(o, std::move(*store), std::move(dev)));
}

absl::Status finishGlooCommunicator(Communicator &comm) {
  auto *g = dynamic_cast<GlooCommunicator *>(&comm);
  if (!g)
    return absl::OkStatus();
  return g->finish();
}

} // namespace trainc::rt
