//===- VerifyPlan.cpp - Whole-plan check across the ranks' programs ------===//

#include "compiler/VerifyPlan.h"

#include "runtime/core/Program.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <tuple>

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

/// One communication op of an entry in program order: a collective on `members` or a
/// send/recv with global rank `peer`.
struct Ordered {
  int kind = 0; // 0 collective, 1 send, 2 recv, 3 wait (async p2p: `token`)
  std::vector<int64_t> members;
  int64_t peer = 0;
  Issued issued;
  int64_t token = -1; // send/recv: async with this token; wait: the token
  bool pairedWithNext = false; // a send run with the receive after it (runsAsSendRecvPair)
};

/// The collectives of one entry, calls expanded, keyed by the group's member list; every
/// communication op in program order in `ordered`.
std::map<std::vector<int64_t>, std::vector<Issued>> expand(const sch::Program &p, uint32_t entry,
                                                           std::map<std::vector<int64_t>, std::string> &names,
                                                           std::vector<Ordered> &ordered) {
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
      if (ins.has_send() || ins.has_recv()) {
        const sch::SendRecv &sr = ins.has_send() ? ins.send() : ins.recv();
        Ordered o;
        o.kind = ins.has_send() ? 1 : 2;
        o.peer = p.groups(int(sr.group())).ranks(int(sr.peer()));
        o.issued = {absl::StrCat(numel(sr.operand(), p, f), " ", dtypeOf(sr.operand(), p, f),
                                 " elements"),
                    absl::StrCat(path, "#", i)};
        if (sr.async())
          o.token = int64_t(sr.token());
        o.pairedWithNext = i + 1 < f.body_size() && ::trainc::rt::runsAsSendRecvPair(ins, f.body(i + 1));
        ordered.push_back(std::move(o));
        continue;
      }
      if (ins.has_wait()) {
        Ordered o;
        o.kind = 3;
        o.token = int64_t(ins.wait().token());
        o.issued = {"", absl::StrCat(path, "#", i)};
        ordered.push_back(std::move(o));
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
      ordered.push_back({0, members, 0, out[members].back()});
    }
  };
  walk(int(entry), p.functions(int(entry)).name());
  return out;
}

bool llvm_any_p2p(const std::vector<Ordered> &ordered) {
  return std::any_of(ordered.begin(), ordered.end(),
                     [](const Ordered &o) { return o.kind == 1 || o.kind == 2; });
}

/// Async sends and receives (--overlap-p2p-comm): each token is waited once before the entry
/// ends and not started again while in flight. Returns "" or the error.
std::string checkAsyncPointToPoint(const std::vector<Ordered> &ordered, size_t rank,
                                   const std::string &entry) {
  std::map<int64_t, const Ordered *> inFlight;
  auto name = [](const Ordered &o) {
    return absl::StrCat(o.kind == 1 ? "send of " : "receive of ", o.issued.what,
                        o.kind == 1 ? " to rank " : " from rank ", o.peer, " (", o.issued.where,
                        ")");
  };
  for (const Ordered &o : ordered) {
    if ((o.kind == 1 || o.kind == 2) && o.token >= 0) {
      auto [it, fresh] = inFlight.try_emplace(o.token, &o);
      if (!fresh)
        return absl::StrCat("entry '", entry, "': rank ", rank, " starts the async ", name(o),
                            " on token ", o.token, ", still held by its async ",
                            name(*it->second));
    } else if (o.kind == 3) {
      inFlight.erase(o.token);
    }
  }
  if (!inFlight.empty())
    return absl::StrCat("entry '", entry, "': rank ", rank, "'s async ",
                        name(*inFlight.begin()->second), " on token ", inFlight.begin()->first,
                        " is never waited");
  return "";
}

} // namespace

void PlanVerifier::addRank(const sch::Program &p) {
  std::map<std::string, uint32_t> entryOf = {{"train_step", p.entry()}};
  for (const auto &[name, fn] : p.entry_points())
    entryOf[name] = fn;
  Rank &rank = ranks.emplace_back();
  auto &rankEvents = events.emplace_back();
  auto intern = [&](const std::string &what) {
    auto [it, fresh] = whatIds.try_emplace(what, uint32_t(whats.size()));
    if (fresh)
      whats.push_back(what);
    return it->second;
  };
  for (const auto &[entry, fn] : entryOf) {
    std::map<std::vector<int64_t>, std::string> groupNames;
    auto &byGroup = rank[entry];
    std::vector<Ordered> ordered;
    auto issuedByGroup = expand(p, fn, groupNames, ordered);
    anyPointToPoint |= llvm_any_p2p(ordered);
    if (std::string e = checkAsyncPointToPoint(ordered, ranks.size() - 1, entry);
        !e.empty() && asyncError.empty())
      asyncError = e;
    if (anyPointToPoint) {
      std::vector<Event> &ev = rankEvents[entry];
      for (Ordered &o : ordered) {
        if (o.kind == 3)
          continue; // the runtime's communication stream runs in issue order: see simulate()
        Event e;
        e.kind = o.kind == 0 ? Event::Collective : o.kind == 1 ? Event::Send : Event::Recv;
        e.peer = o.peer;
        e.paired = o.pairedWithNext;
        if (o.kind == 0) {
          auto it = std::find(groupList.begin(), groupList.end(), o.members);
          e.group = uint32_t(it - groupList.begin());
          if (it == groupList.end())
            groupList.push_back(o.members);
        }
        e.what = intern(o.issued.what);
        e.where = uint32_t(wheres.size());
        wheres.push_back(o.issued.where);
        ev.push_back(e);
      }
    }
    for (auto &[members, issued] : issuedByGroup) {
      std::vector<uint32_t> &ids = byGroup[members];
      for (Issued &i : issued) {
        ids.push_back(intern(i.what));
        ids.push_back(uint32_t(wheres.size()));
        wheres.push_back(std::move(i.where));
      }
    }
    for (auto &[members, name] : groupNames)
      names.emplace(members, name);
  }
}

std::string PlanVerifier::finish() const {
  if (!asyncError.empty())
    return asyncError;
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
    if (anyPointToPoint)
      if (std::string e = simulate(entry); !e.empty())
        return e;
  }
  return "";
}

std::vector<const std::vector<PlanVerifier::Event> *>
PlanVerifier::sequences(const std::string &entry) const {
  static const std::vector<Event> none;
  std::vector<const std::vector<Event> *> seq(events.size());
  for (size_t r = 0; r < events.size(); ++r) {
    auto it = events[r].find(entry);
    seq[r] = it == events[r].end() ? &none : &it->second;
  }
  return seq;
}

size_t PlanVerifier::memberElsewhere(const std::vector<const std::vector<Event> *> &seq,
                                     const std::vector<size_t> &pos, size_t r,
                                     const Event &e) const {
  for (int64_t m : groupList[e.group]) {
    const size_t k = size_t(m);
    if (k != r && (pos[k] == seq[k]->size() || (*seq[k])[pos[k]].kind != Event::Collective ||
                   (*seq[k])[pos[k]].group != e.group))
      return k;
  }
  return r;
}

std::string PlanVerifier::collectiveText(const Event &e) const {
  return absl::StrCat("waits in ", whats[e.what], " on [", absl::StrJoin(groupList[e.group], ","),
                      "] (", wheres[e.where], ")");
}

std::string PlanVerifier::simulate(const std::string &entry) const {
  // Eager sends, blocking receives and collectives (a collective completes once every member
  // has reached it). Runs to completion or to a state where no rank can move: a deadlock.
  // Async sends and receives (a token, waited later) are simulated where they are started:
  // the runtime runs all communication of a rank on one stream in issue order, so an async
  // receive holds back every later transfer and collective of its rank until its message has
  // arrived, whatever the position of its wait (stricter than "complete at the wait").
  const size_t n = events.size();
  const std::vector<const std::vector<Event> *> seq = sequences(entry);
  std::vector<size_t> pos(n, 0);
  std::map<std::pair<int64_t, int64_t>, std::deque<const Event *>> channel; // (from, to)
  // Per group, per rank: collectives completed; arrivals at the next one.
  std::map<std::pair<uint32_t, int64_t>, size_t> done;
  std::map<std::pair<uint32_t, size_t>, size_t> arrived; // (group, index) -> members there
  std::vector<bool> waiting(n, false);                   // arrived at a collective
  auto describe = [&](size_t r) {
    const Event &e = (*seq[r])[pos[r]];
    switch (e.kind) {
    case Event::Send:
      return absl::StrCat("sends ", whats[e.what], " to rank ", e.peer, " (", wheres[e.where], ")");
    case Event::Recv:
      return absl::StrCat("waits to receive ", whats[e.what], " from rank ", e.peer, " (",
                          wheres[e.where], ")");
    case Event::Collective:
      break;
    }
    return collectiveText(e);
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < n; ++r) {
      while (pos[r] < seq[r]->size()) {
        const Event &e = (*seq[r])[pos[r]];
        if (e.kind == Event::Send) {
          if (e.peer < 0 || size_t(e.peer) >= n)
            return absl::StrCat("entry '", entry, "': rank ", r, " sends to rank ", e.peer,
                                ", outside the plan's ", n, " ranks (", wheres[e.where], ")");
          channel[{int64_t(r), e.peer}].push_back(&e);
        } else if (e.kind == Event::Recv) {
          auto &q = channel[{e.peer, int64_t(r)}];
          if (q.empty())
            break;
          const Event *s = q.front();
          if (s->what != e.what)
            return absl::StrCat("entry '", entry, "': rank ", e.peer, " sends ", whats[s->what],
                                " (", wheres[s->where], "), rank ", r, " receives ",
                                whats[e.what], " (", wheres[e.where], ")");
          q.pop_front();
        } else {
          const std::vector<int64_t> &members = groupList[e.group];
          size_t k = done[{e.group, int64_t(r)}];
          if (!waiting[r]) {
            waiting[r] = true;
            ++arrived[{e.group, k}];
            progress = true;
          }
          if (arrived[{e.group, k}] < members.size())
            break;
          waiting[r] = false;
          ++done[{e.group, int64_t(r)}];
        }
        ++pos[r];
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    if (pos[r] == seq[r]->size())
      continue;
    // A blocked rank and the rank it waits for.
    const Event &e = (*seq[r])[pos[r]];
    size_t other = r;
    if (e.kind == Event::Recv)
      other = size_t(e.peer);
    else
      other = memberElsewhere(seq, pos, r, e);
    std::string theirs = pos[other] == seq[other]->size()
                             ? "has finished the entry"
                             : describe(other);
    return absl::StrCat("entry '", entry, "' can deadlock: rank ", r, " ", describe(r),
                        ", while rank ", other, " ", theirs);
  }
  for (const auto &[ends, q] : channel)
    if (!q.empty())
      return absl::StrCat("entry '", entry, "': rank ", ends.first, " sends ", whats[q.front()->what],
                          " to rank ", ends.second, " (", wheres[q.front()->where],
                          "), which never receives it");
  return "";
}

std::string PlanVerifier::simulateNccl(const std::string &entry) const {
  // NCCL's semantics (docs/cuda.md): a send completes only once the peer has posted the
  // matching receive (and a receive once the send is posted), a rank's communication runs in
  // issue order on one stream, and a send paired with the receive after it (runsAsSendRecvPair)
  // posts both together: the rank moves on when both have met their partners. Collectives
  // complete once every member has reached them. The message identities (sizes, dtypes, the
  // k-th send from a to b meets b's k-th receive from a) were checked by simulate().
  const size_t n = events.size();
  const std::vector<const std::vector<Event> *> seq = sequences(entry);
  // Partners: (rank, peer, k) -> position of rank's k-th receive from (send to) peer.
  std::map<std::tuple<int64_t, int64_t, size_t>, size_t> recvAt, sendAt;
  std::vector<std::vector<size_t>> ordinal(n);
  for (size_t r = 0; r < n; ++r) {
    std::map<std::pair<int, int64_t>, size_t> count;
    ordinal[r].resize(seq[r]->size());
    for (size_t i = 0; i < seq[r]->size(); ++i) {
      const Event &e = (*seq[r])[i];
      if (e.kind == Event::Collective)
        continue;
      size_t k = count[{int(e.kind), e.peer}]++;
      ordinal[r][i] = k;
      (e.kind == Event::Send ? sendAt : recvAt)[{int64_t(r), e.peer, k}] = i;
    }
  }
  std::vector<size_t> pos(n, 0);
  std::vector<std::vector<bool>> matched(n);
  for (size_t r = 0; r < n; ++r)
    matched[r].assign(seq[r]->size(), false);
  auto stepLen = [&](size_t r) -> size_t {
    const std::vector<Event> &q = *seq[r];
    return q[pos[r]].kind == Event::Send && q[pos[r]].paired && pos[r] + 1 < q.size() &&
                   q[pos[r] + 1].kind == Event::Recv
               ? 2
               : 1;
  };
  auto posted = [&](size_t r, size_t i) {
    return pos[r] < seq[r]->size() && i >= pos[r] && i < pos[r] + stepLen(r);
  };
  std::map<std::pair<uint32_t, int64_t>, size_t> done;
  std::map<std::pair<uint32_t, size_t>, size_t> arrived;
  std::vector<bool> waiting(n, false);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < n; ++r) {
      while (pos[r] < seq[r]->size()) {
        const size_t len = stepLen(r);
        bool complete = true;
        for (size_t i = pos[r]; i < pos[r] + len; ++i) {
          const Event &e = (*seq[r])[i];
          if (e.kind == Event::Collective) {
            size_t k = done[{e.group, int64_t(r)}];
            if (!waiting[r]) {
              waiting[r] = true;
              ++arrived[{e.group, k}];
              progress = true;
            }
            complete = complete && arrived[{e.group, k}] >= groupList[e.group].size();
            continue;
          }
          if (!matched[r][i] && e.peer >= 0 && size_t(e.peer) < n) {
            const auto &partners = e.kind == Event::Send ? recvAt : sendAt;
            auto it = partners.find({e.peer, int64_t(r), ordinal[r][i]});
            if (it != partners.end() && posted(size_t(e.peer), it->second)) {
              matched[r][i] = matched[size_t(e.peer)][it->second] = true;
              progress = true;
            }
          }
          complete = complete && matched[r][i];
        }
        if (!complete)
          break;
        if ((*seq[r])[pos[r]].kind == Event::Collective) {
          waiting[r] = false;
          ++done[{(*seq[r])[pos[r]].group, int64_t(r)}];
        }
        pos[r] += len;
        progress = true;
      }
    }
  }
  auto one = [&](size_t r, size_t i) {
    const Event &e = (*seq[r])[i];
    if (e.kind == Event::Send)
      return absl::StrCat("sends ", whats[e.what], " to rank ", e.peer, " (", wheres[e.where], ")");
    if (e.kind == Event::Recv)
      return absl::StrCat("receives ", whats[e.what], " from rank ", e.peer, " (",
                          wheres[e.where], ")");
    return collectiveText(e);
  };
  auto describe = [&](size_t r) {
    if (pos[r] == seq[r]->size())
      return std::string("has finished the entry");
    std::string d = one(r, pos[r]);
    if (stepLen(r) == 2)
      absl::StrAppend(&d, " grouped with its next, which ", one(r, pos[r] + 1));
    return d;
  };
  for (size_t r = 0; r < n; ++r) {
    if (pos[r] == seq[r]->size())
      continue;
    // A blocked rank and a rank it waits for: the peer of its first unmatched transfer, or a
    // member of its collective that is elsewhere.
    size_t other = r;
    for (size_t i = pos[r]; i < pos[r] + stepLen(r) && other == r; ++i) {
      const Event &e = (*seq[r])[i];
      if (e.kind != Event::Collective) {
        if (!matched[r][i])
          other = size_t(e.peer);
        continue;
      }
      other = memberElsewhere(seq, pos, r, e);
    }
    return absl::StrCat("entry '", entry,
                        "' can deadlock under NCCL (a send completes only once its receive is "
                        "posted; only a send directly followed by a receive on the same group "
                        "is posted with it): rank ", r, " ", describe(r), ", while rank ", other,
                        " ", describe(other));
  }
  return "";
}

std::string PlanVerifier::ncclDeadlock() const {
  if (!anyPointToPoint)
    return "";
  std::map<std::string, int> entries;
  for (const auto &rankEvents : events)
    for (const auto &[entry, unused] : rankEvents)
      entries[entry] = 0;
  for (const auto &[entry, unused] : entries)
    if (std::string e = simulateNccl(entry); !e.empty())
      return e;
  return "";
}

std::string verifyPlan(const std::vector<sch::Program> &programs) {
  PlanVerifier v;
  for (const sch::Program &p : programs)
    v.addRank(p);
  return v.finish();
}

std::string ncclDeadlock(const std::vector<sch::Program> &programs) {
  PlanVerifier v;
  for (const sch::Program &p : programs)
    v.addRank(p);
  if (std::string e = v.finish(); !e.empty())
    return e;
  return v.ncclDeadlock();
}

} // namespace mlir::trainc
