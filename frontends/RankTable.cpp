//===- RankTable.cpp - Megatron's rank order and communicator groups -----===//

#include "frontends/RankTable.h"

#include "frontends/ModelConfig.h"

#include <algorithm>
#include <set>

namespace trainc::config {

RankTable::RankTable(int64_t tp, int64_t cp, int64_t ep, int64_t dp, int64_t pp)
    : sizes_{tp, cp, ep, dp, pp} {}

RankTable::RankTable(const ParallelConfig &p)
    : RankTable(p.tensor_model_parallel_size, 1, 1, p.data_parallel_size,
                p.pipeline_model_parallel_size) {}

const std::vector<std::string> &RankTable::axisNames() {
  static const std::vector<std::string> names{"tp", "cp", "ep", "dp", "pp"};
  return names;
}

int64_t RankTable::worldSize() const {
  int64_t n = 1;
  for (int64_t s : sizes_)
    n *= s;
  return n;
}

std::vector<int64_t> RankTable::coords(int64_t rank) const {
  std::vector<int64_t> c;
  for (int64_t s : sizes_) {
    c.push_back(rank % s);
    rank /= s;
  }
  return c;
}

int64_t RankTable::rankOf(const std::vector<int64_t> &c) const {
  int64_t r = 0;
  for (size_t a = sizes_.size(); a-- > 0;)
    r = r * sizes_[a] + c[a];
  return r;
}

std::vector<std::vector<int64_t>> RankTable::groups(const std::string &kind) const {
  // The axes that vary inside one group of this kind.
  std::vector<size_t> varying;
  const std::vector<std::string> &names = axisNames();
  if (kind == "mp") {
    varying = {0, 4};
  } else if (kind == "embd") {
    varying = {4};
  } else {
    auto it = std::find(names.begin(), names.end(), kind);
    if (it == names.end())
      return {};
    varying = {size_t(it - names.begin())};
  }
  std::set<std::vector<int64_t>> seen;
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < worldSize(); ++r) {
    std::vector<int64_t> base = coords(r);
    for (size_t a : varying)
      base[a] = 0;
    if (!seen.insert(base).second)
      continue;
    std::vector<int64_t> members;
    for (int64_t m = 0; m < worldSize(); ++m) {
      std::vector<int64_t> c = coords(m);
      for (size_t a : varying)
        c[a] = 0;
      if (c == base)
        members.push_back(m); // increasing rank = group-rank order (tp fastest, then pp)
    }
    if (kind == "embd" && members.size() > 1)
      members = {members.front(), members.back()};
    out.push_back(members);
  }
  return out;
}

std::vector<RankGroup> RankTable::groupsOf(int64_t rank) const {
  // One pass over the ranks per kind (groups() builds every group of a kind: calling it per rank
  // made compiling a plan cubic in the world size).
  std::vector<RankGroup> out;
  const std::vector<std::string> &names = axisNames();
  const std::vector<int64_t> mine = coords(rank);
  for (const char *kind : {"tp", "cp", "ep", "dp", "pp", "mp", "embd"}) {
    std::vector<size_t> varying;
    if (std::string(kind) == "mp")
      varying = {0, 4};
    else if (std::string(kind) == "embd")
      varying = {4};
    else
      varying = {size_t(std::find(names.begin(), names.end(), kind) - names.begin())};
    std::vector<int64_t> members;
    for (int64_t m = 0; m < worldSize(); ++m) {
      std::vector<int64_t> c = coords(m);
      bool same = true;
      for (size_t a = 0; a < c.size() && same; ++a)
        same = std::find(varying.begin(), varying.end(), a) != varying.end() || c[a] == mine[a];
      if (same)
        members.push_back(m); // increasing rank = group-rank order (tp fastest, then pp)
    }
    if (std::string(kind) == "embd" && members.size() > 1)
      members = {members.front(), members.back()};
    if (std::find(members.begin(), members.end(), rank) != members.end())
      out.push_back({kind, members});
  }
  return out;
}

} // namespace trainc::config
