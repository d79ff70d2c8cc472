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
constexpr int kHandshakeTimeoutMs = 5000;
/// Connections still in their handshake (unauthenticated) at most; a new one beyond it evicts the
/// oldest. They cost a file descriptor and a few hundred bytes each, no thread.
constexpr size_t kMaxPendingHandshakes = 256;
/// Bytes of a complete hello: magic, u32 token length, token.
constexpr size_t kHelloHeader = 12;

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

  /// A connection in its handshake, owned by the accept thread (no lock).
  struct Pending {
    int fd;
    Clock::time_point deadline;
    std::string hello; // bytes received so far
  };
  std::vector<Pending> pending; // oldest first

  std::mutex mu; // guards everything below
  std::condition_variable cv;
  std::map<std::string, std::string> data;
  std::map<uint64_t, int> clientFds;             // authenticated connections by id
  std::map<uint64_t, std::thread> clientThreads; // their threads
  std::vector<uint64_t> finished;                // ids of threads that have returned
  uint64_t nextId = 0;
  bool stopping = false;
  int64_t refused = 0;

  void acceptLoop();
  /// Accepts one connection into `pending` (evicting the oldest when full); false when accept
  /// failed for lack of resources (descriptors, memory).
  bool acceptOne();
  /// Reads what `p` sent; returns true when it is done with (accepted or refused and closed).
  bool progressHandshake(Pending &p);
  void refuse(int fd, bool tell);
  void serve(uint64_t id, int fd);
  /// Joins the threads of closed connections.
  void reap();
};

void TcpStoreServer::Impl::refuse(int fd, bool tell) {
  {
    // Counted before the client hears of it, so that a caller who saw the refusal sees the count.
    std::lock_guard<std::mutex> l(mu);
    ++refused;
  }
  if (tell) {
    char c = 'T';
    writeAll(fd, &c, 1);
  }
  ::close(fd);
}

bool TcpStoreServer::Impl::acceptOne() {
  int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0)
    return !(errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (pending.size() >= kMaxPendingHandshakes) {
    refuse(pending.front().fd, false);
    pending.erase(pending.begin());
  }
  pending.push_back(
      Pending{fd, Clock::now() + std::chrono::milliseconds(kHandshakeTimeoutMs), {}});
  return true;
}

bool TcpStoreServer::Impl::progressHandshake(Pending &p) {
  char buf[kHelloHeader + kMaxToken];
  size_t want = kHelloHeader;
  if (p.hello.size() >= kHelloHeader) {
    uint32_t n = getU32(reinterpret_cast<const unsigned char *>(p.hello.data()) + 8);
    if (n > kMaxToken) {
      refuse(p.fd, true);
      return true;
    }
    want += n;
  }
  ssize_t k = ::recv(p.fd, buf, want - p.hello.size(), 0);
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return false;
  if (k <= 0) {
    refuse(p.fd, false);
    return true;
  }
  p.hello.append(buf, size_t(k));
  if (p.hello.size() >= 8 && std::memcmp(p.hello.data(), kMagic, 8) != 0) {
    refuse(p.fd, false); // not a trainc client
    return true;
  }
  if (p.hello.size() < kHelloHeader)
    return false;
  uint32_t n = getU32(reinterpret_cast<const unsigned char *>(p.hello.data()) + 8);
  if (n > kMaxToken) {
    refuse(p.fd, true);
    return true;
  }
  if (p.hello.size() < kHelloHeader + n)
    return false;
  if (!constantTimeEqual(p.hello.substr(kHelloHeader), token)) {
    refuse(p.fd, true);
    return true;
  }
  // Accepted: the connection gets a thread (blocking I/O) until it closes.
  int flags = ::fcntl(p.fd, F_GETFL);
  ::fcntl(p.fd, F_SETFL, flags & ~O_NONBLOCK);
  char c = 'O';
  if (!writeAll(p.fd, &c, 1)) {
    ::close(p.fd);
    return true;
  }
  std::lock_guard<std::mutex> l(mu);
  if (stopping) {
    ::close(p.fd);
    return true;
  }
  uint64_t id = nextId++;
  clientFds[id] = p.fd;
  int fd = p.fd;
  clientThreads[id] = std::thread([this, id, fd] { serve(id, fd); });
  return true;
}

void TcpStoreServer::Impl::reap() {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> l(mu);
    for (uint64_t id : finished) {
      auto it = clientThreads.find(id);
      if (it != clientThreads.end()) {
        done.push_back(std::move(it->second));
        clientThreads.erase(it);
      }
    }
    finished.clear();
  }
  for (std::thread &t : done)
    t.join();
}

void TcpStoreServer::Impl::acceptLoop() {
  bool starved = false; // accept failed for lack of descriptors: wait before retrying
  for (;;) {
    reap();
    std::vector<pollfd> pfds = {{wakePipe[0], POLLIN, 0}, {listenFd, POLLIN, 0}};
    int timeout = -1;
    auto now = Clock::now();
    for (const Pending &p : pending) {
      pfds.push_back({p.fd, POLLIN, 0});
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p.deadline - now).count();
      timeout = int(std::max<int64_t>(0, timeout < 0 ? left : std::min<int64_t>(timeout, left)));
    }
    if (starved) {
      pfds[1].events = 0;
      timeout = timeout < 0 ? 100 : std::min(timeout, 100);
    }
    int r = ::poll(pfds.data(), nfds_t(pfds.size()), timeout);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      break;
    if (pfds[0].revents & POLLIN) {
      // A byte per finished client thread (reaped at the top of the loop), or stop().
      char buf[256];
      while (::read(wakePipe[0], buf, sizeof(buf)) > 0) {
      }
      std::lock_guard<std::mutex> l(mu);
      if (stopping)
        break;
    }
    // Handshakes that sent something, or ran out of time.
    now = Clock::now();
    std::vector<Pending> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending &p = pending[i];
      if (pfds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) {
        if (progressHandshake(p))
          continue;
      } else if (now >= p.deadline) {
        refuse(p.fd, false);
        continue;
      }
      still.push_back(std::move(p));
    }
    pending.swap(still);
    starved = false;
    if (pfds[1].revents & POLLIN) {
      // Several at once: a flood must not starve the handshakes already in progress.
      for (int k = 0; k < 64; ++k) {
        if (!acceptOne()) {
          // Out of descriptors: drop the oldest handshake to free one, else wait a little
          // (poll would report the listening socket readable at once: no busy loop).
          if (!pending.empty()) {
            refuse(pending.front().fd, false);
            pending.erase(pending.begin());
          } else {
            starved = true;
          }
          break;
        }
        pollfd more{listenFd, POLLIN, 0};
        if (::poll(&more, 1, 0) <= 0)
          break;
      }
    }
  }
  for (Pending &p : pending)
    ::close(p.fd);
  pending.clear();
}

void TcpStoreServer::Impl::serve(uint64_t id, int fd) {
  constexpr auto forever = Clock::time_point::max();
  {
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
  {
    std::lock_guard<std::mutex> l(mu);
    clientFds.erase(id);
    ::close(fd);
    finished.push_back(id);
  }
  // Wake the accept loop so it joins this thread now, not at the next connection. The pipe
  // is non-blocking: when it is full the loop is already due to wake.
  char c = 'r';
  (void)!::write(wakePipe[1], &c, 1);
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TcpStoreServer::~TcpStoreServer() { stop(); }

int TcpStoreServer::port() const { return impl_->port; }

int64_t TcpStoreServer::refusedConnections() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->refused;
}

int64_t TcpStoreServer::connectionThreads() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return int64_t(impl_->clientThreads.size());
}

void TcpStoreServer::stop() {
  Impl &im = *impl_;
  {
    std::lock_guard<std::mutex> l(im.mu);
    if (im.stopping)
      return;
    im.stopping = true;
    for (auto &[id, fd] : im.clientFds)
      ::shutdown(fd, SHUT_RDWR);
  }
  im.cv.notify_all();
  char c = 'x';
  (void)!::write(im.wakePipe[1], &c, 1);
  if (im.acceptThread.joinable())
    im.acceptThread.join();
  std::map<uint64_t, std::thread> threads;
  {
    std::lock_guard<std::mutex> l(im.mu);
    threads.swap(im.clientThreads);
  }
  for (auto &[id, t] : threads)
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
  if (::pipe2(im->wakePipe, O_CLOEXEC | O_NONBLOCK) != 0) {
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
  std::string hello(kMagic, 8);
  putStr(hello, token.data(), token.size());
  for (auto wait = std::chrono::milliseconds(10);;
       wait = std::min(wait * 2, std::chrono::milliseconds(500))) {
    int fd = -1;
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
    if (fd >= 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      char reply = 0;
      auto handshakeDeadline =
          std::max(deadline, Clock::now() + std::chrono::milliseconds(kHandshakeTimeoutMs));
      ReadResult r = ReadResult::Error;
      if (writeAll(fd, hello.data(), hello.size()))
        r = readAll(fd, &reply, 1, handshakeDeadline);
      if (r == ReadResult::Ok && reply == 'O')
        return std::unique_ptr<TcpStore>(new TcpStore(fd, where, timeout, token));
      ::close(fd);
      if (r == ReadResult::Ok && reply == 'T')
        return absl::PermissionDeniedError(absl::StrCat(
            "the store at ", where, " refused the connection: wrong job token (every rank "
                                    "of a job needs the same TRAINC_JOB_TOKEN)"));
      if (r == ReadResult::Ok || r == ReadResult::TimedOut)
        return absl::UnavailableError(absl::StrCat(
            "the store at ", where, " did not complete the handshake (is it a trainc store?)"));
      // Closed before it answered: a busy server (a flood of strangers) dropped the handshake.
      lastError = "the store closed the connection during the handshake (busy?)";
    }
    if (Clock::now() + wait > deadline)
      break;
    std::this_thread::sleep_for(wait);
  }
  return absl::UnavailableError(absl::StrCat("cannot reach the store at ", where, " within ",
                                             secondsText(timeout), ": ", lastError));
}

TcpStore::~TcpStore() {
  if (fd_ >= 0)
    ::close(fd_);
}

bool TcpStore::reconnect() {
  size_t colon = address_.rfind(':');
  absl::StatusOr<std::unique_ptr<TcpStore>> fresh =
      connect(address_.substr(0, colon), std::atoi(address_.c_str() + colon + 1), token_,
              std::min(timeout_, std::chrono::milliseconds(10000)));
  if (!fresh.ok())
    return false;
  ::close(fd_);
  fd_ = (*fresh)->fd_;
  (*fresh)->fd_ = -1;
  return true;
}

namespace {
absl::Status lost(const std::string &where) {
  return absl::UnavailableError(absl::StrCat("lost the connection to the store at ", where,
                                             " and could not reconnect (did the launcher exit?)"));
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
  for (int attempt = 0;; ++attempt) {
    char reply;
    if (roundTrip(fd_, req, Clock::now() + timeout_ + std::chrono::seconds(10), reply) &&
        reply == 'O')
      return absl::OkStatus();
    if (attempt == 1 || !reconnect())
      return lost(address_);
  }
}

absl::StatusOr<std::vector<char>> TcpStore::tryGet(const std::string &key,
                                                   std::chrono::milliseconds timeout) {
  std::string req = "G";
  putStr(req, key.data(), key.size());
  putU64(req, uint64_t(std::max<int64_t>(0, timeout.count())));
  std::lock_guard<std::mutex> l(mu_);
  auto deadline = Clock::now() + timeout + std::chrono::seconds(10);
  char reply;
  if (!roundTrip(fd_, req, deadline, reply) && (!reconnect() || !roundTrip(fd_, req, deadline, reply)))
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
  if (!roundTrip(fd_, req, deadline, reply) && (!reconnect() || !roundTrip(fd_, req, deadline, reply)))
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
