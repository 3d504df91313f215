// Shared memory callers on the server's host register with it (DESIGN decision 12), every
// kind in one registry: sealed memfds and CUDA IPC memory offered over the region socket
// (region_socket.h) and claimed by ticket over gRPC, KServe v2's system shared memory (read
// and written through its object's descriptor, system_shm.h) and its CUDA shared memory (an
// IPC handle over gRPC). A region is bound to its owner's identity, counted against that
// identity's quota and the server-wide cap (MappedBytes), and found by id (tensorcompute.v1)
// or by the name its owner gave it (KServe v2, one namespace for both kinds). A region ends
// when its owner unregisters it or when the socket connection it came over closes; requests
// using it keep it until they finish.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/device.h"
#include "server/data/mapped_bytes.h"
#include "server/data/system_shm.h"

namespace tc::server {

// Registered outside any socket connection: by gRPC (KServe v2), until unregistered.
inline constexpr uint64_t kNoConnection = 0;

// The memory behind a region, one of three kinds.
// A mapping of the caller's sealed memfd: host memory the engine reads and writes in place.
struct HostMapping {
  std::byte* base = nullptr;
  // Unmaps it when the last user lets go.
  std::shared_ptr<void> mapping;
  // The devices' pin of the mapping (HostMaps::PinHost), dropped before it is unmapped; null
  // where copies stage instead.
  std::shared_ptr<void> pin;
};
// The caller's GPU memory, opened through CUDA IPC on `device`.
struct DeviceMemory {
  std::byte* base = nullptr;
  runtime::Device* device = nullptr;
  // Closes the IPC mapping when the last user lets go.
  std::shared_ptr<void> opened;
};
// A system shared-memory object (KServe v2): nothing mapped; read and written through its
// descriptor (pread, pwrite).
struct SharedFile {
  std::shared_ptr<const SystemShm> file;
};

// Memory a caller shares, bound to its owner once registered.
struct Region {
  using Memory = std::variant<HostMapping, DeviceMemory, SharedFile>;
  // `connection`: the socket connection it came over (kNoConnection: registered by gRPC).
  // `charge`: its bytes counted against the server-wide cap, given back after the memory goes.
  Region(Memory memory, int64_t bytes, bool writable, uint64_t connection,
         std::shared_ptr<void> charge = nullptr)
      : bytes(bytes),
        writable(writable),
        connection(connection),
        charge_(std::move(charge)),
        memory_(std::move(memory)) {}
  // System shared memory, registered by name (no connection).
  Region(std::shared_ptr<const SystemShm> file, std::shared_ptr<void> charge)
      : bytes(file->bytes),
        writable(true),
        connection(kNoConnection),
        charge_(std::move(charge)),
        memory_(SharedFile{std::move(file)}) {}
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  const Memory& memory() const { return memory_; }
  // The bytes the engine reads and writes in place; null for system shared memory.
  std::byte* base() const {
    if (const auto* h = std::get_if<HostMapping>(&memory_)) return h->base;
    if (const auto* d = std::get_if<DeviceMemory>(&memory_)) return d->base;
    return nullptr;
  }
  // The GPU whose memory it is; null for host memory and files.
  runtime::Device* device() const {
    const auto* d = std::get_if<DeviceMemory>(&memory_);
    return d != nullptr ? d->device : nullptr;
  }
  // System shared memory's object; null for memory mapped or opened here.
  const SystemShm* file() const {
    const auto* f = std::get_if<SharedFile>(&memory_);
    return f != nullptr ? f->file.get() : nullptr;
  }
  // A host mapping's pin for the devices; null where there is none.
  const std::shared_ptr<void>& pin() const {
    static const std::shared_ptr<void> kNone;
    const auto* h = std::get_if<HostMapping>(&memory_);
    return h != nullptr ? h->pin : kNone;
  }
  // Pins a host mapping (a no-op for the other kinds): before the region is published.
  void SetPin(std::shared_ptr<void> pin) {
    if (auto* h = std::get_if<HostMapping>(&memory_)) h->pin = std::move(pin);
  }

  const int64_t bytes;
  // False when the caller sealed the file against writing.
  const bool writable;
  const uint64_t connection;
  std::string id;
  std::string owner;
  std::string name;

 private:
  // Declared first, so given back after the memory goes.
  std::shared_ptr<void> charge_;
  Memory memory_;
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

// What a ticket stands for until it is claimed: a sealed memfd, or a CUDA IPC handle. Nothing
// is mapped or opened yet.
struct Offer {
  std::shared_ptr<const int> fd;  // the memfd (closed when the last copy goes)
  int64_t bytes = 0;              // its size; for a handle, known once opened
  bool writable = true;
  std::string ipc_handle;
  runtime::Device* device = nullptr;
  uint64_t connection = 0;
  absl::Time expires;
};

class RegionStore {
 public:
  // `devices` pin claimed regions (the first device that pins at all).
  // `mapped`: the server-wide cap every region counts against; it outlives the store.
  RegionStore(RegionOptions options, runtime::DeviceSet* devices, MappedBytes* mapped);
  ~RegionStore();

  const RegionOptions& options() const { return options_; }
  MappedBytes* mapped() const { return mapped_; }
  runtime::DeviceSet* devices() const { return devices_; }
  // Where the region socket listens (set once it does); empty where it does not.
  const std::string& address() const { return address_; }
  void set_address(std::string address) { address_ = std::move(address); }

  // The socket's side. A connection opened as the socket accepts one; false when a limit
  // refuses it, with the reason in `why`. Closing one ends its tickets and regions.
  bool OpenConnection(uint64_t connection, int64_t pid, int64_t uid, std::string* why);
  void CloseConnection(uint64_t connection);
  // Marks a connection active now.
  void Touch(uint64_t connection);
  // Issues a ticket for what a connection offers ("ticket ID [BYTES]"), or says why not
  // ("error ..."), unless the connection or the server holds too many unclaimed.
  std::string Ticket(Offer offer);
  // Tickets past their time go.
  void ExpireTickets(absl::Time now);
  // Connections idle past the timeout (or the longest idle one when `one`), to close.
  std::vector<uint64_t> IdleConnections(absl::Time now, bool one) const;
  // Socket connections open now.
  int connections() const;

  // Binds the ticket's region to `owner`, and maps (or opens) it. NOT_FOUND for unknown and
  // expired tickets, RESOURCE_EXHAUSTED past the owner's quota or the server-wide cap.
  absl::StatusOr<std::shared_ptr<Region>> Claim(const std::string& owner, const std::string& ticket,
                                                const std::string& name);
  // Registers memory that reached the server another way than the socket (KServe v2's
  // system and CUDA shared memory) for `owner` under `name`; its connection is kNoConnection,
  // and it lives until unregistered. Quotas as for Claim; ALREADY_EXISTS where the owner has
  // such a region of that name, of either kind.
  static constexpr uint64_t kNoConnection = server::kNoConnection;
  absl::StatusOr<std::shared_ptr<Region>> Adopt(const std::string& owner, const std::string& name,
                                                std::shared_ptr<Region> region);
  // A region by id (tensorcompute.v1): memory the engine reads and writes in place. NOT_FOUND
  // for unknown regions and other identities' alike; INVALID_ARGUMENT for system shared memory.
  absl::StatusOr<std::shared_ptr<Region>> Find(const std::string& owner,
                                               const std::string& id) const;
  // A region adopted under `name` (KServe v2); NOT_FOUND where there is none.
  absl::StatusOr<std::shared_ptr<Region>> FindNamed(const std::string& owner,
                                                    const std::string& name) const;
  absl::Status Unregister(const std::string& owner, const std::string& id);
  // The owner's regions of tensorcompute.v1 (all but system shared memory).
  std::vector<std::shared_ptr<Region>> List(const std::string& owner) const;
  // The owner's adopted regions, all of them or the one of `name`.
  std::vector<std::shared_ptr<Region>> ListNamed(const std::string& owner,
                                                 const std::string& name) const;

  int64_t count() const;
  int64_t bytes() const;

 private:
  struct Connection {
    int64_t pid = -1;
    int64_t uid = -1;
    absl::Time last_active;
    // Tickets pending and regions registered over it.
    int held = 0;
  };
  // The region a claimed ticket stands for, mapped or opened and charged to the cap.
  absl::StatusOr<std::shared_ptr<Region>> Materialize(const Offer& p);
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

  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, Offer> pending_;
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
