//===- trainrun.cpp - The launcher: run a compiled plan -------------------===//
//
//   trainrun [--nproc N] [--nnodes M --node-rank K --master-addr A --master-port P]
//            [--log-all-ranks] [--comm-timeout SECONDS] [--comm-iface IFACE]
//            PLAN_DIR [-- RUNTIME_FLAGS...]
//
// Runs the plan's rank programs with Megatron-style run-time flags (data, iterations, learning-rate
// values, intervals, seed); their defaults come from the `trainc compile` command line recorded in
// the plan. Three modes:
//
//  * One rank (no --nproc or --nproc 1, no rank variables): the trainer runs in this process with
//    the local communicator.
//  * Spawn (--nproc N, N > 1, or --nnodes > 1): this process hosts the job's TcpStore (loopback,
//    ephemeral port, fresh random token: two trainruns never collide) and re-executes itself once
//    per local rank with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//    and TRAINC_JOB_TOKEN set. With --nnodes M, node K runs ranks K*N .. K*N+N-1, node 0 hosts the
//    store at --master-addr:--master-port, and every node must get the same TRAINC_JOB_TOKEN.
//    Output lines are prefixed "[rank r] "; only rank 0's stdout (the training log) is shown unless
//    --log-all-ranks; every rank's stderr is shown. SIGTERM/SIGINT are forwarded to the ranks.
//    When a rank fails, the others get SIGTERM, then SIGKILL 5 s later, and trainrun exits 1
//    naming the rank and its last stderr line.
//  * Env-var (RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS set, no --nproc): runs that one rank,
//    as under torchrun or srun. MASTER_ADDR/MASTER_PORT name the store, which rank 0 hosts;
//    TRAINC_JOB_TOKEN must be set (the same secret on every rank) when WORLD_SIZE > 1.
//
// Test-only knob: TRAINC_TEST_FAIL_RANK=r makes rank r fail right after joining the job.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/GlooCommunicator.h"
#include "runtime/comm/TcpStore.h"
#include "runtime/control/Trainer.h"
#include "runtime/core/Program.h"
#include "runtime/cuda/CudaBackend.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <map>
#include <netdb.h>
#include <optional>
#include <poll.h>
#include <string>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char **environ;

using namespace trainc;

namespace {

/// The launcher's own flags (before PLAN_DIR), for --help and the unknown-option hint.
struct LauncherFlag {
  const char *name, *value, *dflt, *help;
};
const LauncherFlag kLauncherFlags[] = {
    {"--nproc", "N", "1", "ranks to start on this node (N > 1 spawns processes)"},
    {"--nnodes", "M", "1", "hosts of the job"},
    {"--node-rank", "K", "0", "this host's index (needed with --nnodes > 1)"},
    {"--master-addr", "HOST", "127.0.0.1", "the host of node 0, which hosts the rendezvous store"},
    {"--master-port", "P", "ephemeral", "the store's port on node 0"},
    {"--log-all-ranks", "", "off", "show every rank's log, not only rank 0's"},
    {"--comm-timeout", "SECONDS", "300", "collective timeout"},
    {"--distributed-timeout-minutes", "M", "5",
     "Megatron's name for the collective timeout (--comm-timeout wins; also after --)"},
    {"--comm-iface", "IFACE", "TRAINC_GLOO_IFACE or the route to the store", "Gloo's interface"},
    {"--backend", "{cpu,cuda}", "TRAINC_BACKEND, else cuda when a GPU is present",
     "the compute backend (docs/cuda.md)"},
    {"-h, --help", "", "", "this text"},
};

/// The full help: the launcher's flags, then every run-time flag of the trainer's table
/// (rt::control::runFlags) by group with its default.
void printHelp(std::ostream &out) {
  out << "usage: trainrun [--nproc N] [--nnodes M --node-rank K --master-addr HOST --master-port "
         "P]\n"
         "                [--log-all-ranks] [--comm-timeout SECONDS] [--comm-iface IFACE]\n"
         "                [--backend cpu|cuda] PLAN_DIR [-- RUNTIME_FLAGS...]\n"
         "Without --nproc, RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT (or SLURM_PROCID/\n"
         "SLURM_NTASKS/SLURM_LOCALID) run one rank of a job started by an outer launcher; every\n"
         "node of a multi-node job needs the same TRAINC_JOB_TOKEN.\n\nlauncher (before PLAN_DIR):\n";
  for (const LauncherFlag &f : kLauncherFlags) {
    std::string head = std::string("  ") + f.name + (*f.value ? " " : "") + f.value;
    head.resize(std::max<size_t>(head.size() + 2, 46), ' ');
    out << head << (*f.dflt ? absl::StrCat("default: ", f.dflt, "  ") : "") << f.help << "\n";
  }
  out << "\nrun-time flags (after --; Megatron's names; all run-time). A plan records the values "
         "its\ntrainc compile command gave ([run-time] in trainc compile --help): those are the "
         "defaults\nthen, and these flags override them.\n"
      << rt::control::runFlagHelp();
}

int usage(const std::string &msg = "") {
  if (!msg.empty())
    std::cerr << "trainrun: " << msg << "\n";
  std::cerr << "usage: trainrun [launcher flags] PLAN_DIR [-- RUNTIME_FLAGS...]   (trainrun --help "
               "lists every flag)\n";
  return 2;
}

int fail(const std::string &msg) {
  std::cerr << "trainrun: error: " << msg << "\n";
  return 1;
}

/// Parses a decimal integer in [lo, hi]; nullopt when malformed or out of range.
std::optional<int64_t> parseInt(const std::string &s, int64_t lo, int64_t hi) {
  if (s.empty())
    return std::nullopt;
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || *end || v < lo || v > hi)
    return std::nullopt;
  return int64_t(v);
}

const char *env(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? v : nullptr;
}

struct Flags {
  int64_t nproc = 1;
  bool nprocGiven = false;
  int64_t nnodes = 1, nodeRank = 0;
  bool nodeRankGiven = false;
  std::string masterAddr;
  int64_t masterPort = 0;
  bool logAllRanks = false;
  double commTimeout = 300;
  bool commTimeoutGiven = false;
  double distributedTimeoutMinutes = 0; // Megatron's name for the collective timeout
  bool distributedTimeoutGiven = false;
  std::string commIface;
  std::string backend; // --backend: "cpu", "cuda", or "" (cuda when a device is present)
  std::string planDir;
  std::vector<std::string> runtimeArgs;
};

/// Parses --distributed-timeout-minutes' value into `f`; returns an error message or "".
std::string distributedTimeout(Flags &f, const std::optional<std::string> &v) {
  char *end = nullptr;
  double m = v ? std::strtod(v->c_str(), &end) : 0;
  if (!v || v->empty() || *end || !(m > 0) || m * 60 > 1e6)
    return absl::StrCat("--distributed-timeout-minutes expects a positive number of minutes "
                        "(at most 16666), got '", v ? *v : "", "'");
  f.distributedTimeoutMinutes = m;
  f.distributedTimeoutGiven = true;
  return "";
}


/// Reads the plan's rank program and checks that it was compiled for `world` ranks.
absl::StatusOr<schema::Program> readRankProgram(const std::string &planDir, int64_t rank,
                                                int64_t world, const std::string &how) {
  std::string path = absl::StrCat(planDir, "/rank", rank, ".pb");
  absl::StatusOr<schema::Program> p = rt::readProgramFile(path);
  if (!p.ok())
    return p.status();
  if (p->mesh().world_size() != world)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the plan has ", p->mesh().world_size(),
        p->mesh().world_size() == 1 ? " rank" : " ranks", " but the job has ", world, " (", how,
        ")"));
  return p;
}

//===----------------------------------------------------------------------===//
// Running one rank
//===----------------------------------------------------------------------===//

/// Exceptions that escape on the communication thread (a peer died, a collective timed out) end
/// the rank with one clear line instead of std::terminate's abort.
[[noreturn]] void onTerminate() {
  std::string what = "unknown error";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception &x) {
      what = x.what();
    } catch (...) {
    }
  }
  std::string line = "trainrun: error: " + what + "\n";
  (void)!::write(2, line.data(), line.size());
  ::_exit(1);
}

/// The rendezvous store of a multi-rank job, for the NCCL communicator's unique ids.
struct StoreInfo {
  std::string host;
  int port = 0;
  std::string token;
  std::chrono::milliseconds timeout{0};
};

/// The backend --backend names (default: TRAINC_BACKEND, else cuda when a device is present) and,
/// for cuda, the NCCL
/// communicator that replaces `comm` for the trainer (device buffers). The device is LOCAL_RANK
/// (SLURM_LOCALID), 0 when unset. A multi-rank plan whose pipeline transfers can deadlock under
/// NCCL (the compile's metadata "nccl.p2p_deadlock", docs/cuda.md) is refused for cuda before any
/// device or NCCL call.
std::string makeBackend(const Flags &f, const schema::Program &program, int64_t rank,
                        int64_t world, const StoreInfo *store,
                        std::unique_ptr<rt::Backend> &backend,
                        std::unique_ptr<rt::TcpStore> &ncclStore,
                        std::unique_ptr<rt::Communicator> &deviceComm) {
  std::string which = f.backend;
  if (which.empty() && env("TRAINC_BACKEND")) {
    which = env("TRAINC_BACKEND");
    if (which != "cpu" && which != "cuda")
      return absl::StrCat("TRAINC_BACKEND expects cpu or cuda, got '", which, "'");
  }
  if (which.empty())
    which = rt::cudaBackendAvailable() ? "cuda" : "cpu";
  if (which == "cpu")
    return "";
  if (auto it = program.metadata().find("nccl.p2p_deadlock");
      it != program.metadata().end() && world > 1)
    return absl::StrCat("--backend cuda: this plan's pipeline transfers can deadlock under NCCL, "
                        "whose sends wait for their receives (the compile found: ",
                        it->second,
                        "); run it with --backend cpu (docs/cuda.md, \"Pipeline transfers under "
                        "NCCL\")");
  const char *lr = env("LOCAL_RANK") ? env("LOCAL_RANK") : env("SLURM_LOCALID");
  int device = lr ? int(parseInt(lr, 0, 1 << 20).value_or(0)) : 0;
  absl::StatusOr<std::unique_ptr<rt::Backend>> b = rt::createCudaBackend(device);
  if (!b.ok())
    return std::string(b.status().message());
  backend = std::move(*b);
  rt::NcclStore ns;
  if (world > 1) {
    if (!store)
      return "--backend cuda with several ranks needs the rendezvous store";
    auto s = rt::TcpStore::connect(store->host, store->port, store->token, store->timeout);
    if (!s.ok())
      return absl::StrCat("NCCL rendezvous: ", s.status().message());
    ncclStore = std::move(*s);
    rt::TcpStore *st = ncclStore.get();
    ns.set = [st](const std::string &k, const std::vector<char> &v) { st->set(k, v); };
    ns.get = [st](const std::string &k) { return st->get(k); };
  }
  auto c = rt::createNcclCommunicator(rank, world, *backend, std::move(ns));
  if (!c.ok())
    return std::string(c.status().message());
  deviceComm = std::move(*c);
  return "";
}

/// Runs the training loop of one rank (comm null = the single-rank local communicator).
int runTrainer(const Flags &f, rt::Communicator *comm, std::ostream &log, const std::string &how,
               const StoreInfo *store = nullptr) {
  int64_t rank = comm ? comm->rank() : 0, world = comm ? comm->worldSize() : 1;
  absl::StatusOr<schema::Program> program = readRankProgram(f.planDir, rank, world, how);
  if (!program.ok())
    return fail(std::string(program.status().message()));
  absl::StatusOr<rt::control::RunOptions> opts =
      rt::control::parseRunOptions(*program, f.runtimeArgs);
  if (!opts.ok())
    return fail(std::string(opts.status().message()));
  std::unique_ptr<rt::Backend> backend;
  std::unique_ptr<rt::TcpStore> ncclStore;
  std::unique_ptr<rt::Communicator> deviceComm;
  if (std::string e = makeBackend(f, *program, rank, world, store, backend, ncclStore, deviceComm);
      !e.empty())
    return fail(e);
  absl::StatusOr<std::unique_ptr<rt::control::Trainer>> trainer = rt::control::Trainer::create(
      f.planDir, *opts, log, deviceComm ? deviceComm.get() : comm, backend.get());
  if (!trainer.ok()) {
    log << "\n" << std::flush;
    return fail(std::string(trainer.status().message()));
  }
  if (absl::Status s = (*trainer)->train(); !s.ok())
    return fail(std::string(s.message()));
  // Training is complete and its outputs are written: a store lost now (the launcher gone, a
  // network blip that outlived the reconnect) does not fail the job, it is reported.
  if (comm)
    if (absl::Status s = rt::finishGlooCommunicator(*comm); !s.ok())
      std::cerr << "trainrun: warning: training finished, but the end-of-job handshake failed: "
          << s.message() << "\n" << std::flush;
  return 0;
}

bool isLoopback(const std::string &host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

/// The local address on the route to `host` (what peers on other machines can reach), found by
/// connecting a UDP socket (no packet is sent). Empty when it cannot be determined.
std::string localAddressToward(const std::string &host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo *ai = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &ai) != 0 || !ai)
    return "";
  std::string out;
  int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    char buf[INET6_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &len) == 0) {
      if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in *>(&ss)->sin_addr, buf, sizeof(buf));
      else
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_addr, buf, sizeof(buf));
      out = buf;
    }
  }
  if (fd >= 0)
    ::close(fd);
  freeaddrinfo(ai);
  return out;
}

/// Env-var mode: one rank of a job whose processes an outer launcher (or trainrun's spawn mode)
/// started.
int runRankFromEnv(const Flags &f) {
  // A write to a peer that died must be an error naming the collective, not a silent death of
  // this rank by SIGPIPE (which would also hide which rank failed first).
  std::signal(SIGPIPE, SIG_IGN);
  const bool torch = env("RANK") || env("WORLD_SIZE");
  const char *rankVar = torch ? "RANK" : "SLURM_PROCID";
  const char *worldVar = torch ? "WORLD_SIZE" : "SLURM_NTASKS";
  const char *localVar = torch ? "LOCAL_RANK" : "SLURM_LOCALID";
  if (!env(worldVar))
    return fail(absl::StrCat(rankVar, " is set but ", worldVar,
                             " is not (env-var mode needs both; or pass --nproc)"));
  if (!env(rankVar))
    return fail(absl::StrCat(worldVar, " is set but ", rankVar,
                             " is not (env-var mode needs both; or pass --nproc)"));
  std::optional<int64_t> world = parseInt(env(worldVar), 1, 1 << 20);
  if (!world)
    return fail(absl::StrCat(worldVar, " must be a positive integer, got '", env(worldVar), "'"));
  std::optional<int64_t> rank = parseInt(env(rankVar), 0, *world - 1);
  if (!rank)
    return fail(absl::StrCat(rankVar, " must be an integer in 0..", *world - 1, " (", worldVar,
                             " is ", *world, "), got '", env(rankVar), "'"));
  if (const char *lr = env(localVar); lr && !parseInt(lr, 0, *world - 1))
    return fail(absl::StrCat(localVar, " must be an integer in 0..", *world - 1, ", got '", lr,
                             "'"));
  const bool child = env("TRAINC_LAUNCHER_CHILD") != nullptr;
  std::string how = absl::StrCat(worldVar, "=", *world);
  if (*world == 1)
    return runTrainer(f, nullptr, std::cout, how);

  const char *addr = env("MASTER_ADDR");
  if (!addr)
    return fail("MASTER_ADDR is not set (env-var mode needs the host of rank 0, which hosts the "
                "rendezvous store)");
  const char *portText = env("MASTER_PORT");
  if (!portText)
    return fail("MASTER_PORT is not set (env-var mode needs the port of the rendezvous store)");
  std::optional<int64_t> port = parseInt(portText, 1, 65535);
  if (!port)
    return fail(absl::StrCat("MASTER_PORT must be a port number in 1..65535, got '", portText, "'"));
  const char *token = env("TRAINC_JOB_TOKEN");
  if (!token)
    return fail("TRAINC_JOB_TOKEN is not set: every rank of a multi-rank job must get the same "
                "secret, e.g. export TRAINC_JOB_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | "
                "tr -d ' \\n')");
  if (absl::Status s = rt::checkJobToken(token, "TRAINC_JOB_TOKEN"); !s.ok())
    return fail(std::string(s.message()));
  std::set_terminate(onTerminate);

  // Rank 0 hosts the store unless the spawning trainrun does.
  std::unique_ptr<rt::TcpStoreServer> server;
  if (*rank == 0 && !child) {
    auto s = rt::TcpStoreServer::start(addr, int(*port), token);
    if (!s.ok())
      return fail(absl::StrCat("rank 0 cannot host the rendezvous store at MASTER_ADDR:MASTER_PORT: ",
                               s.status().message()));
    server = std::move(*s);
  }
  rt::GlooOptions o;
  o.rank = *rank;
  o.worldSize = *world;
  o.storeHost = addr;
  o.storePort = int(*port);
  o.token = token;
  o.timeout = std::chrono::milliseconds(int64_t(f.commTimeout * 1000));
  o.iface = !f.commIface.empty() ? f.commIface : env("TRAINC_GLOO_IFACE") ? env("TRAINC_GLOO_IFACE") : "";
  if (o.iface.empty() && !isLoopback(addr))
    o.hostname = localAddressToward(addr, int(*port));
  absl::StatusOr<std::unique_ptr<rt::Communicator>> comm = rt::createGlooCommunicator(o);
  if (!comm.ok())
    return fail(std::string(comm.status().message()));
  if (const char *fr = env("TRAINC_TEST_FAIL_RANK"); fr && parseInt(fr, 0, 1 << 20) == *rank)
    return fail(absl::StrCat("rank ", *rank, ": failure injected by TRAINC_TEST_FAIL_RANK (test only)"));
  // Under an outer launcher every rank's stdout reaches the user: keep the training log of rank 0
  // only. A spawning trainrun filters itself (--log-all-ranks).
  std::ostream null(nullptr);
  std::ostream &log = (child || f.logAllRanks || *rank == 0) ? std::cout : null;
  StoreInfo store{addr, int(*port), token, o.timeout};
  return runTrainer(f, comm->get(), log, how, &store);
}

//===----------------------------------------------------------------------===//
// Spawn mode
//===----------------------------------------------------------------------===//

int gSignalPipe[2] = {-1, -1};

void onSignal(int sig) {
  unsigned char c = (unsigned char)sig;
  (void)!::write(gSignalPipe[1], &c, 1);
}

struct Child {
  int64_t rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1; // read ends
  std::string outBuf, errBuf, lastErr;
  bool exited = false;
  int status = 0;
  /// The last signal trainrun sent it (stopping the job after another rank failed), or 0.
  int sentSignal = 0;
  /// Found stopped (SIGSTOP, SIGTSTP, a debugger) when another rank failed.
  bool wasStopped = false;
};

/// Whether process `pid` is stopped or traced ('T' or 't' in /proc/<pid>/stat).
bool isStopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')'); // the command name may contain spaces and parentheses
  return close != std::string::npos && close + 2 < stat.size() &&
         (stat[close + 2] == 'T' || stat[close + 2] == 't');
}

void writeAllFd(int fd, const std::string &s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t k = ::write(fd, s.data() + off, s.size() - off);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return;
    off += size_t(k);
  }
}

/// Emits the complete lines of `buf` (all of it when `eof`) with the rank prefix.
void emitLines(Child &c, std::string &buf, bool isErr, bool show, bool eof) {
  size_t start = 0;
  std::string out;
  for (;;) {
    size_t nl = buf.find('\n', start);
    if (nl == std::string::npos && !(eof && start < buf.size()))
      break;
    size_t end = nl == std::string::npos ? buf.size() : nl;
    std::string line = buf.substr(start, end - start);
    if (isErr && line.find_first_not_of(" \t\r") != std::string::npos)
      c.lastErr = line;
    if (show)
      out += absl::StrCat("[rank ", c.rank, "] ", line, "\n");
    start = nl == std::string::npos ? buf.size() : nl + 1;
  }
  buf.erase(0, start);
  if (!out.empty())
    writeAllFd(isErr ? 2 : 1, out);
}

std::string describeStatus(const Child &c) {
  if (WIFSIGNALED(c.status)) {
    int sig = WTERMSIG(c.status);
    return absl::StrCat("rank ", c.rank, " was killed by signal ", sig, " (", strsignal(sig), ")");
  }
  return absl::StrCat("rank ", c.rank, " exited with status ", WEXITSTATUS(c.status));
}

int spawn(const Flags &f, const char *argv0) {
  const int64_t world = f.nproc * f.nnodes;
  std::string how = absl::StrCat("--nproc ", f.nproc);
  if (f.nnodes > 1)
    how += absl::StrCat(" x --nnodes ", f.nnodes);
  if (absl::StatusOr<schema::Program> p = readRankProgram(f.planDir, 0, world, how); !p.ok())
    return fail(std::string(p.status().message()));

  std::string token, masterAddr = f.masterAddr;
  int64_t masterPort = f.masterPort;
  std::unique_ptr<rt::TcpStoreServer> server;
  if (f.nnodes > 1) {
    const char *t = env("TRAINC_JOB_TOKEN");
    if (!t)
      return fail("TRAINC_JOB_TOKEN is not set: with --nnodes > 1 every node must get the same "
                  "secret, e.g. export TRAINC_JOB_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 "
                  "| tr -d ' \\n') on the first node and the same value on the others");
    if (absl::Status s = rt::checkJobToken(t, "TRAINC_JOB_TOKEN"); !s.ok())
      return fail(std::string(s.message()));
    token = t;
  } else {
    absl::StatusOr<std::string> t = rt::generateJobToken();
    if (!t.ok())
      return fail(std::string(t.status().message()));
    token = *t;
    if (masterAddr.empty())
      masterAddr = "127.0.0.1";
  }
  if (f.nodeRank == 0) {
    auto s = rt::TcpStoreServer::start(masterAddr, int(masterPort), token);
    if (!s.ok())
      return fail(absl::StrCat("cannot host the rendezvous store: ", s.status().message()));
    server = std::move(*s);
    masterPort = server->port();
  }

  // The child command line: this binary in env-var mode.
  std::vector<std::string> args = {argv0, "--comm-timeout", absl::StrCat(f.commTimeout)};
  if (!f.commIface.empty()) {
    args.push_back("--comm-iface");
    args.push_back(f.commIface);
  }
  if (!f.backend.empty()) {
    args.push_back("--backend");
    args.push_back(f.backend);
  }
  args.push_back(f.planDir);
  args.push_back("--");
  args.insert(args.end(), f.runtimeArgs.begin(), f.runtimeArgs.end());
  std::vector<char *> cargv;
  for (std::string &a : args)
    cargv.push_back(a.data());
  cargv.push_back(nullptr);

  if (::pipe2(gSignalPipe, O_CLOEXEC | O_NONBLOCK) != 0)
    return fail(absl::StrCat("pipe: ", std::strerror(errno)));
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  // Under nohup SIGHUP is ignored, and stays ignored for the launcher and its ranks: a closed
  // terminal must not stop the job.
  struct sigaction old {};
  sigaction(SIGHUP, nullptr, &old);
  const bool hupIgnored = old.sa_handler == SIG_IGN;
  if (!hupIgnored)
    sigaction(SIGHUP, &sa, nullptr);

  std::vector<std::string> baseEnv;
  for (char **e = environ; *e; ++e) {
    std::string kv = *e;
    std::string k = kv.substr(0, kv.find('='));
    static const char *drop[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                 "MASTER_ADDR", "MASTER_PORT", "TRAINC_JOB_TOKEN",
                                 "TRAINC_LAUNCHER_CHILD", "GROUP_RANK"};
    bool skip = false;
    for (const char *d : drop)
      skip = skip || k == d;
    if (!skip)
      baseEnv.push_back(kv);
  }

  const int64_t ompThreads = std::max<long>(1, ::sysconf(_SC_NPROCESSORS_ONLN));
  const pid_t parent = ::getpid();
  std::vector<Child> children(size_t(f.nproc));
  for (int64_t i = 0; i < f.nproc; ++i) {
    Child &c = children[size_t(i)];
    c.rank = f.nodeRank * f.nproc + i;
    std::vector<std::string> envs = baseEnv;
    envs.push_back(absl::StrCat("RANK=", c.rank));
    envs.push_back(absl::StrCat("WORLD_SIZE=", world));
    envs.push_back(absl::StrCat("LOCAL_RANK=", i));
    envs.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", f.nproc));
    envs.push_back(absl::StrCat("GROUP_RANK=", f.nodeRank));
    envs.push_back("MASTER_ADDR=" + masterAddr);
    envs.push_back(absl::StrCat("MASTER_PORT=", masterPort));
    envs.push_back("TRAINC_JOB_TOKEN=" + token);
    envs.push_back("TRAINC_LAUNCHER_CHILD=1");
    if (!env("OMP_NUM_THREADS")) // share the cores among the local ranks (as torchrun does)
      envs.push_back(absl::StrCat("OMP_NUM_THREADS=", std::max<int64_t>(1, ompThreads / f.nproc)));
    std::vector<char *> cenv;
    for (std::string &e : envs)
      cenv.push_back(e.data());
    cenv.push_back(nullptr);
    int po[2], pe[2];
    if (::pipe2(po, O_CLOEXEC) != 0 || ::pipe2(pe, O_CLOEXEC) != 0)
      return fail(absl::StrCat("pipe: ", std::strerror(errno)));
    pid_t pid = ::fork();
    if (pid < 0)
      return fail(absl::StrCat("fork: ", std::strerror(errno)));
    if (pid == 0) {
      // Only async-signal-safe calls until exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlive the launcher
      if (::getppid() != parent)
        ::_exit(1);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigaction(SIGTERM, &dfl, nullptr);
      sigaction(SIGINT, &dfl, nullptr);
      if (!hupIgnored)
        sigaction(SIGHUP, &dfl, nullptr);
      ::dup2(po[1], 1);
      ::dup2(pe[1], 2);
      ::execve("/proc/self/exe", cargv.data(), cenv.data());
      const char msg[] = "trainrun: error: cannot re-execute /proc/self/exe\n";
      (void)!::write(2, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    ::close(po[1]);
    ::close(pe[1]);
    c.pid = pid;
    c.out = po[0];
    c.err = pe[0];
  }

  using Clock = std::chrono::steady_clock;
  // With --exit-signal-handler the ranks finish their iteration and save on SIGTERM/SIGINT:
  // the first signal is forwarded and waited for without a deadline; a second one stops them.
  const bool ranksHandleSignals =
      std::find(f.runtimeArgs.begin(), f.runtimeArgs.end(), "--exit-signal-handler") !=
      f.runtimeArgs.end();
  int signalsReceived = 0;
  std::optional<Clock::time_point> killAt;
  const Child *failed = nullptr;
  int interruptedBy = 0;
  auto terminateAll = [&](int sig) {
    for (Child &c : children)
      if (!c.exited) {
        // A stopped rank is the likely cause of its peers' timeouts; it is continued so that it
        // receives the signal.
        c.wasStopped = isStopped(c.pid);
        ::kill(c.pid, sig);
        if (c.wasStopped)
          ::kill(c.pid, SIGCONT);
        c.sentSignal = sig;
      }
    if (!killAt)
      killAt = Clock::now() + std::chrono::seconds(5);
  };
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<std::pair<Child *, bool>> who;
    for (Child &c : children) {
      if (c.out >= 0) {
        pfds.push_back({c.out, POLLIN, 0});
        who.push_back({&c, false});
      }
      if (c.err >= 0) {
        pfds.push_back({c.err, POLLIN, 0});
        who.push_back({&c, true});
      }
    }
    bool allExited = true;
    for (const Child &c : children)
      allExited = allExited && c.exited;
    if (allExited && pfds.empty())
      break;
    pfds.push_back({gSignalPipe[0], POLLIN, 0});
    int r = ::poll(pfds.data(), pfds.size(), 100);
    if (r < 0 && errno != EINTR)
      return fail(absl::StrCat("poll: ", std::strerror(errno)));
    for (size_t k = 0; r > 0 && k + 1 < pfds.size(); ++k) {
      if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      Child &c = *who[k].first;
      bool isErr = who[k].second;
      int &fd = isErr ? c.err : c.out;
      std::string &buf = isErr ? c.errBuf : c.outBuf;
      char tmp[65536];
      ssize_t n = ::read(fd, tmp, sizeof(tmp));
      bool show = isErr || c.rank == 0 || f.logAllRanks;
      if (n > 0) {
        buf.append(tmp, size_t(n));
        emitLines(c, buf, isErr, show, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        emitLines(c, buf, isErr, show, true);
        ::close(fd);
        fd = -1;
      }
    }
    if (pfds.back().revents & POLLIN) {
      unsigned char sig;
      while (::read(gSignalPipe[0], &sig, 1) == 1) {
        if (!interruptedBy)
          interruptedBy = sig;
        for (Child &c : children)
          if (!c.exited)
            ::kill(c.pid, sig);
        if (!killAt && !(ranksHandleSignals && ++signalsReceived == 1))
          killAt = Clock::now() + std::chrono::seconds(5);
      }
    }
    for (Child &c : children) {
      if (c.exited)
        continue;
      int st;
      if (::waitpid(c.pid, &st, WNOHANG) == c.pid) {
        c.exited = true;
        c.status = st;
        bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok && !failed && !interruptedBy) {
          failed = &c;
          terminateAll(SIGTERM);
        }
      }
    }
    if (killAt && Clock::now() >= *killAt)
      for (Child &c : children)
        if (!c.exited) {
          ::kill(c.pid, SIGKILL);
          c.sentSignal = SIGKILL;
        }
    // A child's output pipe stays open only while it runs; after SIGKILL nothing can hold it.
  }
  if (server)
    server->stop();
  if (interruptedBy) {
    bool allOk = true;
    for (const Child &c : children)
      allOk = allOk && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
    if (ranksHandleSignals && allOk) {
      std::cerr << "trainrun: signal " << interruptedBy << " (" << strsignal(interruptedBy)
                << "): every rank finished its iteration, saved and exited\n";
      return 0;
    }
    fail(absl::StrCat("interrupted by signal ", interruptedBy, " (", strsignal(interruptedBy),
                      "); the ranks were stopped"));
    return 128 + interruptedBy;
  }
  if (failed) {
    // The root cause first: a rank killed by a signal trainrun did not send (kill -9, the OOM
    // killer) rather than a peer that failed because its connection to it dropped, which may be
    // reaped in the same pass or a moment before it (the dead rank is then sent the SIGTERM that
    // stops the job, but it died of another signal).
    if (!WIFSIGNALED(failed->status))
      for (Child &c : children)
        if (c.exited && WIFSIGNALED(c.status) && WTERMSIG(c.status) != c.sentSignal) {
          failed = &c;
          break;
        }
    std::string msg = describeStatus(*failed);
    // A rank that was stopped when its peer failed: the peer's collective timed out waiting
    // for it, so it is named first.
    for (Child &c : children)
      if (c.wasStopped && &c != failed) {
        msg = absl::StrCat("rank ", c.rank,
                           " was stopped (SIGSTOP, SIGTSTP or a debugger) and did not respond; ",
                           msg);
        break;
      }
    std::string last = failed->lastErr;
    const std::string prefix = "trainrun: error: ";
    if (last.rfind(prefix, 0) == 0)
      last = last.substr(prefix.size());
    if (std::string self = absl::StrCat("rank ", failed->rank, ": "); last.rfind(self, 0) == 0)
      last = last.substr(self.size());
    if (!last.empty())
      msg += ": " + last;
    return fail(msg);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Flags f;
  bool nnodesGiven = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      f.runtimeArgs.assign(argv + i + 1, argv + argc);
      break;
    }
    auto value = [&](const char *what) -> std::optional<std::string> {
      if (i + 1 >= argc)
        return std::nullopt;
      (void)what;
      return std::string(argv[++i]);
    };
    if (a == "--nproc" || a == "--nnodes" || a == "--node-rank" || a == "--master-port") {
      std::optional<std::string> v = value(a.c_str());
      int64_t lo = a == "--node-rank" || a == "--master-port" ? 0 : 1;
      int64_t hi = a == "--master-port" ? 65535 : (1 << 20);
      std::optional<int64_t> x = v ? parseInt(*v, lo, hi) : std::nullopt;
      if (!x)
        return fail(absl::StrCat(a, " expects ",
                                 a == "--master-port" ? "a port number in 0..65535"
                                 : lo == 0            ? "a non-negative integer"
                                                      : "a positive integer",
                                 ", got '", v ? *v : "", "'"));
      if (a == "--nproc") {
        f.nproc = *x;
        f.nprocGiven = true;
      } else if (a == "--nnodes") {
        f.nnodes = *x;
        nnodesGiven = true;
      } else if (a == "--node-rank") {
        f.nodeRank = *x;
        f.nodeRankGiven = true;
      } else {
        f.masterPort = *x;
      }
    } else if (a == "--master-addr" || a == "--comm-iface") {
      std::optional<std::string> v = value(a.c_str());
      if (!v || v->empty())
        return fail(a + " expects a value");
      (a == "--master-addr" ? f.masterAddr : f.commIface) = *v;
    } else if (a == "--comm-timeout") {
      std::optional<std::string> v = value(a.c_str());
      char *end = nullptr;
      double t = v ? std::strtod(v->c_str(), &end) : 0;
      if (!v || v->empty() || *end || !(t > 0) || t > 1e6)
        return fail(absl::StrCat("--comm-timeout expects a positive number of seconds, got '",
                                 v ? *v : "", "'"));
      f.commTimeout = t;
      f.commTimeoutGiven = true;
    } else if (a == "--distributed-timeout-minutes") {
      std::optional<std::string> v = value(a.c_str());
      if (std::string e = distributedTimeout(f, v); !e.empty())
        return fail(e);
    } else if (a == "--backend") {
      std::optional<std::string> v = value(a.c_str());
      if (!v || (*v != "cpu" && *v != "cuda"))
        return fail(absl::StrCat("--backend expects cpu or cuda, got '", v ? *v : "", "'"));
      f.backend = *v;
    } else if (a == "--log-all-ranks") {
      f.logAllRanks = true;
    } else if (a == "-h" || a == "--help") {
      printHelp(std::cout);
      return 0;
    } else if (a.rfind("-", 0) == 0) {
      std::vector<std::string> launcher;
      for (const LauncherFlag &lf : kLauncherFlags)
        if (lf.name[1] == '-')
          launcher.push_back(lf.name);
      std::string near = rt::control::nearestFlag(a, launcher);
      if (!near.empty())
        return usage("unknown option '" + a + "' (did you mean " + near + "?)");
      for (const rt::control::RunFlag &rf : rt::control::runFlags())
        if (rf.name == a)
          return usage("unknown option '" + a + "': " + a +
                       " is a run-time flag; give it after the plan: trainrun PLAN_DIR -- " + a);
      return usage("unknown option '" + a + "' (runtime flags go after --)");
    } else if (f.planDir.empty()) {
      f.planDir = a;
    } else {
      return usage("more than one plan directory ('" + f.planDir + "', '" + a + "')");
    }
  }
  // `trainrun PLAN -- --help` asks for the same help as `trainrun --help`; a launcher flag after
  // `--` is named as such (the trainer would call it unknown).
  for (const std::string &a : f.runtimeArgs) {
    if (a == "--help" || a == "-h") {
      printHelp(std::cout);
      return 0;
    }
    const std::string name = a.substr(0, a.find('='));
    for (const LauncherFlag &lf : kLauncherFlags)
      if (name == lf.name && name != "--distributed-timeout-minutes")
        return usage(absl::StrCat(name, " is a launcher flag: give it before the plan (trainrun ",
                                  name, *lf.value ? absl::StrCat(" ", lf.value) : "",
                                  " PLAN_DIR -- ...)"));
  }
  if (f.planDir.empty())
    return usage("missing PLAN_DIR");
  // Megatron's --distributed-timeout-minutes among the runtime flags is trainrun's: taken out
  // of them (the trainer does not know it) and applied like the one before --.
  for (size_t i = 0; i < f.runtimeArgs.size(); ++i) {
    std::string a = f.runtimeArgs[i];
    std::optional<std::string> v;
    size_t n = 1;
    if (a == "--distributed-timeout-minutes") {
      if (i + 1 < f.runtimeArgs.size()) {
        v = f.runtimeArgs[i + 1];
        n = 2;
      }
    } else if (a.rfind("--distributed-timeout-minutes=", 0) == 0) {
      v = a.substr(a.find('=') + 1);
    } else {
      continue;
    }
    if (std::string e = distributedTimeout(f, v); !e.empty())
      return fail(e);
    f.runtimeArgs.erase(f.runtimeArgs.begin() + long(i), f.runtimeArgs.begin() + long(i + n));
    --i;
  }
  // --comm-timeout (trainrun's own, in seconds) wins over --distributed-timeout-minutes.
  if (f.distributedTimeoutGiven && !f.commTimeoutGiven)
    f.commTimeout = f.distributedTimeoutMinutes * 60;
  if (f.nodeRank >= f.nnodes)
    return fail(absl::StrCat("--node-rank ", f.nodeRank, " must be below --nnodes ", f.nnodes));
  if (f.nnodes > 1) {
    if (!f.nodeRankGiven)
      return fail(absl::StrCat("--nnodes ", f.nnodes, " needs --node-rank (0..", f.nnodes - 1, ")"));
    if (f.masterAddr.empty())
      return fail(absl::StrCat("--nnodes ", f.nnodes,
                               " needs --master-addr (the host of node 0, which hosts the store)"));
    if (f.masterPort == 0)
      return fail(absl::StrCat("--nnodes ", f.nnodes,
                               " needs --master-port (a free port on the host of node 0)"));
  }

  // An outer launcher set the rank variables: run that one rank.
  if (!f.nprocGiven && !nnodesGiven &&
      (env("RANK") || env("WORLD_SIZE") || env("SLURM_PROCID") || env("SLURM_NTASKS")))
    return runRankFromEnv(f);
  if (f.nproc * f.nnodes > 1)
    return spawn(f, argv[0]);
  return runTrainer(f, nullptr, std::cout, absl::StrCat("--nproc ", f.nproc));
}
