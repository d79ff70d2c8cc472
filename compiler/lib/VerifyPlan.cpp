//===- VerifyPlan.cpp - Whole-plan check across the ranks' programs ------===//

#include "compiler/VerifyPlan.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <functional>
#include <map>

namespace mlir::trainc {
namespace sch = ::trainc::schema;

namespace {

/// One collective as a group member sees it, and where it came from.
struct Issued {
  std::string what; // kind, op, count, dtype: equal on every member
  std::string where;
};

int64_t numel(const sch::Operand &o, const sch::Program &p, const sch::Function &f) {
  if (!o.whole() || o.shape_size() > 0) {
    int64_t n = 1;
    for (int64_t d : o.shape())
      n *= d;
    return n;
  }
  const auto &shape = o.base_case() == sch::Operand::kBuffer ? p.buffers(int(o.buffer())).shape()
                                                             : f.args(int(o.arg())).shape();
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string dtypeOf(const sch::Operand &o, const sch::Program &p, const sch::Function &f) {
  sch::DType t = o.base_case() == sch::Operand::kBuffer ? p.buffers(int(o.buffer())).dtype()
                                                        : f.args(int(o.arg())).dtype();
  return absl::AsciiStrToLower(sch::DType_Name(t));
}

/// The collectives of one entry, calls expanded, keyed by the group's member list.
std::map<std::vector<int64_t>, std::vector<Issued>> expand(const sch::Program &p, uint32_t entry,
                                                           std::map<std::vector<int64_t>, std::string> &names) {
  std::map<std::vector<int64_t>, std::vector<Issued>> out;
  std::function<void(int, const std::string &)> walk = [&](int fi, const std::string &path) {
    const sch::Function &f = p.functions(fi);
    for (int i = 0; i < f.body_size(); ++i) {
      const sch::Instruction &ins = f.body(i);
      if (ins.has_call()) {
        walk(int(ins.call().function()), absl::StrCat(path, "#", i, " -> ",
                                                      p.functions(int(ins.call().function())).name()));
        continue;
      }
      if (!ins.has_collective())
        continue;
      const sch::Collective &c = ins.collective();
      const sch::CommGroup &g = p.groups(int(c.group()));
      std::vector<int64_t> members(g.ranks().begin(), g.ranks().end());
      if (members.size() < 2)
        continue;
      names[members] = g.name();
      std::string what = sch::CollectiveKind_Name(c.kind());
      if (c.kind() == sch::ALL_REDUCE || c.kind() == sch::REDUCE_SCATTER)
        absl::StrAppend(&what, " ", absl::AsciiStrToLower(sch::ReduceOp_Name(c.op())));
      if (c.kind() != sch::BARRIER) {
        // The element count every member passes: the input (all_gather: the output).
        const sch::Operand &o = c.kind() == sch::ALL_GATHER ? c.output() : c.input();
        absl::StrAppend(&what, " of ", numel(o, p, f), " ", dtypeOf(o, p, f), " elements");
      }
      if (c.kind() == sch::BROADCAST)
        absl::StrAppend(&what, " from group rank ", c.root());
      out[members].push_back({what, absl::StrCat(path, "#", i)});
    }
  };
  walk(int(entry), p.functions(int(entry)).name());
  return out;
}

} // namespace

std::string verifyPlan(const std::vector<sch::Program> &programs) {
  std::map<std::string, uint32_t> entries = {{"train_step", 0}};
  std::vector<std::map<std::string, uint32_t>> entryOf(programs.size());
  for (size_t r = 0; r < programs.size(); ++r) {
    entryOf[r]["train_step"] = programs[r].entry();
    for (const auto &[name, fn] : programs[r].entry_points())
      entryOf[r][name] = fn, entries[name] = 0;
  }
  for (const auto &[entry, unused] : entries) {
    (void)unused;
    std::map<std::vector<int64_t>, std::string> names;
    std::vector<std::map<std::vector<int64_t>, std::vector<Issued>>> seq(programs.size());
    for (size_t r = 0; r < programs.size(); ++r) {
      auto it = entryOf[r].find(entry);
      if (it == entryOf[r].end())
        return absl::StrCat("rank ", r, " has no entry '", entry, "' that other ranks have");
      seq[r] = expand(programs[r], it->second, names);
    }
    for (const auto &[members, name] : names) {
      std::string group = absl::StrCat("group '", name, "' [", absl::StrJoin(members, ","), "]");
      for (int64_t m : members)
        if (m < 0 || size_t(m) >= programs.size())
          return absl::StrCat(group, " names rank ", m, ", outside the plan's ",
                              programs.size(), " ranks");
      const std::vector<Issued> &ref = seq[size_t(members[0])][members];
      for (int64_t m : members) {
        const std::vector<Issued> &got = seq[size_t(m)][members];
        size_t n = std::min(ref.size(), got.size());
        for (size_t k = 0; k < n; ++k)
          if (got[k].what != ref[k].what)
            return absl::StrCat(group, ", entry '", entry, "', collective #", k, ": rank ",
                                members[0], " issues ", ref[k].what, " (", ref[k].where,
                                "), rank ", m, " issues ", got[k].what, " (", got[k].where, ")");
        if (got.size() != ref.size())
          return absl::StrCat(group, ", entry '", entry, "': rank ", members[0], " issues ",
                              ref.size(), " collectives, rank ", m, " issues ", got.size(),
                              " (the extra one: ",
                              got.size() > ref.size() ? got[n].what + " (" + got[n].where + ")"
                                                      : ref[n].what + " (" + ref[n].where + ")",
                              ")");
      }
    }
  }
  return "";
}

} // namespace mlir::trainc
