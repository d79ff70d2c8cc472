//===- RtOps.cpp - rt dialect: verifiers backed by the runtime's kernel table ===//

#include "dialects/Rt/RtDialect.h"
#include "dialects/AttrVerify.h"
#include "dialects/Trainc/TraincDialect.h"

#include "runtime/core/Kernel.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::trainc::rt;

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include "dialects/Rt/RtDialect.cpp.inc"
#include "dialects/Rt/RtEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/Rt/RtAttrs.cpp.inc"

void RtDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Rt/RtAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/Rt/RtOps.cpp.inc"
      >();
}

LogicalResult RtDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute v = attr.getValue();
  auto check = [&](bool ok, StringRef expected) {
    return mlir::trainc::checkAttribute(op, attr, ok, expected);
  };
  if (llvm::is_contained({"rt.arena_bytes", "rt.persistent_bytes", "rt.flowing_peak_bytes",
                          "rt.stash_slots", "rt.stash_b_slots", "rt.layer_index"},
                         name))
    return check(mlir::trainc::isI64AtLeast(v, 0), "a non-negative i64 integer");
  if (name == "rt.group_bytes") {
    auto d = dyn_cast<DictionaryAttr>(v);
    return check(d && llvm::all_of(d, [](NamedAttribute e) { return mlir::trainc::isI64AtLeast(e.getValue(), 0); }),
                 "a dictionary of {group = bytes} (non-negative i64 integers)");
  }
  if (name == "rt.carried_tokens")
    return check(isa<DenseI64ArrayAttr>(v), "an array<i64> of token numbers");
  if (name == "rt.shard_segments") {
    auto a = dyn_cast<DenseI64ArrayAttr>(v);
    return check(a && a.size() % 3 == 0, "an array<i64> of (begin, end, decay) triples");
  }
  if (name == "rt.unit_flops") {
    auto f = dyn_cast<FloatAttr>(v);
    return check(f && f.getValueAsDouble() >= 0, "a non-negative float (FLOPs of the unit call)");
  }
  if (llvm::is_contained({"rt.schedule", "rt.unit"}, name))
    return check(isa<StringAttr>(v), "a string");
  const bool onFunction = isa<func::FuncOp>(op);
  if (llvm::is_contained({"rt.stage", "rt.function", "rt.entry"}, name))
    return check(isa<UnitAttr>(v) && onFunction, "a unit attribute on a func.func");
  if (name == "rt.p2p_stash_recvs") // pipeline stages: receives into the stash argument
    return check(onFunction && isa<ArrayAttr>(v) &&
                     llvm::all_of(cast<ArrayAttr>(v), [](Attribute e) {
                       auto d = dyn_cast<DictionaryAttr>(e);
                       return d && d.get("group") && d.get("peer") && d.get("arg") &&
                              d.get("offset") && d.get("type");
                     }),
                 "an array of {group, peer, arg, offset, type} dictionaries on a func.func");
  if (llvm::is_contained({"rt.entry_point", "rt.layer"}, name))
    return check(isa<StringAttr>(v) && onFunction, "a string on a func.func");
  return op->emitOpError() << "has unknown attribute '" << name
                           << "' of the rt dialect (rt.arena_bytes, rt.persistent_bytes, "
                              "rt.flowing_peak_bytes, rt.stash_slots, rt.stash_b_slots, rt.group_bytes, "
                              "rt.carried_tokens, rt.schedule, rt.stage, rt.function, rt.entry, "
                              "rt.entry_point, rt.layer, rt.unit, rt.unit_flops, rt.layer_index, "
                              "rt.shard_segments, rt.p2p_stash_recvs)";
}

LogicalResult RtDialect::verifyRegionArgAttribute(Operation *op, unsigned region, unsigned arg,
                                                  NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute v = attr.getValue();
  auto check = [&](bool ok, StringRef expected) -> LogicalResult {
    if (ok)
      return success();
    return op->emitOpError() << "argument " << arg << ": '" << name << "' must be " << expected
                             << ", not " << v;
  };
  if (name == "rt.input")
    return check(isa<StringAttr>(v), "a string (the model.input)");
  if (name == "rt.stash" || name == "rt.result")
    return check(mlir::trainc::isI64AtLeast(v, 0), "a non-negative i64 integer");
  if (name == "rt.accumulate")
    return check(isa<UnitAttr>(v), "a unit attribute");
  // --overlap-p2p-comm: a send or receive buffer the iteration passes (and transfers).
  if (name == "rt.p2p") {
    auto str = dyn_cast<StringAttr>(v);
    return check(str && llvm::is_contained({"send", "recv"}, str.getValue()),
                 "\"send\" or \"recv\"");
  }
  if (name == "rt.p2p_group")
    return check(isa<StringAttr>(v), "a string (the group)");
  if (name == "rt.p2p_peer")
    return check(isa<IntegerAttr>(v), "an integer (the peer's rank in the group)");
  return op->emitOpError() << "argument " << arg << " has unknown attribute '" << name
                           << "' of the rt dialect (rt.input, rt.stash, rt.result, "
                              "rt.accumulate, rt.p2p, rt.p2p_group, rt.p2p_peer)";
}

namespace mlir::trainc::rt {
bool isPersistentKind(BufferKind kind) {
  return kind != BufferKind::activation && kind != BufferKind::workspace;
}
} // namespace mlir::trainc::rt

LogicalResult BufferOp::verify() {
  if (int64_t(getOffset()) < -1)
    return emitOpError() << "offset " << int64_t(getOffset()) << " is negative";
  if (getGroup() && isPersistentKind(getKind()))
    return emitOpError() << "group '" << *getGroup() << "' on a " << stringifyBufferKind(getKind())
                         << " buffer (only activation and workspace buffers are grouped)";
  return success();
}

LogicalResult BufferRefOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto buf = symbolTable.lookupNearestSymbolFrom<BufferOp>(*this, getBufferAttr());
  if (!buf)
    return emitOpError() << "@" << getBuffer() << " is not an rt.buffer";
  if (buf.getType() != getType())
    return emitOpError() << "type " << getType() << " differs from buffer @" << getBuffer()
                         << " of type " << buf.getType();
  return success();
}

LogicalResult ViewOp::verify() {
  auto src = cast<MemRefType>(getSource().getType());
  auto dst = cast<MemRefType>(getType());
  if (src.getElementType() != dst.getElementType())
    return emitOpError() << "changes the element type from " << src.getElementType() << " to "
                         << dst.getElementType();
  if (int64_t(getOffset()) < 0 || int64_t(getOffset()) + dst.getNumElements() > src.getNumElements())
    return emitOpError() << "offset " << int64_t(getOffset()) << " + " << dst.getNumElements()
                         << " elements exceeds the source of " << src.getNumElements()
                         << " elements";
  if (auto axis = getAxis()) {
    static const char *const axes[] = {"tp", "cp", "ep", "dp", "pp"};
    if (!llvm::is_contained(axes, *axis))
      return emitOpError() << "axis '" << *axis << "' is not a mesh axis (tp, cp, ep, dp, pp)";
    if (int64_t(getAxisStride()) <= 0)
      return emitOpError() << "axis_stride " << int64_t(getAxisStride())
                           << " on axis '" << *axis << "': expected > 0";
  } else if (int64_t(getAxisStride()) != 0) {
    return emitOpError() << "axis_stride " << int64_t(getAxisStride()) << " without an axis";
  }
  return success();
}

namespace {
::trainc::rt::DType toRtDType(Type t) {
  using ::trainc::rt::DType;
  if (t.isF32())
    return DType::F32;
  if (t.isF64())
    return DType::F64;
  if (t.isBF16())
    return DType::BF16;
  if (t.isF16())
    return DType::F16;
  if (t.isInteger(32))
    return DType::I32;
  if (t.isInteger(64))
    return DType::I64;
  if (t.isInteger(8))
    return DType::U8;
  return DType::Invalid;
}

/// The runtime view of a memref type, or an error message when the runtime cannot represent it.
std::string viewOf(Type t, ::trainc::rt::TensorView &v) {
  auto m = cast<MemRefType>(t);
  if (toRtDType(m.getElementType()) == ::trainc::rt::DType::Invalid)
  {
    std::string name;
    llvm::raw_string_ostream os(name);
    os << m.getElementType();
    return "element type " + os.str() +
           " is not one the runtime supports (f32, f64, bf16, f16, i32, i64, i8)";
  }
  if (!::trainc::rt::makeView(toRtDType(m.getElementType()), m.getShape().data(),
                              int(m.getRank()), v))
    return "rank " + std::to_string(m.getRank()) + " exceeds the runtime's maximum rank " +
           std::to_string(::trainc::rt::kMaxRank);
  return "";
}
} // namespace

LogicalResult KernelOp::verify() {
  const ::trainc::rt::KernelSignature *sig = ::trainc::rt::findKernelSignature(getKernel().str());
  if (!sig)
    return emitOpError() << "unknown kernel '" << getKernel() << "'";
  if (int(getInputs().size()) != sig->numIn || int(getOutputs().size()) != sig->numOut)
    return emitOpError() << "kernel '" << getKernel() << "' takes " << sig->numIn
                         << " inputs and " << sig->numOut << " outputs, got "
                         << getInputs().size() << " and " << getOutputs().size();
  ::trainc::rt::Attrs attrs;
  attrs.scalars.resize(sig->attrs.size());
  attrs.lists.resize(sig->attrs.size());
  for (size_t k = 0; k < sig->attrs.size(); ++k)
    attrs.scalars[k] = sig->attrs[k].defaultValue;
  for (NamedAttribute a : getKernelAttrs()) {
    int k = ::trainc::rt::attrIndex(*sig, a.getName().str());
    if (k < 0)
      return emitOpError() << "kernel '" << getKernel() << "' has no attribute '"
                           << a.getName().getValue() << "'";
    bool list = sig->attrs[size_t(k)].type == ::trainc::rt::AttrType::Ints;
    if (auto l = dyn_cast<DenseI64ArrayAttr>(a.getValue()); l && list)
      attrs.lists[k].assign(l.asArrayRef().begin(), l.asArrayRef().end());
    else if (list)
      return emitOpError() << "attribute '" << a.getName().getValue()
                           << "' must be an array<i64>";
    else if (auto i = dyn_cast<IntegerAttr>(a.getValue()))
      attrs.scalars[k] = double(i.getInt());
    else if (auto f = dyn_cast<FloatAttr>(a.getValue()))
      attrs.scalars[k] = f.getValueAsDouble();
    else
      return emitOpError() << "attribute '" << a.getName().getValue()
                           << "' must be an integer or a float";
  }
  std::vector<::trainc::rt::TensorView> in, out;
  for (auto [i, v] : llvm::enumerate(getInputs())) {
    in.emplace_back();
    if (std::string e = viewOf(v.getType(), in.back()); !e.empty())
      return emitOpError() << "input " << i << ": " << e;
  }
  for (auto [i, v] : llvm::enumerate(getOutputs())) {
    out.emplace_back();
    if (std::string e = viewOf(v.getType(), out.back()); !e.empty())
      return emitOpError() << "output " << i << ": " << e;
  }
  ::trainc::rt::KernelCtx ctx{in.data(), int(in.size()), out.data(), int(out.size()), &attrs,
                            nullptr};
  std::string e = sig->verify(ctx);
  if (!e.empty())
    return emitOpError() << "kernel '" << getKernel() << "' " << e;
  if (auto ip = getInPlace()) {
    if (ip->size() != getOutputs().size())
      return emitOpError() << "in_place has " << ip->size() << " entries, expected "
                           << getOutputs().size();
    for (int32_t x : *ip)
      if (x < -1 || x >= int32_t(getInputs().size()))
        return emitOpError() << "in_place entry " << x << " is not -1 or an input index";
  }
  return success();
}

LogicalResult CollectiveOp::verify() {
  StringRef k = stringifyCollectiveKind(getKind());
  size_t want = getKind() == CollectiveKind::barrier ? 0 : 1;
  if (getInputs().size() != want || getOutputs().size() != want)
    return emitOpError() << "'" << k << "' takes " << want << " input and " << want << " output";
  return success();
}


#define GET_OP_CLASSES
#include "dialects/Rt/RtOps.cpp.inc"

SmallVector<int64_t> mlir::trainc::rt::shardSegments(ArrayRef<int64_t> bucketSegments,
                                                     int64_t coord, int64_t shardSize) {
  SmallVector<std::array<int64_t, 3>> pieces;
  const int64_t lo = coord * shardSize, hi = lo + shardSize;
  for (size_t s = 0; s + 2 < bucketSegments.size(); s += 3) {
    int64_t begin = std::max(bucketSegments[s], lo), end = std::min(bucketSegments[s + 1], hi);
    if (begin < end)
      pieces.push_back({begin - lo, end - lo, bucketSegments[s + 2]});
  }
  llvm::sort(pieces);
  SmallVector<int64_t> out;
  for (const auto &p : pieces)
    out.append(p.begin(), p.end());
  if (out.empty())
    out.append({0, 0, 0});
  return out;
}
