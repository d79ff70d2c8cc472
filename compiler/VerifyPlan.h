//===- VerifyPlan.h - Whole-plan check across the ranks' programs --------===//
//
// DESIGN.md phase 12: simulate all ranks' programs together. Every communicator group's members
// must issue the same collectives in the same order (kind, reduce op, element count, dtype),
// per entry function (train_step, eval_step), or the plan could deadlock or mix up buffers at
// run time. Point-to-point send/recv pairing joins this check with pipeline parallelism.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_COMPILER_VERIFYPLAN_H
#define TRAINC_COMPILER_VERIFYPLAN_H

#include "runtime/schema/program.pb.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlir::trainc {

/// `programs[r]` is rank r's program (all validated). Returns "" or the first disagreement, naming
/// the group and its member ranks, the entry, the position in the group's sequence, the two ranks
/// and their ops with the function/instruction path that issued them, e.g.
///   "group 'dp' [0,1], entry 'train_step', collective #3: rank 0 issues ALL_REDUCE sum of 2048
///    f32 elements (train_step -> forward_backward_last.backward#41), rank 1 issues ALL_REDUCE sum of 400
///    f32 elements (train_step -> forward_backward_last.backward#52)"
std::string verifyPlan(const std::vector<::trainc::schema::Program> &programs);

/// verifyPlan one rank at a time, so that the programs of a large plan need not be held at once:
/// addRank(p) for ranks 0, 1, ... in order keeps only each entry's collective sequence per group
/// (interned); finish() returns what verifyPlan would.
class PlanVerifier {
public:
  void addRank(const ::trainc::schema::Program &program);
  std::string finish() const;

private:
  /// Per entry, per group member list: (what id, where id) per collective.
  using Rank = std::map<std::string, std::map<std::vector<int64_t>, std::vector<uint32_t>>>;
  std::vector<Rank> ranks;
  std::map<std::vector<int64_t>, std::string> names;
  std::map<std::string, uint32_t> whatIds;
  std::vector<std::string> whats, wheres;
};

} // namespace mlir::trainc

#endif
