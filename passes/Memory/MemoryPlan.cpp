//===- MemoryPlan.cpp - Static arena offsets from liveness over the call trace ------------===//
//
// Liveness is computed over the unrolled trace: each root (the rt.entry function, then every
// rt.entry_point function, in module order) is executed symbolically on one timeline, one step per
// executed op that is not a func.call; a func.call expands its callee in place. A buffer is live
// from the first to the last step at which an instance of a function touches it (through an
// rt.buffer_ref, its rt.view chains, or a call taking it as an operand), once per instance, so a
// buffer of a function called twice has two spans. An async rt.collective keeps its operands live
// until the rt.wait on its token.
//
// Layout: persistent buffers first, in module order; above them the flowing (activation,
// workspace) buffers by greedy first-fit: buffer groups first (each one contiguous block, in order
// of first appearance), then single buffers, largest first. Two blocks may share memory iff their
// spans never intersect. Offsets are 64-byte aligned.
//
//===----------------------------------------------------------------------===//

#include "passes/Memory/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <map>

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

//===----------------------------------------------------------------------===//
// Interval lists
//===----------------------------------------------------------------------===//

/// Trace steps [begin, end], inclusive.
struct Span {
  int64_t begin, end;
};
/// Sorted, pairwise disjoint and non-adjacent spans (after `normalize`).
using SpanList = SmallVector<Span, 1>;

/// Sorts `spans` and merges the overlapping or adjacent ones.
void normalize(SpanList &spans) {
  llvm::sort(spans, [](Span a, Span b) { return a.begin < b.begin; });
  size_t n = 0;
  for (Span s : spans) {
    if (n && s.begin <= spans[n - 1].end + 1)
      spans[n - 1].end = std::max(spans[n - 1].end, s.end);
    else
      spans[n++] = s;
  }
  spans.truncate(n);
}

/// Whether two normalized lists share a step. O(|a| log |b|) for |a| <= |b|: each span of the
/// shorter list binary-searches the rest of the longer one.
bool intersects(ArrayRef<Span> a, ArrayRef<Span> b) {
  if (a.empty() || b.empty() || a.back().end < b.front().begin || b.back().end < a.front().begin)
    return false;
  if (a.size() > b.size())
    std::swap(a, b);
  const Span *lo = b.begin();
  for (Span s : a) {
    lo = std::lower_bound(lo, b.end(), s.begin, [](Span x, int64_t t) { return x.end < t; });
    if (lo == b.end())
      return false;
    if (lo->begin <= s.end)
      return true;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Trace unrolling
//===----------------------------------------------------------------------===//

struct FunctionInfo;

/// Where an operand's memory comes from: buffer `buffer` (an index into Liveness::buffers), or
/// argument `arg` of the enclosing function; neither for anything else.
struct Source {
  int buffer = -1;
  int arg = -1;
};

/// One op of a function body, as far as the trace needs it.
struct Step {
  FunctionInfo *callee = nullptr; // func.call
  int64_t asyncToken = -1;        // rt.collective with a token
  int64_t waitToken = -1;         // rt.wait
  SmallVector<Source, 2> sources; // the call's or the async collective's operands
};

/// A buffer touched by a function body: from op `first` to op `last` (indices in the body).
struct Touch {
  unsigned buffer, first, last;
};

/// A function body: its steps and the buffers it touches directly.
struct FunctionInfo {
  func::FuncOp fn;
  std::vector<Step> steps;
  std::vector<Touch> touched;
  bool onStack = false;
};

/// Where a buffer is live when that is one function's business: the same local steps
/// [begin, end] (relative to the instance's first step) of every instance of `fn`, and nothing
/// else. Instances of one function never overlap, so two buffers with the same home conflict iff
/// their local ranges intersect.
struct Home {
  FunctionInfo *fn = nullptr;
  int64_t begin = 0, end = 0;
  bool mixed = false; // touched by several functions, or at different local steps, or async
  bool valid() const { return fn && !mixed; }
};

/// Liveness of the flowing buffers over the unrolled trace of every root.
struct Liveness {
  std::vector<rt::BufferOp> buffers; // module order
  llvm::StringMap<unsigned> index;   // buffer name -> position in `buffers`
  std::vector<SpanList> spans;       // per buffer, normalized; empty for persistent buffers
  std::vector<Home> homes;           // per buffer
  std::vector<bool> referenced;      // per buffer: some function has an rt.buffer_ref of it
  /// (first step, function) of every stretch of the trace that one function body runs.
  std::vector<std::pair<int64_t, func::FuncOp>> segments;
  int64_t steps = 0; // trace length

  /// Buffer `b` (op handles are not const-correct).
  rt::BufferOp buffer(unsigned b) const { return rt::BufferOp(buffers[b]); }
  bool flowing(unsigned b) const { return !rt::isPersistentKind(buffer(b).getKind()); }
  /// The innermost function running trace step `step`.
  func::FuncOp functionAt(int64_t step) const {
    auto it = std::upper_bound(segments.begin(), segments.end(), step,
                               [](int64_t s, const auto &seg) { return s < seg.first; });
    return std::prev(it)->second;
  }
};

/// The buffer or function argument `v` is (a part of), through rt.view chains.
Source sourceOf(Value v, const Liveness &live) {
  while (true) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return isa<func::FuncOp>(arg.getOwner()->getParentOp()) ? Source{-1, int(arg.getArgNumber())}
                                                              : Source{};
    Operation *def = v.getDefiningOp();
    if (auto view = dyn_cast_or_null<rt::ViewOp>(def)) {
      v = view.getSource();
      continue;
    }
    if (auto ref = dyn_cast_or_null<rt::BufferRefOp>(def)) {
      auto it = live.index.find(ref.getBuffer());
      return Source{it == live.index.end() ? -1 : int(it->second), -1};
    }
    return Source{};
  }
}

/// The buffers `fn` touches: each rt.buffer_ref result and its views are live at every op (of the
/// body's block) that uses them, the ref itself included.
void collectTouches(func::FuncOp fn, const llvm::DenseMap<Operation *, unsigned> &index,
                    Liveness &live, FunctionInfo &info) {
  Block &body = fn.getBody().front();
  llvm::MapVector<unsigned, std::pair<unsigned, unsigned>> range;
  auto touch = [&](unsigned buffer, Operation *op) {
    Operation *top = body.findAncestorOpInBlock(*op);
    if (!top)
      return;
    unsigned i = index.lookup(top);
    auto [it, fresh] = range.try_emplace(buffer, i, i);
    if (!fresh) {
      it->second.first = std::min(it->second.first, i);
      it->second.second = std::max(it->second.second, i);
    }
  };
  fn.walk([&](rt::BufferRefOp ref) {
    auto found = live.index.find(ref.getBuffer());
    if (found == live.index.end())
      return;
    unsigned buffer = found->second;
    live.referenced[buffer] = true;
    touch(buffer, ref);
    SmallVector<Value> work = {ref.getResult()};
    while (!work.empty()) {
      Value v = work.pop_back_val();
      for (Operation *u : v.getUsers()) {
        touch(buffer, u);
        if (auto view = dyn_cast<rt::ViewOp>(u))
          work.push_back(view.getResult());
      }
    }
  });
  for (auto &[buffer, r] : range)
    info.touched.push_back(Touch{buffer, r.first, r.second});
}

/// Fills `info` from the body of `fn`; fails on a declaration or a call of an unknown function.
LogicalResult buildFunctionInfo(func::FuncOp fn, llvm::StringMap<FunctionInfo> &functions,
                                Liveness &live, FunctionInfo &info) {
  if (fn.isDeclaration())
    return fn.emitOpError() << "@" << fn.getSymName()
                            << " is a declaration; every function of a planned program needs a "
                               "body";
  info.fn = fn;
  llvm::DenseMap<Operation *, unsigned> index;
  for (Operation &op : fn.getBody().front()) {
    index[&op] = unsigned(info.steps.size());
    Step &step = info.steps.emplace_back();
    auto sources = [&](ValueRange operands) {
      for (Value v : operands)
        step.sources.push_back(sourceOf(v, live));
    };
    if (auto call = dyn_cast<func::CallOp>(op)) {
      auto it = functions.find(call.getCallee());
      if (it == functions.end())
        return call.emitOpError() << "calls @" << call.getCallee()
                                  << ", not a function of the module";
      step.callee = &it->second;
      sources(call.getOperands());
    } else if (auto c = dyn_cast<rt::CollectiveOp>(op); c && int64_t(c.getToken()) >= 0) {
      step.asyncToken = int64_t(c.getToken());
      sources(c->getOperands());
    } else if (auto r = dyn_cast<rt::RecvOp>(op); r && int64_t(r.getToken()) >= 0) {
      step.asyncToken = int64_t(r.getToken()); // written until its wait
      sources(r->getOperands());
    } else if (auto s = dyn_cast<rt::SendOp>(op); s && int64_t(s.getToken()) >= 0) {
      step.asyncToken = int64_t(s.getToken()); // read until its wait
      sources(s->getOperands());
    } else if (auto w = dyn_cast<rt::WaitOp>(op)) {
      step.waitToken = int64_t(w.getToken());
    }
  }
  collectTouches(fn, index, live, info);
  return success();
}

/// Unrolls roots onto the trace of `live`, recording every flowing buffer's spans.
class Tracer {
public:
  explicit Tracer(Liveness &live) : live(live) {}

  /// Appends the execution of `root` to the trace; fails on recursion.
  LogicalResult runRoot(FunctionInfo &root) {
    if (failed(run(root, {})))
      return failure();
    // A token never waited on keeps its operands live to the end of the root.
    for (auto &[token, p] : pending)
      for (int b : p.buffers)
        addAsync(b, Span{p.step, live.steps - 1});
    pending.clear();
    return success();
  }

private:
  struct Pending {
    int64_t step;
    SmallVector<int, 2> buffers;
  };

  LogicalResult run(FunctionInfo &f, ArrayRef<int> args);
  SmallVector<int, 2> resolve(ArrayRef<Source> sources, ArrayRef<int> args) const {
    SmallVector<int, 2> out;
    for (Source s : sources)
      out.push_back(s.arg < 0 ? s.buffer : s.arg < int(args.size()) ? args[s.arg] : -1);
    return out;
  }
  /// An async collective on `buffers` at the current step, holding `token`.
  void issue(int64_t token, SmallVector<int, 2> buffers) {
    complete(token); // reissued before its wait: the old operands end here
    pending[token] = Pending{live.steps, std::move(buffers)};
  }
  /// The wait on `token` at the current step: the collective's operands are live until here.
  void complete(int64_t token) {
    auto it = pending.find(token);
    if (it == pending.end())
      return;
    for (int b : it->second.buffers)
      addAsync(b, Span{it->second.step, live.steps});
    pending.erase(it);
  }
  void addAsync(int b, Span s) {
    if (b < 0 || !live.flowing(b))
      return;
    live.spans[b].push_back(s);
    live.homes[b].mixed = true;
  }
  void addTouch(unsigned b, Span s, FunctionInfo *f, int64_t base) {
    if (!live.flowing(b))
      return;
    live.spans[b].push_back(s);
    Home &h = live.homes[b];
    if (!h.fn) {
      h.fn = f;
      h.begin = s.begin - base;
      h.end = s.end - base;
    } else if (h.fn != f || h.begin != s.begin - base || h.end != s.end - base) {
      h.mixed = true;
    }
  }

  Liveness &live;
  llvm::DenseMap<int64_t, Pending> pending; // async token -> its collective's step and buffers
};

/// Runs one instance of `f` whose arguments are the buffers `args` (-1: not a buffer).
LogicalResult Tracer::run(FunctionInfo &f, ArrayRef<int> args) {
  if (f.onStack)
    return f.fn.emitOpError() << "@" << f.fn.getSymName()
                              << " calls itself; the memory planner needs an acyclic call graph";
  f.onStack = true;
  int64_t base = live.steps;
  live.segments.push_back({base, f.fn});
  SmallVector<Span> at(f.steps.size()); // the steps each op ran
  for (auto [i, step] : llvm::enumerate(f.steps)) {
    int64_t begin = live.steps;
    if (step.callee) {
      if (failed(run(*step.callee, resolve(step.sources, args))))
        return failure();
      live.segments.push_back({live.steps, f.fn});
    } else {
      if (step.asyncToken >= 0)
        issue(step.asyncToken, resolve(step.sources, args));
      if (step.waitToken >= 0)
        complete(step.waitToken);
      ++live.steps;
    }
    at[i] = Span{begin, live.steps - 1};
  }
  for (const Touch &t : f.touched)
    addTouch(t.buffer, Span{at[t.first].begin, at[t.last].end}, &f, base);
  f.onStack = false;
  return success();
}

/// Unrolls every root of `module` (rt.entry first, then each rt.entry_point in module order) and
/// fills `live`. Fails (with an error) on a function declaration, a missing entry or recursion.
LogicalResult computeLiveness(ModuleOp module, Liveness &live) {
  for (rt::BufferOp b : module.getOps<rt::BufferOp>()) {
    live.index[b.getSymName()] = unsigned(live.buffers.size());
    live.buffers.push_back(b);
  }
  live.spans.resize(live.buffers.size());
  live.homes.resize(live.buffers.size());
  live.referenced.assign(live.buffers.size(), false);
  llvm::StringMap<FunctionInfo> functions;
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    functions[fn.getSymName()];
  FunctionInfo *entry = nullptr;
  SmallVector<FunctionInfo *> points;
  for (func::FuncOp fn : module.getOps<func::FuncOp>()) {
    FunctionInfo &info = functions[fn.getSymName()];
    if (failed(buildFunctionInfo(fn, functions, live, info)))
      return failure();
    if (fn->hasAttr("rt.entry"))
      entry = entry ? entry : &info;
    else if (fn->hasAttr("rt.entry_point"))
      points.push_back(&info);
  }
  if (!entry)
    return module.emitError() << "trainc-memory-plan: no entry function (rt.entry)";
  Tracer tracer(live);
  if (failed(tracer.runRoot(*entry)))
    return failure();
  for (FunctionInfo *p : points)
    if (failed(tracer.runRoot(*p)))
      return failure();
  for (SpanList &s : live.spans)
    normalize(s);
  return success();
}

//===----------------------------------------------------------------------===//
// Placement
//===----------------------------------------------------------------------===//

/// Flowing buffers placed as one contiguous block: a buffer group, or a single buffer.
struct Item {
  StringRef group;                   // empty for a single buffer
  SmallVector<unsigned, 1> members;  // buffer indices, module order
  SmallVector<int64_t, 1> memberAt;  // each member's offset in the block (bytes, aligned)
  int64_t size = 0;                  // bytes (aligned for a group)
  SpanList spans;                    // union of the members' spans
  Home home;                         // valid only for a single buffer with a home
  int64_t offset = -1;               // bytes above the persistent buffers
};

bool conflicts(const Item &a, const Item &b) {
  if (a.home.valid() && b.home.valid() && a.home.fn == b.home.fn)
    return a.home.begin <= b.home.end && b.home.begin <= a.home.end;
  return intersects(a.spans, b.spans);
}

/// The items of one home function, by local range: a max-end segment tree over the items sorted
/// by local begin, so that finding those whose range meets [a, b] costs O((hits + 1) log n).
class LocalIndex {
public:
  void add(Item *it) { byBegin.push_back(it); }
  void build() {
    llvm::stable_sort(byBegin, [](Item *x, Item *y) { return x->home.begin < y->home.begin; });
    maxEnd.assign(4 * std::max<size_t>(byBegin.size(), 1), 0);
    if (!byBegin.empty())
      fill(1, 0, byBegin.size());
  }
  /// Calls f on every item whose local range meets [a, b].
  template <typename F> void forEachMeeting(int64_t a, int64_t b, F f) const {
    size_t limit = std::upper_bound(byBegin.begin(), byBegin.end(), b,
                                    [](int64_t t, Item *x) { return t < x->home.begin; }) -
                   byBegin.begin();
    if (limit)
      visit(1, 0, byBegin.size(), limit, a, f);
  }

private:
  int64_t fill(size_t node, size_t lo, size_t hi) {
    if (hi - lo == 1)
      return maxEnd[node] = byBegin[lo]->home.end;
    size_t mid = (lo + hi) / 2;
    return maxEnd[node] = std::max(fill(2 * node, lo, mid), fill(2 * node + 1, mid, hi));
  }
  template <typename F>
  void visit(size_t node, size_t lo, size_t hi, size_t limit, int64_t a, F &f) const {
    if (lo >= limit || maxEnd[node] < a)
      return;
    if (hi - lo == 1)
      return f(byBegin[lo]);
    size_t mid = (lo + hi) / 2;
    visit(2 * node, lo, mid, limit, a, f);
    visit(2 * node + 1, mid, hi, limit, a, f);
  }

  std::vector<Item *> byBegin;
  std::vector<int64_t> maxEnd;
};

/// Greedy first-fit in the given order: each item goes to the lowest aligned offset (0 or the end
/// of a placed item) clear of every placed item it conflicts with. Returns the top in bytes.
/// Placed items with the candidate's home are found by local range (LocalIndex); the others are
/// tested span list against span list.
int64_t place(ArrayRef<Item *> order) {
  llvm::MapVector<FunctionInfo *, LocalIndex> local;           // all items with a home
  llvm::MapVector<FunctionInfo *, std::vector<Item *>> placed; // nullptr: items without a home
  for (Item *it : order)
    if (it->home.valid())
      local[it->home.fn].add(it);
  for (auto &[fn, index] : local)
    index.build();
  std::vector<std::pair<int64_t, int64_t>> busy; // [begin, end) of the conflicting placed items
  auto block = [&](Item *p) {
    if (p->offset >= 0 && p->size > 0)
      busy.push_back({p->offset, p->offset + p->size});
  };
  int64_t top = 0;
  for (Item *it : order) {
    busy.clear();
    FunctionInfo *home = it->home.valid() ? it->home.fn : nullptr;
    if (it->size > 0) {
      if (home)
        local[home].forEachMeeting(it->home.begin, it->home.end, block);
      for (auto &[fn, items] : placed)
        if (!home || fn != home)
          for (Item *p : items)
            if (conflicts(*it, *p))
              block(p);
    }
    llvm::sort(busy);
    int64_t at = 0;
    for (auto [begin, end] : busy) {
      if (begin >= at + it->size)
        break;
      at = std::max(at, alignUp(end));
    }
    it->offset = at;
    placed[home].push_back(it);
    top = std::max(top, alignUp(at + it->size));
  }
  return top;
}

/// The flowing buffers as items, in placement order: groups (in order of first appearance), then
/// single buffers, largest first. Fails on a buffer a function touches but no root executes.
FailureOr<std::vector<Item>> flowingItems(const Liveness &live) {
  llvm::MapVector<StringRef, Item> groups;
  std::vector<Item> singles;
  for (unsigned b = 0; b < live.buffers.size(); ++b) {
    rt::BufferOp buf = live.buffer(b);
    if (!live.flowing(b))
      continue;
    if (live.referenced[b] && live.spans[b].empty())
      return buf.emitOpError() << "is not reachable from an entry function";
    std::optional<StringRef> group = buf.getGroup();
    Item &it = group ? groups[*group] : singles.emplace_back();
    it.group = group.value_or(StringRef());
    it.members.push_back(b);
    it.memberAt.push_back(it.size);
    it.size = group ? alignUp(it.size + bytesOf(buf)) : bytesOf(buf);
    it.spans.append(live.spans[b].begin(), live.spans[b].end());
    if (!group)
      it.home = live.homes[b];
  }
  std::stable_sort(singles.begin(), singles.end(),
                   [](const Item &a, const Item &b) { return a.size > b.size; });
  std::vector<Item> items;
  for (auto &[name, it] : groups) {
    normalize(it.spans);
    items.push_back(std::move(it));
  }
  for (Item &it : singles)
    items.push_back(std::move(it));
  return items;
}

struct MemoryPlanPass : mlir::trainc::impl::MemoryPlanPassBase<MemoryPlanPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    Liveness live;
    if (failed(computeLiveness(module, live)))
      return signalPassFailure();
    FailureOr<std::vector<Item>> items = flowingItems(live);
    if (failed(items))
      return signalPassFailure();
    int64_t persistent = 0;
    for (rt::BufferOp buf : live.buffers)
      if (rt::isPersistentKind(buf.getKind())) {
        buf.setOffset(persistent);
        persistent = alignUp(persistent + bytesOf(buf));
      }
    std::vector<Item *> order;
    for (Item &it : *items)
      order.push_back(&it);
    int64_t arena = persistent + place(order);
    Builder b(module.getContext());
    SmallVector<NamedAttribute> groupBytes;
    for (Item &it : *items) {
      for (auto [m, at] : llvm::zip(it.members, it.memberAt))
        live.buffers[m].setOffset(persistent + it.offset + at);
      if (!it.group.empty())
        groupBytes.push_back(b.getNamedAttr(it.group, b.getI64IntegerAttr(it.size)));
    }
    module->setAttr("rt.arena_bytes", b.getI64IntegerAttr(arena));
    module->setAttr("rt.persistent_bytes", b.getI64IntegerAttr(persistent));
    module->setAttr("rt.flowing_peak_bytes", b.getI64IntegerAttr(arena - persistent));
    if (groupBytes.empty())
      module->removeAttr("rt.group_bytes");
    else
      module->setAttr("rt.group_bytes", b.getDictionaryAttr(groupBytes));
  }
};

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

/// A buffer's bytes [begin, end) in the arena.
struct Bytes {
  unsigned buffer;
  int64_t begin, end;
};

/// Reports `x` and `y` (the earlier declared one carries the error) overlapping while both live.
LogicalResult overlapError(const Liveness &live, unsigned x, unsigned y, int64_t step) {
  if (y < x)
    std::swap(x, y);
  return live.buffer(x).emitOpError()
         << "overlaps @" << live.buffer(y).getSymName() << " while both are live (trace step "
         << step << " in @" << live.functionAt(step).getSymName() << ")";
}

/// Persistent buffers are live always: none may share a byte with any other buffer.
LogicalResult verifyPersistent(const Liveness &live, ArrayRef<Bytes> all) {
  std::vector<Bytes> persistent;
  for (const Bytes &r : all)
    if (!live.flowing(r.buffer))
      persistent.push_back(r);
  llvm::sort(persistent, [](const Bytes &a, const Bytes &b) { return a.begin < b.begin; });
  auto error = [&](unsigned p, unsigned o) {
    if (!live.flowing(o) && o < p)
      std::swap(p, o);
    return live.buffer(p).emitOpError() << "overlaps buffer @" << live.buffer(o).getSymName()
                                        << " though it is live for the whole iteration";
  };
  // Pairwise disjoint first, so that their ends are sorted too.
  for (size_t i = 1; i < persistent.size(); ++i)
    if (persistent[i].begin < persistent[i - 1].end)
      return error(persistent[i - 1].buffer, persistent[i].buffer);
  for (const Bytes &q : all) {
    // The first persistent range ending after q begins; the one before it ends at or before.
    auto it = std::upper_bound(persistent.begin(), persistent.end(), q.begin,
                               [](int64_t x, const Bytes &p) { return x < p.end; });
    for (; it != persistent.end() && it->begin < q.end; ++it)
      if (it->buffer != q.buffer)
        return error(it->buffer, q.buffer);
  }
  return success();
}

/// Flowing buffers: a sweep over the trace holding the byte ranges of the live ones.
LogicalResult verifyFlowing(const Liveness &live, ArrayRef<Bytes> all) {
  struct Event {
    int64_t step;
    bool insert; // removals (at end + 1) come before insertions of the same step
    const Bytes *bytes;
  };
  std::vector<Event> events;
  for (const Bytes &r : all)
    if (live.flowing(r.buffer))
      for (Span s : live.spans[r.buffer]) {
        events.push_back(Event{s.begin, true, &r});
        events.push_back(Event{s.end + 1, false, &r});
      }
  llvm::sort(events, [](const Event &a, const Event &b) {
    return a.step != b.step ? a.step < b.step : a.insert < b.insert;
  });
  std::map<int64_t, const Bytes *> liveBytes; // begin -> the live buffer there
  for (const Event &e : events) {
    if (!e.insert) {
      liveBytes.erase(e.bytes->begin);
      continue;
    }
    auto next = liveBytes.lower_bound(e.bytes->begin);
    if (next != liveBytes.end() && next->first < e.bytes->end)
      return overlapError(live, e.bytes->buffer, next->second->buffer, e.step);
    if (next != liveBytes.begin() && std::prev(next)->second->end > e.bytes->begin)
      return overlapError(live, e.bytes->buffer, std::prev(next)->second->buffer, e.step);
    liveBytes.emplace(e.bytes->begin, e.bytes);
  }
  return success();
}

} // namespace

LogicalResult mlir::trainc::verifyMemoryPlan(ModuleOp module) {
  Liveness live;
  if (failed(computeLiveness(module, live)))
    return failure();
  auto arenaAttr = module->getAttrOfType<IntegerAttr>("rt.arena_bytes");
  if (!arenaAttr)
    return module.emitError() << "no rt.arena_bytes (run trainc-memory-plan)";
  int64_t arena = arenaAttr.getInt();
  std::vector<Bytes> all; // the buffers with at least one byte
  for (auto [i, b] : llvm::enumerate(live.buffers)) {
    int64_t offset = int64_t(b.getOffset());
    if (offset < 0 || offset + bytesOf(b) > arena)
      return b.emitOpError() << "offset " << offset << " + " << bytesOf(b)
                             << " bytes is outside the arena of " << arena << " bytes";
    if (bytesOf(b) > 0)
      all.push_back(Bytes{unsigned(i), offset, offset + bytesOf(b)});
  }
  if (failed(verifyPersistent(live, all)))
    return failure();
  return verifyFlowing(live, all);
}
