//===- Export.h - rt IR to the runtime's program.proto --------------------===//
#ifndef TRAINC_COMPILER_EXPORT_H
#define TRAINC_COMPILER_EXPORT_H

#include "runtime/schema/program.pb.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace mlir::trainc {

/// Where a program runs: the mesh (axes fastest first, e.g. Megatron's tp, cp, ep, dp, pp), this
/// rank's coordinates, and the communicator groups it belongs to (name, member global ranks in
/// group-rank order). The default is a single rank whose groups are all {0}.
struct RankPlacement {
  int64_t rank = 0;
  std::vector<std::string> axisNames{"tp", "cp", "ep", "dp", "pp"};
  std::vector<int64_t> axisSizes{1, 1, 1, 1, 1};
  std::vector<int64_t> coords{0, 0, 0, 0, 0};
  std::vector<std::pair<std::string, std::vector<int64_t>>> groups{
      {"tp", {0}}, {"cp", {0}}, {"ep", {0}}, {"dp", {0}}, {"pp", {0}}, {"mp", {0}}, {"embd", {0}}};
};

/// Translates a planned rt module (after trainc-memory-plan) into one rank's program: buffers,
/// parameter table, functions (func.func with memref arguments), instructions (rt.kernel, func.call,
/// rt.host_io, rt.collective, rt.wait, rt.region), the source-location table (from each op's
/// NameLoc/FileLineColLoc) and the reports (memory from the plan's module attributes, FLOPs from
/// trainc.flops_per_iteration, the schedule). `placement` gives the mesh and the groups; an
/// rt.collective names its group ("dp", ...), which must be one of them. Emits an error on the
/// module and fails if an op cannot be exported.
FailureOr<::trainc::schema::Program> exportProgram(ModuleOp module,
                                                   const RankPlacement &placement = {});

} // namespace mlir::trainc

#endif
