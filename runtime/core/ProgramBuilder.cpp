//===- ProgramBuilder.cpp ---------------------------------------------------===//

#include "runtime/core/ProgramBuilder.h"

#include "runtime/core/Program.h"

namespace trainc::rt {

ProgramBuilder::ProgramBuilder() {
  program.set_format_version(kFormatVersion);
  program.set_producer("trainc ProgramBuilder");
  setMesh({"dp"}, {1}, 0);
  addLocation("<builder>", 0, 0, "");
}

void ProgramBuilder::setMesh(const std::vector<std::string> &axes,
                             const std::vector<int64_t> &sizes, int64_t rank) {
  schema::Mesh *m = program.mutable_mesh();
  m->Clear();
  int64_t world = 1, r = rank;
  for (size_t i = 0; i < axes.size(); ++i) {
    m->add_axis_names(axes[i]);
    m->add_axis_sizes(sizes[i]);
    m->add_coords(r % sizes[i]);
    r /= sizes[i];
    world *= sizes[i];
  }
  m->set_rank(rank);
  m->set_world_size(world);
}

int ProgramBuilder::addGroup(const std::string &name, const std::vector<int64_t> &ranks) {
  schema::CommGroup *g = program.add_groups();
  g->set_name(name);
  for (int64_t r : ranks)
    g->add_ranks(r);
  return program.groups_size() - 1;
}

int ProgramBuilder::addBuffer(const std::string &name, schema::BufferKind kind, DType dtype,
                              const std::vector<int64_t> &shape) {
  schema::Buffer *b = program.add_buffers();
  b->set_name(name);
  b->set_kind(kind);
  b->set_dtype(schema::DType(int(dtype)));
  int64_t n = 1;
  for (int64_t d : shape) {
    b->add_shape(d);
    n *= d;
  }
  uint64_t bytes = uint64_t(n) * dtypeSize(dtype);
  b->set_offset(nextOffset);
  b->set_byte_size(bytes);
  nextOffset = (nextOffset + bytes + 63) / 64 * 64;
  return program.buffers_size() - 1;
}

void ProgramBuilder::setPlan(uint32_t microBatchSize, uint32_t numMicrobatches,
                             uint32_t seqLength, uint32_t vocabSize) {
  uint64_t dp = 1;
  const schema::Mesh &m = program.mesh();
  for (int a = 0; a < m.axis_names_size(); ++a)
    if (m.axis_names(a) == "dp")
      dp = uint64_t(m.axis_sizes(a));
  schema::PlanInfo *plan = program.mutable_plan();
  plan->set_micro_batch_size(microBatchSize);
  plan->set_num_microbatches(numMicrobatches);
  plan->set_global_batch_size(uint64_t(microBatchSize) * numMicrobatches * dp);
  plan->set_seq_length(seqLength);
  plan->set_vocab_size(vocabSize);
}

void ProgramBuilder::setHostInput(int buffer, schema::InputRole role, uint32_t microbatch) {
  schema::HostInput *h = program.mutable_buffers(buffer)->mutable_host_input();
  h->set_role(role);
  h->set_microbatch(microbatch);
}

schema::Operand ProgramBuilder::buf(int index) {
  schema::Operand o;
  o.set_buffer(uint32_t(index));
  o.set_whole(true);
  return o;
}

schema::Operand ProgramBuilder::buf(int index, uint64_t offset, const std::vector<int64_t> &shape) {
  schema::Operand o;
  o.set_buffer(uint32_t(index));
  o.set_offset(offset);
  for (int64_t d : shape)
    o.add_shape(d);
  return o;
}

schema::Operand ProgramBuilder::arg(int index) {
  schema::Operand o;
  o.set_arg(uint32_t(index));
  o.set_whole(true);
  return o;
}

schema::Operand ProgramBuilder::arg(int index, uint64_t offset, const std::vector<int64_t> &shape) {
  schema::Operand o;
  o.set_arg(uint32_t(index));
  o.set_offset(offset);
  for (int64_t d : shape)
    o.add_shape(d);
  return o;
}

int ProgramBuilder::addFunction(
    const std::string &name,
    const std::vector<std::tuple<std::string, DType, std::vector<int64_t>>> &args) {
  schema::Function *f = program.add_functions();
  f->set_name(name);
  for (const auto &[n, t, shape] : args) {
    schema::Arg *a = f->add_args();
    a->set_name(n);
    a->set_dtype(schema::DType(int(t)));
    for (int64_t d : shape)
      a->add_shape(d);
  }
  return program.functions_size() - 1;
}

void ProgramBuilder::setEntry(int function) {
  program.set_entry(uint32_t(function));
  entrySet = true;
}

int ProgramBuilder::addLocation(const std::string &file, uint32_t line, uint32_t col,
                                const std::string &op) {
  schema::Location *l = program.add_locations();
  l->set_file(file);
  l->set_line(line);
  l->set_column(col);
  l->set_op(op);
  return program.locations_size() - 1;
}

schema::Instruction &ProgramBuilder::append(int function) {
  schema::Instruction *i = program.mutable_functions(function)->add_body();
  i->set_loc(uint32_t(currentLoc));
  return *i;
}

schema::Instruction &ProgramBuilder::kernel(int function, const std::string &name,
                                            std::vector<schema::Operand> inputs,
                                            std::vector<schema::Operand> outputs,
                                            std::vector<AttrArg> attrs, std::vector<int> inPlace) {
  schema::Instruction &i = append(function);
  schema::KernelCall *k = i.mutable_kernel();
  k->set_kernel(name);
  for (auto &o : inputs)
    *k->add_inputs() = std::move(o);
  for (auto &o : outputs)
    *k->add_outputs() = std::move(o);
  for (const AttrArg &a : attrs) {
    schema::Attr *x = k->add_attrs();
    x->set_name(a.name);
    a.store(*x->mutable_value());
  }
  for (int j : inPlace)
    k->add_in_place(j);
  return i;
}

schema::Instruction &ProgramBuilder::collective(int function, schema::CollectiveKind kind,
                                                int group, schema::Operand input,
                                                schema::Operand output, schema::ReduceOp op,
                                                bool async, uint32_t token) {
  schema::Instruction &i = append(function);
  schema::Collective *c = i.mutable_collective();
  c->set_kind(kind);
  c->set_group(uint32_t(group));
  c->set_op(op);
  *c->mutable_input() = std::move(input);
  *c->mutable_output() = std::move(output);
  c->set_async(async);
  c->set_token(token);
  i.set_stream(1);
  if (async && token >= program.num_tokens())
    program.set_num_tokens(token + 1);
  return i;
}

schema::Instruction &ProgramBuilder::wait(int function, uint32_t token) {
  schema::Instruction &i = append(function);
  i.mutable_wait()->set_token(token);
  return i;
}

schema::Instruction &ProgramBuilder::call(int function, int callee,
                                          std::vector<schema::Operand> args) {
  schema::Instruction &i = append(function);
  i.mutable_call()->set_function(uint32_t(callee));
  for (auto &a : args)
    *i.mutable_call()->add_args() = std::move(a);
  return i;
}

schema::Instruction &ProgramBuilder::hostIO(int function, schema::HostIOKind kind,
                                            const std::string &name) {
  schema::Instruction &i = append(function);
  i.mutable_host_io()->set_kind(kind);
  i.mutable_host_io()->set_name(name);
  return i;
}

schema::Instruction &ProgramBuilder::region(int function, schema::RegionKind kind,
                                            const std::string &name) {
  schema::Instruction &i = append(function);
  i.mutable_region()->set_kind(kind);
  i.mutable_region()->set_name(name);
  return i;
}

schema::Program ProgramBuilder::finish() {
  if (program.arena_bytes() < nextOffset)
    program.set_arena_bytes(nextOffset);
  if (!entrySet)
    program.set_entry(0);
  for (schema::Buffer &b : *program.mutable_buffers()) {
    schema::ScalarRole role = scalarRoleOfName(b.name());
    if (role != schema::SCALAR_ROLE_UNSPECIFIED && b.kind() == scalarRoleKind(role) &&
        b.scalar_role() == schema::SCALAR_ROLE_UNSPECIFIED)
      b.set_scalar_role(role);
  }
  return program;
}

} // namespace trainc::rt
