//===- LowerToRt.cpp - Stage and iteration functions to rt ----------------===//

#include "passes/Export/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringMap.h"

#define DEBUG_TYPE "trainc-lower-to-rt"

namespace mlir::trainc {
#define GEN_PASS_DEF_LOWERTORTPASS
#include "passes/Export/Passes.h.inc"
} // namespace mlir::trainc

using namespace mlir;
using namespace mlir::trainc;

namespace {

MemRefType memrefOf(Type t) {
  auto s = cast<ShapedType>(t);
  return MemRefType::get(s.getShape(), s.getElementType());
}

struct ParamInfo {
  std::string name;
  rt::BufferOp value, grad, expAvg, expAvgSq;
};

/// Module-level state of the lowering: the buffer table and the well-known buffers.
class Lowering {
public:
  explicit Lowering(ModuleOp module) : module(module), b(module.getContext()) {}

  LogicalResult run();

private:
  rt::BufferOp addBuffer(StringRef name, MemRefType type, StringRef kind) {
    std::string unique = name.str();
    for (int i = 1; module.lookupSymbol(unique) || created.count(unique); ++i)
      unique = (name + "." + Twine(i)).str();
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(insertBefore);
    auto buf = b.create<rt::BufferOp>(module.getLoc(), b.getStringAttr(unique), TypeAttr::get(type),
                                      b.getStringAttr(kind), b.getI64IntegerAttr(-1));
    created.insert(unique);
    return buf;
  }
  Value ref(OpBuilder &ob, Location loc, rt::BufferOp buf) {
    return ob.create<rt::BufferRefOp>(loc, buf.getType(), buf.getSymName());
  }
  void kernel(OpBuilder &ob, Location loc, StringRef name, ValueRange ins, ValueRange outs,
              ArrayRef<NamedAttribute> attrs = {}, ArrayRef<int32_t> inPlace = {}) {
    auto k = ob.create<rt::KernelOp>(loc, name, ins, outs, ob.getDictionaryAttr(attrs),
                                     inPlace.empty() ? DenseI32ArrayAttr()
                                                     : ob.getDenseI32ArrayAttr(inPlace));
    (void)k;
  }
  NamedAttribute f64(StringRef n, double v) { return b.getNamedAttr(n, b.getF64FloatAttr(v)); }
  NamedAttribute i64(StringRef n, int64_t v) { return b.getNamedAttr(n, b.getI64IntegerAttr(v)); }
  MemRefType scalarType() { return MemRefType::get({}, statsType); }
  rt::BufferOp scalar(StringRef name, StringRef kind) {
    auto it = scalars.find(name);
    if (it != scalars.end())
      return it->second;
    return scalars[name] = addBuffer(name, scalarType(), kind);
  }

  LogicalResult collectParams();
  LogicalResult lowerStage(func::FuncOp fn);
  LogicalResult lowerIteration(func::FuncOp fn);

  ModuleOp module;
  OpBuilder b;
  Operation *insertBefore = nullptr;
  llvm::StringSet<> created;
  Type statsType;
  SmallVector<ParamInfo> params;
  llvm::StringMap<size_t> paramIndex;
  llvm::StringMap<rt::BufferOp> scalars;
  llvm::StringMap<func::FuncOp> stages;           // original stage functions by name
  llvm::StringMap<SmallVector<unsigned>> stageInputs; // arg numbers tagged model.input
  llvm::StringMap<double> stageFlops, stageBytes;
  llvm::StringMap<rt::BufferOp> inputBuffers;     // "<input>.<mb>"
};

LogicalResult Lowering::collectParams() {
  for (func::FuncOp fn : module.getOps<func::FuncOp>()) {
    if (!fn->hasAttr("sched.stage"))
      continue;
    if (fn.isDeclaration())
      return fn.emitOpError() << "@" << fn.getSymName() << " is a stage function without a body";
    stages[fn.getSymName()] = fn;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      Type t = fn.getArgument(i).getType();
      if (auto name = fn.getArgAttrOfType<StringAttr>(i, "model.param")) {
        if (!statsType)
          statsType = model::statsElementType(cast<ShapedType>(t).getElementType());
        if (paramIndex.count(name.getValue()))
          continue;
        ParamInfo p;
        p.name = name.str();
        p.value = addBuffer(p.name, memrefOf(t), "parameter");
        p.value->setAttr("param_name", name);
        for (StringRef a : {"model.init", "model.init_std", "model.no_weight_decay"})
          if (Attribute v = fn.getArgAttr(i, a))
            p.value->setAttr(a.drop_front(6), v);
        auto gradType = MemRefType::get(cast<ShapedType>(t).getShape(),
                                        model::statsElementType(cast<ShapedType>(t).getElementType()));
        p.grad = addBuffer(p.name + ".main_grad", gradType, "main_grad");
        p.expAvg = addBuffer(p.name + ".exp_avg", gradType, "optimizer_state");
        p.expAvgSq = addBuffer(p.name + ".exp_avg_sq", gradType, "optimizer_state");
        paramIndex[p.name] = params.size();
        params.push_back(p);
      } else if (fn.getArgAttrOfType<StringAttr>(i, "model.input")) {
        stageInputs[fn.getSymName()].push_back(i);
      } else {
        return fn.emitOpError() << "argument " << i
                                << " is neither a model.param nor a model.input";
      }
    }
  }
  if (stages.empty())
    return module.emitError() << "trainc-lower-to-rt: no stage function (sched.stage)";
  if (!statsType)
    statsType = Float32Type::get(module.getContext());
  return success();
}

/// Lowers model ops through KernelOpInterface into rt ops of one function.
class Emitter : public model::KernelEmitter {
public:
  Emitter(OpBuilder &b, Operation *op, IRMapping &map,
          std::function<Value(unsigned)> allocResult)
      : b(b), op(op), map(map), allocResult(std::move(allocResult)) {}
  MLIRContext *getContext() override { return b.getContext(); }
  Value operand(unsigned i) override { return map.lookup(op->getOperand(i)); }
  Value result(unsigned i) override {
    Value r = op->getResult(i);
    if (Value v = map.lookupOrNull(r))
      return v;
    Value v = allocResult(i);
    map.map(r, v);
    return v;
  }
  Value reshape(Value buffer, ArrayRef<int64_t> shape) override {
    auto src = cast<MemRefType>(buffer.getType());
    if (src.getShape() == shape)
      return buffer;
    return b.create<rt::ViewOp>(op->getLoc(), MemRefType::get(shape, src.getElementType()),
                                buffer, b.getI64IntegerAttr(0));
  }
  void aliasResult(unsigned i, Value buffer) override { map.map(op->getResult(i), buffer); }
  void kernel(StringRef name, ValueRange inputs, ValueRange outputs,
              ArrayRef<NamedAttribute> attrs, ArrayRef<int32_t> inPlace) override {
    b.create<rt::KernelOp>(op->getLoc(), name, inputs, outputs, b.getDictionaryAttr(attrs),
                           inPlace.empty() ? DenseI32ArrayAttr() : b.getDenseI32ArrayAttr(inPlace));
  }

private:
  OpBuilder &b;
  Operation *op;
  IRMapping &map;
  std::function<Value(unsigned)> allocResult;
};

LogicalResult Lowering::lowerStage(func::FuncOp fn) {
  StringRef fname = fn.getSymName();
  SmallVector<Type> argTypes;
  for (unsigned i : stageInputs[fname])
    argTypes.push_back(memrefOf(fn.getArgument(i).getType()));
  OpBuilder mb(module.getContext());
  mb.setInsertionPoint(fn);
  auto nf = mb.create<func::FuncOp>(fn.getLoc(), (fname + ".rt").str(),
                                    mb.getFunctionType(argTypes, {}));
  nf->setAttr("rt.stage", mb.getUnitAttr());
  Block *entry = nf.addEntryBlock();
  OpBuilder ob(module.getContext());
  ob.setInsertionPointToStart(entry);
  IRMapping map;
  for (auto [k, i] : llvm::enumerate(stageInputs[fname])) {
    map.map(fn.getArgument(i), entry->getArgument(k));
    nf.setArgAttr(k, "rt.input", fn.getArgAttr(i, "model.input"));
  }
  for (unsigned i = 0; i < fn.getNumArguments(); ++i)
    if (auto name = fn.getArgAttrOfType<StringAttr>(i, "model.param"))
      map.map(fn.getArgument(i), ref(ob, fn.getLoc(), params[paramIndex[name.getValue()]].value));

  int counter = 0;
  double flops = 0, bytes = 0;
  for (Operation &op : fn.getBody().front()) {
    // Instructions keep the location of the op they come from, named by it.
    Location loc = NameLoc::get(StringAttr::get(op.getContext(), op.getName().getStringRef()),
                                op.getLoc());
    ++counter;
    if (auto cost = dyn_cast<model::CostOpInterface>(&op)) {
      flops += cost.getFlops();
      bytes += cost.getBytesMoved();
    }
    if (auto k = dyn_cast<model::KernelOpInterface>(&op)) {
      std::string base = (fname + "." + op.getName().stripDialect() + "." + Twine(counter)).str();
      Emitter e(ob, &op, map, [&](unsigned i) {
        std::string n = op.getNumResults() == 1 ? base : base + "." + std::to_string(i);
        return ref(ob, loc, addBuffer(n, memrefOf(op.getResult(i).getType()), "activation"));
      });
      OpBuilder::InsertionGuard g(ob);
      Location saved = op.getLoc();
      op.setLoc(loc);
      k.emitKernels(e);
      op.setLoc(saved);
      continue;
    }
    if (auto acc = dyn_cast<sched::AccumulateGradOp>(&op)) {
      auto it = paramIndex.find(acc.getParam());
      if (it == paramIndex.end())
        return acc.emitOpError() << "names unknown parameter '" << acc.getParam() << "'";
      Value mg = ref(ob, loc, params[it->second].grad);
      Value g = map.lookup(acc.getGrad());
      if (cast<MemRefType>(g.getType()).getElementType() !=
          cast<MemRefType>(mg.getType()).getElementType()) {
        Value tmp = ref(ob, loc, addBuffer((fname + ".grad_cast." + Twine(counter)).str(),
                                           cast<MemRefType>(mg.getType()), "activation"));
        kernel(ob, loc, "cast", {g}, {tmp});
        g = tmp;
      }
      kernel(ob, loc, "add", {mg, g}, {mg}, {}, {0});
      continue;
    }
    if (auto acc = dyn_cast<sched::AccumulateLossOp>(&op)) {
      Value ls = ref(ob, loc, scalar("loss_sum", "output"));
      Value nt = ref(ob, loc, scalar("num_tokens", "output"));
      Value l = map.lookup(acc.getLossSum()), n = map.lookup(acc.getNumTokens());
      if (acc.getNormalization() == "per_token") {
        kernel(ob, loc, "add", {ls, l}, {ls}, {}, {0});
        kernel(ob, loc, "add", {nt, n}, {nt}, {}, {0});
      } else {
        Value inv = ref(ob, loc, scalar("mb_inv_num_tokens", "workspace"));
        Value mean = ref(ob, loc, scalar("mb_loss_mean", "workspace"));
        kernel(ob, loc, "reciprocal", {n}, {inv});
        kernel(ob, loc, "scale_by", {l, inv}, {mean});
        kernel(ob, loc, "add", {ls, mean}, {ls}, {}, {0});
        kernel(ob, loc, "add", {nt, ref(ob, loc, scalar("one", "workspace"))}, {nt}, {}, {0});
      }
      continue;
    }
    if (auto seed = dyn_cast<sched::LossSeedOp>(&op)) {
      Value inv = ref(ob, loc, scalar("mb_inv_num_tokens", "workspace"));
      kernel(ob, loc, "reciprocal", {map.lookup(seed.getNumTokens())}, {inv});
      Value out = ref(ob, loc, addBuffer((fname + ".loss_seed").str(),
                                         memrefOf(seed.getType()), "activation"));
      kernel(ob, loc, "scale", {inv}, {out},
             {f64("alpha", 1.0 / double(seed.getNumMicrobatches()))});
      map.map(seed.getResult(), out);
      continue;
    }
    if (isa<func::ReturnOp>(op)) {
      ob.create<func::ReturnOp>(op.getLoc());
      continue;
    }
    return op.emitOpError() << "cannot be lowered to rt (no KernelOpInterface)";
  }
  stageFlops[fname] = flops;
  stageBytes[fname] = bytes;
  return success();
}

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
  double flops = 0, bytes = 0;
  int64_t calls = 0;
  for (Operation &op : fn.getBody().front()) {
    Location loc = NameLoc::get(StringAttr::get(op.getContext(), op.getName().getStringRef()),
                                op.getLoc());
    if (isa<sched::ZeroLossesOp>(op)) {
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("loss_sum", "output"))});
      kernel(ob, loc, "fill", {}, {ref(ob, loc, scalar("num_tokens", "output"))});
    } else if (isa<sched::ZeroGradsOp>(op)) {
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
      ob.create<rt::HostIOOp>(loc, "fill_inputs", io.getLabel());
    } else if (auto io = dyn_cast<sched::ReadOutputsOp>(op)) {
      scalar("grad_norm", "output");
      scalar("update_successful", "output");
      ob.create<rt::HostIOOp>(loc, "read_outputs", io.getLabel());
    } else if (auto call = dyn_cast<sched::MicrobatchOp>(op)) {
      auto it = stages.find(call.getCallee());
      if (it == stages.end())
        return call.emitOpError() << "calls @" << call.getCallee() << ", not a stage function";
      func::FuncOp stage = it->second;
      SmallVector<Value> args;
      for (unsigned i : stageInputs[call.getCallee()]) {
        std::string name = stage.getArgAttrOfType<StringAttr>(i, "model.input").str() + "." +
                           std::to_string(call.getIndex());
        rt::BufferOp &buf = inputBuffers[name];
        if (!buf)
          buf = addBuffer(name, memrefOf(stage.getArgument(i).getType()), "input");
        args.push_back(ref(ob, loc, buf));
      }
      ob.create<func::CallOp>(loc, (call.getCallee() + ".rt").str(), TypeRange{}, args);
      flops += stageFlops[call.getCallee()];
      bytes += stageBytes[call.getCallee()];
      ++calls;
    } else if (auto fin = dyn_cast<sched::FinalizeGradsOp>(op)) {
      if (fin.getNormalization() == "per_token") {
        Value inv = ref(ob, loc, scalar("inv_num_tokens", "workspace"));
        kernel(ob, loc, "reciprocal", {ref(ob, loc, scalar("num_tokens", "output"))}, {inv});
        for (ParamInfo &p : params) {
          Value g = ref(ob, loc, p.grad);
          kernel(ob, loc, "scale_by", {g, inv}, {g}, {}, {0});
        }
      }
    } else if (auto clip = dyn_cast<sched::ClipGradNormOp>(op)) {
      Value sumsq = ref(ob, loc, scalar("grad_sumsq", "workspace"));
      for (auto [i, p] : llvm::enumerate(params))
        kernel(ob, loc, "sum_squares", {ref(ob, loc, p.grad)}, {sumsq},
               {f64("beta", i == 0 ? 0.0 : 1.0)});
      kernel(ob, loc, "grad_norm_finalize", {sumsq},
             {ref(ob, loc, scalar("grad_norm", "output")),
              ref(ob, loc, scalar("grad_scale", "workspace")),
              ref(ob, loc, scalar("update_successful", "output"))},
             {f64("max_norm", clip.getMaxNorm().convertToDouble())});
    } else if (auto adam = dyn_cast<sched::AdamWOp>(op)) {
      auto it = paramIndex.find(adam.getParam());
      if (it == paramIndex.end())
        return adam.emitOpError() << "names unknown parameter '" << adam.getParam() << "'";
      ParamInfo &p = params[it->second];
      if (p.value.getType().getElementType() != statsType)
        return adam.emitOpError() << "parameter '" << p.name << "' has element type "
                                  << p.value.getType().getElementType()
                                  << "; mixed precision (fp32 master weights) is not supported "
                                     "yet";
      Value w = ref(ob, loc, p.value), m = ref(ob, loc, p.expAvg), v = ref(ob, loc, p.expAvgSq);
      kernel(ob, loc, "adamw",
             {w, ref(ob, loc, p.grad), m, v, ref(ob, loc, scalar("lr", "scalar")),
              ref(ob, loc, scalar("weight_decay", "scalar")), ref(ob, loc, scalar("step", "scalar")),
              ref(ob, loc, scalar("grad_scale", "workspace")),
              ref(ob, loc, scalar("update_successful", "output"))},
             {w, m, v},
             {f64("beta1", adam.getBeta1().convertToDouble()),
              f64("beta2", adam.getBeta2().convertToDouble()),
              f64("eps", adam.getEps().convertToDouble()), i64("decay", adam.getDecay() ? 1 : 0)},
             {0, 2, 3});
    } else if (isa<func::ReturnOp>(op)) {
      ob.create<func::ReturnOp>(op.getLoc());
    } else {
      return op.emitOpError() << "cannot be lowered to rt in an iteration function";
    }
  }
  if (!isEval) {
    module->setAttr("trainc.flops_per_iteration", b.getF64FloatAttr(flops));
    module->setAttr("trainc.bytes_per_iteration", b.getF64FloatAttr(bytes));
    module->setAttr("trainc.num_microbatches", b.getI64IntegerAttr(calls));
  }
  return success();
}

LogicalResult Lowering::run() {
  if (module.getBody()->empty())
    return module.emitError() << "trainc-lower-to-rt: empty module";
  insertBefore = &module.getBody()->front();
  if (failed(collectParams()))
    return failure();
  SmallVector<func::FuncOp> iterations;
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    if (fn->hasAttr("sched.iteration"))
      iterations.push_back(fn);
  if (llvm::count_if(iterations, [](func::FuncOp f) { return !f->hasAttr("sched.eval"); }) != 1)
    return module.emitError() << "trainc-lower-to-rt: expected one training iteration function "
                                 "(sched.iteration without sched.eval), found "
                              << llvm::count_if(iterations, [](func::FuncOp f) {
                                   return !f->hasAttr("sched.eval");
                                 });
  for (auto &[name, fn] : stages)
    if (failed(lowerStage(fn)))
      return failure();
  for (func::FuncOp it : iterations)
    if (failed(lowerIteration(it)))
      return failure();
  // Drop everything above rt: the lowered functions replace the originals.
  SmallVector<Operation *> dead;
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    if (!fn->hasAttr("rt.stage") && !fn->hasAttr("rt.entry") && !fn->hasAttr("rt.entry_point"))
      dead.push_back(fn);
  for (Operation *op : dead)
    op->erase();
  // Lowered functions take their original names back (calls were emitted with ".rt" names).
  for (func::FuncOp fn : module.getOps<func::FuncOp>()) {
    StringRef n = fn.getSymName();
    if (n.ends_with(".rt"))
      fn.setSymName(n.drop_back(3));
  }
  module.walk([&](func::CallOp call) {
    StringRef n = call.getCallee();
    if (n.ends_with(".rt"))
      call.setCallee(n.drop_back(3));
  });
  return success();
}

struct LowerToRtPass : mlir::trainc::impl::LowerToRtPassBase<LowerToRtPass> {
  void runOnOperation() override {
    if (failed(Lowering(getOperation()).run()))
      signalPassFailure();
  }
};

} // namespace
