// Resident tensors: storage kept on a device between requests, named by unguessable 128-bit
// handles. Each belongs to the identity that created it (others get NOT_FOUND, as for a handle
// that never existed), expires after its TTL, and counts against its owner's quota.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/tensor_view.h"
#include "runtime/device.h"

namespace tc::server {

struct ResidentTensor {
  std::string handle;
  std::string owner;
  runtime::StoragePtr storage;
  // The view it was created with; `data` points at the storage.
  TensorView view;
  absl::Time expires;
  // Uploads writing into it now; it cannot be read until they finish.
  std::atomic<int> writers{0};
};

struct ResidentOptions {
  // Bytes and tensors one identity may keep.
  int64_t quota_bytes = int64_t{16} << 30;
  int max_tensors = 4096;
  absl::Duration default_ttl = absl::Minutes(10);
  absl::Duration max_ttl = absl::Hours(24);
};

class ResidentStore {
 public:
  explicit ResidentStore(ResidentOptions options);
  ~ResidentStore();

  const ResidentOptions& options() const { return options_; }

  // RESOURCE_EXHAUSTED when `owner` cannot keep `bytes` more (checked again by Add).
  absl::Status CheckQuota(const std::string& owner, int64_t bytes) const;
  // Keeps `storage` for `owner`; ttl_seconds 0 means the default, capped at the maximum.
  absl::StatusOr<std::shared_ptr<ResidentTensor>> Add(const std::string& owner,
                                                      runtime::StoragePtr storage,
                                                      const TensorView& view, int64_t ttl_seconds);
  // NOT_FOUND for unknown, expired and other identities' handles alike.
  absl::StatusOr<std::shared_ptr<ResidentTensor>> Find(const std::string& owner,
                                                       const std::string& handle);
  // Frees the tensor (once no request uses it); returns its bytes.
  absl::StatusOr<int64_t> Release(const std::string& owner, const std::string& handle);
  // Drops every expired tensor; returns how many.
  int Sweep(absl::Time now);

  int64_t count() const;
  int64_t bytes() const;

  // Where client sessions keep their resident tensors, for PlaceResident. Under the store's
  // lock: `choose(sessions)` gets, per position in the server's DeviceSet, how many of
  // `owner`'s remembered sessions keep their tensors there, and returns a position (or -1:
  // none usable); `keep(position)` says whether a session's remembered position still serves.
  // A session is forgotten ten minutes after it last placed a tensor. At most
  // kMaxSessionsPerOwner per owner and kMaxSessions in all are remembered; past that a new
  // session is placed but not remembered.
  static constexpr int kMaxSessionsPerOwner = 1024;
  static constexpr int kMaxSessions = 65536;
  int PlaceSession(const std::string& owner, const std::string& session,
                   const std::function<bool(int)>& keep,
                   const std::function<int(const std::vector<int>&)>& choose);
  int64_t sessions() const;

 private:
  absl::Duration Ttl(int64_t ttl_seconds) const;

  ResidentOptions options_;
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<ResidentTensor>> tensors_;
  struct Usage {
    int64_t bytes = 0;
    int tensors = 0;
  };
  absl::flat_hash_map<std::string, Usage> usage_;
  int64_t total_bytes_ = 0;
  struct Affinity {
    std::string owner;
    int position;
    absl::Time last;
  };
  // By session key; and per owner, how many of its sessions use each position.
  absl::flat_hash_map<std::string, Affinity> affinity_;
  absl::flat_hash_map<std::string, std::vector<int>> owner_sessions_;
  bool stop_ = false;
  std::condition_variable stop_cv_;
  std::thread sweeper_;
};

// The device for a new resident tensor of `bytes` that `owner` creates in `session`
// (SessionKey): device `wanted` (ServerInfo's index) when set; else the one the session's
// earlier tensors went to while it is usable and has room, so that one client's operands
// share a device; else the usable device with room that the fewest of the owner's sessions
// use (then the one with the most free budget). Remembers the choice for the session.
absl::StatusOr<runtime::Device*> PlaceResident(runtime::DeviceSet& devices, ResidentStore& store,
                                               const std::string& owner, const std::string& session,
                                               int64_t bytes, std::optional<int> wanted);

// 32 lowercase hex digits from the kernel's random source.
std::string NewHandle();

}  // namespace tc::server
