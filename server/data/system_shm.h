// KServe v2 system shared memory: POSIX shared-memory objects a caller on this host names by
// key (shm_open), registered under a name of its choosing. Tensors move through them with
// pread and pwrite on the object's descriptor, never through a mapping: an object its owner
// truncates or removes afterwards makes a request fail with a clear error, and can never
// fault the server (a mapping would raise SIGBUS). The regions of tensorcompute.v1 (sealed
// memfds, CUDA IPC) are the zero-copy path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tc::server {

struct SystemShm {
  SystemShm(std::string name, std::string key, int fd, int64_t offset, int64_t bytes)
      : name(std::move(name)), key(std::move(key)), fd(fd), offset(offset), bytes(bytes) {}
  ~SystemShm();
  SystemShm(const SystemShm&) = delete;
  SystemShm& operator=(const SystemShm&) = delete;

  // Reads [at, at + n) of the registered range into `out`; writes `data` at `at`. n and the
  // range are checked against the registration, and a short read or write (the object shrank
  // since) is FAILED_PRECONDITION; RESOURCE_EXHAUSTED where `out` cannot grow to n bytes (the
  // caller has counted them against a budget first).
  absl::Status Read(int64_t at, int64_t n, std::string* out) const;
  absl::Status Write(int64_t at, absl::string_view data) const;

  const std::string name;
  const std::string key;
  const int fd;
  // The registered range of the object.
  const int64_t offset;
  const int64_t bytes;
};

// Opens the object `key` ("/name" or "name") read-write for [offset, offset + bytes) of it,
// to be registered as `name` (RegionStore::Adopt holds it). NOT_FOUND for an object that does
// not exist, INVALID_ARGUMENT for a bad name or key, a range past its end, or what is not a
// shared-memory object.
absl::StatusOr<std::shared_ptr<const SystemShm>> OpenSystemShm(const std::string& name,
                                                               const std::string& key,
                                                               int64_t offset, int64_t bytes);

}  // namespace tc::server
