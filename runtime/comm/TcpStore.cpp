//===- TcpStore.cpp - A key-value store over TCP for Gloo's rendezvous ---===//

#include "runtime/comm/TcpStore.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <arpa/inet.h>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace trainc::rt {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[8] = {'T', 'R', 'N', 'C', 'S', 'T', '0', '1'};
constexpr uint32_t kMaxKey = 4096;
constexpr uint32_t kMaxValue = 64u << 20;
constexpr uint32_t kMaxKeys = 1u << 16;
constexpr uint32_t kMaxToken = 256;
/// A stranger that connects and sends nothing is dropped after this long.
constexpr int kHandshakeTimeoutMs = 10000;

std::string secondsText(std::chrono::milliseconds ms) {
  return absl::StrCat(double(ms.count()) / 1000.0, " s");
}

/// Sends all `n` bytes; false on error (the peer is gone).
bool writeAll(int fd, const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n > 0) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    c += k;
    n -= size_t(k);
  }
  return true;
}

enum class ReadResult { Ok, Closed, TimedOut, Error };

/// Reads exactly `n` bytes, waiting at most until `deadline` (Clock::time_point::max() = forever).
ReadResult readAll(int fd, void *p, size_t n, Clock::time_point deadline) {
  char *c = static_cast<char *>(p);
  while (n > 0) {
    if (deadline != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0)
        return ReadResult::TimedOut;
      pollfd pfd{fd, POLLIN, 0};
      int r = ::poll(&pfd, 1, int(std::min<int64_t>(left.count(), 1 << 30)));
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        return ReadResult::Error;
      if (r == 0)
        return ReadResult::TimedOut;
    }
    ssize_t k = ::recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k == 0)
      return ReadResult::Closed;
    if (k < 0)
      return ReadResult::Error;
    c += k;
    n -= size_t(k);
  }
  return ReadResult::Ok;
}

void putU32(std::string &s, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    s.push_back(char((v >> (8 * i)) & 0xff));
}
void putU64(std::string &s, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    s.push_back(char((v >> (8 * i)) & 0xff));
}
void putStr(std::string &s, const char *p, size_t n) {
  putU32(s, uint32_t(n));
  s.append(p, n);
}
uint32_t getU32(const unsigned char *b) {
  return uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
}
uint64_t getU64(const unsigned char *b) {
  return uint64_t(getU32(b)) | uint64_t(getU32(b + 4)) << 32;
}

bool readU32(int fd, uint32_t &v, Clock::time_point deadline) {
  unsigned char b[4];
  if (readAll(fd, b, 4, deadline) != ReadResult::Ok)
    return false;
  v = getU32(b);
  return true;
}
bool readU64(int fd, uint64_t &v, Clock::time_point deadline) {
  unsigned char b[8];
  if (readAll(fd, b, 8, deadline) != ReadResult::Ok)
    return false;
  v = getU64(b);
  return true;
}
bool readStr(int fd, std::string &s, uint32_t max, Clock::time_point deadline) {
  uint32_t n;
  if (!readU32(fd, n, deadline) || n > max)
    return false;
  s.resize(n);
  return n == 0 || readAll(fd, s.data(), n, deadline) == ReadResult::Ok;
}

/// Compares in time that depends on the lengths only, not on where the strings differ.
bool constantTimeEqual(const std::string &a, const std::string &b) {
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

struct AddrInfo {
  addrinfo *list = nullptr;
  ~AddrInfo() {
    if (list)
      freeaddrinfo(list);
  }
};

} // namespace

absl::StatusOr<std::string> generateJobToken() {
  unsigned char b[16];
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("cannot open /dev/urandom: ", std::strerror(errno)));
  size_t got = 0;
  while (got < sizeof(b)) {
    ssize_t k = ::read(fd, b + got, sizeof(b) - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    got += size_t(k);
  }
  ::close(fd);
  if (got != sizeof(b))
    return absl::UnavailableError("cannot read 16 bytes from /dev/urandom");
  static const char *hex = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s.push_back(hex[c >> 4]);
    s.push_back(hex[c & 15]);
  }
  return s;
}

absl::Status checkJobToken(const std::string &token, const std::string &source) {
  if (token.size() < 16 || token.size() > kMaxToken)
    return absl::InvalidArgumentError(
        absl::StrCat(source, " must hold 16 to ", kMaxToken, " characters (a random secret such as "
                     "the output of `head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'`), got ",
                     token.size(), " characters"));
  for (size_t i = 0; i < token.size(); ++i)
    if (token[i] <= ' ' || token[i] > '~')
      return absl::InvalidArgumentError(absl::StrCat(
          source, " must be printable ASCII without spaces; character ", i + 1, " is not"));
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Server
//===----------------------------------------------------------------------===//

struct TcpStoreServer::Impl {
  std::string token;
  int listenFd = -1;
  int wakePipe[2] = {-1, -1};
  int port = 0;
  std::thread acceptThread;

  std::mutex mu; // guards everything below
  std::condition_variable cv;
  std::map<std::string, std::string> data;
  std::vector<int> clientFds;
  std::vector<std::thread> clientThreads;
  bool stopping = false;
  int64_t refused = 0;

  void acceptLoop();
  void serve(int fd);
  bool handshake(int fd);
};

void TcpStoreServer::Impl::acceptLoop() {
  for (;;) {
    pollfd pfds[2] = {{listenFd, POLLIN, 0}, {wakePipe[0], POLLIN, 0}};
    int r = ::poll(pfds, 2, -1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 || (pfds[1].revents & POLLIN))
      return;
    if (!(pfds[0].revents & POLLIN))
      continue;
    int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> l(mu);
    if (stopping) {
      ::close(fd);
      return;
    }
    clientFds.push_back(fd);
    clientThreads.emplace_back([this, fd] { serve(fd); });
  }
}

bool TcpStoreServer::Impl::handshake(int fd) {
  auto deadline = Clock::now() + std::chrono::milliseconds(kHandshakeTimeoutMs);
  char magic[8];
  std::string got;
  bool ok = readAll(fd, magic, 8, deadline) == ReadResult::Ok &&
            std::memcmp(magic, kMagic, 8) == 0 && readStr(fd, got, kMaxToken, deadline);
  if (ok && constantTimeEqual(got, token)) {
    char c = 'O';
    return writeAll(fd, &c, 1);
  }
  {
    // Counted before the client hears of it, so that a caller who saw the refusal sees the count.
    std::lock_guard<std::mutex> l(mu);
    ++refused;
  }
  if (ok) {
    char c = 'T';
    writeAll(fd, &c, 1);
  }
  return false;
}

void TcpStoreServer::Impl::serve(int fd) {
  constexpr auto forever = Clock::time_point::max();
  if (handshake(fd)) {
    for (;;) {
      char op;
      if (readAll(fd, &op, 1, forever) != ReadResult::Ok)
        break;
      std::string reply;
      if (op == 'S') {
        std::string key, value;
        if (!readStr(fd, key, kMaxKey, forever) || !readStr(fd, value, kMaxValue, forever))
          break;
        {
          std::lock_guard<std::mutex> l(mu);
          data[key] = std::move(value);
        }
        cv.notify_all();
        reply = "O";
      } else if (op == 'G' || op == 'W') {
        std::vector<std::string> keys;
        uint32_t n = 1;
        if (op == 'W' && (!readU32(fd, n, forever) || n > kMaxKeys))
          break;
        keys.resize(n);
        bool ok = true;
        for (std::string &k : keys)
          ok = ok && readStr(fd, k, kMaxKey, forever);
        uint64_t timeoutMs;
        if (!ok || !readU64(fd, timeoutMs, forever))
          break;
        auto deadline = Clock::now() + std::chrono::milliseconds(std::min<uint64_t>(timeoutMs, 1ull << 40));
        std::unique_lock<std::mutex> l(mu);
        auto allSet = [&] {
          for (const std::string &k : keys)
            if (!data.count(k))
              return false;
          return true;
        };
        bool done = cv.wait_until(l, deadline, [&] { return stopping || allSet(); });
        if (stopping)
          break;
        if (done) {
          reply = "O";
          if (op == 'G')
            putStr(reply, data[keys[0]].data(), data[keys[0]].size());
        } else {
          reply = "T";
          std::vector<std::string> missing;
          for (const std::string &k : keys)
            if (!data.count(k))
              missing.push_back(k);
          if (op == 'W') {
            putU32(reply, uint32_t(missing.size()));
            for (const std::string &k : missing)
              putStr(reply, k.data(), k.size());
          }
        }
      } else {
        break; // unknown request: drop the connection
      }
      if (!writeAll(fd, reply.data(), reply.size()))
        break;
    }
  }
  std::lock_guard<std::mutex> l(mu);
  for (int &c : clientFds)
    if (c == fd)
      c = -1;
  ::close(fd);
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TcpStoreServer::~TcpStoreServer() { stop(); }

int TcpStoreServer::port() const { return impl_->port; }

int64_t TcpStoreServer::refusedConnections() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->refused;
}

void TcpStoreServer::stop() {
  Impl &im = *impl_;
  {
    std::lock_guard<std::mutex> l(im.mu);
    if (im.stopping)
      return;
    im.stopping = true;
    for (int fd : im.clientFds)
      if (fd >= 0)
        ::shutdown(fd, SHUT_RDWR);
  }
  im.cv.notify_all();
  char c = 'x';
  (void)!::write(im.wakePipe[1], &c, 1);
  if (im.acceptThread.joinable())
    im.acceptThread.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> l(im.mu);
    threads.swap(im.clientThreads);
  }
  for (std::thread &t : threads)
    t.join();
  ::close(im.listenFd);
  ::close(im.wakePipe[0]);
  ::close(im.wakePipe[1]);
}

absl::StatusOr<std::unique_ptr<TcpStoreServer>>
TcpStoreServer::start(const std::string &host, int port, const std::string &token) {
  if (port < 0 || port > 65535)
    return absl::InvalidArgumentError(
        absl::StrCat("store port ", port, " is outside 0..65535"));
  std::string where = absl::StrCat(host.empty() ? "*" : host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  AddrInfo ai;
  std::string portText = std::to_string(port);
  if (int e = getaddrinfo(host.empty() ? nullptr : host.c_str(), portText.c_str(), &hints, &ai.list))
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve store host '", host, "': ", gai_strerror(e)));
  auto im = std::make_unique<Impl>();
  im->token = token;
  std::string lastError = "no address";
  for (addrinfo *a = ai.list; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      lastError = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      im->listenFd = fd;
      break;
    }
    lastError = std::strerror(errno);
    ::close(fd);
  }
  if (im->listenFd < 0)
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", where, " for the store: ", lastError));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(im->listenFd, reinterpret_cast<sockaddr *>(&ss), &len);
  im->port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in *>(&ss)->sin_port);
  if (::pipe2(im->wakePipe, O_CLOEXEC) != 0) {
    ::close(im->listenFd);
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  Impl *raw = im.get();
  im->acceptThread = std::thread([raw] { raw->acceptLoop(); });
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(im)));
}

//===----------------------------------------------------------------------===//
// Client
//===----------------------------------------------------------------------===//

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::connect(const std::string &host, int port,
                                                            const std::string &token,
                                                            std::chrono::milliseconds timeout) {
  if (port <= 0 || port > 65535)
    return absl::InvalidArgumentError(
        absl::StrCat("store port ", port, " is outside 1..65535"));
  std::string where = absl::StrCat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  AddrInfo ai;
  std::string portText = std::to_string(port);
  if (int e = getaddrinfo(host.c_str(), portText.c_str(), &hints, &ai.list))
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve store host '", host, "': ", gai_strerror(e)));
  auto deadline = Clock::now() + timeout;
  std::string lastError;
  int fd = -1;
  for (auto wait = std::chrono::milliseconds(10);; wait = std::min(wait * 2, std::chrono::milliseconds(500))) {
    for (addrinfo *a = ai.list; a && fd < 0; a = a->ai_next) {
      int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (s < 0) {
        lastError = std::strerror(errno);
        continue;
      }
      if (::connect(s, a->ai_addr, a->ai_addrlen) == 0) {
        fd = s;
        break;
      }
      lastError = std::strerror(errno);
      ::close(s);
    }
    if (fd >= 0 || Clock::now() + wait > deadline)
      break;
    std::this_thread::sleep_for(wait);
  }
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("cannot reach the store at ", where, " within ",
                                               secondsText(timeout), ": ", lastError));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::string hello(kMagic, 8);
  putStr(hello, token.data(), token.size());
  char reply = 0;
  auto handshakeDeadline = Clock::now() + std::chrono::milliseconds(kHandshakeTimeoutMs) + timeout;
  ReadResult r = ReadResult::Error;
  if (writeAll(fd, hello.data(), hello.size()))
    r = readAll(fd, &reply, 1, handshakeDeadline);
  if (r == ReadResult::Ok && reply == 'O')
    return std::unique_ptr<TcpStore>(new TcpStore(fd, where, timeout));
  ::close(fd);
  if (r == ReadResult::Ok && reply == 'T')
    return absl::PermissionDeniedError(
        absl::StrCat("the store at ", where, " refused the connection: wrong job token (every rank "
                     "of a job needs the same TRAINC_JOB_TOKEN)"));
  return absl::UnavailableError(absl::StrCat(
      "the store at ", where, " did not complete the handshake (is it a trainc store?)"));
}

TcpStore::~TcpStore() { ::close(fd_); }

namespace {
absl::Status lost(const std::string &where) {
  return absl::UnavailableError(
      absl::StrCat("lost the connection to the store at ", where, " (did the launcher exit?)"));
}

/// Sends one request and reads the one-byte reply code before `deadline`; false if the
/// connection failed.
bool roundTrip(int fd, const std::string &req, Clock::time_point deadline, char &reply) {
  return writeAll(fd, req.data(), req.size()) && readAll(fd, &reply, 1, deadline) == ReadResult::Ok;
}
} // namespace

absl::Status TcpStore::trySet(const std::string &key, const std::vector<char> &value) {
  if (key.size() > kMaxKey || value.size() > kMaxValue)
    return absl::InvalidArgumentError(absl::StrCat("store key '", key, "' or its value (",
                                                   value.size(), " bytes) is too large"));
  std::string req = "S";
  putStr(req, key.data(), key.size());
  putStr(req, value.data(), value.size());
  std::lock_guard<std::mutex> l(mu_);
  char reply;
  if (!roundTrip(fd_, req, Clock::now() + timeout_ + std::chrono::seconds(10), reply) ||
      reply != 'O')
    return lost(address_);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<char>> TcpStore::tryGet(const std::string &key,
                                                   std::chrono::milliseconds timeout) {
  std::string req = "G";
  putStr(req, key.data(), key.size());
  putU64(req, uint64_t(std::max<int64_t>(0, timeout.count())));
  std::lock_guard<std::mutex> l(mu_);
  auto deadline = Clock::now() + timeout + std::chrono::seconds(10);
  char reply;
  if (!roundTrip(fd_, req, deadline, reply))
    return lost(address_);
  if (reply == 'T')
    return absl::DeadlineExceededError(absl::StrCat("timed out after ", secondsText(timeout),
                                                    " waiting for key '", key,
                                                    "' in the store at ", address_));
  std::string v;
  if (reply != 'O' || !readStr(fd_, v, kMaxValue, deadline))
    return lost(address_);
  return std::vector<char>(v.begin(), v.end());
}

absl::Status TcpStore::tryWait(const std::vector<std::string> &keys,
                               std::chrono::milliseconds timeout) {
  std::string req = "W";
  putU32(req, uint32_t(keys.size()));
  for (const std::string &k : keys)
    putStr(req, k.data(), k.size());
  putU64(req, uint64_t(std::max<int64_t>(0, timeout.count())));
  std::lock_guard<std::mutex> l(mu_);
  auto deadline = Clock::now() + timeout + std::chrono::seconds(10);
  char reply;
  if (!roundTrip(fd_, req, deadline, reply))
    return lost(address_);
  if (reply == 'O')
    return absl::OkStatus();
  uint32_t n;
  if (reply != 'T' || !readU32(fd_, n, deadline) || n > kMaxKeys)
    return lost(address_);
  std::vector<std::string> missing(n);
  for (std::string &k : missing)
    if (!readStr(fd_, k, kMaxKey, deadline))
      return lost(address_);
  return absl::DeadlineExceededError(
      absl::StrCat("timed out after ", secondsText(timeout), " waiting for key(s) '",
                   absl::StrJoin(missing, "', '"), "' in the store at ", address_,
                   " (a rank did not arrive: did it fail to start?)"));
}

namespace {
[[noreturn]] void throwStatus(const absl::Status &s) { throw std::runtime_error(std::string(s.message())); }
} // namespace

void TcpStore::set(const std::string &key, const std::vector<char> &data) {
  if (absl::Status s = trySet(key, data); !s.ok())
    throwStatus(s);
}

std::vector<char> TcpStore::get(const std::string &key) {
  absl::StatusOr<std::vector<char>> v = tryGet(key, timeout_);
  if (!v.ok())
    throwStatus(v.status());
  return std::move(*v);
}

void TcpStore::wait(const std::vector<std::string> &keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string> &keys,
                    const std::chrono::milliseconds &timeout) {
  if (absl::Status s = tryWait(keys, timeout); !s.ok())
    throwStatus(s);
}

} // namespace trainc::rt
