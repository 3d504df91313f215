// Shared-memory regions (DESIGN decision 12): memory a caller on the server's host shares with
// it, so that tensors cross no socket. The caller sends a memfd over a Unix socket
// (SCM_RIGHTS); the server seals the file against shrinking, so that no later truncation can
// fault a mapping (no SIGBUS, whatever the caller does), maps it whole, and answers with a
// one-time ticket. GPU memory comes the same way as a CUDA IPC handle, opened on the device
// whose UUID the caller names, with the allocation's extent taken from the driver. The caller
// claims the ticket over gRPC, which binds the region to its identity as resident tensors are
// bound. A region ends when its owner unregisters it or when
// the socket connection it came over closes; requests using it keep the mapping until they
// finish.
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
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/device.h"

namespace tc::server {

// Memory a caller shares: a mapping of its memfd (host memory), or its GPU memory opened
// through CUDA IPC (on `device`).
struct Region {
  // `memory` unmaps or closes it when the last user lets go.
  Region(std::byte* base, int64_t bytes, bool writable, uint64_t connection,
         std::shared_ptr<void> memory, runtime::Device* device = nullptr)
      : base(base), bytes(bytes), writable(writable), connection(connection), device(device),
        memory_(std::move(memory)) {}
  ~Region() { pin.reset(); }
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
  std::shared_ptr<void> memory_;
};

struct RegionOptions {
  // Bytes and regions one identity may have registered.
  int64_t quota_bytes = int64_t{64} << 30;
  int max_regions = 256;
  // Socket connections at once, and tickets not yet claimed per connection.
  int max_connections = 256;
  int max_pending = 16;
  absl::Duration ticket_ttl = absl::Seconds(60);
  // Pin claimed regions for the GPU (cudaHostRegister); off, copies stage through the
  // devices' pinned buffers instead.
  bool pin = true;
};

class RegionStore {
 public:
  // `devices` pin claimed regions (the first device that pins at all).
  RegionStore(RegionOptions options, runtime::DeviceSet* devices);
  ~RegionStore();

  // Listens on `address`: a filesystem path, or "@name" in the abstract namespace.
  absl::Status Listen(const std::string& address);
  const std::string& address() const { return address_; }
  const RegionOptions& options() const { return options_; }

  // Binds the ticket's region to `owner`. NOT_FOUND for unknown and expired tickets.
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

 private:
  struct Pending {
    std::shared_ptr<Region> region;
    absl::Time expires;
  };
  void Serve();
  // Handles one message on a connection; returns the reply.
  std::string Handle(int conn, uint64_t connection);
  std::string Register(int fd, uint64_t connection);
  // "cuda UUID HANDLE": GPU memory shared through CUDA IPC.
  std::string RegisterCuda(absl::string_view args, uint64_t connection);
  // The reply for a region waiting to be claimed.
  std::string Ticket(std::shared_ptr<Region> region);
  // Refuses another ticket on a connection that holds too many unclaimed.
  std::string CheckPending(uint64_t connection);
  // Ends every region and ticket of a connection.
  void Drop(uint64_t connection);
  void ExpireTickets(absl::Time now);
  void Remove(const std::string& id);
  // RESOURCE_EXHAUSTED when `owner` cannot register `bytes` more. Takes mu_ held.
  absl::Status QuotaLocked(const std::string& owner, int64_t bytes) const;
  // Counts `region` against `owner`'s quota and publishes it with a new id. Takes mu_ held.
  void AddLocked(const std::string& owner, const std::string& name,
                 const std::shared_ptr<Region>& region);

  RegionOptions options_;
  runtime::DeviceSet* devices_;
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
  absl::flat_hash_set<uint64_t> open_;
};

// Reaches every byte of [offset, offset + n) inside the region, with n >= 0; INVALID_ARGUMENT
// (naming `what`) otherwise. `align`: the offset must be a multiple of it.
absl::Status CheckRegionRange(const Region& r, int64_t offset, int64_t n, int64_t align,
                              const std::string& what);

}  // namespace tc::server
