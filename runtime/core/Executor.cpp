//===- Executor.cpp - Prepared instruction dispatch ----------------------===//

#include "runtime/core/Executor.h"

#include "runtime/core/Program.h"
#include "runtime/core/Resolve.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <atomic>
#include <mutex>

namespace trainc::rt {

namespace {

enum class Op : uint8_t { Kernel, Collective, Wait, Send, Recv, Call, HostIO, Region, Event };

/// A view whose data pointer is bound when the instruction runs: buffer operands are fixed at
/// prepare time; argument operands add `byteOffset` to the caller's argument pointer.
struct Patch {
  uint16_t slot;   // index into the instruction's views
  uint16_t arg;    // argument index of the enclosing function
  uint64_t byteOffset;
};

struct PInstr {
  Op op;
  uint8_t stream = 0;
  KernelFn fn = nullptr;
  Attrs attrs;
  // Kernel: views = inputs then outputs. Collective/Send/Recv: views = [input, output] or [buf].
  // Call: views = arguments.
  std::vector<TensorView> views;
  std::vector<Patch> patches;
  uint16_t numIn = 0;
  uint64_t staticEnd = 0; // max arena end of the buffer operands (for the high-water mark)
  // Collective / p2p / wait / event fields.
  schema::CollectiveKind ckind = schema::COLLECTIVE_KIND_UNSPECIFIED;
  ReduceOp rop = ReduceOp::Sum;
  int group = 0;
  int64_t peerOrRoot = 0;
  bool async = false;
  uint32_t token = 0;
  // A send whose next instruction is a receive on the same group, both sync or both async
  // (runsAsSendRecvPair): both run as one Communicator::sendRecv (a batched pair; NCCL groups it).
  bool pairWithNext = false;
  uint32_t callee = 0;
  bool eventWait = false;
  // Region (graph capture) on a backend that captures graphs: the index of the partner marker
  // in the same function (begin <-> end); on the begin marker the eager runs so far, whether the
  // region's graph is captured, and the instructions one run of the region executes after the
  // begin marker (what a replay adds to the executed count).
  int32_t partner = -1;
  uint32_t regionRuns = 0;
  bool regionCaptured = false;
  uint64_t regionExecuted = 0;
  schema::HostIOKind hostKind = schema::HOST_IO_KIND_UNSPECIFIED;
  std::string name;
};

struct PFunction {
  std::vector<PInstr> body;
};

int64_t nowNs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              t0)
      .count();
}

} // namespace

struct Executor::Impl {
  std::vector<PFunction> functions;
  std::vector<std::string> functionNames;
  bool carriesTokens = false;
  ExecutorOptions options;
  std::atomic<bool> timing{false}; // read by communication tasks while the host may switch it
  // Timings are nanoseconds of the steady clock (CLOCK_MONOTONIC since boot on Linux), which all
  // processes of one machine share, so the traces of the ranks of a job line up.
  std::chrono::steady_clock::time_point t0{};
  std::vector<InstrTiming> computeTimings;
  std::mutex commTimingsMu;
  std::vector<InstrTiming> commTimings;
  uint32_t numEvents = 0; // user events; token t uses event numEvents + t
  // CUDA graphs: the backend captures (Backend::capturesGraphs), the eager runs of each region
  // before its capture (Program.cuda_graph_warmup_steps), and the event that orders a
  // synchronous collective inside a capture (numEvents + num_tokens).
  bool graphs = false;
  uint32_t graphWarmup = 0;
  uint32_t captureJoinEvent = 0;
  char *arena = nullptr;
  uint64_t arenaBytes = 0;
  // The first error thrown by a communication task (a peer died, a timeout). Later tasks are
  // skipped so that one failure does not wait out every following collective's timeout.
  std::mutex commErrorMu;
  std::string commError;
  void recordComm(int f, int idx, int64_t start) {
    if (!timing)
      return;
    std::lock_guard<std::mutex> l(commTimingsMu);
    commTimings.push_back({f, idx, kCommStream, start, nowNs(t0)});
  }
  absl::Status commStatus() {
    std::lock_guard<std::mutex> l(commErrorMu);
    if (commError.empty())
      return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("communication failed: ", commError));
  }
};

absl::StatusOr<std::unique_ptr<Executor>>
Executor::create(schema::Program program, Backend &backend, Communicator &comm,
                 ExecutorOptions options) {
  if (absl::Status s = validateProgram(program, &backend); !s.ok())
    return s;
  std::unique_ptr<Executor> ex(new Executor());
  ex->program_ = std::move(program);
  ex->backend_ = &backend;
  ex->comm_ = &comm;
  ex->impl_ = std::make_unique<Impl>();
  Impl &im = *ex->impl_;
  im.options = options;
  im.timing = options.timing;
  const schema::Program &p = ex->program_;
  // The CUDA kernels have no f16 variants yet (their dtype dispatch would read f16 as f32).
  if (backend.name() == "cuda")
    for (const schema::Buffer &buf : p.buffers())
      if (DType(int(buf.dtype())) == DType::F16)
        return absl::UnimplementedError(absl::StrCat(
            "buffer '", buf.name(), "' is f16: the CUDA backend has no f16 kernels yet (--fp16 "
            "runs on the CPU backend; --bf16 runs on both)"));

  std::vector<GroupSpec> groups;
  for (const schema::CommGroup &g : p.groups())
    groups.push_back({g.name(), {g.ranks().begin(), g.ranks().end()}});
  if (std::string e = comm.setupGroups(groups); !e.empty())
    return absl::FailedPreconditionError(absl::StrCat("communicator: ", e));
  if (p.mesh().world_size() != comm.worldSize() || p.mesh().rank() != comm.rank())
    return absl::FailedPreconditionError(
        absl::StrCat("program is for rank ", p.mesh().rank(), " of ", p.mesh().world_size(),
                     ", but the communicator is rank ", comm.rank(), " of ", comm.worldSize()));

  size_t arenaBytes = std::max<uint64_t>(p.arena_bytes(), 64);
  ex->arena_ = backend.allocateArena(arenaBytes);
  if (!ex->arena_)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate the arena of ", p.arena_bytes(), " bytes"));
  im.arena = static_cast<char *>(ex->arena_);
  im.arenaBytes = p.arena_bytes();
  im.numEvents = p.num_events();
  im.graphs = backend.capturesGraphs();
  im.graphWarmup = p.cuda_graph_warmup_steps();
  im.captureJoinEvent = p.num_events() + p.num_tokens();
  backend.resizeEvents(p.num_events() + p.num_tokens() + (im.graphs ? 1 : 0));

  im.carriesTokens = p.carried_tokens_size() > 0;
  im.functions.resize(p.functions_size());
  for (const schema::Function &f : p.functions())
    im.functionNames.push_back(f.name());
  for (int fi = 0; fi < p.functions_size(); ++fi) {
    const schema::Function &f = p.functions(fi);
    PFunction &pf = im.functions[fi];
    pf.body.resize(f.body_size());
    for (int ii = 0; ii < f.body_size(); ++ii) {
      const schema::Instruction &ins = f.body(ii);
      PInstr &pi = pf.body[ii];
      pi.stream = uint8_t(ins.stream());
      auto add = [&](const schema::Operand &o) {
        ResolvedOperand r;
        resolveOperand(p, f, o, r); // validated above
        TensorView v = r.view;
        uint64_t off = r.elemOffset * dtypeSize(v.dtype);
        if (r.isArg) {
          pi.patches.push_back({uint16_t(pi.views.size()), uint16_t(r.base), off});
        } else {
          uint64_t b = p.buffers(r.base).offset() + off;
          v.data = im.arena + b;
          pi.staticEnd = std::max<uint64_t>(pi.staticEnd, b + v.bytes());
        }
        pi.views.push_back(v);
      };
      switch (ins.op_case()) {
      case schema::Instruction::kKernel: {
        const schema::KernelCall &k = ins.kernel();
        pi.op = Op::Kernel;
        pi.fn = backend.findKernel(k.kernel());
        pi.name = k.kernel();
        decodeAttrs(*findKernelSignature(k.kernel()), k.attrs(), pi.attrs);
        for (const schema::Operand &o : k.inputs())
          add(o);
        pi.numIn = uint16_t(k.inputs_size());
        for (const schema::Operand &o : k.outputs())
          add(o);
        break;
      }
      case schema::Instruction::kCollective: {
        const schema::Collective &c = ins.collective();
        pi.op = Op::Collective;
        pi.ckind = c.kind();
        pi.rop = ReduceOp(int(c.op()));
        pi.group = int(c.group());
        pi.peerOrRoot = c.root();
        pi.async = c.async();
        pi.token = c.token();
        pi.name = schema::CollectiveKind_Name(c.kind());
        if (c.kind() != schema::BARRIER) {
          add(c.input());
          add(c.output());
        }
        break;
      }
      case schema::Instruction::kWait:
        pi.op = Op::Wait;
        pi.token = ins.wait().token();
        pi.name = "wait";
        break;
      case schema::Instruction::kSend:
      case schema::Instruction::kRecv: {
        const schema::SendRecv &s = ins.has_send() ? ins.send() : ins.recv();
        pi.op = ins.has_send() ? Op::Send : Op::Recv;
        pi.group = int(s.group());
        pi.peerOrRoot = s.peer();
        pi.async = s.async();
        pi.token = s.token();
        pi.name = ins.has_send() ? "send" : "recv";
        add(s.operand());
        break;
      }
      case schema::Instruction::kCall:
        pi.op = Op::Call;
        pi.callee = ins.call().function();
        pi.name = p.functions(int(pi.callee)).name();
        for (const schema::Operand &o : ins.call().args())
          add(o);
        break;
      case schema::Instruction::kHostIo:
        pi.op = Op::HostIO;
        pi.hostKind = ins.host_io().kind();
        pi.name = ins.host_io().name();
        break;
      case schema::Instruction::kRegion:
        pi.op = Op::Region;
        pi.eventWait = ins.region().kind() == schema::GRAPH_CAPTURE_BEGIN;
        pi.name = ins.region().name();
        break;
      case schema::Instruction::kEvent:
        pi.op = Op::Event;
        pi.token = ins.event().event();
        pi.eventWait = ins.event().wait();
        pi.name = "event";
        break;
      default:
        break;
      }
    }
    for (int ii = 0; ii + 1 < f.body_size(); ++ii)
      pf.body[size_t(ii)].pairWithNext = runsAsSendRecvPair(f.body(ii), f.body(ii + 1));
  }
  // A backend that captures graphs replays a region as a whole: its markers must pair up within
  // one function (trainc-cuda-graph places them in the entry function).
  if (im.graphs)
    for (size_t fi = 0; fi < im.functions.size(); ++fi) {
      std::vector<PInstr> &body = im.functions[fi].body;
      int32_t open = -1;
      for (size_t ii = 0; ii < body.size(); ++ii) {
        if (body[ii].op != Op::Region)
          continue;
        if (body[ii].eventWait) {
          open = int32_t(ii);
        } else if (open >= 0 && body[size_t(open)].name == body[ii].name) {
          body[size_t(open)].partner = int32_t(ii);
          body[ii].partner = open;
          open = -1;
        }
      }
      for (const PInstr &pi : body)
        if (pi.op == Op::Region && pi.partner < 0)
          return absl::FailedPreconditionError(absl::StrCat(
              "graph-capture region '", pi.name, "' ", pi.eventWait ? "begins" : "ends",
              " in function '", im.functionNames[fi], "' without its ",
              pi.eventWait ? "end" : "begin", " there: the ", std::string(backend.name()),
              " backend captures and replays a region within one function"));
    }
  return ex;
}

Executor::~Executor() {
  if (backend_) {
    backend_->synchronize(kCommStream);
    if (arena_)
      backend_->freeArena(arena_);
  }
}

namespace {

/// Runs a communication instruction with bound views (on whichever thread the backend chose).
void runComm(Communicator &comm, const PInstr &pi, const TensorView *v) {
  switch (pi.op) {
  case Op::Collective:
    switch (pi.ckind) {
    case schema::ALL_REDUCE:
      comm.allReduce(pi.group, v[0].data, v[1].data, v[0].numel, v[0].dtype, pi.rop);
      break;
    case schema::REDUCE_SCATTER:
      comm.reduceScatter(pi.group, v[0].data, v[1].data, v[1].numel, v[0].dtype, pi.rop);
      break;
    case schema::ALL_GATHER:
      comm.allGather(pi.group, v[0].data, v[1].data, v[0].numel, v[0].dtype);
      break;
    case schema::BROADCAST:
      if (v[0].data != v[1].data)
        std::memcpy(v[1].data, v[0].data, v[0].bytes());
      comm.broadcast(pi.group, v[1].data, v[1].numel, v[1].dtype, pi.peerOrRoot);
      break;
    case schema::BARRIER:
      comm.barrier(pi.group);
      break;
    default:
      break;
    }
    break;
  case Op::Send:
    comm.send(pi.group, pi.peerOrRoot, v[0].data, v[0].bytes(), v[0].dtype);
    break;
  case Op::Recv:
    comm.recv(pi.group, pi.peerOrRoot, v[0].data, v[0].bytes(), v[0].dtype);
    break;
  default:
    break;
  }
}

struct Runner {
  Executor::Impl &im;
  Backend &backend;
  Communicator &comm;
  const HostCallback &host;
  uint64_t &hwm;
  uint64_t &executed;
  void *kdata[kNumStreams];
  bool capturing = false;       // inside a region that the backend is capturing
  uint64_t captureExecuted = 0; // `executed` right after the capturing region's begin

  /// After a synchronous collective or transfer was enqueued: the host waits for it, or, inside
  /// a capture (a captured stream cannot be synchronised), the compute stream is ordered after
  /// it on the device (the host checks the communicator's status at the region's end).
  absl::Status afterSynchronous() {
    if (capturing) {
      backend.recordEvent(im.captureJoinEvent, kCommStream);
      backend.streamWaitEvent(kComputeStream, im.captureJoinEvent);
      return absl::OkStatus();
    }
    backend.synchronize(kCommStream);
    return im.commStatus();
  }

  absl::Status runFunction(int fi, void *const *args) {
    PFunction &pf = im.functions[fi];
    const bool timing = im.timing;
    auto bind = [&](PInstr &pi) {
      ++executed;
      uint64_t end = pi.staticEnd;
      for (const Patch &pt : pi.patches) {
        TensorView &v = pi.views[pt.slot];
        v.data = static_cast<char *>(args[pt.arg]) + pt.byteOffset;
        end = std::max<uint64_t>(end, uint64_t(static_cast<char *>(v.data) - im.arena) + v.bytes());
      }
      if (end > hwm)
        hwm = end;
    };
    for (size_t ii = 0; ii < pf.body.size(); ++ii) {
      PInstr &pi = pf.body[ii];
      bind(pi);
      int64_t t0 = timing ? nowNs(im.t0) : 0;
      switch (pi.op) {
      case Op::Kernel: {
        if (pi.stream == kComputeStream) {
          KernelCtx ctx{pi.views.data(), pi.numIn, pi.views.data() + pi.numIn,
                        int(pi.views.size()) - pi.numIn, &pi.attrs, kdata[kComputeStream]};
          pi.fn(ctx);
        } else {
          std::vector<TensorView> views = pi.views;
          const PInstr *pp = &pi;
          void *kd = kdata[pi.stream];
          int f = fi, idx = int(ii);
          // Tasks on other streams may outlive this Runner (carried tokens): they capture the
          // executor's state, never the Runner.
          Executor::Impl *imp = &im;
          backend.enqueue(pi.stream, [imp, pp, views, kd, f, idx]() mutable {
            Executor::Impl &im = *imp;
            int64_t s = im.timing ? nowNs(im.t0) : 0;
            KernelCtx ctx{views.data(), pp->numIn, views.data() + pp->numIn,
                          int(views.size()) - pp->numIn, &pp->attrs, kd};
            pp->fn(ctx);
            im.recordComm(f, idx, s);
          });
        }
        break;
      }
      case Op::Collective:
      case Op::Send:
      case Op::Recv: {
        if (pi.pairWithNext) {
          // The send and the async receive after it as one batched pair.
          PInstr &ri = pf.body[++ii];
          bind(ri);
          TensorView sv = pi.views[0], rv = ri.views[0];
          const PInstr *sp = &pi, *rp = &ri;
          int f = fi, idx = int(ii);
          Executor::Impl *imp = &im;
          Communicator *cm = &comm;
          backend.enqueue(kCommStream, [imp, cm, sp, rp, sv, rv, f, idx]() {
            Executor::Impl &im = *imp;
            {
              std::lock_guard<std::mutex> l(im.commErrorMu);
              if (!im.commError.empty())
                return;
            }
            int64_t s = im.timing ? nowNs(im.t0) : 0;
            try {
              cm->sendRecv(sp->group, sp->peerOrRoot, sv.data, sv.bytes(), sv.dtype,
                           rp->peerOrRoot, rv.data, rv.bytes(), rv.dtype);
            } catch (const std::exception &e) {
              std::lock_guard<std::mutex> l(im.commErrorMu);
              im.commError = absl::StrCat("send/recv pair (", im.functionNames[size_t(f)],
                                          " instructions ", idx - 1, ", ", idx, "): ", e.what());
            }
            im.recordComm(f, idx - 1, s);
            im.recordComm(f, idx, s);
          });
          if (pi.async) {
            backend.recordEvent(im.numEvents + pi.token, kCommStream);
            backend.recordEvent(im.numEvents + ri.token, kCommStream);
          } else if (absl::Status s = afterSynchronous(); !s.ok()) {
            return s;
          }
          break;
        }
        std::vector<TensorView> views = pi.views;
        const PInstr *pp = &pi;
        int f = fi, idx = int(ii);
        Executor::Impl *imp = &im;
        Communicator *cm = &comm;
        backend.enqueue(kCommStream, [imp, cm, pp, views, f, idx]() {
          Executor::Impl &im = *imp;
          Communicator &comm = *cm;
          {
            std::lock_guard<std::mutex> l(im.commErrorMu);
            if (!im.commError.empty())
              return;
          }
          int64_t s = im.timing ? nowNs(im.t0) : 0;
          try {
            runComm(comm, *pp, views.data());
          } catch (const std::exception &e) {
            std::lock_guard<std::mutex> l(im.commErrorMu);
            im.commError = absl::StrCat(pp->name, " (", im.functionNames[size_t(f)],
                                        " instruction ", idx, "): ", e.what());
          }
          im.recordComm(f, idx, s);
        });
        if (pi.async)
          backend.recordEvent(im.numEvents + pi.token, kCommStream);
        else if (absl::Status s = afterSynchronous(); !s.ok())
          return s;
        break;
      }
      case Op::Wait:
        backend.streamWaitEvent(kComputeStream, im.numEvents + pi.token);
        if (absl::Status s = im.commStatus(); !s.ok())
          return s;
        break;
      case Op::Call: {
        void *callArgs[64];
        std::vector<void *> big;
        void **a = callArgs;
        if (pi.views.size() > 64) {
          big.resize(pi.views.size());
          a = big.data();
        }
        for (size_t k = 0; k < pi.views.size(); ++k)
          a[k] = pi.views[k].data;
        if (absl::Status s = runFunction(int(pi.callee), a); !s.ok())
          return s;
        break;
      }
      case Op::HostIO:
        // The host sees memory as the compute stream does: async collectives still in flight
        // (waited later by the program) never touch the INPUT, SCALAR and OUTPUT buffers the
        // host reads and writes, so host I/O does not drain the communication stream.
        if (host) {
          if (absl::Status s = im.commStatus(); !s.ok())
            return s;
          if (absl::Status s = host(pi.hostKind, pi.name); !s.ok())
            return s;
        }
        break;
      case Op::Region:
        if (!im.graphs) {
          // CPU: every run is eager; the backend checks nesting.
          if (pi.eventWait)
            backend.beginCapture(pi.name);
          else
            backend.endCapture(pi.name);
          break;
        }
        if (pi.eventWait) {
          if (pi.regionCaptured) {
            // Replay: one launch runs everything up to the end marker.
            if (!backend.replayGraph(pi.name))
              return absl::InternalError(absl::StrCat("graph-capture region '", pi.name,
                                                      "' was captured but the ", std::string(backend.name()),
                                                      " backend has no graph to replay"));
            executed += pi.regionExecuted;
            ii = size_t(pi.partner); // the loop continues after the end marker
            break;
          }
          if (pi.regionRuns >= im.graphWarmup) {
            backend.beginCapture(pi.name);
            capturing = true;
            captureExecuted = executed;
          }
          ++pi.regionRuns; // warmup runs are eager (they also size the kernels' scratch)
        } else if (capturing) {
          backend.endCapture(pi.name);
          capturing = false;
          PInstr &begin = pf.body[size_t(pi.partner)];
          begin.regionCaptured = true;
          begin.regionExecuted = executed - captureExecuted;
          // Captured work did not run: launch it once for this run.
          if (!backend.replayGraph(pi.name))
            return absl::InternalError(absl::StrCat("graph-capture region '", pi.name,
                                                    "' has no graph after its capture"));
          if (absl::Status s = im.commStatus(); !s.ok())
            return s;
        }
        break;
      case Op::Event:
        if (pi.eventWait)
          backend.streamWaitEvent(pi.stream, pi.token);
        else
          backend.recordEvent(pi.token, pi.stream);
        break;
      }
      if (timing && !(pi.stream != kComputeStream && pi.op == Op::Kernel) &&
          pi.op != Op::Collective && pi.op != Op::Send && pi.op != Op::Recv)
        im.computeTimings.push_back({fi, int(ii), kComputeStream, t0, nowNs(im.t0)});
    }
    return absl::OkStatus();
  }

};

} // namespace

namespace {
absl::Status runRoot(Executor::Impl &im, Backend &backend, Communicator &comm,
                     const HostCallback &host, uint64_t &hwm, uint64_t &executed, int fn) {
  executed = 0;
  Runner r{im, backend, comm, host, hwm, executed, {}};
  for (unsigned s = 0; s < kNumStreams; ++s)
    r.kdata[s] = backend.kernelData(s);
  absl::Status s = r.runFunction(fn, nullptr);
  // Carried tokens (Program.carried_tokens) stay in flight into the next run; without them a run
  // ends with the communication stream drained.
  if (!im.carriesTokens || !s.ok())
    backend.synchronize(kCommStream);
  if (s.ok())
    s = im.commStatus();
  return s;
}
} // namespace

absl::Status Executor::run(const HostCallback &host) {
  return runRoot(*impl_, *backend_, *comm_, host, hwm_, executed_, int(program_.entry()));
}

absl::Status Executor::runEntry(const std::string &name, const HostCallback &host) {
  auto it = program_.entry_points().find(name);
  if (it == program_.entry_points().end())
    return absl::NotFoundError(absl::StrCat("the program has no entry point '", name, "'"));
  return runRoot(*impl_, *backend_, *comm_, host, hwm_, executed_, int(it->second));
}

int Executor::findBuffer(std::string_view name) const {
  for (int i = 0; i < program_.buffers_size(); ++i)
    if (program_.buffers(i).name() == name)
      return i;
  return -1;
}

void *Executor::bufferData(int index) const {
  return static_cast<char *>(arena_) + program_.buffers(index).offset();
}

void *Executor::hostWritableBuffer(int index) {
  if (index < 0 || index >= program_.buffers_size() || !backend_->hostAddressable())
    return nullptr;
  backend_->synchronize(kCommStream);
  return bufferData(index);
}

absl::Status Executor::writeBuffer(int index, const void *src, size_t bytes) {
  if (index < 0 || index >= program_.buffers_size())
    return absl::InvalidArgumentError(absl::StrCat("no buffer with index ", index));
  const schema::Buffer &b = program_.buffers(index);
  if (bytes != b.byte_size())
    return absl::InvalidArgumentError(absl::StrCat("buffer '", b.name(), "' holds ", b.byte_size(),
                                                   " bytes, got ", bytes));
  // Collectives carried into the next run may still write parameters: let them finish first.
  // Inputs and device scalars are written while they run (see Program.carried_tokens).
  if (b.kind() != schema::INPUT && b.kind() != schema::SCALAR)
    backend_->synchronize(kCommStream);
  backend_->copyToDevice(bufferData(index), src, bytes);
  return absl::OkStatus();
}

absl::Status Executor::readBuffer(int index, void *dst, size_t bytes) const {
  if (index < 0 || index >= program_.buffers_size())
    return absl::InvalidArgumentError(absl::StrCat("no buffer with index ", index));
  const schema::Buffer &b = program_.buffers(index);
  if (bytes != b.byte_size())
    return absl::InvalidArgumentError(absl::StrCat("buffer '", b.name(), "' holds ", b.byte_size(),
                                                   " bytes, got ", bytes));
  if (b.kind() != schema::OUTPUT && b.kind() != schema::INPUT && b.kind() != schema::SCALAR)
    backend_->synchronize(kCommStream);
  backend_->copyToHost(dst, bufferData(index), bytes);
  return absl::OkStatus();
}

void Executor::drainCommunication() const { backend_->synchronize(kCommStream); }

std::vector<InstrTiming> Executor::timings() const {
  std::vector<InstrTiming> all = impl_->computeTimings;
  {
    std::lock_guard<std::mutex> l(impl_->commTimingsMu);
    all.insert(all.end(), impl_->commTimings.begin(), impl_->commTimings.end());
  }
  std::sort(all.begin(), all.end(),
            [](const InstrTiming &a, const InstrTiming &b) { return a.startNs < b.startNs; });
  return all;
}

Executor::TimingMark Executor::timingMark() const {
  std::lock_guard<std::mutex> l(impl_->commTimingsMu);
  return {impl_->computeTimings.size(), impl_->commTimings.size()};
}

std::vector<InstrTiming> Executor::timingsBetween(TimingMark from,
                                                  std::optional<TimingMark> to) const {
  TimingMark end = to ? *to : timingMark();
  const auto &ct = impl_->computeTimings;
  std::vector<InstrTiming> out;
  for (size_t i = std::min(from.compute, ct.size()); i < std::min(end.compute, ct.size()); ++i)
    out.push_back(ct[i]);
  {
    std::lock_guard<std::mutex> l(impl_->commTimingsMu);
    const auto &mt = impl_->commTimings;
    for (size_t i = std::min(from.comm, mt.size()); i < std::min(end.comm, mt.size()); ++i)
      out.push_back(mt[i]);
  }
  std::sort(out.begin(), out.end(),
            [](const InstrTiming &a, const InstrTiming &b) { return a.startNs < b.startNs; });
  return out;
}

void Executor::setTiming(bool on) { impl_->timing = on; }

void Executor::clearTimings() {
  impl_->computeTimings.clear();
  std::lock_guard<std::mutex> l(impl_->commTimingsMu);
  impl_->commTimings.clear();
}

} // namespace trainc::rt
