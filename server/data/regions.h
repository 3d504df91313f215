// Shared-memory regions (DESIGN decision 12): memory a caller on the server's host shares with
// it, so that tensors cross no socket. The caller sends a memfd over a Unix socket
// (SCM_RIGHTS); the server seals the file against shrinking, so that no later truncation can
// fault a mapping (no SIGBUS, whatever the caller does), and answers with a one-time ticket.
// GPU memory comes the same way as a CUDA IPC handle for the device whose UUID the caller
// names. The caller claims the ticket over gRPC, which binds the region to its identity as
// resident tensors are bound; only then, within that identity's quota and the server-wide cap
// (MappedBytes), is the memfd mapped or the handle opened (its extent taken from the driver).
// A region ends when its owner unregisters it or when the socket connection it came over
// closes; requests using it keep the mapping until they finish.
//
// The socket is open to every local process, so it bounds what any one of them can hold:
// connections per process and per user, tickets per connection and in all, and connections
// that hold nothing are closed when idle, or to make room for a new caller.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/device.h"
#include "server/data/mapped_bytes.h"

namespace tc::server {

// Memory a caller shares: a mapping of its memfd (host memory), or its GPU memory opened
// through CUDA IPC (on `device`).
struct Region {
  // `memory` unmaps or closes it when the last user lets go.
  // `charge`: its bytes counted against the server-wide cap, given back after `memory` goes.
  Region(std::byte* base, int64_t bytes, bool writable, uint64_t connection,
         std::shared_ptr<void> memory, runtime::Device* device = nullptr,
         std::shared_ptr<void> charge = nullptr)
      : base(base), bytes(bytes), writable(writable), connection(connection), device(device),
        charge_(std::move(charge)), memory_(std::move(memory)) {}
  ~Region() {
    pin.reset();
    memory_.reset();
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  std::byte* const base;
  const int64_t bytes;
  // False when the caller sealed the file against writing.
  const bool writable;
  // The socket connection it was registered over.
  const uint64_t connection;
  // The GPU whose memory it is; null for host memory.
  runtime::Device* const device;
  std::string id;
  std::string owner;
  std::string name;
  // The devices' pin of a host mapping (Device::PinHost), dropped before it is unmapped; null
  // where copies stage instead.
  std::shared_ptr<void> pin;

 private:
  std::shared_ptr<void> charge_;
  std::shared_ptr<void> memory_;
};

struct RegionOptions {
  // Bytes and regions one identity may have registered.
  int64_t quota_bytes = int64_t{64} << 30;
  int max_regions = 256;
  // Socket connections at once, from one process, and from one user (uid); a new caller over
  // a limit is told so in the socket's one reply before it closes.
  int max_connections = 256;
  int max_connections_per_process = 16;
  int max_connections_per_user = 128;
  // A connection that holds no ticket and no region and has sent nothing for this long is
  // closed (and the longest idle such one, sooner, when a new caller needs its place).
  absl::Duration idle_timeout = absl::Seconds(30);
  // Tickets not yet claimed, per connection and in all (each keeps a descriptor open).
  int max_pending = 16;
  int max_pending_total = 1024;
  absl::Duration ticket_ttl = absl::Seconds(60);
  // Pin claimed regions for the GPU (cudaHostRegister); off, copies stage through the
  // devices' pinned buffers instead.
  bool pin = true;
};

class RegionStore {
 public:
  // `devices` pin claimed regions (the first device that pins at all).
  // `mapped`: the server-wide cap every region counts against; it outlives the store.
  RegionStore(RegionOptions options, runtime::DeviceSet* devices, MappedBytes* mapped);
  ~RegionStore();

  // Listens on `address`: a filesystem path, or "@name" in the abstract namespace.
  absl::Status Listen(const std::string& address);
  const std::string& address() const { return address_; }
  const RegionOptions& options() const { return options_; }
  MappedBytes* mapped() const { return mapped_; }

  // Binds the ticket's region to `owner`, and maps (or opens) it. NOT_FOUND for unknown and
  // expired tickets, RESOURCE_EXHAUSTED past the owner's quota or the server-wide cap.
  absl::StatusOr<std::shared_ptr<Region>> Claim(const std::string& owner,
                                               const std::string& ticket,
                                               const std::string& name);
  // Registers memory that reached the server another way than the socket (KServe v2's CUDA
  // shared memory, by IPC handle over gRPC) for `owner` under `name`; its connection is
  // kNoConnection, and it lives until unregistered. Quotas as for Claim; ALREADY_EXISTS where
  // the owner has such a region of that name.
  static constexpr uint64_t kNoConnection = 0;
  absl::StatusOr<std::shared_ptr<Region>> Adopt(const std::string& owner, const std::string& name,
                                               std::shared_ptr<Region> region);
  // NOT_FOUND for unknown regions and other identities' alike.
  absl::StatusOr<std::shared_ptr<Region>> Find(const std::string& owner,
                                              const std::string& id) const;
  absl::Status Unregister(const std::string& owner, const std::string& id);
  std::vector<std::shared_ptr<Region>> List(const std::string& owner) const;

  int64_t count() const;
  int64_t bytes() const;
  // Socket connections open now.
  int connections() const;

  // Handles one message as it came over connection `connection` (`text`, and the descriptors
  // attached, which it takes); returns the reply. The socket's own path, and the fuzzer's.
  std::string HandleMessage(absl::string_view text, std::vector<int> fds, uint64_t connection);
  // A connection as the socket accepts one (the fuzzer's way in); false when a limit refuses
  // it, with the reason in `why`. Closed with CloseConnection.
  bool OpenConnection(uint64_t connection, int64_t pid, int64_t uid, std::string* why);
  void CloseConnection(uint64_t connection);

 private:
  // What a ticket stands for until it is claimed: a sealed memfd, or a CUDA IPC handle. Nothing
  // is mapped or opened yet.
  struct Pending {
    std::shared_ptr<const int> fd;  // the memfd (closed when the last copy goes)
    int64_t bytes = 0;              // its size; for a handle, known once opened
    bool writable = true;
    std::string ipc_handle;
    runtime::Device* device = nullptr;
    uint64_t connection = 0;
    absl::Time expires;
  };
  struct Connection {
    int64_t pid = -1;
    int64_t uid = -1;
    absl::Time last_active;
    // Tickets pending and regions registered over it.
    int held = 0;
  };
  void Serve();
  // Reads one message off a connection; returns the reply (empty: the connection ends).
  std::string Receive(int conn, uint64_t connection);
  // Reads one message off a refused connection and drops it, closing its descriptors.
  static void Discard(int conn);
  std::string Register(int fd, uint64_t connection);
  // "cuda UUID HANDLE": GPU memory shared through CUDA IPC.
  std::string RegisterCuda(absl::string_view args, uint64_t connection);
  // Issues a ticket unless the connection, or the server, holds too many unclaimed.
  std::string Ticket(Pending pending);
  // The region a claimed ticket stands for, mapped or opened and charged to the cap.
  absl::StatusOr<std::shared_ptr<Region>> Materialize(const Pending& p);
  // Ends every region and ticket of a connection.
  void Drop(uint64_t connection);
  void ExpireTickets(absl::Time now);
  // Connections idle past the timeout (or the longest idle one when `one`), to close.
  std::vector<uint64_t> IdleConnections(absl::Time now, bool one) const;
  void Remove(const std::string& id);
  // RESOURCE_EXHAUSTED when `owner` cannot register `bytes` more. Takes mu_ held.
  absl::Status QuotaLocked(const std::string& owner, int64_t bytes) const;
  // Counts `region` against `owner`'s quota and publishes it with a new id. Takes mu_ held.
  void AddLocked(const std::string& owner, const std::string& name,
                 const std::shared_ptr<Region>& region);

  RegionOptions options_;
  runtime::DeviceSet* devices_;
  MappedBytes* mapped_;
  std::string address_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::thread server_;

  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, Pending> pending_;
  absl::flat_hash_map<std::string, std::shared_ptr<Region>> regions_;
  struct Usage {
    int64_t bytes = 0;
    int regions = 0;
  };
  absl::flat_hash_map<std::string, Usage> usage_;
  int64_t total_bytes_ = 0;
  // Socket connections still open: a region whose connection closed is not published.
  absl::flat_hash_map<uint64_t, Connection> open_;
};

// Reaches every byte of [offset, offset + n) inside the region, with n >= 0; INVALID_ARGUMENT
// (naming `what`) otherwise. `align`: the offset must be a multiple of it.
absl::Status CheckRegionRange(const Region& r, int64_t offset, int64_t n, int64_t align,
                              const std::string& what);

}  // namespace tc::server
