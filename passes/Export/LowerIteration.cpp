//===- LowerIteration.cpp - the iteration as calls of units ------------===//

#include "passes/Export/Lowering.h"

using namespace mlir;
using namespace mlir::trainc;

namespace mlir::trainc::lower_to_rt {

LogicalResult Lowering::lowerIteration(func::FuncOp fn) {
  OpBuilder mb(module.getContext());
  mb.setInsertionPoint(fn);
  auto nf = mb.create<func::FuncOp>(fn.getLoc(), (fn.getSymName() + ".rt").str(),
                                    mb.getFunctionType({}, {}));
  bool isEval = fn->hasAttr("sched.eval");
  if (isEval)
    nf->setAttr("rt.entry_point", mb.getStringAttr(fn.getSymName()));
  else
    nf->setAttr("rt.entry", mb.getUnitAttr());
  OpBuilder ob(module.getContext());
  ob.setInsertionPointToStart(nf.addEntryBlock());
  UnitState units;
  if (layout.distributed()) {
    // Each bucket's update goes where its last sched.adamw is (the updates are in layout order and
    // the bucket's all-gather follows that one).
    shardUpdates.clear();
    std::map<int64_t, std::pair<Operation *, SmallVector<int64_t>>> byBucket;
    for (sched::AdamWOp adam : fn.getBody().front().getOps<sched::AdamWOp>()) {
      auto it = layoutIndex.find(adam.getParam());
      if (it == layoutIndex.end())
        continue; // lowerAdamW names the parameter
      size_t i = it->second;
      int64_t k = layout.bucketOf(i), lo = layout.bound(k);
      auto &[last, segments] = byBucket[k];
      last = adam;
      segments.append({layout.geo.offsets[i] - lo, layout.geo.offsets[i] + layout.geo.sizes[i] - lo,
                       adam.getDecay() ? 1 : 0});
    }
    for (auto &[k, entry] : byBucket)
      shardUpdates[entry.first] = {k, std::move(entry.second)};
  }
  for (Operation &op : fn.getBody().front()) {
    Location loc = sourceLoc(op);
    if (!isa<sched::MicrobatchOp, sched::ForwardOp, sched::BackwardOp, sched::BackwardInputOp,
             sched::BackwardWeightOp>(op)) {
      // --overlap-p2p-comm: the units' async sends complete before what follows them.
      for (auto &[type, pool] : sendSlots)
        for (auto &e : pool)
          if (e.second >= 0) {
            ob.create<rt::WaitOp>(loc, ob.getI64IntegerAttr(e.second));
            e.second = -1;
          }
    }
    if (isa<sched::ZeroLossesOp>(op)) {
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("loss_sum", "output"))});
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("num_tokens", "output"))});
    } else if (isa<sched::ZeroGradsOp>(op)) {
      if (layout.mainGrad)
        kernel(ob, loc, "fill", {}, {ref(ob, loc, layout.mainGrad)});
      else
        for (ParamInfo &p : params)
          kernel(ob, loc, "fill", {}, {ref(ob, loc, p.grad)});
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("loss_sum", "output"))});
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("num_tokens", "output"))});
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("one", "workspace"))}, {f64("value", 1)});
    } else if (auto io = dyn_cast<sched::FillInputsOp>(op)) {
      // Device scalars the control plane fills every iteration.
      scalar("lr", "scalar");
      scalar("weight_decay", "scalar");
      scalar("step", "scalar");
      ob.create<rt::HostIOOp>(loc, rt::HostIOKind::fill_inputs, io.getLabel());
    } else if (auto io = dyn_cast<sched::ReadOutputsOp>(op)) {
      scalar("grad_norm", "output");
      scalar("update_successful", "output");
      ob.create<rt::HostIOOp>(loc, rt::HostIOKind::read_outputs, io.getLabel());
    } else if (isa<sched::MicrobatchOp, sched::ForwardOp, sched::BackwardOp,
                   sched::BackwardInputOp, sched::BackwardWeightOp>(op)) {
      if (failed(lowerUnit(ob, loc, op, isEval, units)))
        return failure();
    } else if (auto fin = dyn_cast<sched::FinalizeGradsOp>(op)) {
      allReduceSharedGrads(ob, loc);
      if (layout.mainGrad) {
        // Only this rank's shards hold reduced gradients under the distributed optimizer.
        Value inv;
        if (fin.getNormalization() == sched::Normalization::per_token) {
          inv = ref(ob, loc, scalar("inv_num_tokens", "workspace"));
          kernel(ob, loc, "reciprocal", {ref(ob, loc, scalar("num_tokens", "output"))}, {inv});
        }
        auto mainGradShards = [&] {
          SmallVector<Value> shards;
          if (layout.distributed())
            for (int64_t k = 0; k < layout.numBuckets(); ++k)
              shards.push_back(shardOf(ob, loc, layout.mainGrad, k));
          else
            shards.push_back(ref(ob, loc, layout.mainGrad));
          return shards;
        };
        if (inv || layout.dp() > 1) {
          for (Value g : mainGradShards()) {
            if (inv)
              kernel(ob, loc, "scale_by", {g, inv}, {g}, {}, {0});
            else // legacy mode: Megatron averages the gradients over DP
              kernel(ob, loc, "scale", {g}, {g}, {f64("alpha", 1.0 / double(layout.dp()))}, {0});
          }
        }
        if (lossScaler)
          unscaleGrads(ob, loc, mainGradShards());
      } else if (fin.getNormalization() == sched::Normalization::per_token) {
        Value inv = ref(ob, loc, scalar("inv_num_tokens", "workspace"));
        kernel(ob, loc, "reciprocal", {ref(ob, loc, scalar("num_tokens", "output"))}, {inv});
        for (ParamInfo &p : params) {
          Value g = ref(ob, loc, p.grad);
          kernel(ob, loc, "scale_by", {g, inv}, {g}, {}, {0});
        }
      }
      if (lossScaler && !layout.mainGrad) {
        SmallVector<Value> grads;
        for (ParamInfo &p : params)
          grads.push_back(ref(ob, loc, p.grad));
        unscaleGrads(ob, loc, grads);
      }
    } else if (auto clip = dyn_cast<sched::ClipGradNormOp>(op)) {
      lowerGradNorm(ob, loc, clip.getMaxNorm().convertToDouble());
    } else if (isa<sched::GradSyncWaitOp, sched::ParamGatherStartOp, sched::ParamGatherWaitOp,
                   sched::ReduceLossesOp>(op)) {
      if (failed(lowerDataParallelOp(ob, loc, op)))
        return failure();
    } else if (auto adam = dyn_cast<sched::AdamWOp>(op)) {
      if (failed(lowerAdamW(ob, loc, adam)))
        return failure();
    } else if (isa<func::ReturnOp>(op)) {
      // The tokens the training iteration returns stay in flight into the next one.
      for (Value t : op.getOperands()) {
        FailureOr<int64_t> id = tokenId(t, &op);
        if (failed(id))
          return failure();
        if (!isEval)
          carriedTokens.push_back(*id);
      }
      ob.create<func::ReturnOp>(op.getLoc());
    } else {
      return op.emitOpError() << "cannot be lowered to rt in an iteration function";
    }
  }
  if (!units.busySlots.empty())
    return fn.emitOpError() << "ends with " << units.busySlots.size()
                            << " stash(es) that no sched.backward consumed";
  if (!isEval) {
    // The unit order the schedule pass chose (the plan's, or its explicit override).
    module->setAttr("rt.schedule",
                    b.getStringAttr(fn->hasAttr("sched.schedule")
                                        ? fn->getAttrOfType<StringAttr>("sched.schedule").getValue()
                                        : StringRef("no-pipelining")));
    if (stashSlots > 0)
      module->setAttr("rt.stash_slots", b.getI64IntegerAttr(stashSlots));
    if (stashBSlots > 0) // ZB-H1: slots of the stash parts freed at B
      module->setAttr("rt.stash_b_slots", b.getI64IntegerAttr(stashBSlots));
    module->setAttr("trainc.flops_per_iteration", b.getF64FloatAttr(units.flops));
    module->setAttr("trainc.bytes_per_iteration", b.getF64FloatAttr(units.bytes));
    module->setAttr("trainc.num_microbatches", b.getI64IntegerAttr(units.forwards));
  }
  return success();
}

LogicalResult Lowering::lowerUnit(OpBuilder &ob, Location loc, Operation &op, bool isEval,
                                  UnitState &st) {
  // One call of a stage function; its FLOPs and bytes count towards the iteration's.
  auto call = [&](StringRef callee, ArrayRef<Value> givenArgs, const Twine &label,
                  int64_t slot = -1) {
    SmallVector<Value> args(givenArgs);
    if (overlapUnits.contains(callee))
      overlappedReceives(ob, loc, (callee + ".rt").str(), args, slot, st);
    auto c = ob.create<func::CallOp>(loc, (callee + ".rt").str(), TypeRange{}, args);
    c->setAttr("rt.unit", ob.getStringAttr(label));
    c->setAttr("rt.unit_flops", ob.getF64FloatAttr(stageFlops[callee]));
    // The unit's sends in its program order (its send arguments are in reverse): async with
    // --overlap-p2p-comm, else synchronous (the buffer is free again when they return).
    for (auto &s : llvm::reverse(st.sendsAfter)) {
      auto &e = sendSlots[s.type][s.slot];
      int64_t token = -1;
      if (overlapP2P)
        e.second = token = std::max<int64_t>(0, 2 * layout.numBuckets()) + nextAsyncToken++;
      ob.create<rt::SendOp>(loc, s.group, s.peer, ref(ob, loc, e.first),
                            ob.getI64IntegerAttr(token));
    }
    st.sendsAfter.clear();
    st.flops += stageFlops[callee];
    st.bytes += stageBytes[callee];
    ++st.units;
  };
  auto stageOf = [&](StringRef callee) -> FailureOr<func::FuncOp> {
    auto it = stages.find(callee);
    if (it == stages.end())
      return op.emitOpError() << "calls @" << callee << ", not a stage function";
    return it->second;
  };
  auto unitLabel = [](const char *kind, int64_t mb, int64_t chunk) {
    return (Twine(kind) + " microbatch " + Twine(mb) + " chunk " + Twine(chunk)).str();
  };
  if (auto mb = dyn_cast<sched::MicrobatchOp>(op)) {
    if (failed(stageOf(mb.getCallee())))
      return failure();
    call(mb.getCallee(), inputArgs(ob, loc, mb.getCallee(), int64_t(mb.getIndex())),
         (isEval ? "F (eval) microbatch " : "F+B microbatch ") + Twine(mb.getIndex()));
    ++st.forwards;
    return success();
  }
  if (auto fwd = dyn_cast<sched::ForwardOp>(op)) {
    FailureOr<func::FuncOp> stage = stageOf(fwd.getCallee());
    if (failed(stage))
      return failure();
    // The lowest free stash slot holds this microbatch's activations until its backward.
    int64_t slot = 0;
    while (llvm::is_contained(st.busySlots, slot))
      ++slot;
    st.busySlots.push_back(slot);
    stashSlots = std::max(stashSlots, slot + 1);
    SmallVector<Value> args = inputArgs(ob, loc, fwd.getCallee(), int64_t(fwd.getMicrobatch()));
    SmallVector<rt::BufferOp> stash = stashSlot(*stage, slot);
    for (rt::BufferOp buf : stash)
      args.push_back(ref(ob, loc, buf));
    st.stashOf[fwd.getStash()] = {slot, stash};
    // ZB-H1: the part only B reads takes the lowest free slot of its own, held until B.
    int64_t bSlot = 0;
    while (llvm::is_contained(st.busyBSlots, bSlot))
      ++bSlot;
    SmallVector<rt::BufferOp> bOnly = stashSlot(*stage, bSlot, /*bOnly=*/true);
    if (!bOnly.empty()) {
      st.busyBSlots.push_back(bSlot);
      stashBSlots = std::max(stashBSlots, bSlot + 1);
      for (rt::BufferOp buf : bOnly)
        args.push_back(ref(ob, loc, buf));
      st.bOnlyOf[fwd.getStash()] = {bSlot, bOnly};
    }
    call(fwd.getCallee(), args, unitLabel("F", fwd.getMicrobatch(), fwd.getChunk()), slot);
    if (fwd.getChunk() == 0) // microbatches, not the units of an interleaved rank's chunks
      ++st.forwards;
    return success();
  }
  // ZB-H1: B keeps the forward's slot (its values for W go into the same slot) and frees the
  // part only it reads; W frees the slot.
  if (auto bi = dyn_cast<sched::BackwardInputOp>(op)) {
    if (failed(stageOf(bi.getCallee())))
      return failure();
    auto it = st.stashOf.find(bi.getStash());
    if (it == st.stashOf.end())
      return bi.emitOpError() << "consumes a stash no earlier sched.forward produced";
    SmallVector<Value> args = inputArgs(ob, loc, bi.getCallee(), int64_t(bi.getMicrobatch()));
    for (rt::BufferOp buf : it->second.second)
      args.push_back(ref(ob, loc, buf));
    if (auto bo = st.bOnlyOf.find(bi.getStash()); bo != st.bOnlyOf.end()) {
      for (rt::BufferOp buf : bo->second.second)
        args.push_back(ref(ob, loc, buf));
      llvm::erase(st.busyBSlots, bo->second.first);
      st.bOnlyOf.erase(bo);
    }
    call(bi.getCallee(), args, unitLabel("B", bi.getMicrobatch(), bi.getChunk()));
    auto held = it->second;
    st.stashOf.erase(it);
    st.stashOf[bi.getWeightStash()] = held;
    return success();
  }
  if (auto bw = dyn_cast<sched::BackwardWeightOp>(op)) {
    if (failed(stageOf(bw.getCallee())))
      return failure();
    auto it = st.stashOf.find(bw.getStash());
    if (it == st.stashOf.end())
      return bw.emitOpError() << "consumes a stash no earlier sched.backward_input produced";
    SmallVector<Value> args = inputArgs(ob, loc, bw.getCallee(), int64_t(bw.getMicrobatch()));
    for (rt::BufferOp buf : it->second.second)
      args.push_back(ref(ob, loc, buf));
    call(bw.getCallee(), args, unitLabel("W", bw.getMicrobatch(), bw.getChunk()));
    llvm::erase(st.busySlots, it->second.first);
    st.slotFreedAt[it->second.first] = st.units - 1;
    return success();
  }
  auto bwd = cast<sched::BackwardOp>(op);
  if (failed(stageOf(bwd.getCallee())))
    return failure();
  auto it = st.stashOf.find(bwd.getStash());
  if (it == st.stashOf.end())
    return bwd.emitOpError() << "consumes a stash no earlier sched.forward produced";
  SmallVector<Value> args = inputArgs(ob, loc, bwd.getCallee(), int64_t(bwd.getMicrobatch()));
  for (rt::BufferOp buf : it->second.second)
    args.push_back(ref(ob, loc, buf));
  call(bwd.getCallee(), args, unitLabel("B", bwd.getMicrobatch(), bwd.getChunk()));
  llvm::erase(st.busySlots, it->second.first);
  st.slotFreedAt[it->second.first] = st.units - 1;
  return success();
}

void Lowering::overlappedReceives(OpBuilder &ob, Location loc, StringRef rtCallee,
                                  SmallVector<Value> &args, int64_t stashSlot, UnitState &st) {
  auto fn = module.lookupSymbol<func::FuncOp>(rtCallee);
  if (!fn)
    return;
  Block *block = ob.getInsertionBlock();
  const int64_t thisUnit = st.units;
  // Where a receive may be posted: before the previous unit's call when that unit communicates
  // nothing (this rank's order of sends, receives and collectives stays the synchronous plan's,
  // so the whole-plan check of that order holds for the runtime's in-order communication
  // stream), else here, after the previous unit's sends. Either way it follows the sends before
  // it directly: synchronous, such a send and this receive run as one batched pair.
  Block::iterator early = block->end();
  for (auto it = block->end(); it != block->begin();) {
    Operation &op = *--it;
    if (isa<rt::BufferRefOp, rt::ViewOp, rt::KernelOp>(op))
      continue;
    auto prev = dyn_cast<func::CallOp>(op);
    if (prev && prev->hasAttr("rt.unit") && isCommFree(prev.getCallee()))
      early = it;
    break;
  }
  auto post = [&](StringAttr group, IntegerAttr peer, Block::iterator at,
                  function_ref<Value(OpBuilder &)> target) {
    // Without --overlap-p2p-comm the receive is synchronous (it completes where it is posted).
    const int64_t token =
        overlapP2P ? std::max<int64_t>(0, 2 * layout.numBuckets()) + nextAsyncToken++ : -1;
    {
      OpBuilder::InsertionGuard g(ob);
      ob.setInsertionPoint(block, at);
      ob.create<rt::RecvOp>(loc, group, peer, target(ob), ob.getI64IntegerAttr(token));
    }
    if (overlapP2P)
      ob.create<rt::WaitOp>(loc, ob.getI64IntegerAttr(token));
  };
  // Receives into this unit's stash slot (a forward's received activation): early only when
  // the slot's previous holder is not the previous unit (it reads the slot until it returns).
  if (auto stashRecvs = fn->getAttrOfType<ArrayAttr>("rt.p2p_stash_recvs")) {
    auto freed = st.slotFreedAt.find(stashSlot);
    bool slotFree = freed == st.slotFreedAt.end() || freed->second < thisUnit - 1;
    for (Attribute a : stashRecvs) {
      auto d = cast<DictionaryAttr>(a);
      unsigned arg = unsigned(cast<IntegerAttr>(d.get("arg")).getInt());
      auto slotRef = arg < args.size() ? args[arg].getDefiningOp<rt::BufferRefOp>() : nullptr;
      if (!slotRef)
        continue;
      auto type = cast<MemRefType>(cast<TypeAttr>(d.get("type")).getValue());
      int64_t offset = cast<IntegerAttr>(d.get("offset")).getInt();
      post(cast<StringAttr>(d.get("group")), cast<IntegerAttr>(d.get("peer")),
           slotFree ? early : block->end(), [&](OpBuilder &pb) -> Value {
             Value r = pb.create<rt::BufferRefOp>(loc, slotRef.getType(), slotRef.getBuffer());
             return pb.create<rt::ViewOp>(loc, type, r, pb.getI64IntegerAttr(offset));
           });
    }
  }
  const unsigned firstP2P = unsigned(args.size());
  for (unsigned i = firstP2P; i < fn.getNumArguments(); ++i) {
    auto group = fn.getArgAttrOfType<StringAttr>(i, "rt.p2p_group");
    auto peer = fn.getArgAttrOfType<IntegerAttr>(i, "rt.p2p_peer");
    auto kind = fn.getArgAttrOfType<StringAttr>(i, "rt.p2p");
    if (!group || !peer || !kind)
      continue;
    auto type = cast<MemRefType>(fn.getArgument(i).getType());
    if (kind.getValue() == "send") {
      // Two send buffers per type: a third send waits for the older one before the call
      // overwrites it (its transfer has long been eager-copied on Gloo).
      auto &pool = sendSlots[type];
      auto *pick = llvm::find_if(pool, [](auto &e) { return e.second < 0; });
      if (pick == pool.end() && pool.size() < 2) {
        pool.push_back({addBuffer(("send" + Twine(pool.size())).str(), type, "activation"), -1});
        pick = pool.end() - 1;
      }
      if (pick == pool.end()) {
        pick = llvm::min_element(pool, [](auto &x, auto &y) { return x.second < y.second; });
        ob.create<rt::WaitOp>(loc, ob.getI64IntegerAttr(pick->second));
        pick->second = -1;
      }
      args.push_back(ref(ob, loc, pick->first));
      st.sendsAfter.push_back({group, peer, unsigned(pick - pool.begin()), type});
      continue;
    }
    // A buffer that no receive in flight and no unit still to run reads: the previous unit
    // reads its own until it returns (double-buffered when this receive is posted before it).
    bool hoisted = early != block->end();
    const int64_t postedBefore = hoisted ? thisUnit - 1 : thisUnit;
    rt::BufferOp slot;
    for (auto &[buf, lastUse] : recvSlots[type])
      if (lastUse < postedBefore) {
        slot = buf;
        lastUse = thisUnit;
        break;
      }
    if (!slot) {
      slot = addBuffer(("recv" + Twine(recvSlots[type].size())).str(), type, "activation");
      recvSlots[type].push_back({slot, thisUnit});
    }
    post(group, peer, early, [&](OpBuilder &pb) { return ref(pb, loc, slot); });
    args.push_back(ref(ob, loc, slot));
  }
}

bool Lowering::isCommFree(StringRef name) {
  auto it = commFree.find(name);
  if (it != commFree.end())
    return it->second;
  commFree[name] = false; // recursion: assume it communicates
  auto fn = module.lookupSymbol<func::FuncOp>(name);
  bool free = bool(fn);
  if (fn)
    fn.walk([&](Operation *op) {
      if (isa<rt::SendOp, rt::RecvOp, rt::CollectiveOp, rt::WaitOp>(op) ||
          (isa<func::CallOp>(op) && !isCommFree(cast<func::CallOp>(op).getCallee()))) {
        free = false;
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
  return commFree[name] = free;
}

void Lowering::hoistPointToPoint(func::FuncOp nf) {
  // Only the receives before the unit's first other communication and the sends after its
  // last move: this rank's order of communication stays the synchronous plan's.
  Block &body = nf.getBody().front();
  auto communicates = [&](Operation &op) {
    if (isa<rt::SendOp, rt::RecvOp, rt::CollectiveOp, rt::WaitOp>(op))
      return true;
    auto c = dyn_cast<func::CallOp>(op);
    return c && !isCommFree(c.getCallee());
  };
  SmallVector<rt::RecvOp> recvs;
  SmallVector<rt::SendOp> sends;
  for (Operation &op : body) {
    if (auto r = dyn_cast<rt::RecvOp>(op); r && int64_t(r.getToken()) < 0) {
      recvs.push_back(r);
      continue;
    }
    if (communicates(op))
      break;
  }
  for (Operation &op : llvm::reverse(body)) {
    if (auto sd = dyn_cast<rt::SendOp>(op); sd && int64_t(sd.getToken()) < 0) {
      sends.push_back(sd);
      continue;
    }
    if (communicates(op))
      break;
  }
  std::reverse(sends.begin(), sends.end());
  if (!recvs.empty() && !sends.empty() && sends.front()->isBeforeInBlock(recvs.back()))
    sends.clear(); // a unit of p2p only: keep its order
  // The transfer's own buffer, referenced once: an argument replaces it.
  auto toArgument = [&](Operation *p2p, Value buffer, StringAttr group, IntegerAttr peer,
                        StringRef kind) {
    auto bref = buffer.getDefiningOp<rt::BufferRefOp>();
    if (!bref)
      return false;
    StringRef name = bref.getBuffer();
    int refs = 0;
    nf.walk([&](rt::BufferRefOp o) { refs += o.getBuffer() == name; });
    auto buf = module.lookupSymbol<rt::BufferOp>(name);
    if (refs != 1 || !buf)
      return false;
    unsigned idx = nf.getNumArguments();
    nf.insertArgument(idx, buffer.getType(),
                      b.getDictionaryAttr({b.getNamedAttr("rt.p2p", b.getStringAttr(kind)),
                                           b.getNamedAttr("rt.p2p_group", group),
                                           b.getNamedAttr("rt.p2p_peer", peer)}),
                      p2p->getLoc());
    p2p->erase();
    bref.getResult().replaceAllUsesWith(nf.getArgument(idx));
    bref.erase();
    buf.erase();
    return true;
  };
  SmallVector<Attribute> stashRecvs;
  for (rt::RecvOp r : recvs) {
    // Into a stash slot (a forward's received input, stashed for its backward): the iteration
    // receives into the same view of the slot it passes.
    if (auto v = r.getBuffer().getDefiningOp<rt::ViewOp>()) {
      auto arg = dyn_cast<BlockArgument>(v.getSource());
      if (!arg || v.getAxisAttr() || !nf.getArgAttr(arg.getArgNumber(), "rt.stash"))
        break; // stays: so do the receives after it
      stashRecvs.push_back(b.getDictionaryAttr(
          {b.getNamedAttr("group", r.getGroupAttr()), b.getNamedAttr("peer", r.getPeerAttr()),
           b.getNamedAttr("arg", b.getI64IntegerAttr(arg.getArgNumber())),
           b.getNamedAttr("offset", v.getOffsetAttr()),
           b.getNamedAttr("type", TypeAttr::get(v.getType()))}));
      r.erase();
      continue;
    }
    if (!toArgument(r, r.getBuffer(), r.getGroupAttr(), r.getPeerAttr(), "recv"))
      break;
  }
  if (!stashRecvs.empty())
    nf->setAttr("rt.p2p_stash_recvs", b.getArrayAttr(stashRecvs));
  // Sends from the end backwards: one that stays keeps those before it.
  for (rt::SendOp sd : llvm::reverse(sends))
    if (!toArgument(sd, sd.getBuffer(), sd.getGroupAttr(), sd.getPeerAttr(), "send"))
      break;
}

SmallVector<Value> Lowering::inputArgs(OpBuilder &ob, Location loc, StringRef callee,
                                       int64_t mb) {
  func::FuncOp stage = stages[callee];
  SmallVector<Value> args;
  for (unsigned i : stageInputs[callee]) {
    std::string name =
        stage.getArgAttrOfType<StringAttr>(i, "model.input").str() + "." + std::to_string(mb);
    rt::BufferOp &buf = inputBuffers[name];
    if (!buf)
      buf = addBuffer(name, memrefOf(stage.getArgument(i).getType()), "input");
    args.push_back(ref(ob, loc, buf));
  }
  return args;
}

SmallVector<rt::BufferOp> Lowering::stashSlot(func::FuncOp fwd, int64_t slot, bool bOnly) {
  // Units with the same layout share a slot's buffers.
  SmallVector<Type> types(fwd.getResultTypes());
  if (auto zb = fwd->getAttrOfType<ArrayAttr>("sched.stash_layout")) {
    types.clear();
    for (auto [a, freed] : llvm::zip(zb, freedAtB(zb)))
      if (freed == bOnly)
        types.push_back(cast<TypeAttr>(a).getValue());
  } else if (bOnly) {
    types.clear();
  }
  StashLayout layout = StashLayout::of(types);
  // ZB-H1's B-only parts are slots of their own ("stash_b<slot>", group stash.b.<slot>).
  const std::string base = bOnly ? "stash_b" : "stash";
  SmallVector<rt::BufferOp> &bufs = stashBuffers[{slot, base + ":" + layout.key()}];
  if (bufs.empty()) {
    for (unsigned d = 0; d < layout.dtypes.size(); ++d) {
      std::string name = base + std::to_string(slot);
      if (layout.dtypes.size() > 1)
        name += "." + std::to_string(d);
      rt::BufferOp buf = addBuffer(name, layout.bufferType(d), "activation");
      buf.setGroupAttr(b.getStringAttr((bOnly ? "stash.b." : "stash.") + Twine(slot)));
      bufs.push_back(buf);
    }
  }
  return bufs;
}

ArrayRef<bool> Lowering::freedAtB(ArrayAttr layout) {
  auto [it, fresh] = freedAtBCache.try_emplace(layout);
  if (!fresh)
    return it->second;
  SmallVector<bool> &freed = it->second;
  bool seen = false;
  freed.assign(layout.size(), true);
  for (auto &[name, fn] : stages) {
    auto unit = fn->getAttrOfType<StringAttr>("sched.unit");
    if (!unit || unit.getValue() != "backward_weight" ||
        fn->getAttr("sched.stash_layout") != layout)
      continue;
    seen = true;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (auto k = fn.getArgAttrOfType<IntegerAttr>(i, "sched.stash"))
        if (k.getInt() >= 0 && k.getInt() < int64_t(freed.size()) &&
            !fn.getArgument(i).use_empty())
          freed[size_t(k.getInt())] = false;
  }
  if (!seen)
    freed.assign(layout.size(), false);
  return freed;
}

} // namespace mlir::trainc::lower_to_rt
