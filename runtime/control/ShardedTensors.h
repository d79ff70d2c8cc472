//===- ShardedTensors.h - Global tensors from tensor-parallel slices -------===//
//
// A parameter sharded by tensor parallelism is, on each rank of the "tp" group, one box of its
// global tensor (schema::Parameter global_shape, slice_start, slice_size; the box of the rank at
// group position c starts at c x slice_size on the one split dim). Weight exports and the
// params norm need the global view: these helpers gather it over the tp group.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_CONTROL_SHARDEDTENSORS_H
#define TRAINC_RUNTIME_CONTROL_SHARDEDTENSORS_H

#include "runtime/comm/Communicator.h"
#include "runtime/schema/program.pb.h"

#include "absl/status/statusor.h"

#include <string>

namespace trainc::rt {

/// The dim along which `p` is split (slice_size != global_shape), or -1 for a whole tensor.
/// Errors: more than one split dim (names the parameter).
absl::StatusOr<int> splitDimOf(const schema::Parameter &p);

/// The index of the program's "tp" group and this rank's position in it; {-1, 0} when the
/// program has no tp group of more than one rank.
std::pair<int, int64_t> tensorParallelGroup(const schema::Program &program);

/// The global tensor's bytes (row-major, global_shape) of parameter `p`, whose local slice is
/// `local` (row-major over slice_size, `elementSize` bytes per element), all-gathered over
/// group `group` of `comm` (every member calls it with the same parameter). Errors: a slice that
/// is not this rank's box of an even split along one dim, or a failed collective (names the
/// parameter).
absl::StatusOr<std::string> gatherGlobal(Communicator &comm, const schema::Program &program,
                                         const schema::Parameter &p, const std::string &local,
                                         size_t elementSize);

} // namespace trainc::rt

#endif
