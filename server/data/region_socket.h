// The region socket: how a process on the server's host offers memory (DESIGN decision 12).
// It sends a memfd over a Unix socket (SCM_RIGHTS); the socket seals the file against
// shrinking, so that no later truncation can fault a mapping (no SIGBUS, whatever the caller
// does), and answers with a one-time ticket that the caller claims over gRPC
// (RegionStore::Claim). GPU memory comes the same way as a CUDA IPC handle for the device
// whose UUID the caller names. A region ends when the connection it came over closes.
//
// The socket is open to every local process, so it bounds what any one of them can hold:
// connections per process and per user, tickets per connection and in all, and connections
// that hold nothing are closed when idle, or to make room for a new caller.
#pragma once

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/data/regions.h"

namespace tc::server {

class RegionSocket {
 public:
  // Offers what callers send to `store`, which outlives the socket.
  explicit RegionSocket(RegionStore* store) : store_(store) {}
  ~RegionSocket();
  RegionSocket(const RegionSocket&) = delete;
  RegionSocket& operator=(const RegionSocket&) = delete;

  // Listens on `address`: a filesystem path, or "@name" in the abstract namespace; the store
  // learns the address.
  absl::Status Listen(const std::string& address);

 private:
  void Serve();
  // Reads one message off a connection; returns the reply (empty: the connection ends).
  std::string Receive(int conn, uint64_t connection);
  // Reads one message off a refused connection and drops it, closing its descriptors.
  static void Discard(int conn);

  RegionStore* const store_;
  std::string address_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::thread server_;
};

// Handles one message as it came over connection `connection` (`text`, and the descriptors
// attached, which it takes); returns the reply: "ticket ID [BYTES]" or "error WHY". The
// socket's own path, and the fuzzer's.
std::string HandleRegionMessage(RegionStore& store, absl::string_view text, std::vector<int> fds,
                                uint64_t connection);

}  // namespace tc::server
