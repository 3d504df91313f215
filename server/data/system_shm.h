// KServe v2 system shared memory: POSIX shared-memory objects a caller on this host names by
// key (shm_open), registered under a name of its choosing. Tensors move through them with
// pread and pwrite on the object's descriptor, never through a mapping: an object its owner
// truncates or removes afterwards makes a request fail with a clear error, and can never
// fault the server (a mapping would raise SIGBUS). The regions of tensorcompute.v1 (sealed
// memfds, CUDA IPC) are the zero-copy path.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/data/mapped_bytes.h"

namespace tc::server {

struct SystemShm {
  // `charge`: `bytes` counted against the server-wide cap while the registration lives.
  SystemShm(std::string name, std::string key, int fd, int64_t offset, int64_t bytes,
            std::shared_ptr<void> charge)
      : name(std::move(name)), key(std::move(key)), fd(fd), offset(offset), bytes(bytes),
        charge_(std::move(charge)) {}
  ~SystemShm();
  SystemShm(const SystemShm&) = delete;
  SystemShm& operator=(const SystemShm&) = delete;

  // Reads [at, at + n) of the registered range into `out`; writes `data` at `at`. n and the
  // range are checked against the registration, and a short read or write (the object shrank
  // since) is FAILED_PRECONDITION; RESOURCE_EXHAUSTED where `out` cannot grow to n bytes (the
  // caller has counted them against a budget first).
  absl::Status Read(int64_t at, int64_t n, std::string* out) const;
  absl::Status Write(int64_t at, const std::string& data) const;

  const std::string name;
  const std::string key;
  const int fd;
  // The registered range of the object.
  const int64_t offset;
  const int64_t bytes;

 private:
  std::shared_ptr<void> charge_;
};

class SystemShmStore {
 public:
  // `max_regions` per identity; every registration's bytes count against `mapped`, which
  // outlives the store.
  SystemShmStore(int max_regions, MappedBytes* mapped)
      : max_regions_(max_regions), mapped_(mapped) {}

  // Opens the object `key` ("/name" or "name") read-write and registers [offset, offset +
  // bytes) of it as `name` for `owner`. ALREADY_EXISTS for a name the owner uses, NOT_FOUND
  // for an object that does not exist, INVALID_ARGUMENT for a range past its end.
  absl::Status Register(const std::string& owner, const std::string& name,
                        const std::string& key, int64_t offset, int64_t bytes);
  // One name, or every region of the owner when `name` is empty. NOT_FOUND for a name the
  // owner has not registered.
  absl::Status Unregister(const std::string& owner, const std::string& name);
  absl::StatusOr<std::shared_ptr<const SystemShm>> Find(const std::string& owner,
                                                        const std::string& name) const;
  // The owner's regions, or the one named.
  absl::StatusOr<std::vector<std::shared_ptr<const SystemShm>>> List(
      const std::string& owner, const std::string& name) const;

 private:
  const int max_regions_;
  MappedBytes* const mapped_;
  mutable std::mutex mu_;
  // owner -> name -> region.
  absl::flat_hash_map<std::string,
                      absl::flat_hash_map<std::string, std::shared_ptr<const SystemShm>>>
      regions_;
};

}  // namespace tc::server
