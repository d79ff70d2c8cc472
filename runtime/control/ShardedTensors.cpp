//===- ShardedTensors.cpp - Global tensors from tensor-parallel slices -----===//

#include "runtime/control/ShardedTensors.h"

#include "absl/strings/str_cat.h"

#include <cstring>

namespace trainc::rt {

absl::StatusOr<int> splitDimOf(const schema::Parameter &p) {
  int dim = -1;
  for (int d = 0; d < p.global_shape_size(); ++d)
    if (p.slice_size(d) != p.global_shape(d)) {
      if (dim >= 0)
        return absl::UnimplementedError(absl::StrCat(
            "parameter '", p.name(), "' is sliced along dims ", dim, " and ", d,
            "; only tensor-parallel slices along one dim can be reassembled"));
      dim = d;
    }
  return dim;
}

std::pair<int, int64_t> tensorParallelGroup(const schema::Program &program) {
  const schema::Mesh &mesh = program.mesh();
  int64_t coord = 0;
  for (int a = 0; a < mesh.axis_names_size() && a < mesh.coords_size(); ++a)
    if (mesh.axis_names(a) == "tp")
      coord = mesh.coords(a);
  for (int g = 0; g < program.groups_size(); ++g)
    if (program.groups(g).name() == "tp" && program.groups(g).ranks_size() > 1)
      return {g, coord};
  return {-1, 0};
}

absl::StatusOr<std::string> gatherGlobal(Communicator &comm, const schema::Program &program,
                                         const schema::Parameter &p, const std::string &local,
                                         size_t elementSize) {
  absl::StatusOr<int> dim = splitDimOf(p);
  if (!dim.ok())
    return dim.status();
  if (*dim < 0)
    return local;
  auto [group, position] = tensorParallelGroup(program);
  const int64_t size = group < 0 ? 1 : program.groups(group).ranks_size();
  const int d = *dim;
  if (group < 0 || p.slice_size(d) * size != p.global_shape(d) ||
      p.slice_start(d) != position * p.slice_size(d))
    return absl::FailedPreconditionError(absl::StrCat(
        "parameter '", p.name(), "': slice [", p.slice_start(d), ", +", p.slice_size(d),
        ") of dim ", d, " (extent ", p.global_shape(d),
        ") is not this rank's part of an even split over the tp group"));
  std::string all(local.size() * size_t(size), '\0');
  try {
    comm.allGather(group, local.data(), all.data(), int64_t(local.size()), DType::U8);
  } catch (const std::exception &e) {
    return absl::UnavailableError(
        absl::StrCat("gathering parameter '", p.name(), "' over tp failed: ", e.what()));
  }
  // Piece r is the box at r x slice_size(d): `outer` runs of `block` contiguous bytes.
  size_t outer = 1, inner = elementSize;
  for (int k = 0; k < d; ++k)
    outer *= size_t(p.slice_size(k));
  for (int k = d + 1; k < p.slice_size_size(); ++k)
    inner *= size_t(p.slice_size(k));
  const size_t block = size_t(p.slice_size(d)) * inner;
  std::string global(all.size(), '\0');
  for (int64_t r = 0; r < size; ++r)
    for (size_t o = 0; o < outer; ++o)
      std::memcpy(global.data() + o * block * size_t(size) + size_t(r) * block,
                  all.data() + size_t(r) * local.size() + o * block, block);
  return global;
}

} // namespace trainc::rt
