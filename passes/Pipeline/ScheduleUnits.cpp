//===- ScheduleUnits.cpp - Forward and backward units and their order -----===//
//
// Splits each training stage function at its loss seed into a forward unit that returns its
// stash and a backward unit that takes it, and replaces the iteration's microbatch calls by
// sched.forward / sched.backward units in the order of a schedule description. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/Passes.h"
#include "passes/PlanOption.h"

#include "dialects/Model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <optional>

#define DEBUG_TYPE "trainc-schedule-units"

namespace mlir::trainc {
#define GEN_PASS_DEF_SCHEDULEUNITSPASS
#include "passes/Pipeline/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

/// The forward and backward unit functions of one stage function.
struct Units {
  func::FuncOp forward, backward;
  /// Interleaved chunk units: the stage function's results (tokens) the backward returns, by
  /// index (the whole-stage units return all of them).
  SmallVector<unsigned> results;
};

/// True for the op that starts the backward: autodiff's seed (model.fill {model.loss_seed}) or
/// the legacy-mode seed (sched.loss_seed).
bool isLossSeed(Operation &op) {
  return isa<sched::LossSeedOp>(op) || (isa<model::FillOp>(op) && op.hasAttr("model.loss_seed"));
}

/// Copies the discardable attributes of `from` (sched.stage, ...) onto `to`.
void copyFunctionAttrs(func::FuncOp from, func::FuncOp to) {
  for (NamedAttribute a : from->getDiscardableAttrs())
    to->setAttr(a.getName(), a.getValue());
}

class Splitter {
public:
  explicit Splitter(ModuleOp module) : module(module) {}

  /// Splits `fn` into its units (created once per stage function). Errors name the function.
  FailureOr<Units> split(func::FuncOp fn);

  /// Splits `fn`, the stage function of a rank holding `chunkLayers.size() / 2` model chunks
  /// (chunk v's decoder layers are [chunkLayers[2v], chunkLayers[2v + 1])), into one forward and
  /// one backward unit per chunk (created once per stage function). See splitChunks below.
  FailureOr<SmallVector<Units>> splitChunks(func::FuncOp fn, ArrayRef<int64_t> chunkLayers);

private:
  /// Validates `fn` and partitions its body at the loss seed into forward ops (plus the loss
  /// accumulation) and backward ops.
  LogicalResult partition(func::FuncOp fn, SmallVectorImpl<Operation *> &fwdOps,
                          SmallVectorImpl<Operation *> &bwdOps,
                          llvm::DenseSet<Operation *> &inForward);
  /// The stash of a backward of `bwdOps` whose forward is `inForward` (sorted in forward order),
  /// and the backward's ops with the re-materialised views first.
  void stashOf(ArrayRef<Operation *> bwdOps, const llvm::DenseSet<Operation *> &inForward,
               SmallVectorImpl<Value> &stashValues, SmallVectorImpl<Operation *> &bwdWithRemat);
  func::FuncOp buildForward(func::FuncOp fn, ArrayRef<Operation *> ops, ArrayRef<Value> stash,
                            StringRef name);
  /// Returns `fn`'s results (tokens), all or those at `results`; `ops` must define them.
  func::FuncOp buildBackward(func::FuncOp fn, ArrayRef<Operation *> ops, ArrayRef<Value> stash,
                             StringRef name, std::optional<ArrayRef<unsigned>> results = {});
  /// An earlier forward unit with the same signature and body as `fwd`, or null.
  func::FuncOp findEquivalent(func::FuncOp fwd);

  ModuleOp module;
  llvm::StringMap<Units> done;
  llvm::StringMap<SmallVector<Units>> doneChunks;
  SmallVector<func::FuncOp> forwards;
};

LogicalResult Splitter::partition(func::FuncOp fn, SmallVectorImpl<Operation *> &fwdOps,
                                  SmallVectorImpl<Operation *> &bwdOps,
                                  llvm::DenseSet<Operation *> &inForward) {
  if (fn.isDeclaration() || !fn->hasAttr("sched.stage"))
    return fn.emitOpError() << "@" << fn.getSymName()
                            << " is not a stage function with a body (sched.stage)";
  if (!llvm::all_of(fn.getResultTypes(), llvm::IsaPred<sched::TokenType>))
    return fn.emitOpError() << "@" << fn.getSymName() << " returns " << fn.getNumResults()
                            << " values; a stage function returns only tokens (sched.token)";
  Block &body = fn.getBody().front();
  auto seed = llvm::find_if(body, isLossSeed);
  if (seed == body.end())
    return fn.emitOpError() << "@" << fn.getSymName()
                            << " has no loss seed (model.fill {model.loss_seed} or "
                               "sched.loss_seed): nothing marks where its backward starts";

  // Forward: the ops before the seed plus the loss accumulation; backward: the rest.
  bool before = true;
  for (Operation &op : body.without_terminator()) {
    before &= &op != &*seed;
    if (before || isa<sched::AccumulateLossOp>(op)) {
      fwdOps.push_back(&op);
      inForward.insert(&op);
    } else {
      bwdOps.push_back(&op);
    }
  }
  for (Operation *op : fwdOps)
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp(); def && !inForward.contains(def))
        return op->emitOpError() << "is in the forward of @" << fn.getSymName()
                                 << " but reads a value of its backward";
  return success();
}

void Splitter::stashOf(ArrayRef<Operation *> bwdOps, const llvm::DenseSet<Operation *> &inForward,
                       SmallVectorImpl<Value> &stashValues,
                       SmallVectorImpl<Operation *> &bwdWithRemat) {
  // The stash: forward values the backward reads, except what is cheaper to recompute.
  llvm::SetVector<Value> stash;
  llvm::SetVector<Operation *> remat;
  SmallVector<Value> work;
  for (Operation *op : bwdOps)
    llvm::append_range(work, op->getOperands());
  while (!work.empty()) {
    Value v = work.pop_back_val();
    Operation *def = v.getDefiningOp();
    if (!def || !inForward.contains(def))
      continue; // an argument (parameter or input: the backward has it) or a backward value
    if (model::isCheaperToRecompute(def)) {
      if (remat.insert(def))
        llvm::append_range(work, def->getOperands());
      continue;
    }
    stash.insert(v);
  }
  bwdWithRemat.assign(remat.begin(), remat.end());
  llvm::sort(bwdWithRemat, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  llvm::append_range(bwdWithRemat, bwdOps);
  // Stash order: the order the forward computes them (stable, readable dumps).
  stashValues.assign(stash.begin(), stash.end());
  llvm::sort(stashValues, [](Value a, Value b) {
    Operation *x = a.getDefiningOp(), *y = b.getDefiningOp();
    if (x != y)
      return x->isBeforeInBlock(y);
    return cast<OpResult>(a).getResultNumber() < cast<OpResult>(b).getResultNumber();
  });
}

FailureOr<Units> Splitter::split(func::FuncOp fn) {
  auto it = done.find(fn.getSymName());
  if (it != done.end())
    return it->second;
  SmallVector<Operation *> fwdOps, bwdOps;
  llvm::DenseSet<Operation *> inForward;
  if (failed(partition(fn, fwdOps, bwdOps, inForward)))
    return failure();
  SmallVector<Value> stashValues;
  SmallVector<Operation *> bwdWithRemat;
  stashOf(bwdOps, inForward, stashValues, bwdWithRemat);

  Units units;
  units.forward = buildForward(fn, fwdOps, stashValues, (fn.getSymName() + ".forward").str());
  if (func::FuncOp same = findEquivalent(units.forward)) {
    units.forward.erase();
    units.forward = same;
  } else {
    forwards.push_back(units.forward);
  }
  units.backward =
      buildBackward(fn, bwdWithRemat, stashValues, (fn.getSymName() + ".backward").str());
  done[fn.getSymName()] = units;
  return units;
}

// Interleaved 1F1B: a rank holds V model chunks; the stage function computes all of them in a
// row (chunk v's forward ends in a send, chunk v + 1's starts with a recv, and autodiff reverses
// that), and each chunk's forward and backward become units of their own. Every op belongs to
// one chunk: a layer call to its layer's chunk; another op to the chunk of the values it reads,
// or else of the ops that read its results (the recv templates, the embedding); what reads
// nothing of a chunk and is read by none stays with the last chunk's forward (the zero loss of
// a rank without the loss) or backward (the seed), except the gradient syncs: a bucket's starts
// at the end of the backward of the lowest chunk holding one of its parameters, which in the last
// microbatch runs after the others (Megatron starts a chunk's grad sync in its last backward; its
// buckets are per chunk, ours may span chunks).
FailureOr<SmallVector<Units>> Splitter::splitChunks(func::FuncOp fn, ArrayRef<int64_t> chunkLayers) {
  auto it = doneChunks.find(fn.getSymName());
  if (it != doneChunks.end())
    return it->second;
  const int64_t V = int64_t(chunkLayers.size() / 2);
  SmallVector<Operation *> fwdOps, bwdOps;
  llvm::DenseSet<Operation *> inForward;
  if (failed(partition(fn, fwdOps, bwdOps, inForward)))
    return failure();
  Block &body = fn.getBody().front();
  llvm::DenseMap<Operation *, int64_t> chunk;
  for (Operation &op : body.without_terminator()) {
    auto layer = op.getAttrOfType<IntegerAttr>("model.layer_index");
    if (!layer)
      continue;
    int64_t c = -1;
    for (int64_t v = 0; v < V; ++v)
      if (layer.getInt() >= chunkLayers[size_t(2 * v)] &&
          layer.getInt() < chunkLayers[size_t(2 * v + 1)])
        c = v;
    if (c < 0)
      return op.emitOpError() << "runs layer " << layer.getInt()
                              << ", which is in none of this rank's " << V << " model chunks";
    chunk[&op] = c;
  }
  // From the values read, in program order.
  for (Operation &op : body.without_terminator()) {
    if (chunk.count(&op))
      continue;
    for (Value v : op.getOperands())
      if (Operation *def = v.getDefiningOp(); def && chunk.count(def)) {
        // (A copy: inserting may move the map's values.)
        const int64_t c = chunk.lookup(def);
        auto [at, fresh] = chunk.try_emplace(&op, c);
        if (!fresh && at->second != c)
          return op.emitOpError() << "reads values of model chunks " << at->second << " and "
                                  << c
                                  << "; the chunks of a rank exchange values only through "
                                     "mesh.send / mesh.recv";
      }
  }
  // From the readers, in reverse.
  SmallVector<Operation *> all;
  for (Operation &op : body.without_terminator())
    all.push_back(&op);
  for (Operation *op : llvm::reverse(all)) {
    if (chunk.count(op))
      continue;
    for (Operation *user : op->getUsers())
      if (auto found = chunk.find(user); found != chunk.end()) {
        const int64_t c = found->second; // a copy: inserting may move the map's values
        auto [at, fresh] = chunk.try_emplace(op, c);
        if (!fresh && at->second != c)
          return op->emitOpError() << "is read by model chunks " << at->second << " and " << c
                                   << "; a value computed once serves one chunk";
      }
  }
  // Every read within one chunk.
  for (Operation *op : all)
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp();
          def && chunk.count(op) && chunk.count(def) && chunk.lookup(def) != chunk.lookup(op))
        return op->emitOpError() << "is in model chunk " << chunk.lookup(op)
                                 << " but reads a value of chunk " << chunk.lookup(def)
                                 << "; the chunks of a rank exchange values only through "
                                    "mesh.send / mesh.recv";
  SmallVector<SmallVector<Operation *>> fwd, bwd;
  fwd.resize(size_t(V));
  bwd.resize(size_t(V));
  SmallVector<Operation *> syncs;
  for (Operation *op : fwdOps)
    fwd[size_t(chunk.count(op) ? chunk.lookup(op) : V - 1)].push_back(op);
  for (Operation *op : bwdOps) {
    if (chunk.count(op))
      bwd[size_t(chunk.lookup(op))].push_back(op);
    else if (isa<sched::SchedDialect>(op->getDialect()))
      syncs.push_back(op);
    else
      bwd[size_t(V - 1)].push_back(op);
  }
  // A bucket's sync starts at the end of the backward of the lowest chunk holding one of its
  // parameters: in the last microbatch that unit runs after the other chunks' (chunk V - 1's
  // backward first, chunk 0's last), so every contribution is in. Other syncs: chunk 0's end.
  llvm::StringMap<int64_t> chunkOfParam;
  for (Operation *op : bwdOps)
    if (auto acc = dyn_cast<sched::AccumulateGradOp>(op); acc && chunk.count(op))
      chunkOfParam[acc.getParam()] = chunk.lookup(op);
  SmallVector<SmallVector<Operation *>> syncsOf;
  syncsOf.resize(size_t(V));
  for (Operation *op : syncs) {
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp(); def && !llvm::is_contained(syncs, def))
        return op->emitOpError() << "reads a value of the backward; a gradient sync placed at "
                                    "the end of a chunk's backward reads none";
    int64_t c = V;
    auto start = dyn_cast<sched::GradSyncStartOp>(op);
    auto buffer = start ? module.lookupSymbol<sched::GradBufferOp>(start.getBufferAttr())
                        : sched::GradBufferOp();
    if (buffer && int64_t(start.getBucket()) < buffer.getNumBuckets()) {
      const int64_t lo = buffer.getBucketBounds()[size_t(start.getBucket())],
                    hi = buffer.getBucketBounds()[size_t(start.getBucket() + 1)];
      for (auto [i, name] : llvm::enumerate(buffer.getParams())) {
        const int64_t first = buffer.getOffsets()[i], end = first + buffer.getSizes()[i];
        auto it = chunkOfParam.find(cast<FlatSymbolRefAttr>(name).getValue());
        if (first < hi && end > lo && it != chunkOfParam.end())
          c = std::min(c, it->second);
      }
    }
    syncsOf[size_t(c < V ? c : 0)].push_back(op);
  }
  SmallVector<SmallVector<unsigned>> resultsOf;
  resultsOf.resize(size_t(V));
  for (int64_t v = 0; v < V; ++v) {
    llvm::append_range(bwd[size_t(v)], syncsOf[size_t(v)]);
    llvm::DenseSet<Operation *> in(bwd[size_t(v)].begin(), bwd[size_t(v)].end());
    for (auto [i, r] : llvm::enumerate(body.getTerminator()->getOperands()))
      if (Operation *def = r.getDefiningOp(); def && in.contains(def))
        resultsOf[size_t(v)].push_back(unsigned(i));
  }
  for (auto [i, r] : llvm::enumerate(body.getTerminator()->getOperands()))
    if (llvm::none_of(resultsOf, [&](auto &rs) { return llvm::is_contained(rs, unsigned(i)); }))
      return fn.emitOpError() << "@" << fn.getSymName() << " returns token " << i
                              << ", which no chunk's backward produces";

  SmallVector<Units> units;
  for (int64_t v = 0; v < V; ++v) {
    llvm::DenseSet<Operation *> inChunkForward(fwd[size_t(v)].begin(), fwd[size_t(v)].end());
    SmallVector<Value> stashValues;
    SmallVector<Operation *> bwdWithRemat;
    stashOf(bwd[size_t(v)], inChunkForward, stashValues, bwdWithRemat);
    const std::string base = (fn.getSymName() + ".chunk" + Twine(v)).str();
    Units u;
    u.forward = buildForward(fn, fwd[size_t(v)], stashValues, base + ".forward");
    if (func::FuncOp same = findEquivalent(u.forward)) {
      u.forward.erase();
      u.forward = same;
    } else {
      forwards.push_back(u.forward);
    }
    u.results = resultsOf[size_t(v)];
    u.backward = buildBackward(fn, bwdWithRemat, stashValues, base + ".backward",
                               ArrayRef<unsigned>(u.results));
    units.push_back(u);
  }
  doneChunks[fn.getSymName()] = units;
  return units;
}

func::FuncOp Splitter::buildForward(func::FuncOp fn, ArrayRef<Operation *> ops,
                                    ArrayRef<Value> stash, StringRef name) {
  OpBuilder b(fn);
  SmallVector<Type> results;
  for (Value v : stash)
    results.push_back(v.getType());
  auto f = b.create<func::FuncOp>(fn.getLoc(), name,
                                  b.getFunctionType(fn.getArgumentTypes(), results));
  copyFunctionAttrs(fn, f);
  f->removeAttr("sched.last_microbatch");
  f->setAttr("sched.unit", b.getStringAttr("forward"));
  f.setAllArgAttrs(fn.getAllArgAttrs());
  Block *entry = f.addEntryBlock();
  IRMapping map;
  map.map(fn.getArguments(), entry->getArguments());
  b.setInsertionPointToStart(entry);
  for (Operation *op : ops)
    b.clone(*op, map);
  SmallVector<Value> ret;
  for (Value v : stash)
    ret.push_back(map.lookup(v));
  b.create<func::ReturnOp>(fn.getLoc(), ret);
  // Model ops only the backward needed (views it now recomputes) are dead here.
  SmallVector<Operation *> body;
  for (Operation &op : entry->without_terminator())
    body.push_back(&op);
  for (Operation *op : llvm::reverse(body))
    if (isa<model::ModelDialect>(op->getDialect()) && op->getNumResults() > 0 && op->use_empty())
      op->erase();
  return f;
}

func::FuncOp Splitter::buildBackward(func::FuncOp fn, ArrayRef<Operation *> ops,
                                     ArrayRef<Value> stash, StringRef name,
                                     std::optional<ArrayRef<unsigned>> results) {
  Operation *term = fn.getBody().front().getTerminator();
  SmallVector<unsigned> which;
  if (results)
    which.assign(results->begin(), results->end());
  else
    for (unsigned i = 0; i < term->getNumOperands(); ++i)
      which.push_back(i);
  SmallVector<Type> resultTypes;
  for (unsigned i : which)
    resultTypes.push_back(term->getOperand(i).getType());
  OpBuilder b(fn);
  // The stage function's arguments except the tokens it waits on (its forward waits), then the
  // stash; its results are the tokens of the collectives the backward starts.
  SmallVector<Type> args;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<BlockArgument> kept;
  for (BlockArgument a : fn.getArguments())
    if (!isa<sched::TokenType>(a.getType())) {
      kept.push_back(a);
      args.push_back(a.getType());
      argAttrs.push_back(fn.getArgAttrDict(a.getArgNumber())
                             ? fn.getArgAttrDict(a.getArgNumber())
                             : b.getDictionaryAttr({}));
    }
  for (Value v : stash)
    args.push_back(v.getType());
  auto f = b.create<func::FuncOp>(fn.getLoc(), name, b.getFunctionType(args, resultTypes));
  copyFunctionAttrs(fn, f);
  f->removeAttr("sched.first_microbatch");
  f->setAttr("sched.unit", b.getStringAttr("backward"));
  for (size_t k = 0; k < stash.size(); ++k)
    argAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("sched.stash", b.getI64IntegerAttr(int64_t(k)))}));
  f.setAllArgAttrs(argAttrs);
  Block *entry = f.addEntryBlock();
  IRMapping map;
  for (auto [k, a] : llvm::enumerate(kept))
    map.map(a, entry->getArgument(unsigned(k)));
  for (auto [k, v] : llvm::enumerate(stash))
    map.map(v, entry->getArgument(unsigned(kept.size() + k)));
  b.setInsertionPointToStart(entry);
  for (Operation *op : ops)
    b.clone(*op, map);
  SmallVector<Value> ret;
  for (unsigned i : which)
    ret.push_back(map.lookupOrDefault(term->getOperand(i)));
  b.create<func::ReturnOp>(fn.getLoc(), ret);
  return f;
}

func::FuncOp Splitter::findEquivalent(func::FuncOp fwd) {
  for (func::FuncOp other : forwards) {
    if (other.getFunctionType() != fwd.getFunctionType() ||
        other.getAllArgAttrs() != fwd.getAllArgAttrs())
      continue;
    if (OperationEquivalence::isRegionEquivalentTo(&other.getBody(), &fwd.getBody(),
                                                   OperationEquivalence::IgnoreLocations))
      return other;
  }
  return {};
}

} // namespace

SmallVector<std::pair<bool, int64_t>>
mlir::trainc::oneForwardOneBackward(int64_t numStages, int64_t stage, int64_t m) {
  const int64_t warmup = std::min(numStages - stage - 1, m);
  SmallVector<std::pair<bool, int64_t>> order;
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f)
    order.push_back({true, f});
  for (int64_t i = 0; i < m - warmup; ++i) {
    order.push_back({true, f++});
    order.push_back({false, b++});
  }
  for (; b < m; ++b)
    order.push_back({false, b});
  return order;
}

namespace {

struct ScheduleUnitsPass : mlir::trainc::impl::ScheduleUnitsPassBase<ScheduleUnitsPass> {
  using ScheduleUnitsPassBase::ScheduleUnitsPassBase;

  /// ZB-H1: every backward unit split into B and W (splitWeightGradients), one slot layout
  /// (`sched.stash_layout`: the forward's stash then B's values) on the three units of a
  /// microbatch, ordered by zeroBubbleH1.
  LogicalResult zeroBubble(ModuleOp module, OpBuilder &b,
                           SmallVector<std::pair<Units, int64_t>> units,
                           SmallVector<sched::MicrobatchOp> calls, int64_t numStages,
                           int64_t stageIndex) {
    llvm::StringMap<std::pair<func::FuncOp, func::FuncOp>> parts;
    llvm::StringMap<ArrayAttr> layoutOfForward;
    for (auto &[u, index] : units) {
      StringRef name = u.backward.getSymName();
      if (parts.count(name))
        continue;
      FailureOr<std::pair<func::FuncOp, func::FuncOp>> p =
          splitWeightGradients(module, u.backward);
      if (failed(p))
        return failure();
      parts[name] = *p;
      SmallVector<Attribute> layout;
      for (Type t : u.forward.getResultTypes())
        layout.push_back(TypeAttr::get(t));
      for (Type t : p->first.getResultTypes())
        layout.push_back(TypeAttr::get(t));
      ArrayAttr attr = b.getArrayAttr(layout);
      auto [at, fresh] = layoutOfForward.try_emplace(u.forward.getSymName(), attr);
      if (!fresh && at->second != attr)
        return u.forward.emitOpError()
               << "is the forward of backward units whose input-gradient parts return "
                  "different values; zb-h1 gives the three units of a microbatch one stash "
                  "slot layout";
      for (func::FuncOp f : {u.forward, p->first, p->second})
        f->setAttr("sched.stash_layout", attr);
    }
    const int64_t m = int64_t(units.size());
    SmallVector<sched::ForwardOp> fs;
    SmallVector<sched::BackwardInputOp> bs;
    fs.resize(size_t(m));
    bs.resize(size_t(m));
    for (ZeroBubbleStep st : zeroBubbleH1(numStages, stageIndex, m)) {
      const size_t k = size_t(st.microbatch);
      Units u = units[k].first;
      auto [fb, fw] = parts[u.backward.getSymName()];
      if (st.kind == 'F') {
        fs[k] = b.create<sched::ForwardOp>(calls.front().getLoc(),
                                           sched::StashType::get(b.getContext()),
                                           u.forward.getSymName(), units[k].second, 0,
                                           calls[k].getWaits());
      } else if (st.kind == 'B') {
        bs[k] = b.create<sched::BackwardInputOp>(calls.front().getLoc(),
                                                 sched::StashType::get(b.getContext()),
                                                 fb.getSymName(), fs[k].getStash(),
                                                 units[k].second, 0);
      } else {
        auto w = b.create<sched::BackwardWeightOp>(calls.front().getLoc(), fw.getResultTypes(),
                                                   fw.getSymName(), bs[k].getWeightStash(),
                                                   units[k].second, 0);
        for (auto [o, r] : llvm::zip(calls[k].getTokens(), w.getTokens()))
          o.replaceAllUsesWith(r);
      }
    }
    for (auto &entry : parts)
      if (auto old = module.lookupSymbol<func::FuncOp>(entry.getKey()))
        old.erase();
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // The resolved value, as a local that shadows the option (passes/PlanOption.h).
    std::string schedule;
    if (failed(resolvePlanOption(module, this->schedule, "schedule", schedule)))
      return signalPassFailure();
    if (schedule != "no-pipelining" && schedule != "all-forward-first" && schedule != "1f1b" &&
        schedule != "interleaved" && schedule != "zb-h1") {
      module.emitError() << "trainc-schedule-units: schedule '" << schedule
                         << "' is not one of 'no-pipelining', '1f1b', 'interleaved', 'zb-h1', "
                            "'all-forward-first'";
      return signalPassFailure();
    }
    // A pipeline stage's place (trainc-pipeline-split); one stage without it.
    int64_t numStages = 1, stageIndex = 0;
    if (auto a = module->getAttrOfType<IntegerAttr>("trainc.pipeline_size"))
      numStages = a.getInt();
    if (auto a = module->getAttrOfType<IntegerAttr>("trainc.pipeline_stage"))
      stageIndex = a.getInt();
    // The model chunks of an interleaved rank (trainc-pipeline-split virtual-stages).
    int64_t numChunks = 1, groupSize = 0;
    if (auto a = module->getAttrOfType<IntegerAttr>("trainc.pipeline_virtual_stages"))
      numChunks = a.getInt();
    if (auto a = module->getAttrOfType<IntegerAttr>("trainc.microbatch_group_size_per_vp_stage"))
      groupSize = a.getInt();
    if ((numChunks > 1) != (schedule == "interleaved")) {
      module.emitError() << "trainc-schedule-units: schedule '" << schedule << "' with "
                         << numChunks << " model chunk(s) per pipeline stage ("
                         << (numChunks > 1 ? "use 'interleaved'"
                                           : "'interleaved' needs trainc-pipeline-split with "
                                             "virtual-stages > 1")
                         << ")";
      return signalPassFailure();
    }
    if (schedule == "zb-h1" && numStages < 2) {
      module.emitError() << "trainc-schedule-units: schedule 'zb-h1' needs a pipeline stage "
                            "(trainc-pipeline-split with pp > 1); this module has "
                         << numStages << " stage";
      return signalPassFailure();
    }
    if (numStages > 1 && schedule == "no-pipelining") {
      module.emitError() << "trainc-schedule-units: schedule 'no-pipelining' runs one stage; "
                            "this module is stage "
                         << stageIndex << " of " << numStages << " (use '1f1b')";
      return signalPassFailure();
    }
    func::FuncOp step;
    for (func::FuncOp f : module.getOps<func::FuncOp>())
      if (f->hasAttr("sched.iteration") && !f->hasAttr("sched.eval")) {
        if (step) {
          f.emitOpError() << "is a second training iteration function (after @"
                          << step.getSymName() << "); a module has one";
          return signalPassFailure();
        }
        step = f;
      }
    if (!step) {
      module.emitError() << "trainc-schedule-units: no training iteration function (run "
                            "trainc-schedule first)";
      return signalPassFailure();
    }
    step->setAttr("sched.schedule", StringAttr::get(module.getContext(), schedule));
    SmallVector<sched::MicrobatchOp> calls(step.getOps<sched::MicrobatchOp>());
    if (calls.empty())
      return;
    for (size_t i = 1; i < calls.size(); ++i)
      if (calls[i - 1]->getNextNode() != calls[i].getOperation()) {
        calls[i].emitOpError() << "is not next to the previous sched.microbatch; the units of "
                                  "an iteration are ordered as one block";
        return signalPassFailure();
      }
    Splitter splitter(module);
    SmallVector<std::pair<Units, int64_t>> units;
    for (sched::MicrobatchOp mb : calls) {
      auto fn = module.lookupSymbol<func::FuncOp>(mb.getCalleeAttr());
      if (!fn) {
        mb.emitOpError() << "calls @" << mb.getCallee() << ", not a function in this module";
        return signalPassFailure();
      }
      if (schedule == "interleaved" && int64_t(mb.getIndex()) != int64_t(units.size())) {
        mb.emitOpError() << "is microbatch " << mb.getIndex() << " at position " << units.size()
                         << "; the microbatches of an iteration are in index order";
        return signalPassFailure();
      }
      // (Interleaved: the chunk units are split below.)
      FailureOr<Units> u = schedule == "interleaved" ? Units{} : splitter.split(fn);
      if (failed(u))
        return signalPassFailure();
      units.push_back({*u, int64_t(mb.getIndex())});
    }
    OpBuilder b(calls.front());
    // A forward unit takes the tokens its microbatch waited on; the backward unit returns the
    // tokens the microbatch returned.
    auto forward = [&](Units u, size_t k) {
      return b.create<sched::ForwardOp>(calls.front().getLoc(),
                                        sched::StashType::get(b.getContext()),
                                        u.forward.getSymName(), units[k].second, 0,
                                        calls[k].getWaits());
    };
    auto backward = [&](Units u, sched::ForwardOp f, size_t k) {
      auto bwd = b.create<sched::BackwardOp>(f.getLoc(), u.backward.getResultTypes(),
                                             u.backward.getSymName(), f.getStash(),
                                             f.getMicrobatch(), 0);
      for (auto [o, r] : llvm::zip(calls[k].getTokens(), bwd.getTokens()))
        o.replaceAllUsesWith(r);
    };
    if (schedule == "interleaved") {
      auto layers = module->getAttrOfType<DenseI64ArrayAttr>("trainc.pipeline_layers");
      if (!layers || int64_t(layers.size()) != 2 * numChunks) {
        module.emitError() << "trainc-schedule-units: trainc.pipeline_layers does not give the "
                              "[first, end) layers of each of the "
                           << numChunks << " model chunks";
        return signalPassFailure();
      }
      const int64_t m = int64_t(units.size());
      if (std::string e = checkInterleavedSchedule(numStages, numChunks, m, groupSize);
          !e.empty()) {
        module.emitError() << "trainc-schedule-units: " << e;
        return signalPassFailure();
      }
      SmallVector<SmallVector<Units>> chunkUnits;
      for (sched::MicrobatchOp mb : calls) {
        if (!mb.getWaits().empty()) {
          mb.emitOpError() << "waits on tokens (overlapped parameter gathers); the interleaved "
                              "schedule does not split those over model chunks";
          return signalPassFailure();
        }
        FailureOr<SmallVector<Units>> u =
            splitter.splitChunks(module.lookupSymbol<func::FuncOp>(mb.getCalleeAttr()),
                                 layers.asArrayRef());
        if (failed(u))
          return signalPassFailure();
        chunkUnits.push_back(*u);
      }
      SmallVector<SmallVector<sched::ForwardOp>> fs;
      fs.resize(size_t(m));
      for (auto &row : fs)
        row.resize(size_t(numChunks));
      for (ScheduleStep st :
           interleavedOneForwardOneBackward(numStages, stageIndex, numChunks, m, groupSize)) {
        const size_t k = size_t(st.microbatch), v = size_t(st.chunk);
        Units u = chunkUnits[k][v];
        if (st.forward) {
          fs[k][v] = b.create<sched::ForwardOp>(calls.front().getLoc(),
                                                sched::StashType::get(b.getContext()),
                                                u.forward.getSymName(), st.microbatch, st.chunk,
                                                ValueRange{});
          continue;
        }
        auto bwd = b.create<sched::BackwardOp>(fs[k][v].getLoc(), u.backward.getResultTypes(),
                                               u.backward.getSymName(), fs[k][v].getStash(),
                                               st.microbatch, st.chunk);
        for (auto [i, r] : llvm::zip(u.results, bwd.getTokens()))
          calls[k].getTokens()[i].replaceAllUsesWith(r);
      }
    } else if (schedule == "no-pipelining") {
      for (size_t k = 0; k < units.size(); ++k)
        backward(units[k].first, forward(units[k].first, k), k);
    } else if (schedule == "zb-h1") {
      if (failed(zeroBubble(module, b, units, calls, numStages, stageIndex)))
        return signalPassFailure();
    } else if (schedule == "1f1b") {
      // Megatron's forward_backward_pipelining_without_interleaving: warmup forwards, then one
      // forward and one backward each step, then the cooldown backwards.
      SmallVector<std::pair<bool, int64_t>> order =
          oneForwardOneBackward(numStages, stageIndex, int64_t(units.size()));
      SmallVector<sched::ForwardOp> fs(units.size());
      for (auto [isForward, k] : order) {
        if (isForward)
          fs[size_t(k)] = forward(units[size_t(k)].first, size_t(k));
        else
          backward(units[size_t(k)].first, fs[size_t(k)], size_t(k));
      }
    } else {
      SmallVector<sched::ForwardOp> fs;
      for (size_t k = 0; k < units.size(); ++k)
        fs.push_back(forward(units[k].first, k));
      for (auto [k, f] : llvm::enumerate(fs))
        backward(units[k].first, f, k);
    }
    llvm::StringSet<> stages;
    for (sched::MicrobatchOp mb : calls) {
      stages.insert(mb.getCallee());
      mb.erase();
    }
    for (const auto &s : stages) {
      auto fn = module.lookupSymbol<func::FuncOp>(s.getKey());
      if (fn && SymbolTable::symbolKnownUseEmpty(fn, module))
        fn.erase();
    }
    // ZB-H1: the layer backwards that were split (@f.bwd) are called no more.
    if (schedule == "zb-h1")
      for (func::FuncOp f : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
        if (auto d = f->getAttrOfType<StringAttr>("model.derivative");
            d && d.getValue() == "backward" && f.isPrivate() &&
            SymbolTable::symbolKnownUseEmpty(f, module))
          f.erase();
  }
};

} // namespace
