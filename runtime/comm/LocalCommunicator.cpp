//===- LocalCommunicator.cpp - The one-rank communicator -----------------===//

#include "runtime/comm/Communicator.h"

#include <cstring>
#include <stdexcept>

namespace trainc::rt {
namespace {

class LocalCommunicator final : public Communicator {
public:
  int64_t rank() const override { return 0; }
  int64_t worldSize() const override { return 1; }
  std::string setupGroups(const std::vector<GroupSpec> &groups) override {
    for (const GroupSpec &g : groups)
      if (g.ranks.size() != 1 || g.ranks[0] != 0)
        return "group '" + g.name + "' has " + std::to_string(g.ranks.size()) +
               " ranks; the local communicator serves a single rank only";
    return "";
  }
  void allReduce(int, const void *in, void *out, int64_t n, DType t, ReduceOp) override {
    copy(in, out, n, t);
  }
  void reduceScatter(int, const void *in, void *out, int64_t n, DType t, ReduceOp) override {
    copy(in, out, n, t);
  }
  void allGather(int, const void *in, void *out, int64_t n, DType t) override {
    copy(in, out, n, t);
  }
  void broadcast(int, void *, int64_t, DType, int64_t) override {}
  void send(int, int64_t, const void *, size_t, DType) override {
    throw std::logic_error("send on a single-rank communicator"); // validator rejects peer == self
  }
  void recv(int, int64_t, void *, size_t, DType) override {
    throw std::logic_error("recv on a single-rank communicator");
  }
  void barrier(int) override {}

private:
  static void copy(const void *in, void *out, int64_t n, DType t) {
    if (in != out)
      std::memmove(out, in, size_t(n) * dtypeSize(t));
  }
};

} // namespace

std::unique_ptr<Communicator> createLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}

} // namespace trainc::rt
