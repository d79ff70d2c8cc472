//===- Export.cpp - rt IR to program.proto --------------------------------===//

#include "compiler/Export.h"

#include "dialects/Model/ModelDialect.h"
#include "dialects/Rt/RtDialect.h"
#include "runtime/core/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace mlir::trainc;
namespace schema = ::trainc::schema;

namespace {

schema::DType dtypeOf(Type t) {
  if (t.isF32())
    return schema::F32;
  if (t.isF64())
    return schema::F64;
  if (t.isBF16())
    return schema::BF16;
  if (t.isF16())
    return schema::F16;
  if (t.isInteger(32))
    return schema::I32;
  if (t.isInteger(64))
    return schema::I64;
  if (t.isInteger(8))
    return schema::U8;
  return schema::DTYPE_UNSPECIFIED;
}

/// An exported operand: base buffer or argument, element offset (at coordinate 0 of `axis`, and
/// `stride` more per coordinate of a rank-dependent view).
struct OperandRef {
  bool isArg = false;
  uint32_t base = 0;
  uint64_t offset = 0;
  StringRef axis;
  int64_t stride = 0;
};

class Exporter {
public:
  Exporter(ModuleOp m, const RankPlacement &placement, ExportedPlan &out)
      : module(m), placement(placement), p(out.program), plan(out) {}
  LogicalResult run();

private:
  LogicalResult exportFunction(func::FuncOp fn, schema::Function &out);
  uint32_t location(Location loc);
  /// The operand `v` of `user`, in slot (`where`, `j`) of the instruction being built.
  FailureOr<schema::Operand> operand(Value v, Operation *user, ExportedPlan::Slot where = {},
                                     uint32_t j = 0);
  FailureOr<uint32_t> axisIndex(StringRef axis, Operation *user);
  /// Records the kernel attributes of `kc` named in `offsets` (model.rank_offsets) as AttrSites.
  LogicalResult rankOffsets(Operation &op, DictionaryAttr offsets, const schema::KernelCall &kc);
  /// Fills `q`'s global shape and slice from a buffer's (or param_info's) attributes: a
  /// tensor-parallel split (global_shape, split_dim, split_axis) or the whole `local` shape.
  LogicalResult slice(Operation *where, schema::Parameter &q, ArrayRef<int64_t> local,
                      DictionaryAttr attrs);

  ModuleOp module;
  const RankPlacement &placement;
  schema::Program &p;
  ExportedPlan &plan;
  /// The function and instruction being exported (the position of rank-dependent operands).
  uint32_t curFunction = 0, curInstruction = 0;
  llvm::StringMap<uint32_t> groupIndex;
  int64_t maxToken = -1;
  llvm::StringMap<uint32_t> bufferIndex, functionIndex, locIndex;
  llvm::DenseMap<Value, OperandRef> refs;
};

uint32_t Exporter::location(Location loc) {
  std::string op, file;
  unsigned line = 0, col = 0;
  std::function<void(Location)> visit = [&](Location l) {
    if (auto n = dyn_cast<NameLoc>(l)) {
      if (op.empty())
        op = n.getName().str();
      visit(n.getChildLoc());
    } else if (auto f = dyn_cast<FileLineColLoc>(l)) {
      if (file.empty()) {
        file = f.getFilename().str();
        line = f.getLine();
        col = f.getColumn();
      }
    } else if (auto fu = dyn_cast<FusedLoc>(l)) {
      for (Location c : fu.getLocations())
        visit(c);
    } else if (auto cs = dyn_cast<CallSiteLoc>(l)) {
      visit(cs.getCallee());
    }
  };
  visit(loc);
  std::string key = file + ":" + std::to_string(line) + ":" + std::to_string(col) + " " + op;
  auto [it, fresh] = locIndex.try_emplace(key, p.locations_size());
  if (fresh) {
    schema::Location *l = p.add_locations();
    l->set_file(file);
    l->set_line(line);
    l->set_column(col);
    l->set_op(op);
  }
  return it->second;
}

FailureOr<uint32_t> Exporter::axisIndex(StringRef axis, Operation *user) {
  for (size_t a = 0; a < placement.axisNames.size(); ++a)
    if (placement.axisNames[a] == axis)
      return uint32_t(a);
  return user->emitOpError() << "depends on mesh axis '" << axis
                             << "', which the placement's mesh does not have";
}

LogicalResult Exporter::rankOffsets(Operation &op, DictionaryAttr offsets,
                                    const schema::KernelCall &kc) {
  for (NamedAttribute a : offsets) {
    auto pair = dyn_cast<DenseI64ArrayAttr>(a.getValue());
    if (!pair || pair.size() != 2 || pair[0] < 0 || pair[0] >= int64_t(placement.axisNames.size()))
      return op.emitOpError() << model::kRankOffsetsAttr << " entry '" << a.getName()
                              << "' is not [mesh axis, stride] of the placement's mesh";
    for (int i = 0; i < kc.attrs_size(); ++i)
      if (kc.attrs(i).name() == a.getName().getValue())
        plan.attrSites.push_back({curFunction, curInstruction, uint32_t(i), uint32_t(pair[0]),
                                  kc.attrs(i).value().i(), pair[1]});
  }
  return success();
}

LogicalResult Exporter::slice(Operation *where, schema::Parameter &q, ArrayRef<int64_t> local,
                              DictionaryAttr attrs) {
  auto global = attrs ? attrs.getAs<DenseI64ArrayAttr>("global_shape") : DenseI64ArrayAttr();
  if (!global) {
    for (int64_t d : local) {
      q.add_global_shape(d);
      q.add_slice_start(0);
      q.add_slice_size(d);
    }
    return success();
  }
  auto dim = attrs.getAs<IntegerAttr>("split_dim"), axis = attrs.getAs<IntegerAttr>("split_axis");
  if (!dim || !axis || dim.getInt() < 0 || dim.getInt() >= int64_t(global.size()) ||
      axis.getInt() < 0 || axis.getInt() >= int64_t(placement.axisSizes.size()) ||
      global[dim.getInt()] % placement.axisSizes[size_t(axis.getInt())])
    return where->emitOpError() << "export: parameter '" << q.name()
                                << "' has a global_shape without a split_dim and split_axis "
                                   "that divide it over the placement's mesh";
  for (auto [d, e] : llvm::enumerate(global.asArrayRef())) {
    bool split = int64_t(d) == dim.getInt();
    q.add_global_shape(e);
    q.add_slice_start(0);
    q.add_slice_size(split ? e / placement.axisSizes[size_t(axis.getInt())] : e);
  }
  if (global.size() == local.size() + 1) // SwiGLU's fc1: [2, F, ...] is the tensor [2F, ...]
    for (size_t d = 1; d < global.size(); ++d)
      q.add_tensor_shape(d == 1 ? global[0] * global[1] : global[d]);
  plan.sliceSites.push_back({uint32_t(p.parameters_size() - 1), uint32_t(dim.getInt()),
                             uint32_t(axis.getInt())});
  return success();
}

FailureOr<schema::Operand> Exporter::operand(Value v, Operation *user, ExportedPlan::Slot where,
                                             uint32_t j) {
  auto it = refs.find(v);
  if (it == refs.end()) {
    user->emitOpError() << "operand is not an rt.buffer_ref, rt.view or function argument";
    return failure();
  }
  if (it->second.stride != 0) {
    FailureOr<uint32_t> axis = axisIndex(it->second.axis, user);
    if (failed(axis))
      return failure();
    plan.operandSites.push_back({curFunction, curInstruction, where, j, *axis,
                                 it->second.offset, it->second.stride});
  }
  schema::Operand o;
  if (it->second.isArg)
    o.set_arg(it->second.base);
  else
    o.set_buffer(it->second.base);
  o.set_offset(it->second.offset);
  for (int64_t d : cast<MemRefType>(v.getType()).getShape())
    o.add_shape(d);
  return o;
}

LogicalResult Exporter::exportFunction(func::FuncOp fn, schema::Function &out) {
  out.set_name(fn.getSymName().str());
  for (BlockArgument a : fn.getArguments()) {
    auto t = cast<MemRefType>(a.getType());
    schema::Arg *arg = out.add_args();
    auto name = fn.getArgAttrOfType<StringAttr>(a.getArgNumber(), "rt.input");
    auto stash = fn.getArgAttrOfType<IntegerAttr>(a.getArgNumber(), "rt.stash");
    arg->set_name(name    ? name.str()
                  : stash ? "stash." + std::to_string(stash.getInt())
                          : "arg" + std::to_string(a.getArgNumber()));
    arg->set_dtype(dtypeOf(t.getElementType()));
    for (int64_t d : t.getShape())
      arg->add_shape(d);
    refs[a] = {true, a.getArgNumber(), 0};
  }
  for (Operation &op : fn.getBody().front()) {
    if (auto ref = dyn_cast<rt::BufferRefOp>(op)) {
      refs[ref.getResult()] = {false, bufferIndex.lookup(ref.getBuffer()), 0};
      continue;
    }
    if (auto view = dyn_cast<rt::ViewOp>(op)) {
      OperandRef r = refs.lookup(view.getSource());
      r.offset += uint64_t(view.getOffset());
      if (std::optional<StringRef> axis = view.getAxis()) {
        if (r.stride != 0 && r.axis != *axis)
          return view.emitOpError() << "depends on mesh axis '" << *axis
                                    << "' and its source on '" << r.axis << "'";
        r.axis = *axis;
        r.stride += int64_t(view.getAxisStride());
      }
      refs[view.getResult()] = r;
      continue;
    }
    if (isa<func::ReturnOp>(op))
      continue;
    curInstruction = uint32_t(out.body_size());
    schema::Instruction ins;
    ins.set_loc(location(op.getLoc()));
    if (auto k = dyn_cast<rt::KernelOp>(op)) {
      schema::KernelCall *kc = ins.mutable_kernel();
      kc->set_kernel(k.getKernel().str());
      for (auto [j, v] : llvm::enumerate(k.getInputs())) {
        FailureOr<schema::Operand> o = operand(v, &op, ExportedPlan::KernelInput, uint32_t(j));
        if (failed(o))
          return failure();
        *kc->add_inputs() = *o;
      }
      for (auto [j, v] : llvm::enumerate(k.getOutputs())) {
        FailureOr<schema::Operand> o = operand(v, &op, ExportedPlan::KernelOutput, uint32_t(j));
        if (failed(o))
          return failure();
        *kc->add_outputs() = *o;
      }
      for (NamedAttribute a : k.getKernelAttrs()) {
        schema::Attr *x = kc->add_attrs();
        x->set_name(a.getName().str());
        if (auto i = dyn_cast<IntegerAttr>(a.getValue()))
          x->mutable_value()->set_i(i.getInt());
        else if (auto f = dyn_cast<FloatAttr>(a.getValue()))
          x->mutable_value()->set_f(f.getValueAsDouble());
        else if (auto l = dyn_cast<DenseI64ArrayAttr>(a.getValue()))
          for (int64_t e : l.asArrayRef())
            x->mutable_value()->mutable_ints()->add_values(e);
        else
          return op.emitOpError() << "attribute '" << a.getName() << "' cannot be exported";
      }
      if (auto offsets = op.getAttrOfType<DictionaryAttr>(model::kRankOffsetsAttr))
        if (failed(rankOffsets(op, offsets, *kc)))
          return failure();
      if (auto segments = op.getAttrOfType<DenseI64ArrayAttr>("rt.shard_segments")) {
        // A DP shard's update: every rank's `segments` follow from the bucket's.
        int index = -1;
        for (int a = 0; a < kc->attrs_size(); ++a)
          if (kc->attrs(a).name() == "segments")
            index = a;
        FailureOr<uint32_t> axis = axisIndex("dp", &op);
        if (index < 0 || k.getInputs().empty() || failed(axis))
          return op.emitOpError() << "has rt.shard_segments but no `segments` attribute or no dp "
                                     "axis";
        plan.segmentSites.push_back(
            {curFunction, curInstruction, uint32_t(index), *axis,
             std::vector<int64_t>(segments.asArrayRef().begin(), segments.asArrayRef().end()),
             cast<MemRefType>(k.getInputs()[0].getType()).getNumElements()});
      }
      if (auto ip = k.getInPlace())
        for (int32_t j : *ip)
          kc->add_in_place(j);
    } else if (auto call = dyn_cast<func::CallOp>(op)) {
      auto it = functionIndex.find(call.getCallee());
      if (it == functionIndex.end())
        return op.emitOpError() << "calls unknown function @" << call.getCallee();
      schema::Call *c = ins.mutable_call();
      c->set_function(it->second);
      for (auto [j, v] : llvm::enumerate(call.getOperands())) {
        FailureOr<schema::Operand> o = operand(v, &op, ExportedPlan::CallArg, uint32_t(j));
        if (failed(o))
          return failure();
        *c->add_args() = *o;
      }
    } else if (auto io = dyn_cast<rt::HostIOOp>(op)) {
      ins.mutable_host_io()->set_kind(io.getKind() == rt::HostIOKind::fill_inputs
                                          ? schema::FILL_INPUTS
                                          : schema::READ_OUTPUTS);
      ins.mutable_host_io()->set_name(io.getLabel().str());
    } else if (auto r = dyn_cast<rt::RegionOp>(op)) {
      ins.mutable_region()->set_kind(r.getKind() == rt::RegionKind::begin
                                         ? schema::GRAPH_CAPTURE_BEGIN
                                         : schema::GRAPH_CAPTURE_END);
      ins.mutable_region()->set_name(r.getLabel().str());
    } else if (auto w = dyn_cast<rt::WaitOp>(op)) {
      int64_t token = int64_t(w.getToken());
      if (token < 0)
        return op.emitOpError() << "waits on negative token " << token;
      ins.mutable_wait()->set_token(uint32_t(token));
      maxToken = std::max<int64_t>(maxToken, token);
    } else if (auto c = dyn_cast<rt::CollectiveOp>(op)) {
      schema::Collective *col = ins.mutable_collective();
      // The rt enums follow program.proto's order after its UNSPECIFIED 0.
      col->set_kind(schema::CollectiveKind(int(c.getKind()) + 1));
      auto g = groupIndex.find(c.getGroup());
      if (g == groupIndex.end())
        return op.emitOpError() << "uses group '" << c.getGroup()
                                << "', which this rank's placement does not have";
      col->set_group(g->second);
      col->set_op(c.getOp() == rt::ReduceOp::max   ? schema::MAX
                  : c.getOp() == rt::ReduceOp::min ? schema::MIN
                                                   : schema::SUM);
      if (!c.getInputs().empty()) {
        FailureOr<schema::Operand> in =
            operand(c.getInputs()[0], &op, ExportedPlan::CollectiveInput);
        FailureOr<schema::Operand> o =
            operand(c.getOutputs()[0], &op, ExportedPlan::CollectiveOutput);
        if (failed(in) || failed(o))
          return failure();
        *col->mutable_input() = *in;
        *col->mutable_output() = *o;
      }
      ins.set_stream(1);
      if (int64_t token = int64_t(c.getToken()); token >= 0) {
        col->set_async(true);
        col->set_token(uint32_t(token));
        maxToken = std::max<int64_t>(maxToken, token);
      }
    } else if (isa<rt::SendOp, rt::RecvOp>(op)) {
      bool isSend = isa<rt::SendOp>(op);
      StringRef group = isSend ? cast<rt::SendOp>(op).getGroup() : cast<rt::RecvOp>(op).getGroup();
      int64_t peer = isSend ? cast<rt::SendOp>(op).getPeer() : cast<rt::RecvOp>(op).getPeer();
      auto g = groupIndex.find(group);
      if (g == groupIndex.end())
        return op.emitOpError() << "uses group '" << group
                                << "', which this rank's placement does not have";
      schema::SendRecv *sr = isSend ? ins.mutable_send() : ins.mutable_recv();
      sr->set_group(g->second);
      sr->set_peer(peer);
      FailureOr<schema::Operand> o = operand(op.getOperand(0), &op, ExportedPlan::PointToPoint);
      if (failed(o))
        return failure();
      *sr->mutable_operand() = *o;
      int64_t token = isSend ? cast<rt::SendOp>(op).getToken() : cast<rt::RecvOp>(op).getToken();
      if (token >= 0) {
        sr->set_async(true);
        sr->set_token(uint32_t(token));
        maxToken = std::max<int64_t>(maxToken, token);
      }
      ins.set_stream(1);
    } else {
      return op.emitOpError() << "cannot be exported to program.proto";
    }
    *out.add_body() = std::move(ins);
  }
  return success();
}

LogicalResult Exporter::run() {
  p.set_format_version(::trainc::rt::kFormatVersion);
  p.set_producer("trainc compiler (MLIR 19)");
  schema::Mesh *mesh = p.mutable_mesh();
  int64_t world = 1;
  for (size_t a = 0; a < placement.axisNames.size(); ++a) {
    mesh->add_axis_names(placement.axisNames[a]);
    mesh->add_axis_sizes(placement.axisSizes[a]);
    mesh->add_coords(placement.coords[a]);
    world *= placement.axisSizes[a];
  }
  mesh->set_rank(placement.rank);
  mesh->set_world_size(world);
  for (const auto &[name, ranks] : placement.groups) {
    groupIndex[name] = uint32_t(p.groups_size());
    schema::CommGroup *g = p.add_groups();
    g->set_name(name);
    for (int64_t r : ranks)
      g->add_ranks(r);
  }
  // The groups come from the mesh axes: the module's mesh must be the placement's.
  if (auto m = module.lookupSymbol<mesh::MeshOp>(model::kMeshName)) {
    auto names = m->getAttrOfType<ArrayAttr>(model::kAxisNamesAttr);
    bool same = names && names.size() == placement.axisNames.size() &&
                m.getShape() == ArrayRef<int64_t>(placement.axisSizes);
    for (size_t a = 0; same && a < placement.axisNames.size(); ++a)
      same = cast<StringAttr>(names[a]).getValue() == placement.axisNames[a];
    if (!same)
      return m.emitOpError() << "export: the module's mesh is not the placement's (axes and sizes "
                                "must be equal)";
  }
  auto arena = module->getAttrOfType<IntegerAttr>("rt.arena_bytes");
  if (!arena)
    return module.emitError() << "export: the module has no memory plan (run trainc-memory-plan)";
  p.set_arena_bytes(uint64_t(arena.getInt()));

  std::map<rt::BufferKind, uint64_t> kindBytes;
  for (rt::BufferOp b : module.getOps<rt::BufferOp>()) {
    bufferIndex[b.getSymName()] = p.buffers_size();
    schema::Buffer *buf = p.add_buffers();
    buf->set_name(b.getSymName().str());
    buf->set_kind(schema::BufferKind(int(b.getKind()) + 1)); // proto order after UNSPECIFIED
    MemRefType t = b.getType();
    buf->set_dtype(dtypeOf(t.getElementType()));
    for (int64_t d : t.getShape())
      buf->add_shape(d);
    if (int64_t(b.getOffset()) < 0)
      return b.emitOpError() << "export: buffer has no offset (run trainc-memory-plan)";
    buf->set_offset(uint64_t(b.getOffset()));
    uint64_t bytes = uint64_t(t.getNumElements()) * ((t.getElementTypeBitWidth() + 7) / 8);
    buf->set_byte_size(bytes);
    kindBytes[b.getKind()] += bytes;
    if (b.getKind() == rt::BufferKind::input) {
      // The lowering names a microbatch's input buffer "<model.input>.<microbatch>"; the host
      // fills it by role and microbatch (Buffer.host_input), not by name.
      auto [role, mb] = b.getSymName().rsplit('.');
      unsigned microbatch = 0;
      if (role.empty() || mb.empty() || mb.getAsInteger(10, microbatch))
        return b.emitOpError() << "export: internal error: input buffer '" << b.getSymName()
                               << "' is not named <model.input>.<microbatch>";
      schema::InputRole r = schema::INPUT_ROLE_UNSPECIFIED;
      if (role.lower() != role.str() || !schema::InputRole_Parse(role.upper(), &r) ||
          r == schema::INPUT_ROLE_UNSPECIFIED)
        return b.emitOpError() << "export: input buffer '" << b.getSymName() << "': model.input '"
                               << role
                               << "' is not an input the runtime fills (expected tokens, "
                                  "position_ids, labels, loss_mask, rng or doc_start)";
      buf->mutable_host_input()->set_role(r);
      buf->mutable_host_input()->set_microbatch(microbatch);
    }
    // The host interface's scalars, by role (the lowering names them as scalarRoleOfName reads).
    if (schema::ScalarRole role = ::trainc::rt::scalarRoleOfName(b.getSymName().str());
        role != schema::SCALAR_ROLE_UNSPECIFIED && buf->kind() == ::trainc::rt::scalarRoleKind(role))
      buf->set_scalar_role(role);
    if (auto name = b->getAttrOfType<StringAttr>("param_name")) {
      schema::Parameter *q = p.add_parameters();
      q->set_name(name.str());
      if (failed(slice(b, *q, t.getShape(), b->getAttrDictionary())))
        return failure();
      q->set_buffer(uint32_t(p.buffers_size() - 1));
      q->set_no_weight_decay(b->hasAttr("no_weight_decay"));
      if (auto init = b->getAttrOfType<StringAttr>("init"))
        q->set_init(init.str());
      if (auto std = b->getAttrOfType<FloatAttr>("init_std"))
        q->set_init_std(std.getValueAsDouble());
    }
    // Parameters that are ranges of one buffer (the distributed optimizer's `params`).
    if (auto infos = b->getAttrOfType<ArrayAttr>("param_info"))
      for (Attribute a : infos) {
        auto d = cast<DictionaryAttr>(a);
        schema::Parameter *q = p.add_parameters();
        q->set_name(d.getAs<StringAttr>("name").str());
        if (failed(slice(b, *q, d.getAs<DenseI64ArrayAttr>("shape").asArrayRef(), d)))
          return failure();
        q->set_buffer(uint32_t(p.buffers_size() - 1));
        q->set_buffer_offset(uint64_t(d.getAs<IntegerAttr>("offset").getInt()));
        q->set_no_weight_decay(bool(d.get("no_weight_decay")));
        if (auto init = d.getAs<StringAttr>("init"))
          q->set_init(init.str());
        if (auto std = d.getAs<FloatAttr>("init_std"))
          q->set_init_std(std.getValueAsDouble());
      }
  }
  // Where each parameter's main_grad lives.
  llvm::StringMap<std::pair<uint32_t, uint64_t>> gradOf;
  for (rt::BufferOp b : module.getOps<rt::BufferOp>()) {
    uint32_t index = bufferIndex.lookup(b.getSymName());
    if (auto name = b->getAttrOfType<StringAttr>("grad_of"))
      gradOf[name.getValue()] = {index, 0};
    if (auto infos = b->getAttrOfType<ArrayAttr>("grad_info"))
      for (Attribute a : infos) {
        auto d = cast<DictionaryAttr>(a);
        gradOf[d.getAs<StringAttr>("name").getValue()] = {
            index, uint64_t(d.getAs<IntegerAttr>("offset").getInt())};
      }
  }
  for (schema::Parameter &q : *p.mutable_parameters()) {
    auto it = gradOf.find(q.name());
    if (it == gradOf.end())
      continue;
    q.set_grad_buffer(it->second.first);
    q.set_grad_offset(it->second.second);
  }
  SmallVector<func::FuncOp> fns(module.getOps<func::FuncOp>());
  for (func::FuncOp fn : fns) {
    functionIndex[fn.getSymName()] = p.functions_size();
    p.add_functions();
    if (fn->hasAttr("rt.entry"))
      p.set_entry(uint32_t(p.functions_size() - 1));
    if (auto name = fn->getAttrOfType<StringAttr>("rt.entry_point"))
      (*p.mutable_entry_points())[name.str()] = uint32_t(p.functions_size() - 1);
  }
  for (auto [i, fn] : llvm::enumerate(fns)) {
    curFunction = uint32_t(i);
    if (failed(exportFunction(fn, *p.mutable_functions(int(i)))))
      return failure();
  }
  p.set_num_tokens(uint32_t(maxToken + 1));
  if (auto bounds = module->getAttrOfType<DenseI64ArrayAttr>("trainc.grad_bucket_bounds")) {
    std::string text;
    for (int64_t b : bounds.asArrayRef())
      text += (text.empty() ? "" : ",") + std::to_string(b);
    (*p.mutable_metadata())["plan.grad_bucket_bounds"] = text;
  }
  if (auto carried = module->getAttrOfType<DenseI64ArrayAttr>("rt.carried_tokens"))
    for (int64_t t : carried.asArrayRef())
      p.add_carried_tokens(uint32_t(t));

  schema::Reports *r = p.mutable_reports();
  schema::MemoryReport *mem = r->mutable_memory();
  if (auto a = module->getAttrOfType<IntegerAttr>("rt.persistent_bytes"))
    mem->set_persistent_bytes(uint64_t(a.getInt()));
  if (auto a = module->getAttrOfType<IntegerAttr>("rt.flowing_peak_bytes"))
    mem->set_flowing_peak_bytes(uint64_t(a.getInt()));
  mem->set_arena_bytes(p.arena_bytes());
  // One stash slot as the memory planner laid out its group (every slot has the same layout).
  if (auto groups = module->getAttrOfType<DictionaryAttr>("rt.group_bytes"))
    if (auto a = groups.getAs<IntegerAttr>("stash.0"))
      mem->set_stash_bytes_per_microbatch(uint64_t(a.getInt()));
  if (auto a = module->getAttrOfType<IntegerAttr>("rt.stash_slots"))
    mem->set_stash_slots(uint32_t(a.getInt()));
  if (auto groups = module->getAttrOfType<DictionaryAttr>("rt.group_bytes"))
    if (auto a = groups.getAs<IntegerAttr>("stash.b.0"))
      mem->set_stash_b_bytes_per_microbatch(uint64_t(a.getInt()));
  if (auto a = module->getAttrOfType<IntegerAttr>("rt.stash_b_slots"))
    mem->set_stash_b_slots(uint32_t(a.getInt()));
  for (auto &[kind, bytes] : kindBytes) {
    schema::KindBytes *kb = mem->add_by_kind();
    kb->set_kind(schema::BufferKind(int(kind) + 1));
    kb->set_bytes(bytes);
  }
  if (auto f = module->getAttrOfType<FloatAttr>("trainc.flops_per_iteration")) {
    r->mutable_flops()->set_flops_per_iteration(f.getValueAsDouble());
    // Model FLOPs leave out what activation recompute replays (trainc-recompute's count per
    // microbatch, times the microbatches): recompute adds hardware FLOPs only.
    double replayed = 0;
    if (auto rf = module->getAttrOfType<FloatAttr>("trainc.recompute_flops_per_microbatch"))
      if (auto m = module->getAttrOfType<IntegerAttr>("trainc.num_microbatches"))
        replayed = rf.getValueAsDouble() * double(m.getInt());
    r->mutable_flops()->set_model_flops_per_iteration(f.getValueAsDouble() - replayed);
  }
  if (auto f = module->getAttrOfType<FloatAttr>("trainc.bytes_per_iteration"))
    r->mutable_flops()->set_bytes_per_iteration(f.getValueAsDouble());
  schema::ScheduleReport *s = r->mutable_schedule();
  auto schedule = module->getAttrOfType<StringAttr>("rt.schedule");
  s->set_schedule(schedule ? schedule.str() : "no-pipelining");
  if (auto m = module->getAttrOfType<IntegerAttr>("trainc.num_microbatches"))
    s->set_num_microbatches(m.getInt());
  for (Operation &op : fns[p.entry()].getBody().front())
    if (auto call = dyn_cast<func::CallOp>(op)) {
      auto unit = call->getAttrOfType<StringAttr>("rt.unit");
      s->add_steps(((unit ? unit.getValue() : "call") + " " + call.getCallee()).str());
      auto flops = call->getAttrOfType<FloatAttr>("rt.unit_flops");
      s->add_step_flops(flops ? flops.getValueAsDouble() : 0.0);
    }
  return success();
}

} // namespace

schema::Operand &ExportedPlan::operandAt(const OperandSite &site) {
  schema::Instruction &ins =
      *program.mutable_functions(int(site.function))->mutable_body(int(site.instruction));
  switch (site.slot) {
  case KernelInput:
    return *ins.mutable_kernel()->mutable_inputs(int(site.index));
  case KernelOutput:
    return *ins.mutable_kernel()->mutable_outputs(int(site.index));
  case CallArg:
    return *ins.mutable_call()->mutable_args(int(site.index));
  case CollectiveInput:
    return *ins.mutable_collective()->mutable_input();
  case CollectiveOutput:
    break;
  case PointToPoint:
    return ins.has_send() ? *ins.mutable_send()->mutable_operand()
                          : *ins.mutable_recv()->mutable_operand();
  }
  return *ins.mutable_collective()->mutable_output();
}

std::string ExportedPlan::specialise(const RankPlacement &placement) {
  schema::Mesh &mesh = *program.mutable_mesh();
  if (size_t(mesh.axis_names_size()) != placement.axisNames.size() ||
      size_t(program.groups_size()) != placement.groups.size())
    return "the placement of rank " + std::to_string(placement.rank) +
           " has another mesh or other groups than the compiled plan's";
  for (size_t a = 0; a < placement.axisNames.size(); ++a) {
    if (mesh.axis_names(int(a)) != placement.axisNames[a] ||
        mesh.axis_sizes(int(a)) != placement.axisSizes[a])
      return "the placement of rank " + std::to_string(placement.rank) + " has axis " +
             placement.axisNames[a] + " of size " + std::to_string(placement.axisSizes[a]) +
             ", the compiled plan " + mesh.axis_names(int(a)) + " of size " +
             std::to_string(mesh.axis_sizes(int(a)));
    mesh.set_coords(int(a), placement.coords[a]);
  }
  mesh.set_rank(placement.rank);
  for (size_t g = 0; g < placement.groups.size(); ++g) {
    schema::CommGroup &group = *program.mutable_groups(int(g));
    if (group.name() != placement.groups[g].first)
      return "the placement of rank " + std::to_string(placement.rank) + " has group '" +
             placement.groups[g].first + "' where the compiled plan has '" + group.name() + "'";
    group.clear_ranks();
    for (int64_t r : placement.groups[g].second)
      group.add_ranks(r);
  }
  for (const OperandSite &site : operandSites)
    operandAt(site).set_offset(
        uint64_t(site.offset + placement.coords[site.axis] * site.stride));
  for (const AttrSite &site : attrSites)
    program.mutable_functions(int(site.function))
        ->mutable_body(int(site.instruction))
        ->mutable_kernel()
        ->mutable_attrs(int(site.attr))
        ->mutable_value()
        ->set_i(site.base + placement.coords[site.axis] * site.stride);
  for (const SliceSite &site : sliceSites) {
    schema::Parameter &q = *program.mutable_parameters(int(site.parameter));
    q.set_slice_start(int(site.dim), placement.coords[site.axis] * q.slice_size(int(site.dim)));
  }
  for (const SegmentSite &site : segmentSites) {
    schema::IntList &ints = *program.mutable_functions(int(site.function))
                                 ->mutable_body(int(site.instruction))
                                 ->mutable_kernel()
                                 ->mutable_attrs(int(site.attr))
                                 ->mutable_value()
                                 ->mutable_ints();
    ints.clear_values();
    for (int64_t v :
         rt::shardSegments(site.bucketSegments, placement.coords[site.axis], site.shardSize))
      ints.add_values(v);
  }
  return "";
}

FailureOr<ExportedPlan> mlir::trainc::exportPlan(ModuleOp module,
                                                 const RankPlacement &placement) {
  ExportedPlan plan;
  if (failed(Exporter(module, placement, plan).run()))
    return failure();
  if (std::string e = plan.specialise(placement); !e.empty())
    return module.emitError() << "export: " << e;
  return plan;
}

FailureOr<schema::Program> mlir::trainc::exportProgram(ModuleOp module,
                                                      const RankPlacement &placement) {
  FailureOr<ExportedPlan> plan = exportPlan(module, placement);
  if (failed(plan))
    return failure();
  return std::move(plan->program);
}
