//===- SchedOps.cpp - sched dialect ---------------------------------------===//

#include "dialects/Sched/SchedDialect.h"
#include "dialects/Trainc/TraincDialect.h"
#include "dialects/Model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::trainc::sched;

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include "dialects/Sched/SchedDialect.cpp.inc"
#include "dialects/Sched/SchedEnums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/Sched/SchedTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Sched/SchedAttrs.cpp.inc"

void SchedDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Sched/SchedAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/Sched/SchedTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/Sched/SchedOps.cpp.inc"
      >();
}


LogicalResult SchedDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute v = attr.getValue();
  auto fail = [&](StringRef expected) {
    return op->emitOpError() << "attribute '" << name << "' must be " << expected << ", not "
                             << v;
  };
  if (name == kPlanAttrName)
    return isa<PlanAttr>(v) && isa<ModuleOp>(op) ? success()
                                                  : fail("a #sched.plan on the module");
  const bool onFunction = isa<func::FuncOp>(op);
  if (llvm::is_contained({"sched.stage", "sched.iteration", "sched.eval",
                          "sched.first_microbatch", "sched.last_microbatch"},
                         name))
    return isa<UnitAttr>(v) && onFunction ? success() : fail("a unit attribute on a func.func");
  if (name == "sched.num_microbatches") {
    auto i = dyn_cast<IntegerAttr>(v);
    return i && i.getInt() > 0 && onFunction ? success()
                                             : fail("a positive integer on a func.func");
  }
  if (name == "sched.schedule")
    return isa<StringAttr>(v) && onFunction ? success() : fail("a string on a func.func");
  if (name == "sched.unit") {
    auto s = dyn_cast<StringAttr>(v);
    return s && onFunction &&
                   llvm::is_contained({"forward", "backward", "backward_input",
                                       "backward_weight"},
                                      s.getValue())
               ? success()
               : fail("\"forward\", \"backward\", \"backward_input\" or \"backward_weight\" "
                      "on a func.func");
  }
  if (name == "sched.stash_layout") {
    // ZB-H1: the tensors of one stash slot (the forward's stash, then B's values for W).
    auto a = dyn_cast<ArrayAttr>(v);
    bool ok = a && onFunction && llvm::all_of(a, [](Attribute t) {
      auto ta = dyn_cast<TypeAttr>(t);
      auto r = ta ? dyn_cast<RankedTensorType>(ta.getValue()) : RankedTensorType();
      return r && r.hasStaticShape() && r.getElementType().isIntOrFloat();
    });
    return ok ? success() : fail("an array of statically shaped tensor types on a func.func");
  }
  if (name == kAsyncAttrName) {
    // An asynchronous tensor collective: completed by its one user, a sched.collective_wait.
    if (!isa<UnitAttr>(v) ||
        !isa<mesh::AllReduceOp, mesh::ReduceScatterOp, mesh::AllGatherOp>(op))
      return fail("a unit attribute on a mesh.all_reduce, mesh.reduce_scatter or mesh.all_gather");
    if (!op->getResult(0).hasOneUse() ||
        !isa<CollectiveWaitOp>(*op->getResult(0).getUsers().begin()))
      return op->emitOpError() << "is marked " << kAsyncAttrName
                               << " but its result is not used by exactly one "
                                  "sched.collective_wait (it has "
                               << std::distance(op->getResult(0).use_begin(),
                                                op->getResult(0).use_end())
                               << " uses)";
    return success();
  }
  if (name == kNoAsyncTpCommAttrName)
    return isa<UnitAttr>(v) && isa<ModuleOp>(op) ? success()
                                                 : fail("a unit attribute on the module");
  return op->emitOpError() << "has unknown attribute '" << name
                           << "' of the sched dialect (sched.plan, sched.stage, sched.iteration, "
                              "sched.eval, sched.first_microbatch, sched.last_microbatch, "
                              "sched.num_microbatches, sched.schedule, sched.unit, sched.stash_layout, "
                              "sched.async, sched.no_async_tp_comm)";
}

LogicalResult SchedDialect::verifyRegionArgAttribute(Operation *op, unsigned region, unsigned arg,
                                                     NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == "sched.stash") {
    auto i = dyn_cast<IntegerAttr>(attr.getValue());
    if (i && i.getInt() >= 0)
      return success();
    return op->emitOpError() << "argument " << arg << ": 'sched.stash' must be a non-negative "
                                "integer (the stash index), not "
                             << attr.getValue();
  }
  return op->emitOpError() << "argument " << arg << " has unknown attribute '" << name
                           << "' of the sched dialect (sched.stash)";
}

/// The `model.parameter` that `name` (used by `op`) refers to; an error on `op` when it names
/// nothing or something else.
static FailureOr<mlir::trainc::model::ParameterOp>
lookupParameter(Operation *op, SymbolTableCollection &symbols, FlatSymbolRefAttr name) {
  Operation *decl = symbols.lookupNearestSymbolFrom(op, name);
  auto param = dyn_cast_or_null<mlir::trainc::model::ParameterOp>(decl);
  if (!param)
    return op->emitOpError() << "names " << name << ", which is "
                             << (decl ? "not a model.parameter" : "not declared in this module")
                             << " (parameters are declared once as model.parameter @<name>)";
  return param;
}

LogicalResult AccumulateGradOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<mlir::trainc::model::ParameterOp> p =
      lookupParameter(*this, symbolTable, getParamAttr());
  if (failed(p))
    return failure();
  auto t = cast<ShapedType>(p->getType());
  if (t.getShape() != getGrad().getType().getShape())
    return emitOpError() << "gradient of type " << getGrad().getType() << " for " << getParamAttr()
                         << ", which is declared " << p->getType();
  return success();
}

LogicalResult AdamWOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return lookupParameter(*this, symbolTable, getParamAttr());
}

LogicalResult GradBufferOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  for (auto [i, a] : llvm::enumerate(getParams())) {
    FailureOr<mlir::trainc::model::ParameterOp> p =
        lookupParameter(*this, symbolTable, cast<FlatSymbolRefAttr>(a));
    if (failed(p))
      return failure();
    if (cast<ShapedType>(p->getType()).getNumElements() != getSizes()[i])
      return emitOpError() << "size " << getSizes()[i] << " of " << a << " differs from its "
                           << cast<ShapedType>(p->getType()).getNumElements()
                           << " declared elements";
  }
  return success();
}

static LogicalResult verifyUnitTokens(Operation *op, func::FuncOp fn, size_t waits,
                                      size_t tokens);

/// The grad buffer an async start names and its bucket, checked.
static LogicalResult verifyBucket(Operation *op, SymbolTableCollection &symbols,
                                  FlatSymbolRefAttr buffer, int64_t bucket, bool needsDistributed) {
  auto buf = symbols.lookupNearestSymbolFrom<GradBufferOp>(op, buffer);
  if (!buf)
    return op->emitOpError() << "names " << buffer << ", which is not a sched.grad_buffer";
  if (bucket < 0 || bucket >= buf.getNumBuckets())
    return op->emitOpError() << "bucket " << bucket << " is not one of the "
                             << buf.getNumBuckets() << " buckets of " << buffer;
  if (needsDistributed && !buf.getDistributedOptimizer())
    return op->emitOpError() << "needs the distributed optimizer (" << buffer
                             << " has no distributed_optimizer)";
  return success();
}

LogicalResult GradSyncStartOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyBucket(*this, symbolTable, getBufferAttr(), int64_t(getBucket()), false);
}

LogicalResult ParamGatherStartOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyBucket(*this, symbolTable, getBufferAttr(), int64_t(getBucket()), true);
}

LogicalResult MicrobatchOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto fn = symbolTable.lookupNearestSymbolFrom<func::FuncOp>(*this, getCalleeAttr());
  if (!fn)
    return emitOpError() << "callee @" << getCallee() << " is not a function in this module";
  if (failed(verifyUnitTokens(*this, fn, getWaits().size(), getTokens().size())))
    return failure();
  if (int64_t(getIndex()) < 0)
    return emitOpError() << "microbatch index " << int64_t(getIndex()) << " is negative";
  return success();
}

PlanAttr mlir::trainc::sched::getPlan(Operation *op) {
  ModuleOp m = isa<ModuleOp>(op) ? cast<ModuleOp>(op) : op->getParentOfType<ModuleOp>();
  return m ? m->getAttrOfType<PlanAttr>(kPlanAttrName) : PlanAttr();
}

namespace {
enum class FieldKind { Int, Float, Bool, String };
/// The plan's fields in print order (the order of the AttrDef's parameters).
constexpr std::pair<const char *, FieldKind> kPlanFields[] = {
    {"num_layers", FieldKind::Int}, {"hidden_size", FieldKind::Int},
    {"num_attention_heads", FieldKind::Int}, {"num_query_groups", FieldKind::Int},
    {"ffn_hidden_size", FieldKind::Int}, {"seq_length", FieldKind::Int},
    {"padded_vocab_size", FieldKind::Int}, {"tp", FieldKind::Int}, {"cp", FieldKind::Int},
    {"ep", FieldKind::Int}, {"dp", FieldKind::Int}, {"pp", FieldKind::Int},
    {"virtual_stages", FieldKind::Int}, {"micro_batch_size", FieldKind::Int},
    {"global_batch_size", FieldKind::Int}, {"num_microbatches", FieldKind::Int},
    {"params_dtype", FieldKind::String}, {"optimizer", FieldKind::String},
    {"adam_beta1", FieldKind::Float}, {"adam_beta2", FieldKind::Float},
    {"adam_eps", FieldKind::Float}, {"clip_grad", FieldKind::Float},
    {"weight_decay", FieldKind::Float}, {"loss_mode", FieldKind::String},
    {"bucket_size", FieldKind::Int}, {"distributed_optimizer", FieldKind::Bool},
    {"overlap_param_gather", FieldKind::Bool}, {"schedule", FieldKind::String},
    {"recompute", FieldKind::String}};


const char *kindName(FieldKind k) {
  switch (k) {
  case FieldKind::Int:
    return "an integer";
  case FieldKind::Float:
    return "a float";
  case FieldKind::Bool:
    return "true or false";
  case FieldKind::String:
    return "a string";
  }
  return "";
}
} // namespace

static bool fieldHasKind(Attribute v, FieldKind k) {
  switch (k) {
  case FieldKind::Int:
    return llvm::isa<IntegerAttr>(v) && !llvm::isa<BoolAttr>(v);
  case FieldKind::Float:
    return llvm::isa<FloatAttr>(v) || (llvm::isa<IntegerAttr>(v) && !llvm::isa<BoolAttr>(v));
  case FieldKind::Bool:
    return llvm::isa<BoolAttr>(v);
  case FieldKind::String:
    return llvm::isa<StringAttr>(v);
  }
  return false;
}

SmallVector<std::pair<StringRef, Attribute>> PlanAttr::getFields() const {
  Builder b(getContext());
  const int64_t ints[] = {getNumLayers(),       getHiddenSize(),     getNumAttentionHeads(),
                          getNumQueryGroups(),  getFfnHiddenSize(),  getSeqLength(),
                          getPaddedVocabSize(), getTp(),             getCp(),
                          getEp(),              getDp(),             getPp(),
                          getVirtualStages(),   getMicroBatchSize(), getGlobalBatchSize(),
                          getNumMicrobatches()};
  SmallVector<Attribute> v;
  for (int64_t x : ints)
    v.push_back(b.getI64IntegerAttr(x));
  v.append({b.getStringAttr(getParamsDtype()), b.getStringAttr(getOptimizer()), getAdamBeta1(),
            getAdamBeta2(), getAdamEps(), getClipGrad(), getWeightDecay(),
            b.getStringAttr(getLossMode()), b.getI64IntegerAttr(getBucketSize()),
            getDistributedOptimizer(), getOverlapParamGather(), b.getStringAttr(getSchedule()),
            b.getStringAttr(getRecompute())});
  SmallVector<std::pair<StringRef, Attribute>> out;
  for (auto [k, f] : llvm::enumerate(kPlanFields))
    out.push_back({f.first, v[k]});
  return out;
}

PlanAttr PlanAttr::fromFields(MLIRContext *ctx, const llvm::StringMap<Attribute> &values,
                              function_ref<InFlightDiagnostic()> emitError) {
  for (const auto &[name, kind] : kPlanFields) {
    Attribute v = values.lookup(name);
    if (!v) {
      emitError() << "#sched.plan is missing field '" << name << "'";
      return {};
    }
    if (!fieldHasKind(v, kind)) {
      emitError() << "#sched.plan field '" << name << "' = " << v << " is not " << kindName(kind);
      return {};
    }
  }
  Builder b(ctx);
  auto i = [&](const char *n) { return llvm::cast<IntegerAttr>(values.lookup(n)).getInt(); };
  auto f = [&](const char *n) {
    if (auto x = llvm::dyn_cast<IntegerAttr>(values.lookup(n)))
      return b.getF64FloatAttr(double(x.getInt()));
    return b.getF64FloatAttr(llvm::cast<FloatAttr>(values.lookup(n)).getValueAsDouble());
  };
  auto str = [&](const char *n) { return llvm::cast<StringAttr>(values.lookup(n)).getValue(); };
  auto bl = [&](const char *n) { return llvm::cast<BoolAttr>(values.lookup(n)); };
  return PlanAttr::getChecked(
      emitError, ctx, i("num_layers"), i("hidden_size"), i("num_attention_heads"),
      i("num_query_groups"), i("ffn_hidden_size"), i("seq_length"), i("padded_vocab_size"),
      i("tp"), i("cp"), i("ep"), i("dp"), i("pp"), i("virtual_stages"), i("micro_batch_size"),
      i("global_batch_size"), i("num_microbatches"), str("params_dtype"), str("optimizer"),
      f("adam_beta1"), f("adam_beta2"), f("adam_eps"), f("clip_grad"), f("weight_decay"),
      str("loss_mode"), i("bucket_size"), bl("distributed_optimizer"),
      bl("overlap_param_gather"), str("schedule"), str("recompute"));
}

PlanAttr PlanAttr::withField(StringRef name, Attribute value,
                             function_ref<InFlightDiagnostic()> emitError) const {
  llvm::StringMap<Attribute> fields;
  for (auto [n, v] : getFields())
    fields[n] = v;
  if (!fields.count(name)) {
    emitError() << "#sched.plan has no field '" << name << "'";
    return {};
  }
  fields[name] = value;
  if (name == "micro_batch_size" || name == "dp" || name == "num_microbatches") {
    auto get = [&](const char *n) -> int64_t {
      auto a = llvm::dyn_cast<IntegerAttr>(fields[n]);
      return a ? a.getInt() : 0;
    };
    fields["global_batch_size"] = Builder(getContext())
                                      .getI64IntegerAttr(get("micro_batch_size") * get("dp") *
                                                         get("num_microbatches"));
  }
  return fromFields(getContext(), fields, emitError);
}

Attribute PlanAttr::parse(AsmParser &parser, Type) {
  llvm::StringMap<Attribute> values;
  SMLoc start = parser.getCurrentLocation();
  if (parser.parseLess())
    return {};
  if (failed(parser.parseOptionalGreater())) {
    do {
      SMLoc at = parser.getCurrentLocation();
      std::string key;
      if (parser.parseKeywordOrString(&key) || parser.parseEqual())
        return {};
      const auto *field = llvm::find_if(kPlanFields, [&](auto &f) { return key == f.first; });
      if (field == std::end(kPlanFields)) {
        parser.emitError(at) << "#sched.plan has no field '" << key << "'";
        return {};
      }
      if (values.count(key)) {
        parser.emitError(at) << "#sched.plan field '" << key << "' is given twice";
        return {};
      }
      Attribute v;
      if (parser.parseAttribute(v))
        return {};
      values[key] = v;
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseGreater())
      return {};
  }
  return fromFields(parser.getContext(), values, [&] { return parser.emitError(start); });
}

void PlanAttr::print(AsmPrinter &p) const {
  p << "<";
  llvm::interleaveComma(getFields(), p, [&](const std::pair<StringRef, Attribute> &f) {
    p << f.first << " = ";
    if (auto s = llvm::dyn_cast<StringAttr>(f.second))
      p.printString(s.getValue());
    else if (auto bl = llvm::dyn_cast<BoolAttr>(f.second))
      p << (bl.getValue() ? "true" : "false");
    else if (auto i = llvm::dyn_cast<IntegerAttr>(f.second))
      p << i.getInt();
    else
      p.printAttributeWithoutType(f.second);
  });
  p << ">";
}

FailureOr<Attribute> mlir::trainc::sched::resolvePlanField(Operation *op, StringRef name,
                                                           Attribute explicitValue,
                                                           Attribute fallback) {
  PlanAttr plan = getPlan(op);
  if (!plan)
    return explicitValue ? explicitValue : fallback;
  if (explicitValue) {
    ModuleOp m = isa<ModuleOp>(op) ? cast<ModuleOp>(op) : op->getParentOfType<ModuleOp>();
    PlanAttr updated = plan.withField(name, explicitValue, [&] { return m.emitError(); });
    if (!updated)
      return failure();
    m->setAttr(kPlanAttrName, updated);
    return explicitValue;
  }
  for (auto [field, value] : plan.getFields())
    if (field == name)
      return value;
  return op->emitError() << "#sched.plan has no field '" << name << "'";
}

LogicalResult PlanAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t numLayers,
                               int64_t hidden, int64_t heads, int64_t groups, int64_t ffn,
                               int64_t seq, int64_t vocab, int64_t tp, int64_t cp, int64_t ep,
                               int64_t dp, int64_t pp, int64_t vp, int64_t mbs, int64_t gbs,
                               int64_t m, StringRef paramsDtype, StringRef optimizer,
                               FloatAttr beta1, FloatAttr beta2, FloatAttr eps, FloatAttr clip,
                               FloatAttr wd, StringRef lossMode, int64_t bucketSize,
                               BoolAttr distributed, BoolAttr overlapGather, StringRef schedule,
                               StringRef recompute) {
  auto positive = [&](const char *name, int64_t v) -> LogicalResult {
    if (v > 0)
      return success();
    return emitError() << "#sched.plan: " << name << " = " << v << ", expected a positive value";
  };
  const std::pair<const char *, int64_t> sizes[] = {
      {"num_layers", numLayers}, {"hidden_size", hidden}, {"num_attention_heads", heads},
      {"num_query_groups", groups}, {"ffn_hidden_size", ffn}, {"seq_length", seq},
      {"padded_vocab_size", vocab}, {"tp", tp}, {"cp", cp}, {"ep", ep}, {"dp", dp}, {"pp", pp},
      {"virtual_stages", vp}, {"micro_batch_size", mbs}, {"global_batch_size", gbs},
      {"num_microbatches", m}};
  for (auto [name, v] : sizes)
    if (failed(positive(name, v)))
      return failure();
  if (gbs != mbs * dp * m)
    return emitError() << "#sched.plan: global_batch_size = " << gbs
                       << " is not micro_batch_size x dp x num_microbatches = " << mbs << " x "
                       << dp << " x " << m;
  if (heads % groups != 0)
    return emitError() << "#sched.plan: num_attention_heads = " << heads
                       << " is not a multiple of num_query_groups = " << groups;
  if (!llvm::is_contained({"fp32", "fp64", "bf16", "fp16"}, paramsDtype))
    return emitError() << "#sched.plan: params_dtype = \"" << paramsDtype
                       << "\", expected one of fp32, fp64, bf16, fp16";
  if (optimizer != "adam")
    return emitError() << "#sched.plan: optimizer = \"" << optimizer << "\", expected \"adam\"";
  if (lossMode != "per_token" && lossMode != "per_microbatch")
    return emitError() << "#sched.plan: loss_mode = \"" << lossMode
                       << "\", expected per_token or per_microbatch";
  if (schedule != "no-pipelining" && schedule != "all-forward-first" && schedule != "1f1b" &&
      schedule != "interleaved" && schedule != "zb-h1")
    return emitError() << "#sched.plan: schedule = \"" << schedule
                       << "\", expected no-pipelining, 1f1b, interleaved, zb-h1 or "
                          "all-forward-first";
  if (schedule == "interleaved" && vp <= 1)
    return emitError() << "#sched.plan: schedule = \"" << schedule << "\" with virtual_stages = "
                       << vp << " (interleaved runs more than one model chunk per stage)";
  if (failed(parseRecompute(recompute, numLayers / pp, [&] {
        return emitError() << "#sched.plan: ";
      })))
    return failure();
  double b1 = beta1.getValueAsDouble(), b2 = beta2.getValueAsDouble();
  if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
    return emitError() << "#sched.plan: adam_beta1 = " << b1 << ", adam_beta2 = " << b2
                       << ", expected 0 <= beta < 1";
  if (!(eps.getValueAsDouble() > 0))
    return emitError() << "#sched.plan: adam_eps = " << eps.getValueAsDouble()
                       << ", expected > 0";
  if (!(clip.getValueAsDouble() >= 0))
    return emitError() << "#sched.plan: clip_grad = " << clip.getValueAsDouble()
                       << ", expected >= 0 (0 disables clipping)";
  if (bucketSize < 0)
    return emitError() << "#sched.plan: bucket_size = " << bucketSize
                       << ", expected >= 0 (0 = Megatron's default)";
  if (overlapGather.getValue() && !(distributed.getValue() && dp > 1))
    return emitError() << "#sched.plan: overlap_param_gather needs distributed_optimizer and "
                          "dp > 1 (dp = "
                       << dp << ")";
  return success();
}

/// The function `callee` names, or an error on `op` naming it.
static FailureOr<func::FuncOp> unitCallee(Operation *op, FlatSymbolRefAttr callee,
                                          SymbolTableCollection &symbolTable) {
  auto fn = symbolTable.lookupNearestSymbolFrom<func::FuncOp>(op, callee);
  if (!fn)
    return op->emitOpError() << "callee " << callee << " is not a function in this module";
  return fn;
}

/// A unit call's tokens against its callee: the callee takes `waits` tokens as its trailing
/// arguments and its results are exactly `tokens` tokens (stage functions return nothing else).
static LogicalResult verifyUnitTokens(Operation *op, func::FuncOp fn, size_t waits,
                                      size_t tokens) {
  auto isToken = [](Type t) { return isa<TokenType>(t); };
  if (fn.getNumResults() != tokens || !llvm::all_of(fn.getResultTypes(), isToken))
    return op->emitOpError() << "callee @" << fn.getSymName() << " returns "
                             << fn.getNumResults() << " values but the call has " << tokens
                             << " token results; a stage function accumulates its gradients "
                                "and losses and returns only the tokens of the collectives it "
                                "starts";
  unsigned tokenArgs = unsigned(llvm::count_if(fn.getArgumentTypes(), isToken));
  if (tokenArgs != waits)
    return op->emitOpError() << "passes " << waits << " tokens to @" << fn.getSymName()
                             << ", which takes " << tokenArgs;
  return success();
}

static LogicalResult verifyUnitIndices(Operation *op, int64_t microbatch, int64_t chunk) {
  if (microbatch < 0)
    return op->emitOpError() << "microbatch " << microbatch << " is negative";
  if (chunk < 0)
    return op->emitOpError() << "chunk " << chunk << " is negative";
  return success();
}

LogicalResult ForwardOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<func::FuncOp> fn = unitCallee(*this, getCalleeAttr(), symbolTable);
  if (failed(fn))
    return failure();
  unsigned tokenArgs = unsigned(llvm::count_if(fn->getArgumentTypes(), llvm::IsaPred<TokenType>));
  if (tokenArgs != getWaits().size())
    return emitOpError() << "passes " << getWaits().size() << " tokens to @" << getCallee()
                         << ", which takes " << tokenArgs;
  for (Type t : fn->getResultTypes()) {
    auto r = dyn_cast<RankedTensorType>(t);
    if (!r || !r.hasStaticShape() || !r.getElementType().isIntOrFloat())
      return emitOpError() << "callee @" << getCallee() << " returns " << t
                           << "; a forward unit returns its stash as statically shaped tensors "
                              "of integers or floats";
  }
  return verifyUnitIndices(*this, getMicrobatch(), getChunk());
}

LogicalResult CollectiveWaitOp::verify() {
  Operation *start = getInput().getDefiningOp();
  if (!start || !start->hasAttr(kAsyncAttrName))
    return emitOpError() << "waits on a value that is not the result of a collective marked "
                         << kAsyncAttrName;
  if (start->getBlock() != (*this)->getBlock())
    return emitOpError() << "is not in the block of the collective it waits for";
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type " << getResult().getType()
                         << " differs from the collective's " << getInput().getType();
  return success();
}

/// A unit consuming a stash (sched.backward, sched.backward_input: the forward's; sched.
/// backward_weight: the input-gradient unit's): it is the result of a `Producer` of the same
/// microbatch and chunk, and its only use. `stash` names it in the single-use error.
template <typename Producer, typename Consumer>
static LogicalResult verifyStashConsumer(Consumer op, StringRef producerName, StringRef stash) {
  auto producer = op.getStash().template getDefiningOp<Producer>();
  if (!producer)
    return op.emitOpError() << "stash operand is not the result of a " << producerName;
  if (producer.getMicrobatch() != op.getMicrobatch() || producer.getChunk() != op.getChunk())
    return op.emitOpError() << "consumes the stash of microbatch " << producer.getMicrobatch()
                            << " chunk " << producer.getChunk() << " as microbatch "
                            << op.getMicrobatch() << " chunk " << op.getChunk();
  if (!op.getStash().hasOneUse())
    return op.emitOpError() << stash << " of microbatch " << op.getMicrobatch()
                            << " is consumed more than once";
  return success();
}

LogicalResult BackwardOp::verify() {
  return verifyStashConsumer<ForwardOp>(*this, "sched.forward", "stash");
}

LogicalResult BackwardOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<func::FuncOp> fn = unitCallee(*this, getCalleeAttr(), symbolTable);
  if (failed(fn))
    return failure();
  if (failed(verifyUnitTokens(*this, *fn, 0, getTokens().size())))
    return failure();
  auto fwd = getStash().getDefiningOp<ForwardOp>();
  if (!fwd)
    return success(); // reported by verify()
  FailureOr<func::FuncOp> f = unitCallee(fwd, fwd.getCalleeAttr(), symbolTable);
  if (failed(f))
    return failure();
  // The stash arguments are the trailing ones, tagged sched.stash, in the forward's result order.
  SmallVector<Type> stashArgs;
  for (unsigned i = 0; i < fn->getNumArguments(); ++i)
    if (fn->getArgAttr(i, "sched.stash"))
      stashArgs.push_back(fn->getArgument(i).getType());
  if (TypeRange(stashArgs) != f->getResultTypes())
    return emitOpError() << "callee @" << getCallee() << " takes " << stashArgs.size()
                         << " stash arguments that do not match the " << f->getNumResults()
                         << " results of the forward unit @" << fwd.getCallee();
  return verifyUnitIndices(*this, getMicrobatch(), getChunk());
}

/// The stash argument types of a unit function (its trailing arguments tagged sched.stash).
static SmallVector<Type> stashArgTypes(func::FuncOp fn) {
  SmallVector<Type> types;
  for (unsigned i = 0; i < fn.getNumArguments(); ++i)
    if (fn.getArgAttr(i, "sched.stash"))
      types.push_back(fn.getArgument(i).getType());
  return types;
}

LogicalResult BackwardInputOp::verify() {
  return verifyStashConsumer<ForwardOp>(*this, "sched.forward", "stash");
}

LogicalResult BackwardInputOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<func::FuncOp> fn = unitCallee(*this, getCalleeAttr(), symbolTable);
  if (failed(fn))
    return failure();
  for (Type t : fn->getResultTypes())
    if (!isa<RankedTensorType>(t) || !cast<RankedTensorType>(t).hasStaticShape())
      return emitOpError() << "callee @" << getCallee() << " returns " << t
                           << "; an input-gradient unit returns the values its weight-gradient "
                              "unit reads, as statically shaped tensors";
  auto fwd = getStash().getDefiningOp<ForwardOp>();
  if (!fwd)
    return success(); // reported by verify()
  FailureOr<func::FuncOp> f = unitCallee(fwd, fwd.getCalleeAttr(), symbolTable);
  if (failed(f))
    return failure();
  if (TypeRange(stashArgTypes(*fn)) != f->getResultTypes())
    return emitOpError() << "callee @" << getCallee()
                         << " takes stash arguments that do not match the "
                         << f->getNumResults() << " results of the forward unit @"
                         << fwd.getCallee();
  return verifyUnitIndices(*this, getMicrobatch(), getChunk());
}

LogicalResult BackwardWeightOp::verify() {
  return verifyStashConsumer<BackwardInputOp>(*this, "sched.backward_input", "weight stash");
}

LogicalResult BackwardWeightOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<func::FuncOp> fn = unitCallee(*this, getCalleeAttr(), symbolTable);
  if (failed(fn))
    return failure();
  if (failed(verifyUnitTokens(*this, *fn, 0, getTokens().size())))
    return failure();
  auto b = getStash().getDefiningOp<BackwardInputOp>();
  if (!b)
    return success(); // reported by verify()
  auto fwd = b.getStash().getDefiningOp<ForwardOp>();
  FailureOr<func::FuncOp> bf = unitCallee(b, b.getCalleeAttr(), symbolTable);
  if (!fwd || failed(bf))
    return failure();
  FailureOr<func::FuncOp> f = unitCallee(fwd, fwd.getCalleeAttr(), symbolTable);
  if (failed(f))
    return failure();
  // The forward's stash, then the input-gradient unit's results.
  SmallVector<Type> expected(f->getResultTypes());
  llvm::append_range(expected, bf->getResultTypes());
  if (TypeRange(stashArgTypes(*fn)) != TypeRange(expected))
    return emitOpError() << "callee @" << getCallee() << " takes "
                         << stashArgTypes(*fn).size()
                         << " stash arguments that do not match the forward unit's "
                         << f->getNumResults() << " results followed by the input-gradient unit's "
                         << bf->getNumResults();
  return verifyUnitIndices(*this, getMicrobatch(), getChunk());
}

LogicalResult AccumulateLossOp::verify() {
  if (cast<ShapedType>(getLossSum().getType()).getRank() != 0 ||
      cast<ShapedType>(getNumTokens().getType()).getRank() != 0)
    return emitOpError() << "loss_sum and num_tokens must be scalars (rank-0 tensors)";
  return success();
}

LogicalResult LossSeedOp::verify() {
  if (int64_t(getNumMicrobatches()) <= 0)
    return emitOpError() << "num_microbatches " << int64_t(getNumMicrobatches())
                         << " must be positive";
  if (getNumTokens().getType() != getType())
    return emitOpError() << "result type " << getType() << " differs from num_tokens type "
                         << getNumTokens().getType();
  return success();
}


LogicalResult OptimizerStepOp::verify() {
  double b1 = getBeta1().convertToDouble(), b2 = getBeta2().convertToDouble();
  if (!(b1 >= 0 && b1 < 1))
    return emitOpError() << "beta1 = " << b1 << ", expected 0 <= beta1 < 1";
  if (!(b2 >= 0 && b2 < 1))
    return emitOpError() << "beta2 = " << b2 << ", expected 0 <= beta2 < 1";
  if (!(getEps().convertToDouble() > 0))
    return emitOpError() << "eps = " << getEps().convertToDouble() << ", expected > 0";
  if (!(getClipGrad().convertToDouble() >= 0))
    return emitOpError() << "clip_grad = " << getClipGrad().convertToDouble()
                         << ", expected >= 0 (0 disables clipping)";
  return success();
}

#define GET_OP_CLASSES
#include "dialects/Sched/SchedOps.cpp.inc"

LogicalResult GradBufferOp::verify() {
  ArrayRef<int64_t> offsets = getOffsets(), sizes = getSizes(), bounds = getBucketBounds();
  int64_t dp = getDp(), numel = getNumel();
  if (dp <= 0)
    return emitOpError() << "dp = " << dp << ", expected a positive data-parallel size";
  if (offsets.size() != getParams().size() || sizes.size() != getParams().size())
    return emitOpError() << "has " << getParams().size() << " params but " << offsets.size()
                         << " offsets and " << sizes.size() << " sizes";
  if (bounds.size() < 2 || bounds.front() != 0 || bounds.back() != numel)
    return emitOpError() << "bucket_bounds must start at 0 and end at numel = " << numel;
  for (size_t b = 0; b + 1 < bounds.size(); ++b) {
    if (bounds[b + 1] <= bounds[b])
      return emitOpError() << "bucket " << b << " [" << bounds[b] << ", " << bounds[b + 1]
                           << ") is empty or reversed";
    if (getDistributedOptimizer() && (bounds[b + 1] - bounds[b]) % dp != 0)
      return emitOpError() << "bucket " << b << " has " << bounds[b + 1] - bounds[b]
                           << " elements, not a multiple of dp = " << dp
                           << " (the distributed optimizer shards every bucket evenly)";
  }
  int64_t end = 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (sizes[i] <= 0 || offsets[i] < end)
      return emitOpError() << "param " << getParams()[i] << " at offset " << offsets[i] << " with " << sizes[i]
                           << " elements overlaps the previous one or is empty";
    end = offsets[i] + sizes[i];
    // A parameter lives in one bucket (Megatron never splits a parameter across buckets).
    auto it = llvm::upper_bound(bounds, offsets[i]);
    if (it == bounds.end() || end > *it)
      return emitOpError() << "param " << getParams()[i] << " [" << offsets[i] << ", " << end << ") crosses a bucket boundary";
  }
  if (end > numel)
    return emitOpError() << "params end at " << end << ", beyond numel = " << numel;
  return success();
}

std::string mlir::trainc::sched::RecomputeSpec::str() const {
  if (granularity == "selective" && modules != std::vector<std::string>{"core_attn"})
    return "selective:" + llvm::join(modules, ",");
  if (granularity != "full")
    return granularity;
  return granularity + ":" + method + ":" + std::to_string(numLayers);
}

FailureOr<mlir::trainc::sched::RecomputeSpec>
mlir::trainc::sched::parseRecompute(StringRef text, int64_t numLayersPerStage,
                                     function_ref<InFlightDiagnostic()> emitError) {
  RecomputeSpec spec;
  if (text == "none" || text == "selective") {
    spec.granularity = text.str();
    if (text == "selective")
      spec.modules = {"core_attn"};
    return spec;
  }
  SmallVector<StringRef> parts;
  text.split(parts, ':');
  auto bad = [&]() -> FailureOr<RecomputeSpec> {
    return emitError() << "recompute = \"" << text
                       << "\", expected none, selective, selective:M,... (M: core_attn, mlp), "
                          "full:uniform:N or full:block:N";
  };
  if (parts.size() == 2 && parts[0] == "selective") {
    SmallVector<StringRef> mods;
    parts[1].split(mods, ',');
    for (StringRef m : mods) {
      if (m != "core_attn" && m != "mlp")
        return emitError() << "recompute = \"" << text << "\": module '" << m
                           << "' is not one of core_attn, mlp";
      spec.modules.push_back(m.str());
    }
    spec.granularity = "selective";
    return spec;
  }
  if (parts.size() != 3 || parts[0] != "full")
    return bad();
  if (parts[1] != "uniform" && parts[1] != "block")
    return emitError() << "recompute = \"" << text << "\": method '" << parts[1]
                       << "' is not one of uniform, block";
  if (parts[2].getAsInteger(10, spec.numLayers))
    return bad();
  if (spec.numLayers < 1 && numLayersPerStage <= 0)
    return emitError() << "recompute = \"" << text << "\": num_layers " << spec.numLayers
                       << ", expected at least 1";
  if (spec.numLayers < 1 || (numLayersPerStage > 0 && spec.numLayers > numLayersPerStage))
    return emitError() << "recompute = \"" << text << "\": num_layers " << spec.numLayers
                       << " is out of range [1, " << numLayersPerStage
                       << "] (the layers per pipeline stage)";
  spec.granularity = "full";
  spec.method = parts[1].str();
  return spec;
}
