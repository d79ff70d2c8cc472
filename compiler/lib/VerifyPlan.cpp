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

void PlanVerifier::addRank(const sch::Program &p) {
  std::map<std::string, uint32_t> entryOf = {{"train_step", p.entry()}};
  for (const auto &[name, fn] : p.entry_points())
    entryOf[name] = fn;
  Rank &rank = ranks.emplace_back();
  for (const auto &[entry, fn] : entryOf) {
    std::map<std::vector<int64_t>, std::string> groupNames;
    auto &byGroup = rank[entry];
    for (auto &[members, issued] : expand(p, fn, groupNames)) {
      std::vector<uint32_t> &ids = byGroup[members];
      for (Issued &i : issued) {
        auto [it, fresh] = whatIds.try_emplace(i.what, uint32_t(whats.size()));
        if (fresh)
          whats.push_back(i.what);
        ids.push_back(it->second);
        ids.push_back(uint32_t(wheres.size()));
        wheres.push_back(std::move(i.where));
      }
    }
    for (auto &[members, name] : groupNames)
      names.emplace(members, name);
  }
}

std::string PlanVerifier::finish() const {
  std::map<std::string, int> entries;
  for (const Rank &r : ranks)
    for (const auto &[entry, unused] : r)
      entries[entry] = 0;
  for (const auto &[entry, unused] : entries) {
    for (size_t r = 0; r < ranks.size(); ++r)
      if (!ranks[r].count(entry))
        return absl::StrCat("rank ", r, " has no entry '", entry, "' that other ranks have");
    for (const auto &[members, name] : names) {
      std::string group = absl::StrCat("group '", name, "' [", absl::StrJoin(members, ","), "]");
      for (int64_t m : members)
        if (m < 0 || size_t(m) >= ranks.size())
          return absl::StrCat(group, " names rank ", m, ", outside the plan's ", ranks.size(),
                              " ranks");
      static const std::vector<uint32_t> none;
      auto seqOf = [&](int64_t r) -> const std::vector<uint32_t> & {
        const auto &byGroup = ranks[size_t(r)].at(entry);
        auto it = byGroup.find(members);
        return it == byGroup.end() ? none : it->second;
      };
      // Pairs (what, where) per collective.
      const std::vector<uint32_t> &ref = seqOf(members[0]);
      for (int64_t m : members) {
        const std::vector<uint32_t> &got = seqOf(m);
        size_t n = std::min(ref.size(), got.size());
        for (size_t k = 0; k < n; k += 2)
          if (got[k] != ref[k])
            return absl::StrCat(group, ", entry '", entry, "', collective #", k / 2, ": rank ",
                                members[0], " issues ", whats[ref[k]], " (", wheres[ref[k + 1]],
                                "), rank ", m, " issues ", whats[got[k]], " (",
                                wheres[got[k + 1]], ")");
        if (got.size() != ref.size()) {
          const std::vector<uint32_t> &longer = got.size() > ref.size() ? got : ref;
          return absl::StrCat(group, ", entry '", entry, "': rank ", members[0], " issues ",
                              ref.size() / 2, " collectives, rank ", m, " issues ",
                              got.size() / 2, " (the extra one: ", whats[longer[n]], " (",
                              wheres[longer[n + 1]], "))");
        }
      }
    }
  }
  return "";
}

std::string verifyPlan(const std::vector<sch::Program> &programs) {
  PlanVerifier v;
  for (const sch::Program &p : programs)
    v.addRank(p);
  return v.finish();
}

} // namespace mlir::trainc
