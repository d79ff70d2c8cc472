//===- ProgramBuilder.h - Assembling programs in C++ ---------------------===//
//
// A small helper to write schema::Program messages: buffers are laid out at 64-byte aligned offsets
// in order of creation (the compiler's memory planner sets offsets itself with setOffset), functions
// and instructions are appended. Used by the runtime tests, the demo and benchmarks.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CORE_PROGRAMBUILDER_H
#define TRAINC_RUNTIME_CORE_PROGRAMBUILDER_H

#include "runtime/core/DType.h"
#include "runtime/schema/program.pb.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace trainc::rt {

/// A kernel attribute: integer, float or list of integers.
struct AttrArg {
  std::string name;
  bool isInt;
  int64_t i = 0;
  double f = 0;
  bool isInts = false;
  std::vector<int64_t> ints;
  AttrArg(std::string n, int v) : name(std::move(n)), isInt(true), i(v) {}
  AttrArg(std::string n, int64_t v) : name(std::move(n)), isInt(true), i(v) {}
  AttrArg(std::string n, double v) : name(std::move(n)), isInt(false), f(v) {}
  AttrArg(std::string n, std::vector<int64_t> v)
      : name(std::move(n)), isInt(false), isInts(true), ints(std::move(v)) {}
  /// Stores the value into a program attribute.
  void store(schema::AttrValue &out) const {
    if (isInts) {
      for (int64_t v : ints)
        out.mutable_ints()->add_values(v);
    } else if (isInt) {
      out.set_i(i);
    } else {
      out.set_f(f);
    }
  }
};

class ProgramBuilder {
public:
  /// Starts a single-rank program (mesh "dp" of size 1, rank 0).
  ProgramBuilder();

  /// Sets the mesh (axes fastest-varying first) and this program's rank.
  void setMesh(const std::vector<std::string> &axes, const std::vector<int64_t> &sizes,
               int64_t rank);
  int addGroup(const std::string &name, const std::vector<int64_t> &ranks);

  /// Appends a buffer at the next 64-byte aligned arena offset; returns its index.
  int addBuffer(const std::string &name, schema::BufferKind kind, DType dtype,
                const std::vector<int64_t> &shape);
  /// Sets Program.plan; the global batch is micro_batch_size x num_microbatches x the mesh's dp
  /// size (call setMesh first).
  void setPlan(uint32_t microBatchSize, uint32_t numMicrobatches, uint32_t seqLength,
               uint32_t vocabSize);
  /// Marks INPUT buffer `buffer` as the host input `role` of `microbatch`.
  void setHostInput(int buffer, schema::InputRole role, uint32_t microbatch);
  /// The whole buffer / a view of `shape` at element `offset`.
  static schema::Operand buf(int index);
  static schema::Operand buf(int index, uint64_t offset, const std::vector<int64_t> &shape);
  static schema::Operand arg(int index);
  static schema::Operand arg(int index, uint64_t offset, const std::vector<int64_t> &shape);

  /// Adds a function; returns its index. The first function added is the entry unless setEntry.
  int addFunction(const std::string &name,
                  const std::vector<std::tuple<std::string, DType, std::vector<int64_t>>> &args = {});
  void setEntry(int function);
  int addLocation(const std::string &file, uint32_t line, uint32_t col, const std::string &op);
  /// Source location given to instructions appended from now on.
  void setCurrentLocation(int loc) { currentLoc = loc; }

  /// Appends a kernel call to `function`. `inPlace[j]` = input index aliased by output j, or -1.
  schema::Instruction &kernel(int function, const std::string &name,
                              std::vector<schema::Operand> inputs,
                              std::vector<schema::Operand> outputs,
                              std::vector<AttrArg> attrs = {}, std::vector<int> inPlace = {});
  schema::Instruction &collective(int function, schema::CollectiveKind kind, int group,
                                  schema::Operand input, schema::Operand output,
                                  schema::ReduceOp op = schema::SUM, bool async = false,
                                  uint32_t token = 0);
  schema::Instruction &wait(int function, uint32_t token);
  schema::Instruction &call(int function, int callee, std::vector<schema::Operand> args);
  schema::Instruction &hostIO(int function, schema::HostIOKind kind, const std::string &name);
  schema::Instruction &region(int function, schema::RegionKind kind, const std::string &name);

  void setNumTokens(uint32_t n) { program.set_num_tokens(n); }
  schema::Program &proto() { return program; }
  /// Sets arena_bytes to the end of the last buffer (unless already larger), gives the SCALAR and
  /// OUTPUT buffers named as the compiler names the host scalars ("lr", "weight_decay", "step",
  /// "loss_sum", "num_tokens", "grad_norm", "update_successful") their Buffer.scalar_role unless
  /// one is set, and returns the program.
  schema::Program finish();

private:
  schema::Instruction &append(int function);
  schema::Program program;
  uint64_t nextOffset = 0;
  int currentLoc = 0;
  bool entrySet = false;
};

} // namespace trainc::rt

#endif
