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

/// A plan compiled once for every rank (DESIGN.md: specialise per rank last). `program` is one
/// rank's program; what differs between ranks is data only: the mesh coordinates and group
/// members, the offsets of rank-dependent views (rt.view with an axis: a DP rank's shard of a
/// gradient bucket), the adamw `segments` of a shard (rt.shard_segments), rank-dependent kernel
/// attributes (model.rank_offsets: a TP shard's vocab_start) and the slice_start of parameters
/// sharded by tensor parallelism (a buffer's global_shape / split_dim / split_axis). `specialise`
/// rewrites exactly those, in place, into another rank's program, without re-running any phase.
struct ExportedPlan {
  ::trainc::schema::Program program;

  /// Rewrites `program` into the program of `placement` (any rank of the same mesh, in any
  /// order). Returns "" or a message naming the mesh axis or group that does not match.
  std::string specialise(const RankPlacement &placement);

  /// Where a rank-dependent operand sits: function, instruction, operand slot.
  enum Slot : uint8_t {
    KernelInput,
    KernelOutput,
    CallArg,
    CollectiveInput,
    CollectiveOutput,
    PointToPoint
  };
  struct OperandSite {
    uint32_t function = 0, instruction = 0;
    Slot slot = KernelInput;
    uint32_t index = 0;
    /// Mesh axis (index into the mesh's axes); offset at coordinate 0 and per coordinate.
    uint32_t axis = 0;
    uint64_t offset = 0;
    int64_t stride = 0;
  };
  /// An adamw over a DP shard: its `segments` attribute follows from the bucket's.
  struct SegmentSite {
    uint32_t function = 0, instruction = 0, attr = 0, axis = 0;
    std::vector<int64_t> bucketSegments;
    int64_t shardSize = 0;
  };
  /// A kernel attribute that depends on the rank (model.rank_offsets, e.g. a vocabulary
  /// shard's vocab_start): value = base + coordinate x stride.
  struct AttrSite {
    uint32_t function = 0, instruction = 0, attr = 0, axis = 0;
    int64_t base = 0, stride = 0;
  };
  /// A parameter sharded along `dim` of its global shape over mesh axis `axis`: the rank at
  /// coordinate c holds the box starting at c x slice_size(dim) (slice_start, specialised).
  struct SliceSite {
    uint32_t parameter = 0, dim = 0, axis = 0;
  };
  std::vector<OperandSite> operandSites;
  std::vector<SegmentSite> segmentSites;
  std::vector<AttrSite> attrSites;
  std::vector<SliceSite> sliceSites;

private:
  ::trainc::schema::Operand &operandAt(const OperandSite &site);
};

/// Exports a planned rt module once, as the program of `placement`, with the places where other
/// ranks' programs differ (ExportedPlan::specialise). Errors as exportProgram.
FailureOr<ExportedPlan> exportPlan(ModuleOp module, const RankPlacement &placement = {});

/// Translates a planned rt module (after trainc-memory-plan) into one rank's program: buffers,
/// parameter table, functions (func.func with memref arguments), instructions (rt.kernel, func.call,
/// rt.host_io, rt.collective, rt.send, rt.recv, rt.wait, rt.region), the source-location table (from each op's
/// NameLoc/FileLineColLoc) and the reports (memory from the plan's module attributes, FLOPs from
/// trainc.flops_per_iteration, the schedule). `placement` gives the mesh and the groups; an
/// rt.collective names its group ("dp", ...), which must be one of them. Emits an error on the
/// module and fails if an op cannot be exported.
FailureOr<::trainc::schema::Program> exportProgram(ModuleOp module,
                                                   const RankPlacement &placement = {});

} // namespace mlir::trainc

#endif
