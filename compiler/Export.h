//===- Export.h - rt IR to the runtime's program.proto --------------------===//
#ifndef TRAINC_COMPILER_EXPORT_H
#define TRAINC_COMPILER_EXPORT_H

#include "runtime/schema/program.pb.h"

#include "mlir/IR/BuiltinOps.h"

namespace mlir::trainc {

/// Translates a planned rt module (after trainc-memory-plan) into one rank's program: buffers,
/// parameter table, functions (func.func with memref arguments), instructions (rt.kernel, func.call,
/// rt.host_io, rt.collective, rt.wait, rt.region), the source-location table (from each op's
/// NameLoc/FileLineColLoc) and the reports (memory from the plan's module attributes, FLOPs from
/// trainc.flops_per_iteration, the schedule). Emits an error on the module and fails if an op
/// cannot be exported.
FailureOr<::trainc::schema::Program> exportProgram(ModuleOp module);

} // namespace mlir::trainc

#endif
