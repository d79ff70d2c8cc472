//===- LowerOptimizer.cpp - grad norm, clip, AdamW ---------------------===//

#include "passes/Export/Lowering.h"

using namespace mlir;
using namespace mlir::trainc;

namespace mlir::trainc::lower_to_rt {

void Lowering::lowerTensorParallelShardNorm(OpBuilder &ob, Location loc, Value sumsq) {
  // The distributed optimizer under tensor parallelism: each bucket shard holds TP-sharded and
  // replicated parameters' ranges, which depend on the dp coordinate. Two sums per shard with
  // `segments` (rt.shard_segments: the export writes each DP rank's), the sharded one summed
  // over DP and TP, the replicated one over DP only (counted once, Megatron's
  // param_is_not_tensor_parallel_duplicate).
  std::map<int64_t, std::array<SmallVector<int64_t>, 2>> segments; // bucket -> (replicated, split)
  for (const ParamInfo &p : params) {
    if (pipelineStage() > 0 && isSharedAcrossStages(p.name))
      continue; // the tied copy counts on the first stage
    size_t i = layoutIndex.lookup(p.name);
    int64_t k = layout.bucketOf(i), lo = layout.bound(k);
    segments[k][p.tpSplit].append(
        {layout.geo.offsets[i] - lo, layout.geo.offsets[i] + layout.geo.sizes[i] - lo, 1});
  }
  Value split = ref(ob, loc, scalar("grad_sumsq_tp", "workspace"));
  for (int64_t k = 0; k < layout.numBuckets(); ++k)
    for (int cls = 0; cls < 2; ++cls) {
      // The bucket's ranges of this class in ascending order (shardSegments' input).
      SmallVector<int64_t> sorted;
      SmallVector<std::array<int64_t, 3>> triples;
      const SmallVector<int64_t> &src = segments[k][cls];
      for (size_t s = 0; s + 2 < src.size(); s += 3)
        triples.push_back({src[s], src[s + 1], src[s + 2]});
      llvm::sort(triples);
      for (auto &t : triples)
        sorted.append(t.begin(), t.end());
      auto sum = kernel(ob, loc, "sum_squares", {shardOf(ob, loc, layout.mainGrad, k)},
                        {cls ? split : sumsq},
                        {f64("beta", k == 0 ? 0.0 : 1.0),
                         b.getNamedAttr("segments", b.getDenseI64ArrayAttr(rt::shardSegments(
                                                        sorted, 0, layout.shardSize(k))))});
      sum->setAttr("rt.shard_segments", b.getDenseI64ArrayAttr(sorted));
    }
  if (layout.dp() > 1) {
    collective(ob, loc, "all_reduce", sumsq, sumsq, -1);
    collective(ob, loc, "all_reduce", split, split, -1);
  }
  createCollective(ob, loc, "all_reduce", "tp", split, split, -1);
  kernel(ob, loc, "add", {sumsq, split}, {sumsq}, {}, {0});
}

void Lowering::lowerGradNorm(OpBuilder &ob, Location loc, double maxNorm) {
  Value sumsq = ref(ob, loc, scalar("grad_sumsq", "workspace"));
  if (!layout.distributed()) {
    // Every rank holds the whole reduced gradient: sum over every parameter (a copy shared
    // across pipeline stages counts once, on the first stage). Under tensor parallelism the
    // sharded parameters' sum is summed over TP and the replicated ones are counted once
    // (Megatron's param_is_not_tensor_parallel_duplicate).
    bool anySplit = llvm::any_of(params, [](const ParamInfo &p) { return p.tpSplit; });
    Value split = anySplit ? ref(ob, loc, scalar("grad_sumsq_tp", "workspace")) : sumsq;
    bool firstSplit = true, firstReplicated = true;
    for (const ParamInfo &p : params) {
      if (pipelineStage() > 0 && isSharedAcrossStages(p.name))
        continue;
      bool &first = p.tpSplit && anySplit ? firstSplit : firstReplicated;
      kernel(ob, loc, "sum_squares", {gradRef(ob, loc, p)}, {p.tpSplit ? split : sumsq},
             {f64("beta", first ? 0.0 : 1.0)});
      first = false;
    }
    if (anySplit) {
      if (firstSplit) // every sharded parameter skipped
        kernel(ob, loc, "fill", {}, {split});
      createCollective(ob, loc, "all_reduce", "tp", split, split, -1);
      if (firstReplicated) // no replicated parameter
        kernel(ob, loc, "copy", {split}, {sumsq});
      else
        kernel(ob, loc, "add", {sumsq, split}, {sumsq}, {}, {0});
    } else if (firstReplicated) {
      kernel(ob, loc, "fill", {}, {sumsq});
    }
  } else if (llvm::any_of(params, [](const ParamInfo &p) { return p.tpSplit; })) {
    lowerTensorParallelShardNorm(ob, loc, sumsq);
  } else {
    // This rank's shard of every bucket (each element once over DP; the padding's gradients are
    // zero), then the sum over DP.
    // A later stage's copy of the tied embedding (its own bucket) is counted on the first stage.
    bool first = true;
    for (int64_t k = 0; k < layout.numBuckets(); ++k) {
      if (isSharedCopyBucket(k))
        continue;
      kernel(ob, loc, "sum_squares", {shardOf(ob, loc, layout.mainGrad, k)}, {sumsq},
             {f64("beta", first ? 0.0 : 1.0)});
      first = false;
    }
    if (first)
      kernel(ob, loc, "fill", {}, {sumsq});
    if (layout.dp() > 1)
      collective(ob, loc, "all_reduce", sumsq, sumsq, -1);
  }
  // The squares of every stage's gradients (the grad norm over the model-parallel group): the
  // same norm, clip factor and update_successful on every rank.
  if (pipelineSize() > 1)
    createCollective(ob, loc, "all_reduce", "pp", sumsq, sumsq, -1);
  kernel(ob, loc, "grad_norm_finalize", {sumsq},
         {ref(ob, loc, scalar("grad_norm", "output")),
          ref(ob, loc, scalar("grad_scale", "workspace")),
          ref(ob, loc, scalar("update_successful", "output"))},
         {f64("max_norm", maxNorm)});
  // fp16: found_inf is a non-finite norm (an inf or NaN in any unscaled main grad of any rank:
  // the sum of squares is summed over DP, TP and PP above, as Megatron's MAX over found_inf),
  // update_successful = 0 skips the step; the dynamic scale follows DynamicGradScaler.update.
  if (lossScaler && cast<BoolAttr>(lossScaler.get("dynamic")).getValue()) {
    Value scale = ref(ob, loc, scalar("loss_scale", "scalar"));
    Value growth = ref(ob, loc, scalar("loss_scale_growth_tracker", "scalar"));
    Value hyst = ref(ob, loc, scalar("loss_scale_hysteresis_tracker", "scalar"));
    auto i64Of = [&](StringRef k) { return cast<IntegerAttr>(lossScaler.get(k)).getInt(); };
    kernel(ob, loc, "loss_scale_update",
           {ref(ob, loc, scalar("update_successful", "output")), scale, growth, hyst},
           {scale, growth, hyst},
           {f64("growth_factor", 2.0), f64("backoff_factor", 0.5),
            i64("growth_interval", i64Of("loss_scale_window")),
            i64("hysteresis", i64Of("hysteresis")),
            f64("min_scale", cast<FloatAttr>(lossScaler.get("min_loss_scale")).getValueAsDouble())},
           {1, 2, 3});
  }
}

LogicalResult Lowering::lowerAdamW(OpBuilder &ob, Location loc, sched::AdamWOp adam) {
  auto it = paramIndex.find(adam.getParam());
  if (it == paramIndex.end())
    return adam.emitOpError() << "names unknown parameter '" << adam.getParam() << "'";
  ParamInfo &p = params[it->second];
  const bool mixed = p.type.getElementType() != statsType;
  if (mixed && !p.type.getElementType().isBF16() && !p.type.getElementType().isF16())
    return adam.emitOpError() << "parameter '" << p.name << "' has element type "
                              << p.type.getElementType()
                              << "; master weights exist for bf16 and f16 parameters only";
  SmallVector<NamedAttribute> attrs{f64("beta1", adam.getBeta1().convertToDouble()),
                                    f64("beta2", adam.getBeta2().convertToDouble()),
                                    f64("eps", adam.getEps().convertToDouble())};
  // bf16 parameters: AdamW on the fp32 master weights `master`, which also writes w = bf16(master)
  // (Megatron's Float16OptimizerWithFloat16Params).
  auto update = [&](Value w, Value g, Value m, Value v, Value master = {}) {
    SmallVector<Value> ins{master ? master : w, g, m, v, ref(ob, loc, scalar("lr", "scalar")),
                           ref(ob, loc, scalar("weight_decay", "scalar")),
                           ref(ob, loc, scalar("step", "scalar")),
                           ref(ob, loc, scalar("grad_scale", "workspace")),
                           ref(ob, loc, scalar("update_successful", "output"))};
    if (master)
      return kernel(ob, loc, "adamw_master", ins, {master, m, v, w}, attrs, {0, 2, 3, -1});
    return kernel(ob, loc, "adamw", ins, {w, m, v}, attrs, {0, 2, 3});
  };
  if (!layout.distributed()) {
    // One statement per operand: the order of the refs in the IR is fixed.
    Value w = valueRef(ob, loc, p);
    Value m = ref(ob, loc, p.expAvg);
    Value v = ref(ob, loc, p.expAvgSq);
    Value g = gradRef(ob, loc, p);
    attrs.push_back(i64("decay", adam.getDecay() ? 1 : 0));
    update(w, g, m, v, mixed ? ref(ob, loc, p.master) : Value());
    return success();
  }
  // ZeRO-1: one update per bucket shard, at the bucket's last sched.adamw, over this rank's shard;
  // Adam states are indexed by the position inside the concatenation of this rank's shards. The
  // updated parameters' bucket-relative ranges go in rt.shard_segments; `segments` (which parts of
  // the shard to update, each with its decay flag) is coordinate 0's, and the export computes
  // every other rank's from rt.shard_segments.
  auto it2 = shardUpdates.find(adam);
  if (it2 == shardUpdates.end())
    return success(); // folded into the bucket's update
  int64_t k = it2->second.first;
  const SmallVector<int64_t> &bucketSegments = it2->second.second;
  const int64_t size = layout.shardSize(k);
  attrs.push_back(b.getNamedAttr( // each segment has its own decay flag

      "segments", b.getDenseI64ArrayAttr(rt::shardSegments(bucketSegments, 0, size))));
  int64_t state = layout.stateOffset(k);
  Value w = shardOf(ob, loc, layout.params, k);
  Value m = range(ob, loc, layout.expAvg, state, state + size);
  Value v = range(ob, loc, layout.expAvgSq, state, state + size);
  Value g = shardOf(ob, loc, layout.mainGrad, k);
  Value master = mixed ? range(ob, loc, layout.master, state, state + size) : Value();
  update(w, g, m, v, master)->setAttr("rt.shard_segments", b.getDenseI64ArrayAttr(bucketSegments));
  return success();
}

void Lowering::scaleLossSeed(OpBuilder &ob, Location loc, Value seed) {
  if (lossScaler)
    kernel(ob, loc, "scale_by", {seed, ref(ob, loc, scalar("loss_scale", "scalar"))}, {seed}, {},
           {0});
}

void Lowering::unscaleGrads(OpBuilder &ob, Location loc, ArrayRef<Value> grads) {
  if (!lossScaler)
    return;
  Value inv = ref(ob, loc, scalar("inv_loss_scale", "workspace"));
  kernel(ob, loc, "reciprocal", {ref(ob, loc, scalar("loss_scale", "scalar"))}, {inv});
  for (Value g : grads)
    kernel(ob, loc, "scale_by", {g, inv}, {g}, {}, {0});
}

} // namespace mlir::trainc::lower_to_rt
