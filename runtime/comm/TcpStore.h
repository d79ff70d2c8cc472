//===- TcpStore.h - A key-value store over TCP for Gloo's rendezvous -----===//
//
// Debian's Gloo (0.5, 2022) ships FileStore, HashStore and RedisStore but no TCP store, so the
// ranks of a job meet through this one: trainrun (or rank 0 under an outer launcher) runs a
// TcpStoreServer on a thread; every rank connects a TcpStore client, which implements
// gloo::rendezvous::Store (set / get / wait), and Gloo exchanges the transport addresses of each
// group's pairs through it.
//
// Every connection starts with the job's token (a random string shared by the ranks of one job,
// normally 32 hex characters from /dev/urandom). The server compares it in constant time and
// closes a connection whose token differs, so a stranger on the machine (or another job on the
// same port) cannot read or poison the rendezvous; the client reports "the store at HOST:PORT
// refused the connection: wrong job token".
//
// Wire format (all integers little-endian): the client sends "TRNCST01", u32 token length, token;
// the server answers 'O' (accepted) or 'T' (wrong token, then closes). Requests: 'S' str key,
// str value -> 'O'; 'G' str key, u64 timeout_ms -> 'O' str value | 'T'; 'W' u32 n, n x str key,
// u64 timeout_ms -> 'O' | 'T' u32 n, n x str missing key. str = u32 length + bytes.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_COMM_TCPSTORE_H
#define TRAINC_RUNTIME_COMM_TCPSTORE_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace trainc::rt {

/// A fresh job token: 32 lower-case hex characters (128 bits) read from /dev/urandom.
/// Errors: /dev/urandom cannot be read.
absl::StatusOr<std::string> generateJobToken();

/// Checks that `token` can serve as a job token: 16 to 256 characters, printable ASCII without
/// spaces. The error names the problem (never the token itself, which is a secret) and `source`
/// (e.g. "TRAINC_JOB_TOKEN").
absl::Status checkJobToken(const std::string &token, const std::string &source);

/// The server side: binds host:port and serves on a background thread until stop() or
/// destruction. Handshakes run on that thread without blocking (at most 256 at once, 5 s each; a
/// new connection beyond that evicts the oldest, and running out of file descriptors drops the
/// oldest handshake instead of spinning), so strangers flooding the port cost a descriptor each
/// and no thread; an authenticated connection gets a thread, joined soon after it closes.
class TcpStoreServer {
public:
  /// Binds `host` (a numeric address or a name; "" = every interface) and `port` (0 = an ephemeral
  /// port chosen by the kernel, see port()). Errors name host and port: unresolvable host, address
  /// in use, permission denied.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> start(const std::string &host, int port,
                                                              const std::string &token);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer &) = delete;
  TcpStoreServer &operator=(const TcpStoreServer &) = delete;

  /// The bound TCP port.
  int port() const;
  /// Number of connections closed because of a wrong token, a malformed or late handshake, or
  /// evicted while still in the handshake (more than 256 at once, or out of file descriptors).
  int64_t refusedConnections() const;
  /// Threads of authenticated connections not yet joined (a closed one's is joined soon after).
  int64_t connectionThreads() const;
  /// Closes the listening socket and every connection and joins the threads. Idempotent.
  void stop();

  struct Impl;

private:
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The client side, usable as Gloo's rendezvous store. One TCP connection, serialised by a mutex;
/// a lost connection is reconnected once per request (requests are idempotent) before the error
/// "lost the connection to the store at H:P" is reported.
/// The gloo::rendezvous::Store overrides throw std::runtime_error with the message of the Status
/// variants below (Gloo's connectFullMesh propagates it).
class TcpStore final : public gloo::rendezvous::Store {
public:
  /// Connects to host:port and presents `token`. Connection refusals are retried until `timeout`
  /// (the server may still be starting); `timeout` is also the default for wait() and get().
  /// Errors: "cannot resolve store host 'X'", "cannot reach the store at H:P within N s: <reason>",
  /// "the store at H:P refused the connection: wrong job token".
  static absl::StatusOr<std::unique_ptr<TcpStore>> connect(const std::string &host, int port,
                                                           const std::string &token,
                                                           std::chrono::milliseconds timeout);
  ~TcpStore() override;

  /// Sets `key` to `value` (overwrites).
  absl::Status trySet(const std::string &key, const std::vector<char> &value);
  /// Returns the value of `key`, waiting up to `timeout` for it to be set.
  absl::StatusOr<std::vector<char>> tryGet(const std::string &key, std::chrono::milliseconds timeout);
  /// Waits up to `timeout` until every key is set. The error lists the keys still missing.
  absl::Status tryWait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout);

  void set(const std::string &key, const std::vector<char> &data) override;
  std::vector<char> get(const std::string &key) override;
  void wait(const std::vector<std::string> &keys) override;
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override;

  /// "host:port" for messages.
  const std::string &address() const { return address_; }

private:
  TcpStore(int fd, std::string address, std::chrono::milliseconds timeout, std::string token)
      : fd_(fd), address_(std::move(address)), timeout_(timeout), token_(std::move(token)) {}
  /// Replaces the connection by a new one (mu_ held). False when the store cannot be reached.
  bool reconnect();
  int fd_;
  std::string token_;
  std::string address_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
};

} // namespace trainc::rt

#endif
