// Compiled expression kernels kept on disk across restarts: one file per kernel in a directory
// only the server's user can write, named by the SHA-256 of its key (the source with
// everything that decides what it compiles to: the compiler's version, options, the embedded
// headers, the architecture).
//
// Nothing read is trusted: an entry is used only when it is a regular file of this user,
// holds this format, the very key asked for (not only its hash), and a value whose SHA-256 is
// the one recorded beside it; anything else (corrupt, truncated, foreign, another key's, a
// link) is counted as rejected, removed, and the caller compiles again. Entries are written
// under a temporary name and renamed, so a reader never sees half of one, and several
// processes (a server's GPU workers) may share a directory. The directory is kept under a
// size bound, least recently used entries going first.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tc::rtc {

struct DiskCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;    // no entry under the key's name
  uint64_t rejected = 0;  // an entry there that failed verification (removed)
  uint64_t stores = 0;
  uint64_t store_failures = 0;
  uint64_t evictions = 0;
};

class DiskCache {
 public:
  // Opens `dir`, creating it (and missing parents) with mode 0700. Refused unless it is a
  // directory (not a link to one) owned by this process's effective user that neither group
  // nor others can write. `max_bytes` bounds the entries' total size.
  static absl::StatusOr<std::unique_ptr<DiskCache>> Open(const std::string& dir, int64_t max_bytes);

  // The value stored under `key`, or nullopt (missing or rejected).
  std::optional<std::string> Load(const std::string& key);
  // Stores `value` under `key`, replacing what was there; then trims the directory.
  absl::Status Store(const std::string& key, const std::string& value);

  DiskCacheStats stats() const;
  const std::string& dir() const { return dir_; }
  // The file an entry of `key` has (for tests).
  std::string PathFor(const std::string& key) const;

  // Lowercase hex SHA-256 of `data`.
  static std::string Sha256Hex(const std::string& data);

 private:
  DiskCache(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  void Trim();
  void Count(uint64_t DiskCacheStats::*field);

  const std::string dir_;
  const int64_t max_bytes_;
  mutable std::mutex mu_;
  DiskCacheStats stats_;
};

}  // namespace tc::rtc
