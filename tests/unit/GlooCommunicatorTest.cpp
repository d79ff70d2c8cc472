//===- GlooCommunicatorTest.cpp - TcpStore and the Gloo communicator -----===//
//
// Ranks run as threads of this process; each has its own GlooCommunicator connected to one
// TcpStoreServer on loopback (ephemeral port). Every collective is checked against values
// computed independently from the per-rank inputs.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/GlooCommunicator.h"
#include "runtime/comm/TcpStore.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <functional>
#include <thread>

using namespace trainc::rt;
using namespace std::chrono_literals;

namespace {

const char *kToken = "0123456789abcdef0123456789abcdef";

struct Job {
  std::unique_ptr<TcpStoreServer> server;
  Job() {
    auto s = TcpStoreServer::start("127.0.0.1", 0, kToken);
    EXPECT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
  }
  GlooOptions options(int64_t rank, int64_t world) const {
    GlooOptions o;
    o.rank = rank;
    o.worldSize = world;
    o.storePort = server->port();
    o.token = kToken;
    o.timeout = 20s;
    return o;
  }
  /// Runs fn(rank, comm) on `world` threads, each with its own communicator.
  void run(int64_t world, const std::function<void(int64_t, Communicator &)> &fn,
           std::chrono::milliseconds timeout = 20s) {
    std::vector<std::thread> threads;
    for (int64_t r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        GlooOptions o = options(r, world);
        o.timeout = timeout;
        auto c = createGlooCommunicator(o);
        ASSERT_TRUE(c.ok()) << c.status();
        fn(r, **c);
        EXPECT_TRUE(finishGlooCommunicator(**c).ok());
      });
    for (std::thread &t : threads)
      t.join();
  }
};

/// Exact in binary floating point, so sums do not depend on the reduction order.
double value(int64_t rank, int64_t i) { return 0.5 * double(rank + 1) + 0.25 * double(i % 13) - 1.0; }

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = i;
  return v;
}

TEST(TcpStoreTest, SetGetWait) {
  Job job;
  auto a = TcpStore::connect("127.0.0.1", job.server->port(), kToken, 5s);
  auto b = TcpStore::connect("localhost", job.server->port(), kToken, 5s);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    EXPECT_TRUE((*a)->trySet("k", {'h', 'i'}).ok());
  });
  auto v = (*b)->tryGet("k", 5s); // waits for the other client's set
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(std::string(v->begin(), v->end()), "hi");
  EXPECT_TRUE((*b)->tryWait({"k"}, 1s).ok());
  (*a)->set("empty", {});
  EXPECT_TRUE((*a)->get("empty").empty());
}

TEST(TcpStoreTest, WaitTimeoutNamesTheMissingKeys) {
  Job job;
  auto c = TcpStore::connect("127.0.0.1", job.server->port(), kToken, 5s);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->trySet("here", {'1'}).ok());
  absl::Status s = (*c)->tryWait({"here", "rank/1", "rank/2"}, 200ms);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("waiting for key(s) 'rank/1', 'rank/2'"), std::string::npos) << s;
  EXPECT_EQ(s.message().find("'here'"), std::string::npos) << s;
  auto g = (*c)->tryGet("never", 100ms);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("waiting for key 'never'"), std::string::npos) << g.status();
  // Gloo's interface throws.
  EXPECT_THROW((*c)->wait({"never"}, 100ms), std::runtime_error);
}

TEST(TcpStoreTest, WrongTokenIsRefused) {
  Job job;
  auto c = TcpStore::connect("127.0.0.1", job.server->port(), "ffffffffffffffffffffffffffffffff", 5s);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kPermissionDenied);
  std::string want = "the store at 127.0.0.1:" + std::to_string(job.server->port()) +
                     " refused the connection: wrong job token";
  EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status();
  EXPECT_EQ(job.server->refusedConnections(), 1);
  // A token that is a prefix of the right one is wrong too.
  auto p = TcpStore::connect("127.0.0.1", job.server->port(), std::string(kToken).substr(0, 16), 5s);
  EXPECT_FALSE(p.ok());
  // The communicator reports the same.
  GlooOptions o = job.options(0, 2);
  o.token = "not-the-token-of-this-job";
  auto comm = createGlooCommunicator(o);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("rank 0: " + want), std::string::npos) << comm.status();
  EXPECT_EQ(job.server->refusedConnections(), 3);
  // The right token still works afterwards.
  EXPECT_TRUE(TcpStore::connect("127.0.0.1", job.server->port(), kToken, 5s).ok());
}

/// A raw loopback connection to `port` (no handshake); -1 on failure.
int rawConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Resident set size of this process in KiB (VmRSS of /proc/self/status).
int64_t rssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stoll(line.substr(6));
  return -1;
}

// A stranger flooding the port (connections that send nothing, garbage, or a wrong token) while
// a job uses the store: the job's clients still connect and work, no thread is spent on a
// stranger, the server's memory does not grow with the number of connections, and the
// handshakes in flight stay bounded (the oldest is evicted).
TEST(TcpStoreTest, StrangersFloodingThePortDoNotStopTheJob) {
  Job job;
  const int port = job.server->port();
  auto a = TcpStore::connect("127.0.0.1", port, kToken, 5s);
  ASSERT_TRUE(a.ok()) << a.status();
  int64_t rssBefore = rssKiB();
  std::vector<int> silent;
  for (int i = 0; i < 1500; ++i) {
    int fd = rawConnect(port);
    if (fd < 0)
      break;
    if (i % 3 == 1)
      (void)!::write(fd, "GET / HTTP/1.0\r\n\r\n", 18); // not a trainc client
    if (i % 3 == 2) {
      std::string hello("TRNCST01", 8);
      hello += std::string("\x20\0\0\0", 4) + std::string(32, 'x'); // wrong token
      (void)!::write(fd, hello.data(), hello.size());
    }
    silent.push_back(fd);
    if (silent.size() > 400) { // stay well inside this process's descriptor limit
      ::close(silent.front());
      silent.erase(silent.begin());
    }
  }
  // While the flood's connections are still open, a rank of the job connects and works.
  auto b = TcpStore::connect("127.0.0.1", port, kToken, 10s);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->trySet("during-flood", {'1'}).ok());
  auto v = (*a)->tryGet("during-flood", 5s);
  ASSERT_TRUE(v.ok()) << v.status();
  // Only the two clients of the job have threads; the strangers were refused or evicted.
  EXPECT_LE(job.server->connectionThreads(), 2);
  EXPECT_GE(job.server->refusedConnections(), 1000 - 256);
  for (int fd : silent)
    ::close(fd);
  int64_t growth = rssKiB() - rssBefore;
  EXPECT_LT(growth, 8 * 1024) << "server RSS grew by " << growth << " KiB";
}

// A job client's thread is joined once its connection closes, so connections that come and go
// (ranks, probes) do not accumulate threads.
TEST(TcpStoreTest, ClosedConnectionsAreReaped) {
  Job job;
  for (int i = 0; i < 50; ++i) {
    auto c = TcpStore::connect("127.0.0.1", job.server->port(), kToken, 5s);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE((*c)->trySet("k" + std::to_string(i), {'1'}).ok());
  }
  // Each finished client thread wakes the accept loop, which joins it; only the connection
  // still open keeps a thread. Up to 10 s: the loop may be slow to run on a loaded machine.
  auto last = TcpStore::connect("127.0.0.1", job.server->port(), kToken, 5s);
  ASSERT_TRUE(last.ok());
  for (int i = 0; i < 1000 && job.server->connectionThreads() > 1; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(job.server->connectionThreads(), 1);
}

// A client whose connection was cut reconnects for its next request; a store that is gone is
// reported as lost after the reconnect fails.
TEST(TcpStoreTest, LostConnectionReconnectsOrSaysWhatWasLost) {
  auto job = std::make_unique<Job>();
  const int port = job->server->port();
  auto c = TcpStore::connect("127.0.0.1", port, kToken, 2s);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->trySet("a", {'1'}).ok());
  job.reset(); // the launcher's store goes away
  absl::Status s = (*c)->trySet("b", {'2'});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("lost the connection to the store at 127.0.0.1:" +
                             std::to_string(port) + " and could not reconnect"),
            std::string::npos)
      << s;
  // A new server on the same port (a restarted launcher): the next request reconnects.
  auto again = TcpStoreServer::start("127.0.0.1", port, kToken);
  if (!again.ok())
    GTEST_SKIP() << "port " << port << " was taken in between: " << again.status();
  EXPECT_TRUE((*c)->trySet("c", {'3'}).ok());
  auto v = (*c)->tryGet("c", 1s);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(std::string(v->begin(), v->end()), "3");
}

TEST(TcpStoreTest, UnreachableStoreIsNamed) {
  int port;
  {
    Job job;
    port = job.server->port();
  } // stopped: nothing listens there now
  auto c = TcpStore::connect("127.0.0.1", port, kToken, 300ms);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("cannot reach the store at 127.0.0.1:" +
                                      std::to_string(port) + " within 0.3 s"),
            std::string::npos)
      << c.status();
  auto h = TcpStore::connect("no-such-host.invalid", port, kToken, 300ms);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("cannot resolve store host 'no-such-host.invalid'"),
            std::string::npos)
      << h.status();
}

TEST(TcpStoreTest, TokenChecks) {
  EXPECT_TRUE(checkJobToken(kToken, "TRAINC_JOB_TOKEN").ok());
  absl::Status s = checkJobToken("short", "TRAINC_JOB_TOKEN");
  EXPECT_NE(s.message().find("TRAINC_JOB_TOKEN must hold 16 to 256 characters"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("got 5 characters"), std::string::npos) << s;
  EXPECT_FALSE(checkJobToken("0123456789 abcdef0", "X").ok());
  auto t = generateJobToken();
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->size(), 32u);
  EXPECT_TRUE(checkJobToken(*t, "generated").ok());
  EXPECT_NE(*t, *generateJobToken());
}

TEST(TcpStoreTest, ServerBindErrorsNameTheAddress) {
  Job job;
  auto s = TcpStoreServer::start("127.0.0.1", job.server->port(), kToken);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("cannot listen on 127.0.0.1:" +
                                      std::to_string(job.server->port())),
            std::string::npos)
      << s.status();
  EXPECT_FALSE(TcpStoreServer::start("127.0.0.1", 70000, kToken).ok());
}

/// Every collective over the group of all ranks, in place and out of place.
void checkCollectives(int64_t world) {
  Job job;
  job.run(world, [&](int64_t r, Communicator &c) {
    ASSERT_EQ(c.setupGroups({{"dp", iota(world)}}), "");
    const int64_t n = 37;
    // all_reduce f32 sum, out of place and in place; max and min.
    std::vector<float> in(n), out(n);
    for (int64_t i = 0; i < n; ++i)
      in[size_t(i)] = float(value(r, i));
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      c.allReduce(0, in.data(), out.data(), n, DType::F32, op);
      for (int64_t i = 0; i < n; ++i) {
        double want = op == ReduceOp::Sum ? 0 : value(0, i);
        for (int64_t q = 0; q < world; ++q)
          want = op == ReduceOp::Sum   ? want + value(q, i)
                 : op == ReduceOp::Max ? std::max(want, value(q, i))
                                       : std::min(want, value(q, i));
        EXPECT_EQ(out[size_t(i)], float(want)) << "rank " << r << " op " << int(op) << " i " << i;
      }
    }
    std::vector<float> inplace = in;
    c.allReduce(0, inplace.data(), inplace.data(), n, DType::F32, ReduceOp::Sum);
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int64_t q = 0; q < world; ++q)
        want += value(q, i);
      EXPECT_EQ(inplace[size_t(i)], float(want));
    }
    // f64, i64, bf16 sums.
    std::vector<double> d(n);
    std::vector<int64_t> l(n);
    std::vector<uint16_t> h(n);
    for (int64_t i = 0; i < n; ++i) {
      d[size_t(i)] = value(r, i) / 3.0;
      l[size_t(i)] = (int64_t(1) << 40) * (r + 1) + i;
      h[size_t(i)] = bf16(float(value(r, i))).bits;
    }
    c.allReduce(0, d.data(), d.data(), n, DType::F64, ReduceOp::Sum);
    c.allReduce(0, l.data(), l.data(), n, DType::I64, ReduceOp::Sum);
    c.allReduce(0, h.data(), h.data(), n, DType::BF16, ReduceOp::Sum);
    for (int64_t i = 0; i < n; ++i) {
      double wd = 0, wh = 0;
      int64_t wl = 0;
      for (int64_t q = 0; q < world; ++q) {
        wd += value(q, i) / 3.0;
        wl += (int64_t(1) << 40) * (q + 1) + i;
        wh += value(q, i);
      }
      EXPECT_NEAR(d[size_t(i)], wd, 1e-14);
      EXPECT_EQ(l[size_t(i)], wl);
      bf16 got;
      got.bits = h[size_t(i)];
      EXPECT_EQ(float(got), float(wh)) << i; // small exact values: bf16 represents them
    }
    // reduce_scatter: out of place, and in place (out = this rank's chunk of in).
    const int64_t chunk = 5;
    std::vector<double> full(size_t(chunk * world)), mine(chunk);
    for (int64_t i = 0; i < chunk * world; ++i)
      full[size_t(i)] = value(r, i);
    std::vector<double> fullCopy = full;
    c.reduceScatter(0, full.data(), mine.data(), chunk, DType::F64, ReduceOp::Sum);
    EXPECT_EQ(full, fullCopy) << "reduce_scatter must not modify its input";
    c.reduceScatter(0, full.data(), full.data() + r * chunk, chunk, DType::F64, ReduceOp::Sum);
    for (int64_t i = 0; i < chunk; ++i) {
      double want = 0;
      for (int64_t q = 0; q < world; ++q)
        want += value(q, r * chunk + i);
      EXPECT_EQ(mine[size_t(i)], want);
      EXPECT_EQ(full[size_t(r * chunk + i)], want);
    }
    // all_gather: out of place, and in place (in = this rank's chunk of out).
    std::vector<float> piece(chunk), gathered(size_t(chunk * world), -7.f),
        gatheredInPlace(size_t(chunk * world), -7.f);
    for (int64_t i = 0; i < chunk; ++i)
      piece[size_t(i)] = gatheredInPlace[size_t(r * chunk + i)] = float(value(r, i));
    c.allGather(0, piece.data(), gathered.data(), chunk, DType::F32);
    c.allGather(0, gatheredInPlace.data() + r * chunk, gatheredInPlace.data(), chunk, DType::F32);
    for (int64_t q = 0; q < world; ++q)
      for (int64_t i = 0; i < chunk; ++i) {
        EXPECT_EQ(gathered[size_t(q * chunk + i)], float(value(q, i)));
        EXPECT_EQ(gatheredInPlace[size_t(q * chunk + i)], float(value(q, i)));
      }
    // broadcast from group rank 1 (the last rank when world is 2).
    std::vector<int32_t> b(9);
    for (int i = 0; i < 9; ++i)
      b[size_t(i)] = int32_t(100 * r + i);
    c.broadcast(0, b.data(), 9, DType::I32, 1);
    for (int i = 0; i < 9; ++i)
      EXPECT_EQ(b[size_t(i)], 100 + i);
    // send/recv around the ring, twice (sequence numbers keep messages apart).
    for (int round = 0; round < 2; ++round) {
      std::vector<int64_t> msg(3, r * 10 + round), got(3, -1);
      int64_t next = (r + 1) % world, prev = (r + world - 1) % world;
      if (r % 2 == 0) {
        c.send(0, next, msg.data(), sizeof(int64_t) * 3);
        c.recv(0, prev, got.data(), sizeof(int64_t) * 3);
      } else {
        c.recv(0, prev, got.data(), sizeof(int64_t) * 3);
        c.send(0, next, msg.data(), sizeof(int64_t) * 3);
      }
      EXPECT_EQ(got, std::vector<int64_t>(3, prev * 10 + round));
    }
    c.barrier(0);
  });
}

TEST(GlooCommunicatorTest, CollectivesTwoRanks) { checkCollectives(2); }
TEST(GlooCommunicatorTest, CollectivesThreeRanks) { checkCollectives(3); }
TEST(GlooCommunicatorTest, CollectivesFourRanks) { checkCollectives(4); }

TEST(GlooCommunicatorTest, SubsetGroupsInDifferentProgramOrder) {
  Job job;
  job.run(4, [&](int64_t r, Communicator &c) {
    // Programs list their groups in different orders; setup must not deadlock.
    std::vector<int64_t> pair = r % 2 == 0 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{1, 3};
    std::vector<GroupSpec> groups = {{"dp", pair}, {"world", iota(4)}, {"self", {r}}};
    if (r >= 2)
      std::reverse(groups.begin(), groups.end());
    ASSERT_EQ(c.setupGroups(groups), "");
    int dp = r >= 2 ? 2 : 0, world = 1, self = r >= 2 ? 0 : 2;
    double x = double(r + 1), y = double(10 * (r + 1));
    c.allReduce(dp, &x, &x, 1, DType::F64, ReduceOp::Sum);
    c.allReduce(world, &y, &y, 1, DType::F64, ReduceOp::Sum);
    EXPECT_EQ(x, r % 2 == 0 ? 1.0 + 3.0 : 2.0 + 4.0);
    EXPECT_EQ(y, 100.0);
    // all_gather in place over the pair: group rank = position in the pair.
    float g[2] = {-1, -1};
    int64_t gr = r / 2;
    g[gr] = float(r);
    c.allGather(dp, &g[gr], g, 1, DType::F32);
    EXPECT_EQ(g[0], float(pair[0]));
    EXPECT_EQ(g[1], float(pair[1]));
    // reduce_scatter in place over the pair.
    double rs[2] = {double(r), double(r * 100)};
    c.reduceScatter(dp, rs, &rs[gr], 1, DType::F64, ReduceOp::Sum);
    EXPECT_EQ(rs[gr], gr == 0 ? double(pair[0] + pair[1]) : double(100 * (pair[0] + pair[1])));
    // point-to-point inside the pair: group ranks 0 -> 1.
    int64_t v = r;
    if (gr == 0)
      c.send(dp, 1, &v, sizeof(v));
    else
      c.recv(dp, 0, &v, sizeof(v));
    EXPECT_EQ(v, pair[0]);
    // A group of one copies.
    float s = 3, t = 0;
    c.allReduce(self, &s, &t, 1, DType::F32, ReduceOp::Sum);
    EXPECT_EQ(t, 3.f);
    // Set up again with the same groups: contexts are reused, no new rendezvous.
    ASSERT_EQ(c.setupGroups(groups), "");
    c.barrier(world);
  });
}

// Sends are eager (buffered): two ranks that send to each other before receiving do not wait on
// each other (1F1B's steady state, where stage s sends an activation forward while stage s + 1
// sends a gradient back), and the sender may reuse its buffer as soon as send returns. With a
// short timeout, a rendezvous send would fail this test instead of passing.
TEST(GlooCommunicatorTest, CrossingSendsDoNotWaitForTheReceiver) {
  Job job;
  job.run(
      2,
      [&](int64_t r, Communicator &c) {
        ASSERT_EQ(c.setupGroups({{"pp", {0, 1}}}), "");
        const int64_t peer = 1 - r;
        for (int k = 0; k < 3; ++k) {
          std::vector<float> out(1000, float(10 * r + k)), in(1000, -1);
          c.send(0, peer, out.data(), out.size() * sizeof(float));
          std::fill(out.begin(), out.end(), -7.f); // reused at once: the message was copied
          c.recv(0, peer, in.data(), in.size() * sizeof(float));
          EXPECT_EQ(in.front(), float(10 * peer + k));
          EXPECT_EQ(in.back(), float(10 * peer + k));
        }
      },
      5s);
}

// Every message carries a header (size, dtype, sequence number): a receive that does not match
// the send is refused at once with both sides named, not after the timeout, and the messages
// after it still match (rank 0 sends five, rank 1's second to fourth expect other sizes or
// another dtype of the same size).
TEST(GlooCommunicatorTest, MismatchedPointToPointIsRefusedAtOnce) {
  Job job;
  job.run(
      2,
      [&](int64_t r, Communicator &c) {
        ASSERT_EQ(c.setupGroups({{"pp", {0, 1}}}), "");
        std::vector<float> f(16, float(r + 1));
        if (r == 0) {
          c.send(0, 1, f.data(), 8 * sizeof(float));
          c.send(0, 1, f.data(), 16 * sizeof(float));
          c.send(0, 1, f.data(), 0);
          c.send(0, 1, f.data(), 4 * sizeof(float), DType::F32);
          c.send(0, 1, f.data(), 2 * sizeof(float), DType::F32);
          return;
        }
        c.recv(0, 0, f.data(), 8 * sizeof(float));
        EXPECT_EQ(f[7], 1.f);
        auto error = [&](size_t bytes, DType t = DType::U8) -> std::string {
          try {
            c.recv(0, 0, f.data(), bytes, t);
          } catch (const std::exception &e) {
            return e.what();
          }
          return "no error";
        };
        EXPECT_EQ(error(8 * sizeof(float)),
                  "rank 1: recv from rank 0 (peer 0 of group 'pp' [0,1]), message 1: the sender "
                  "sent 64 bytes, this rank expects 32 bytes; the two ranks' programs disagree "
                  "(programs of different plans, or a corrupted program)");
        // An empty send against a non-empty receive (without the header: a wait until timeout).
        EXPECT_EQ(error(4),
                  "rank 1: recv from rank 0 (peer 0 of group 'pp' [0,1]), message 2: the sender "
                  "sent 0 bytes, this rank expects 4 bytes; the two ranks' programs disagree "
                  "(programs of different plans, or a corrupted program)");
        // Same size, another dtype (an fp32 plan's activation met by a bf16 plan of twice the
        // micro-batch size).
        EXPECT_EQ(error(16, DType::BF16),
                  "rank 1: recv from rank 0 (peer 0 of group 'pp' [0,1]), message 3: the sender "
                  "sent 16 bytes (4 x f32), this rank expects 16 bytes (8 x bf16); the two "
                  "ranks' programs disagree (programs of different plans, or a corrupted "
                  "program)");
        f.assign(16, -1);
        c.recv(0, 0, f.data(), 2 * sizeof(float), DType::F32);
        EXPECT_EQ(f[1], 1.f);
        EXPECT_EQ(f[2], -1.f);
      },
      3s);
}

TEST(GlooCommunicatorTest, GroupErrors) {
  Job job;
  auto c = createGlooCommunicator(job.options(1, 4));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->setupGroups({{"dp", {0, 2}}}), "group 'dp' [0,2] does not contain this rank (1)");
  EXPECT_EQ((*c)->setupGroups({{"tp", {1, 4}}}),
            "group 'tp' [1,4] has a rank outside 0..3 (the job has 4 ranks)");
  EXPECT_EQ((*c)->setupGroups({{"pp", {1, 1}}}), "group 'pp' [1,1] lists a rank twice");
  EXPECT_FALSE(createGlooCommunicator(job.options(4, 4)).ok());
  GlooOptions bad = job.options(0, 2);
  bad.hostname = "no-such-host.invalid";
  auto d = createGlooCommunicator(bad);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("cannot open Gloo's TCP transport on host "
                                      "'no-such-host.invalid'"),
            std::string::npos)
      << d.status();
  GlooOptions badIface = job.options(0, 2);
  badIface.iface = "nosuchif9";
  auto e = createGlooCommunicator(badIface);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("cannot open Gloo's TCP transport on interface 'nosuchif9': "
                                      "no such network interface"),
            std::string::npos)
      << e.status();
}

TEST(GlooCommunicatorTest, MissingPeerTimesOutNamingTheKeys) {
  Job job;
  GlooOptions o = job.options(0, 2);
  o.timeout = 500ms;
  auto c = createGlooCommunicator(o);
  ASSERT_TRUE(c.ok());
  std::string e = (*c)->setupGroups({{"dp", {0, 1}}});
  EXPECT_NE(e.find("connecting group [0,1] failed"), std::string::npos) << e;
  EXPECT_NE(e.find("trainc/group/0,1/1"), std::string::npos) << e;
}

TEST(GlooCommunicatorTest, DeadPeerRaisesInsteadOfHanging) {
  Job job;
  std::atomic<bool> raised{false};
  std::string message;
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      GlooOptions o = job.options(r, 2);
      o.timeout = 5s;
      auto c = createGlooCommunicator(o);
      ASSERT_TRUE(c.ok());
      ASSERT_EQ((*c)->setupGroups({{"dp", {0, 1}}}), "");
      float x = 1;
      (*c)->allReduce(0, &x, &x, 1, DType::F32, ReduceOp::Sum);
      if (r == 1)
        return; // "dies": its connections close
      std::this_thread::sleep_for(200ms);
      std::vector<float> big(1 << 16, 1.f);
      auto t0 = std::chrono::steady_clock::now();
      try {
        (*c)->allReduce(0, big.data(), big.data(), int64_t(big.size()), DType::F32,
                        ReduceOp::Sum);
      } catch (const std::runtime_error &e) {
        raised = true;
        message = e.what();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 6s);
    });
  for (std::thread &t : threads)
    t.join();
  EXPECT_TRUE(raised);
  EXPECT_NE(message.find("rank 0: all_reduce on group 'dp' [0,1] failed"), std::string::npos)
      << message;
}

TEST(GlooCommunicatorTest, SilentPeerTimesOut) {
  Job job;
  std::string message;
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      GlooOptions o = job.options(r, 2);
      o.timeout = 1s;
      auto c = createGlooCommunicator(o);
      ASSERT_TRUE(c.ok());
      ASSERT_EQ((*c)->setupGroups({{"dp", {0, 1}}}), "");
      if (r == 1) { // alive, connected, but never joins the collective
        std::this_thread::sleep_for(3s);
        return;
      }
      auto t0 = std::chrono::steady_clock::now();
      float x = 1;
      try {
        (*c)->allReduce(0, &x, &x, 1, DType::F32, ReduceOp::Sum);
      } catch (const std::runtime_error &e) {
        message = e.what();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 2500ms);
    });
  for (std::thread &t : threads)
    t.join();
  EXPECT_NE(message.find("rank 0: all_reduce on group 'dp' [0,1] failed"), std::string::npos)
      << message;
}

} // namespace
