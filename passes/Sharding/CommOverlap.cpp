//===- CommOverlap.cpp - Asynchronous tensor collectives ------------------===//
//
// trainc-tp-comm-overlap: Megatron's overlap of the input-gradient all-reduce (reduce-scatter
// under sequence parallelism) with the weight-gradient GEMM
// (tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication), found from the
// IR's dependencies. For each tensor collective C of a block, in order:
//   - window: the ops after the last sched.collective_wait before C (or the block start) and
//     before C. Those that C's operand does not depend on move to right after C, in order, unless
//     an op staying in the window uses them, they are ops of the mesh or sched dialects, or they
//     have memory effects and another op with memory effects stays after them;
//   - the ops between C and the first user of its result (or the next collective) are then
//     independent of C; if they compute anything, C becomes `sched.async` and a
//     sched.collective_wait before that point replaces its result.
// Only the order of independent ops changes, so values are bitwise those of the sync plan.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"

#include "dialects/Sched/SchedDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"

#define DEBUG_TYPE "trainc-tp-comm-overlap"

namespace mlir::trainc {
#define GEN_PASS_DEF_TENSORPARALLELCOMMOVERLAPPASS
#include "passes/Sharding/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

bool isCollective(Operation *op) {
  return isa<mesh::AllReduceOp, mesh::ReduceScatterOp, mesh::AllGatherOp>(op);
}

/// Ops that never move: communication and scheduling (collectives, p2p, bucket syncs, waits;
/// not sched.accumulate_grad), ops with regions, terminators.
bool isBarrier(Operation *op) {
  if (isa<sched::AccumulateGradOp>(op))
    return false; // a main-grad update: moves as an op with memory effects
  Dialect *d = op->getDialect();
  return isa_and_nonnull<mesh::MeshDialect, sched::SchedDialect>(d) ||
         op->getNumRegions() > 0 || op->hasTrait<OpTrait::IsTerminator>();
}

/// Whether `op` runs a kernel worth overlapping: FLOPs or bytes moved by CostOpInterface
/// (elementwise ops count bytes, no FLOPs; views count neither), or a call (a layer function).
bool computes(Operation *op) {
  if (isa<CallOpInterface>(op) || isa<sched::AccumulateGradOp>(op))
    return true;
  if (auto c = dyn_cast<model::CostOpInterface>(op))
    return c.getFlops() > 0 || c.getBytesMoved() > 0;
  return false;
}

/// Reorders `block` around its collectives and marks those with independent compute async.
/// Returns the number of collectives made async.
int64_t overlapBlock(Block &block) {
  SmallVector<Operation *> collectives;
  for (Operation &op : block)
    if (isCollective(&op))
      collectives.push_back(&op);
  int64_t made = 0;
  Operation *floor = nullptr; // the last wait placed: ops before it never move past it
  for (Operation *c : collectives) {
    // 1. The window (floor, c) and the ops c's operand depends on inside it.
    SmallVector<Operation *> window;
    for (Operation *op = c->getPrevNode(); op && op != floor; op = op->getPrevNode())
      window.push_back(op); // reverse block order
    if (floor && !floor->isBeforeInBlock(c))
      window.clear();
    llvm::DenseSet<Operation *> inWindow(window.begin(), window.end());
    llvm::DenseSet<Operation *> slice;
    SmallVector<Value> todo(c->getOperands().begin(), c->getOperands().end());
    while (!todo.empty()) {
      Operation *d = todo.pop_back_val().getDefiningOp();
      if (!d || !inWindow.count(d) || !slice.insert(d).second)
        continue;
      todo.append(d->getOperands().begin(), d->getOperands().end());
    }
    // Movable, scanning backwards: independent of the operand, not a barrier, every user in the
    // window movable too, and no op with memory effects staying after an op with memory effects
    // that moves.
    llvm::DenseSet<Operation *> movable;
    bool effectStays = false;
    for (Operation *op : window) {
      bool pure = isMemoryEffectFree(op);
      bool ok = !slice.count(op) && !isBarrier(op) && (pure || !effectStays);
      for (Operation *user : op->getUsers())
        if (ok && inWindow.count(user) && !movable.count(user))
          ok = false;
      if (ok)
        movable.insert(op);
      else if (!pure)
        effectStays = true;
    }
    Operation *at = c;
    for (auto it = window.rbegin(); it != window.rend(); ++it)
      if (movable.count(*it)) {
        (*it)->moveAfter(at);
        at = *it;
      }
    // 2. The first op after c that needs its result, or the next collective.
    Value r = c->getResult(0);
    Operation *until = nullptr;
    bool work = false;
    for (Operation *op = c->getNextNode(); op; op = op->getNextNode()) {
      bool uses = llvm::any_of(op->getOperands(), [&](Value v) { return v == r; });
      if (!uses)
        op->walk([&](Operation *nested) {
          if (llvm::is_contained(nested->getOperands(), r))
            uses = true;
        });
      if (uses || isCollective(op) || op->hasTrait<OpTrait::IsTerminator>()) {
        until = op;
        break;
      }
      work = work || computes(op);
    }
    if (!until || !work)
      continue;
    OpBuilder b(until);
    auto wait = b.create<sched::CollectiveWaitOp>(c->getLoc(), r.getType(), r);
    r.replaceAllUsesExcept(wait.getResult(), wait);
    c->setAttr(sched::kAsyncAttrName, b.getUnitAttr());
    floor = wait;
    ++made;
  }
  return made;
}

struct TensorParallelCommOverlapPass
    : public mlir::trainc::impl::TensorParallelCommOverlapPassBase<TensorParallelCommOverlapPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!enable.hasValue() && module->hasAttr(sched::kNoAsyncTpCommAttrName))
      return;
    if (!enable)
      return;
    for (auto fn : module.getOps<func::FuncOp>())
      if (!fn.isDeclaration())
        for (Block &block : fn.getBody())
          overlapBlock(block);
  }
};

} // namespace
