//===- CudaGraph.cpp - The full-iteration graph-capture region ------------===//
//
// trainc-cuda-graph: Megatron's --cuda-graph-impl full_iteration on rt IR. See Passes.td for the
// placement of the region and the invariants; docs/design.md "CUDA graphs" for the reasons.
//
//===----------------------------------------------------------------------===//

#include "passes/Graph/Passes.h"

#include "runtime/core/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::trainc {
#define GEN_PASS_DEF_CUDAGRAPHPASS
#include "passes/Graph/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

constexpr llvm::StringLiteral kRegionLabel = "iteration";

/// Whether the host writes buffer `b` before each step: an input (the batch, the RNG key) or a
/// scalar with a host-written role (lr, weight_decay, step; runtime/core/Program.h). The loss
/// scaler's scalars are device state the program itself updates (loss_scale_update).
bool hostWritten(rt::BufferOp b) {
  if (b.getKind() == rt::BufferKind::input)
    return true;
  if (b.getKind() != rt::BufferKind::scalar)
    return false;
  const ::trainc::schema::ScalarRole role = ::trainc::rt::scalarRoleOfName(b.getSymName().str());
  return role == ::trainc::schema::LR || role == ::trainc::schema::WEIGHT_DECAY ||
         role == ::trainc::schema::STEP;
}

/// What a buffer operand is bound to: a module buffer, or argument `arg` of the enclosing
/// function (views are followed to their source).
struct Binding {
  rt::BufferOp buffer;
  int arg = -1;
};

/// What a function (its callees included) does that matters inside a captured region.
struct Summary {
  Operation *hostIo = nullptr;                // the first rt.host_io reached
  Operation *barrier = nullptr;               // the first rt.collective barrier reached
  SmallVector<Operation *> argWriter;         // per argument: the first op writing it, or null
  SmallVector<std::pair<rt::BufferOp, Operation *>> written; // host-written buffers it writes
};

class Checker {
public:
  Checker(ModuleOp m) : module(m), symbols(m) {}

  Binding bind(Value v) {
    while (true) {
      if (auto arg = dyn_cast<BlockArgument>(v))
        return {{}, int(arg.getArgNumber())};
      Operation *def = v.getDefiningOp();
      if (auto view = dyn_cast_or_null<rt::ViewOp>(def)) {
        v = view.getSource();
        continue;
      }
      if (auto ref = dyn_cast_or_null<rt::BufferRefOp>(def))
        return {symbols.lookup<rt::BufferOp>(ref.getBuffer()), -1};
      return {};
    }
  }

  /// The values op writes (kernel and collective outputs, the buffer of a recv).
  static SmallVector<Value> writtenValues(Operation *op) {
    if (auto k = dyn_cast<rt::KernelOp>(op))
      return SmallVector<Value>(k.getOutputs());
    if (auto c = dyn_cast<rt::CollectiveOp>(op))
      return SmallVector<Value>(c.getOutputs());
    if (auto r = dyn_cast<rt::RecvOp>(op))
      return {r.getBuffer()};
    return {};
  }

  /// Records in `s` what `op` (of a function with `numArgs` arguments) does. Calls use their
  /// callee's summary, mapped onto the call's operands.
  LogicalResult visit(Operation *op, Summary &s) {
    if (isa<rt::HostIOOp>(op)) {
      if (!s.hostIo)
        s.hostIo = op;
      return success();
    }
    if (auto c = dyn_cast<rt::CollectiveOp>(op);
        c && c.getKind() == rt::CollectiveKind::barrier && !s.barrier)
      s.barrier = op;
    auto note = [&](Binding b, Operation *writer) {
      if (b.arg >= 0 && size_t(b.arg) < s.argWriter.size()) {
        if (!s.argWriter[size_t(b.arg)])
          s.argWriter[size_t(b.arg)] = writer;
      } else if (b.buffer && hostWritten(b.buffer)) {
        s.written.push_back({b.buffer, writer});
      }
    };
    if (auto call = dyn_cast<func::CallOp>(op)) {
      auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
      if (!callee || callee.isDeclaration())
        return call.emitOpError() << "calls @" << call.getCallee()
                                  << ", not a function with a body in the module";
      FailureOr<const Summary *> cs = summarize(callee);
      if (failed(cs))
        return failure();
      if ((*cs)->hostIo && !s.hostIo)
        s.hostIo = (*cs)->hostIo;
      if ((*cs)->barrier && !s.barrier)
        s.barrier = (*cs)->barrier;
      for (auto [i, w] : llvm::enumerate((*cs)->argWriter))
        if (w && i < call.getNumOperands())
          note(bind(call.getOperand(unsigned(i))), w);
      for (auto [b, w] : (*cs)->written)
        s.written.push_back({b, w});
      return success();
    }
    for (Value v : writtenValues(op))
      note(bind(v), op);
    return success();
  }

  FailureOr<const Summary *> summarize(func::FuncOp fn) {
    auto it = summaries.find(fn);
    if (it != summaries.end()) {
      if (!it->second)
        return fn.emitOpError() << "is reached recursively from a graph-capture region";
      return it->second.get();
    }
    summaries[fn] = nullptr; // in progress
    auto s = std::make_unique<Summary>();
    s->argWriter.assign(fn.getNumArguments(), nullptr);
    for (Operation &op : fn.getBody().getOps())
      if (failed(visit(&op, *s)))
        return failure();
    const Summary *out = s.get();
    summaries[fn] = std::move(s);
    return out;
  }

  ModuleOp module;
  SymbolTable symbols;
  llvm::DenseMap<Operation *, std::unique_ptr<Summary>> summaries;
};

/// The op that `inner` (reached from `top`, an op of the entry function) is, for messages: the
/// op itself, plus a note at the call that reaches it when they differ.
InFlightDiagnostic refuse(Operation *inner, Operation *top, func::FuncOp entry) {
  InFlightDiagnostic d = inner->emitError();
  d << "trainc-cuda-graph: ";
  if (inner != top)
    d.attachNote(top->getLoc()) << "reached from this call in @" << entry.getSymName();
  return d;
}

struct CudaGraphPass : mlir::trainc::impl::CudaGraphPassBase<CudaGraphPass> {
  using CudaGraphPassBase::CudaGraphPassBase;

  void runOnOperation() override {
    ModuleOp m = getOperation();
    std::string mode = graphImpl;
    if (mode.empty()) {
      if (auto a = m->getAttrOfType<StringAttr>(kCudaGraphImplAttrName))
        mode = a.getValue().str();
      else
        mode = "none";
    }
    if (mode == "none")
      return;
    if (mode != "full_iteration") {
      m.emitError() << "trainc-cuda-graph: cuda graph impl '" << mode
                    << "' is not supported (expected none or full_iteration; Megatron's 'local' "
                       "per-layer graphs are not implemented)";
      return signalPassFailure();
    }
    if (failed(markIteration(m)))
      signalPassFailure();
  }

  LogicalResult markIteration(ModuleOp m) {
    func::FuncOp entry;
    for (auto fn : m.getOps<func::FuncOp>())
      if (fn->hasAttr("rt.entry"))
        entry = fn;
    if (!entry || entry.isDeclaration())
      return m.emitError() << "trainc-cuda-graph: no rt.entry function with a body (run "
                              "trainc-lower-to-rt first)";
    WalkResult existing = m.walk([&](rt::RegionOp r) {
      r.emitError() << "trainc-cuda-graph: the module already has a graph-capture region";
      return WalkResult::interrupt();
    });
    if (existing.wasInterrupted())
      return failure();
    if (auto carried = m->getAttrOfType<DenseI64ArrayAttr>("rt.carried_tokens");
        carried && !carried.empty())
      return m.emitError()
             << "trainc-cuda-graph: full_iteration graphs with async tokens carried into the "
                "next iteration (rt.carried_tokens, --overlap-param-gather) are not supported: "
                "their waits would lie outside the captured graph";

    Block &body = entry.getBody().front();
    Operation *ret = body.getTerminator();
    auto isPure = [](Operation &op) { return isa<rt::BufferRefOp, rt::ViewOp>(op); };
    Checker checker(m);

    // Begin: after the first fill_inputs. Device work before it moves after it when it touches
    // no input or scalar buffer (the host writes only those at fill_inputs), so that the region
    // holds the whole iteration.
    rt::HostIOOp fill;
    for (auto io : body.getOps<rt::HostIOOp>())
      if (io.getKind() == rt::HostIOKind::fill_inputs) {
        fill = io;
        break;
      }
    OpBuilder b(m.getContext());
    if (fill) {
      bool movable = true;
      for (Operation &op : body) {
        if (&op == fill.getOperation())
          break;
        if (isPure(op))
          continue;
        if (!isa<rt::KernelOp>(op)) {
          movable = false; // calls, collectives, host I/O: keep the order
          break;
        }
        for (Value v : op.getOperands()) {
          Binding bd = checker.bind(v);
          if (!bd.buffer || bd.buffer.getKind() == rt::BufferKind::input ||
              bd.buffer.getKind() == rt::BufferKind::scalar)
            movable = false;
        }
      }
      if (movable)
        fill->moveBefore(&body.front());
      b.setInsertionPointAfter(fill);
    } else {
      b.setInsertionPointToStart(&body);
    }
    auto begin = b.create<rt::RegionOp>(entry.getLoc(), rt::RegionKind::begin,
                                        b.getStringAttr(kRegionLabel));

    // End: before the last read_outputs when only buffer references follow it, else before the
    // return.
    Operation *endAt = ret;
    for (Operation *op = ret->getPrevNode(); op && op != begin.getOperation();
         op = op->getPrevNode()) {
      if (isPure(*op))
        continue;
      if (auto io = dyn_cast<rt::HostIOOp>(op); io && io.getKind() == rt::HostIOKind::read_outputs)
        endAt = op;
      break;
    }
    b.setInsertionPoint(endAt);
    auto end = b.create<rt::RegionOp>(entry.getLoc(), rt::RegionKind::end,
                                      b.getStringAttr(kRegionLabel));

    // Verify every op between the markers (callees through their summaries).
    for (Operation *op = begin->getNextNode(); op != end.getOperation(); op = op->getNextNode()) {
      Summary s;
      if (failed(checker.visit(op, s)))
        return failure();
      if (s.hostIo) {
        auto io = cast<rt::HostIOOp>(s.hostIo);
        InFlightDiagnostic d = refuse(s.hostIo, op, entry);
        d << "rt.host_io " << rt::stringifyHostIOKind(io.getKind()) << " \"" << io.getLabel()
          << "\" inside the graph-capture region \"" << kRegionLabel << "\" of @"
          << entry.getSymName() << ": ";
        if (io.getKind() == rt::HostIOKind::read_outputs)
          d << "the host would read scalars (loss, grad norm, the found-inf flag) in the "
               "middle of a captured iteration; host-read scalars are read after the region";
        else
          d << "no host work runs inside a replayed graph; host I/O must come before the region";
        return failure();
      }
      if (s.barrier) {
        InFlightDiagnostic d = refuse(s.barrier, op, entry);
        d << "rt.collective barrier inside the graph-capture region \"" << kRegionLabel
          << "\" of @" << entry.getSymName()
          << ": a barrier synchronises the host (the NCCL communicator's is a blocking all-reduce "
             "of a host value), which a captured graph cannot do";
        return failure();
      }
      if (!s.written.empty()) {
        auto [buf, writer] = s.written.front();
        InFlightDiagnostic d = refuse(writer, op, entry);
        d << "'" << writer->getName() << "' writes @" << buf.getSymName() << " ("
          << rt::stringifyBufferKind(buf.getKind())
          << ", written by the host before each step) inside the graph-capture region \""
          << kRegionLabel << "\" of @" << entry.getSymName()
          << ": a replay would use the captured value instead of the host's; varying values "
             "(lr, step, loss scale, RNG key) must be read from device buffers the host writes "
             "before the region";
        return failure();
      }
    }
    return success();
  }
};

} // namespace
