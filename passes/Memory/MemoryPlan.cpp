//===- MemoryPlan.cpp - Static arena offsets from liveness ----------------===//

#include "passes/Memory/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>

#define DEBUG_TYPE "trainc-memory-plan"

namespace mlir::trainc {
#define GEN_PASS_DEF_MEMORYPLANPASS
#include "passes/Memory/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

constexpr int64_t kAlign = 64;
int64_t alignUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
int64_t bytesOf(rt::BufferOp b) {
  MemRefType t = b.getType();
  return t.getNumElements() * int64_t((t.getElementTypeBitWidth() + 7) / 8);
}

/// A block of memory live over [begin, end] (instruction indices of one function, inclusive).
struct Item {
  std::string name; // buffer symbol, or "frame:<function>"
  int64_t size = 0;
  int64_t begin = 0, end = 0;
  int64_t offset = -1; // relative to the function's frame
  int order = 0;
};

bool intersects(const Item &a, const Item &b) { return a.begin <= b.end && b.begin <= a.end; }

/// Greedy first-fit, largest first; returns the frame size.
int64_t place(std::vector<Item> &items) {
  std::vector<Item *> order;
  for (Item &i : items)
    order.push_back(&i);
  std::stable_sort(order.begin(), order.end(), [](Item *a, Item *b) {
    return a->size != b->size ? a->size > b->size : a->order < b->order;
  });
  std::vector<Item *> placed;
  int64_t top = 0;
  for (Item *it : order) {
    // Candidate offsets: 0 and the end of every placed, intersecting item.
    std::vector<int64_t> cands = {0};
    for (Item *p : placed)
      if (intersects(*it, *p))
        cands.push_back(alignUp(p->offset + p->size));
    std::sort(cands.begin(), cands.end());
    for (int64_t c : cands) {
      bool ok = true;
      for (Item *p : placed)
        if (intersects(*it, *p) && c < p->offset + p->size && p->offset < c + it->size) {
          ok = false;
          break;
        }
      if (ok) {
        it->offset = c;
        break;
      }
    }
    placed.push_back(it);
    top = std::max(top, alignUp(it->offset + it->size));
  }
  return top;
}

/// Liveness of the flowing buffers: for each function, the items (buffers used only there, and the
/// frames of its callees) with their intervals; buffers used in several functions are global.
struct Liveness {
  llvm::MapVector<func::FuncOp, std::vector<Item>> perFunction;
  llvm::StringMap<SmallVector<func::FuncOp>> callers; // callee name -> caller functions
  std::vector<std::string> global;                    // flowing buffers used in several functions
  func::FuncOp entry;
  SmallVector<func::FuncOp> roots; // entry and entry points; never active at the same time
};

LogicalResult computeLiveness(ModuleOp module, llvm::StringMap<rt::BufferOp> &buffers,
                              Liveness &live) {
  for (rt::BufferOp b : module.getOps<rt::BufferOp>())
    buffers[b.getSymName()] = b;
  llvm::StringMap<llvm::SmallPtrSet<Operation *, 2>> users; // buffer -> functions using it
  llvm::StringMap<std::pair<int64_t, int64_t>> interval;    // buffer -> [first, last] in its fn
  for (func::FuncOp fn : module.getOps<func::FuncOp>()) {
    if (fn.isDeclaration())
      return fn.emitOpError() << "@" << fn.getSymName() << " is a declaration; every function of a planned program needs a "
                                 "body";
    if (fn->hasAttr("rt.entry"))
      live.entry = fn;
    if (fn->hasAttr("rt.entry") || fn->hasAttr("rt.entry_point"))
      live.roots.push_back(fn);
    llvm::DenseMap<Operation *, int64_t> index;
    int64_t n = 0;
    for (Operation &op : fn.getBody().front())
      index[&op] = n++;
    auto touch = [&](StringRef name, int64_t i) {
      auto [it, fresh] = interval.try_emplace(name, std::make_pair(i, i));
      if (!fresh) {
        it->second.first = std::min(it->second.first, i);
        it->second.second = std::max(it->second.second, i);
      }
    };
    fn.walk([&](rt::BufferRefOp ref) {
      StringRef name = ref.getBuffer();
      users[name].insert(fn);
      touch(name, index[ref]);
      SmallVector<Value> work = {ref.getResult()};
      while (!work.empty()) {
        Value v = work.pop_back_val();
        for (Operation *u : v.getUsers()) {
          touch(name, index.lookup(u));
          if (auto view = dyn_cast<rt::ViewOp>(u))
            work.push_back(view.getResult());
        }
      }
    });
    std::vector<Item> &items = live.perFunction[fn];
    llvm::StringMap<std::pair<int64_t, int64_t>> calls;
    fn.walk([&](func::CallOp call) {
      auto [it, fresh] = calls.try_emplace(call.getCallee(), index[call], index[call]);
      if (!fresh)
        it->second.second = index[call];
    });
    for (auto &[callee, range] : calls) {
      live.callers[callee].push_back(fn);
      Item frame;
      frame.name = ("frame:" + callee).str();
      frame.begin = range.first;
      frame.end = range.second;
      frame.order = int(items.size());
      items.push_back(frame);
    }
    (void)n;
  }
  if (!live.entry)
    return module.emitError() << "trainc-memory-plan: no entry function (rt.entry)";
  int order = 0;
  for (rt::BufferOp b : module.getOps<rt::BufferOp>()) {
    ++order;
    if (rt::isPersistentKind(b.getKind()))
      continue;
    auto &fns = users[b.getSymName()];
    if (fns.size() != 1) {
      live.global.push_back(b.getSymName().str());
      continue;
    }
    auto fn = cast<func::FuncOp>(*fns.begin());
    Item it;
    it.name = b.getSymName().str();
    it.size = bytesOf(b);
    it.begin = interval[it.name].first;
    it.end = interval[it.name].second;
    it.order = order;
    live.perFunction[fn].push_back(it);
  }
  for (auto &[callee, fns] : live.callers)
    if (fns.size() > 1)
      return module.emitError() << "trainc-memory-plan: function @" << callee
                                << " is called from " << fns.size()
                                << " functions; the planner supports one caller per function";
  return success();
}

struct MemoryPlanPass : mlir::trainc::impl::MemoryPlanPassBase<MemoryPlanPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::StringMap<rt::BufferOp> buffers;
    Liveness live;
    if (failed(computeLiveness(module, buffers, live)))
      return signalPassFailure();
    Builder b(module.getContext());
    // Persistent buffers, then global flowing buffers, then the entry's frame.
    int64_t offset = 0;
    for (rt::BufferOp buf : module.getOps<rt::BufferOp>())
      if (rt::isPersistentKind(buf.getKind())) {
        buf.setOffset(offset);
        offset = alignUp(offset + bytesOf(buf));
      }
    int64_t persistent = offset;
    for (const std::string &name : live.global) {
      buffers[name].setOffset(offset);
      offset = alignUp(offset + bytesOf(buffers[name]));
    }
    // Frame sizes bottom-up (callees first), then absolute offsets top-down from the entry.
    llvm::DenseMap<Operation *, int64_t> frameSize;
    std::function<int64_t(func::FuncOp)> size = [&](func::FuncOp fn) -> int64_t {
      auto it = frameSize.find(fn);
      if (it != frameSize.end())
        return it->second;
      std::vector<Item> &items = live.perFunction[fn];
      for (Item &i : items)
        if (StringRef(i.name).starts_with("frame:"))
          i.size = size(module.lookupSymbol<func::FuncOp>(StringRef(i.name).drop_front(6)));
      return frameSize[fn] = place(items);
    };
    std::function<void(func::FuncOp, int64_t)> assign = [&](func::FuncOp fn, int64_t base) {
      for (Item &i : live.perFunction[fn]) {
        if (StringRef(i.name).starts_with("frame:"))
          assign(module.lookupSymbol<func::FuncOp>(StringRef(i.name).drop_front(6)), base + i.offset);
        else
          buffers[i.name].setOffset(base + i.offset);
      }
    };
    // Entries never run at the same time: each one's frame starts at the same base.
    int64_t frames = 0;
    for (func::FuncOp root : live.roots) {
      frames = std::max(frames, size(root));
      assign(root, offset);
    }
    int64_t arena = alignUp(offset + frames);
    // Functions never called from an entry keep no storage.
    for (rt::BufferOp buf : module.getOps<rt::BufferOp>())
      if (int64_t(buf.getOffset()) < 0) {
        buf.emitOpError() << "is not reachable from an entry function";
        return signalPassFailure();
      }
    module->setAttr("rt.arena_bytes", b.getI64IntegerAttr(arena));
    module->setAttr("rt.persistent_bytes", b.getI64IntegerAttr(persistent));
    module->setAttr("rt.flowing_peak_bytes", b.getI64IntegerAttr(arena - persistent));
  }
};

} // namespace

LogicalResult mlir::trainc::verifyMemoryPlan(ModuleOp module) {
  llvm::StringMap<rt::BufferOp> buffers;
  Liveness live;
  if (failed(computeLiveness(module, buffers, live)))
    return failure();
  auto arenaAttr = module->getAttrOfType<IntegerAttr>("rt.arena_bytes");
  if (!arenaAttr)
    return module.emitError() << "no rt.arena_bytes (run trainc-memory-plan)";
  int64_t arena = arenaAttr.getInt();
  struct Placed {
    rt::BufferOp buf;
    int64_t begin, end;
  };
  std::vector<Placed> persistent, all;
  for (rt::BufferOp b : module.getOps<rt::BufferOp>()) {
    if (int64_t(b.getOffset()) < 0 || int64_t(b.getOffset()) + bytesOf(b) > arena)
      return b.emitOpError() << "offset " << int64_t(b.getOffset()) << " + " << bytesOf(b)
                             << " bytes is outside the arena of " << arena << " bytes";
    Placed p{b, int64_t(b.getOffset()), int64_t(b.getOffset()) + bytesOf(b)};
    all.push_back(p);
    if (rt::isPersistentKind(b.getKind()) ||
        llvm::is_contained(live.global, b.getSymName().str()))
      persistent.push_back(p);
  }
  for (Placed &p : persistent)
    for (Placed &q : all)
      if (p.buf != q.buf && p.begin < q.end && q.begin < p.end && p.end > p.begin &&
          q.end > q.begin)
        return p.buf.emitOpError() << "overlaps buffer @" << q.buf.getSymName()
                                   << " though it is live for the whole iteration";
  // The buffers each function uses, itself or through its callees (for a caller's buffer that is
  // live across a call: it must not share memory with anything the callee touches).
  llvm::StringMap<llvm::StringSet<>> uses;
  std::function<const llvm::StringSet<> &(func::FuncOp)> usesOf =
      [&](func::FuncOp f) -> const llvm::StringSet<> & {
    auto it = uses.find(f.getSymName());
    if (it != uses.end())
      return it->second;
    llvm::StringSet<> set;
    uses[f.getSymName()] = {}; // no recursion (the call graph is checked elsewhere)
    f.walk([&](Operation *op) {
      if (auto r = dyn_cast<rt::BufferRefOp>(op))
        set.insert(r.getBuffer());
      else if (auto call = dyn_cast<func::CallOp>(op))
        if (auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee()))
          for (const auto &e : usesOf(callee))
            set.insert(e.getKey());
    });
    return uses[f.getSymName()] = std::move(set);
  };
  auto overlapping = [&](rt::BufferOp x, rt::BufferOp y) {
    return int64_t(x.getOffset()) < int64_t(y.getOffset()) + bytesOf(y) &&
           int64_t(y.getOffset()) < int64_t(x.getOffset()) + bytesOf(x) && bytesOf(x) > 0 &&
           bytesOf(y) > 0;
  };
  for (auto &[fn, items] : live.perFunction)
    for (const Item &a : items)
      for (const Item &c : items) {
        bool aFrame = StringRef(a.name).starts_with("frame:");
        bool cFrame = StringRef(c.name).starts_with("frame:");
        if (&a == &c || aFrame || !intersects(a, c))
          continue;
        rt::BufferOp x = buffers[a.name];
        if (!cFrame) {
          rt::BufferOp y = buffers[c.name];
          if (&a < &c && overlapping(x, y))
            return x.emitOpError() << "overlaps @" << y.getSymName()
                                   << " while both are live in @" << fn.getSymName();
          continue;
        }
        auto callee = module.lookupSymbol<func::FuncOp>(StringRef(c.name).drop_front(6));
        if (!callee)
          continue;
        for (const auto &e : usesOf(callee)) {
          rt::BufferOp y = buffers.lookup(e.getKey());
          if (y && y != x && !rt::isPersistentKind(y.getKind()) && overlapping(x, y))
            return x.emitOpError() << "overlaps @" << y.getSymName() << " of the frame of @"
                                   << callee.getSymName() << ", called while it is live in @"
                                   << fn.getSymName();
        }
      }
  return success();
}
