//===- PipelineSplit.cpp - One pipeline stage of the model ----------------===//
//
// Keeps one pipeline stage's part of @forward: its decoder-layer calls, the embedding on the
// first stage, the final norm, output layer and loss on the last. The activation crossing a stage
// boundary becomes a mesh.send / mesh.recv pair on the pp axis (autodiff sends its gradient
// back). See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/Passes.h"
#include "passes/PlanOption.h"

#include "dialects/Model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"

#define DEBUG_TYPE "trainc-pipeline-split"

namespace mlir::trainc {
#define GEN_PASS_DEF_PIPELINESPLITPASS
#include "passes/Pipeline/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

SmallVector<int64_t> mlir::trainc::pipelineStageBounds(int64_t numLayers, int64_t numStages,
                                                       int64_t firstStageLayers,
                                                       int64_t lastStageLayers) {
  // The stages without a given count share the rest.
  const int64_t given = (firstStageLayers > 0) + (lastStageLayers > 0);
  const int64_t others = numStages - std::min(given, numStages);
  const int64_t rest = numLayers - std::max<int64_t>(firstStageLayers, 0) -
                       std::max<int64_t>(lastStageLayers, 0);
  SmallVector<int64_t> bounds = {0};
  for (int64_t s = 0; s < numStages; ++s) {
    int64_t n;
    if (s == 0 && firstStageLayers > 0)
      n = firstStageLayers;
    else if (s == numStages - 1 && lastStageLayers > 0)
      n = lastStageLayers;
    else
      n = others > 0 ? rest / others : 0;
    bounds.push_back(bounds.back() + n);
  }
  return bounds;
}

namespace {

/// The index of the mesh axis named `name` (trainc.axis_names), or -1.
int64_t axisIndex(mesh::MeshOp m, StringRef name) {
  auto names = m->getAttrOfType<ArrayAttr>(model::kAxisNamesAttr);
  if (!names)
    return -1;
  for (auto [i, a] : llvm::enumerate(names))
    if (auto s = dyn_cast<StringAttr>(a); s && s.getValue() == name)
      return int64_t(i);
  return -1;
}

/// Erases ops of `block` whose results nobody reads: model ops (pure) and calls of layer
/// functions (pure computations). Point-to-point ops stay.
void eraseDead(Block &block) {
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops)) {
    bool removable = isa<model::ModelDialect>(op->getDialect()) ||
                     (isa<func::CallOp>(op) && op->hasAttr("model.layer_index"));
    if (removable && op->use_empty())
      op->erase();
  }
}

struct PipelineSplitPass : mlir::trainc::impl::PipelineSplitPassBase<PipelineSplitPass> {
  using PipelineSplitPassBase::PipelineSplitPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t numStages = 0;
    if (failed(resolvePlanOption(module, this->numStages, "pp", numStages)))
      return signalPassFailure();
    const int64_t s = stage;
    if (numStages < 1 || s < 0 || s >= numStages) {
      module.emitError() << "trainc-pipeline-split: stage " << s << " is not one of the "
                         << numStages << " pipeline stages (0 to " << numStages - 1 << ")";
      return signalPassFailure();
    }
    auto fwd = module.lookupSymbol<func::FuncOp>(function);
    if (!fwd || fwd.isDeclaration()) {
      module.emitError() << "trainc-pipeline-split: no function @" << function
                         << " with a body to split";
      return signalPassFailure();
    }
    Block &body = fwd.getBody().front();
    SmallVector<func::CallOp> layers;
    for (auto call : body.getOps<func::CallOp>())
      if (call->hasAttr("model.layer_index"))
        layers.push_back(call);
    const int64_t L = int64_t(layers.size());
    int64_t V = 1;
    if (failed(resolvePlanOption(module, this->virtualStages, "virtual_stages", V)))
      return signalPassFailure();
    if (V < 1) {
      module.emitError() << "trainc-pipeline-split: virtual-stages " << V
                         << " is not a model chunk count (1 or more)";
      return signalPassFailure();
    }
    if (V > 1 && (firstStageLayers > 0 || lastStageLayers > 0)) {
      module.emitError() << "trainc-pipeline-split: virtual-stages " << V
                         << " cannot be combined with first-stage-layers / last-stage-layers";
      return signalPassFailure();
    }
    if (V > 1 && (numStages < 2 || L % (V * numStages) != 0)) {
      fwd.emitOpError() << "has " << L << " decoder layers, which do not split into " << V
                        << " model chunks on each of " << numStages
                        << " pipeline stages (num_layers must be divisible by "
                           "pipeline_model_parallel_size x virtual_pipeline_model_parallel_size, "
                           "with pipeline_model_parallel_size > 1)";
      return signalPassFailure();
    }
    SmallVector<int64_t> bounds =
        pipelineStageBounds(L, numStages, firstStageLayers, lastStageLayers);
    bool even = firstStageLayers <= 0 && lastStageLayers <= 0;
    bool valid = bounds.back() == L;
    for (int64_t k = 0; k < numStages; ++k)
      valid &= bounds[size_t(k + 1)] > bounds[size_t(k)];
    if (!valid || (even && L % numStages != 0)) {
      fwd.emitOpError() << "has " << L << " decoder layers, which do not split into "
                        << numStages << " pipeline stages of at least one layer"
                        << (even ? " evenly (num_layers must be divisible by "
                                   "pipeline_model_parallel_size)"
                                 : (" with first-stage-layers " + Twine(firstStageLayers) +
                                    " and last-stage-layers " + Twine(lastStageLayers) +
                                    " (the other stages split the rest evenly)")
                                       .str());
      return signalPassFailure();
    }
    for (auto [i, call] : llvm::enumerate(layers))
      if (call->getAttrOfType<IntegerAttr>("model.layer_index").getInt() != int64_t(i) ||
          call.getNumResults() != 1 || call.getNumOperands() == 0 ||
          call.getOperand(0).getType() != call.getResult(0).getType()) {
        call.emitOpError() << "is not layer " << i
                           << " of a chain x -> x of decoder-layer calls in layer order";
        return signalPassFailure();
      }
    for (size_t i = 1; i < layers.size(); ++i)
      if (layers[i].getOperand(0) != layers[i - 1].getResult(0)) {
        layers[i].emitOpError() << "does not take the previous layer's output as its input";
        return signalPassFailure();
      }
    auto meshOp = module.lookupSymbol<mesh::MeshOp>(model::kMeshName);
    int64_t ppAxis = meshOp ? axisIndex(meshOp, "pp") : -1;
    if (ppAxis < 0) {
      module.emitError() << "trainc-pipeline-split: the module has no mesh @" << model::kMeshName
                         << " with a \"pp\" axis";
      return signalPassFailure();
    }
    if (meshOp.getShape()[size_t(ppAxis)] != numStages) {
      module.emitError() << "trainc-pipeline-split: the mesh's pp axis has "
                         << meshOp.getShape()[size_t(ppAxis)] << " coordinates, the plan "
                         << numStages << " stages";
      return signalPassFailure();
    }
    // This rank's model chunks, [first, end) layers each: one, or with V virtual stages chunk v
    // holding layer block v P + s of V P (Megatron's get_model / TransformerBlock offsets).
    SmallVector<std::pair<int64_t, int64_t>> chunks;
    const int64_t perChunk = L / (V * numStages);
    if (V == 1)
      chunks.push_back({bounds[size_t(s)], bounds[size_t(s + 1)]});
    else
      for (int64_t v = 0; v < V; ++v)
        chunks.push_back({(v * numStages + s) * perChunk, (v * numStages + s + 1) * perChunk});

    // Parameters used by the layers of more than one stage's part (the word embedding that GPT's
    // output layer shares): Megatron's shared embedding, a copy per stage kept equal.
    auto stageOfUse = [&](Operation *user) -> int64_t {
      for (int64_t k = 0; k < L; ++k)
        if (user == layers[size_t(k)])
          return V > 1 ? (k / perChunk) % numStages
                       : llvm::upper_bound(bounds, k) - bounds.begin() - 1;
      return user->isBeforeInBlock(layers.front()) ? 0 : numStages - 1;
    };
    SmallVector<Attribute> shared;
    for (BlockArgument a : fwd.getArguments()) {
      FlatSymbolRefAttr name = model::paramOf(fwd, a.getArgNumber());
      if (!name)
        continue;
      llvm::SmallDenseSet<int64_t, 4> stages;
      for (Operation *u : a.getUsers())
        stages.insert(stageOfUse(u));
      if (stages.size() > 1)
        shared.push_back(name);
    }

    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    auto axes = DenseI16ArrayAttr::get(ctx, {int16_t(ppAxis)});
    auto meshRef = FlatSymbolRefAttr::get(ctx, model::kMeshName);
    // A chunk receives its input from the previous stage (stage P - 1's previous chunk for
    // stage 0) and sends its output to the next (stage 0's next chunk for stage P - 1), as
    // Megatron's p2p between virtual stages; the first chunk of stage 0 starts from the
    // embedding, the last of stage P - 1 ends in the loss.
    const int64_t prev = (s + numStages - 1) % numStages, next = (s + 1) % numStages;
    for (auto [v, range] : llvm::enumerate(chunks)) {
      if (s > 0 || v > 0) {
        func::CallOp first = layers[size_t(range.first)];
        b.setInsertionPoint(first);
        Type t = first.getOperand(0).getType();
        Value tmpl = b.create<model::FillOp>(first.getLoc(), t, b.getF64FloatAttr(0.0));
        Value x = b.create<mesh::RecvOp>(first.getLoc(), t, meshRef, axes, tmpl,
                                         b.getDenseI64ArrayAttr({prev}), ValueRange{});
        first->setOperand(0, x);
      }
      if (s < numStages - 1 || int64_t(v) < V - 1) {
        func::CallOp last = layers[size_t(range.second - 1)];
        b.setInsertionPointAfter(last);
        b.create<mesh::SendOp>(last.getLoc(), last.getResult(0).getType(), meshRef, axes,
                               last.getResult(0), b.getDenseI64ArrayAttr({next}), ValueRange{});
      }
    }
    if (s < numStages - 1) {
      // No loss here: (loss_sum, num_tokens) = (0, 0); the last stage's reach every stage
      // through sched.reduce_losses over pp. The fills stay last, so a legacy-mode seed placed
      // after num_tokens follows the send.
      auto ret = cast<func::ReturnOp>(body.getTerminator());
      b.setInsertionPoint(ret);
      SmallVector<Value> zeros;
      for (Value v : ret.getOperands())
        zeros.push_back(b.create<model::FillOp>(ret.getLoc(), v.getType(), b.getF64FloatAttr(0.0)));
      ret->setOperands(zeros);
    }
    // The other stages' layers, and what only they read (nothing reads them any more).
    eraseDead(body);

    // Parameters this stage does not read leave the signature; inputs stay (every rank's host
    // fills the same input buffers).
    llvm::BitVector unused(fwd.getNumArguments());
    for (BlockArgument a : fwd.getArguments())
      if (model::paramOf(fwd, a.getArgNumber()) && a.use_empty())
        unused.set(a.getArgNumber());
    fwd.eraseArguments(unused);
    for (auto p : llvm::to_vector(module.getOps<model::ParameterOp>()))
      if (SymbolTable::symbolKnownUseEmpty(p, module))
        p.erase();

    module->setAttr("trainc.pipeline_stage", b.getI64IntegerAttr(s));
    module->setAttr("trainc.pipeline_size", b.getI64IntegerAttr(numStages));
    SmallVector<int64_t> ranges;
    for (auto [lo, hi] : chunks)
      llvm::append_values(ranges, lo, hi);
    module->setAttr("trainc.pipeline_layers", b.getDenseI64ArrayAttr(ranges));
    if (V > 1) {
      module->setAttr("trainc.pipeline_virtual_stages", b.getI64IntegerAttr(V));
      if (microbatchGroupSize > 0)
        module->setAttr("trainc.microbatch_group_size_per_vp_stage",
                        b.getI64IntegerAttr(microbatchGroupSize));
    }
    if (!shared.empty())
      module->setAttr("trainc.pipeline_shared", b.getArrayAttr(shared));
  }
};

} // namespace
