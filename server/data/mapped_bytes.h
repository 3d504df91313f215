// The server-wide cap on memory its callers share with it: memfd regions, CUDA IPC memory and
// KServe v2 system shared memory all count their registered bytes here, from the moment the
// server opens or maps them until the last request using them lets go. Registered bytes bound
// what the server can be made to touch on a caller's behalf (a sparse memfd's holes become
// pages charged to the server when it reads or writes them), and the address space its
// mappings take, so the cap is derived from the machine's memory (see main.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tc::server {

class MappedBytes {
 public:
  explicit MappedBytes(int64_t limit) : limit_(limit) {}
  MappedBytes(const MappedBytes&) = delete;
  MappedBytes& operator=(const MappedBytes&) = delete;

  // Counts `bytes` until the returned charge goes; RESOURCE_EXHAUSTED, naming `what`, when
  // they would take the total past the limit. The charge must not outlive this object.
  absl::StatusOr<std::shared_ptr<void>> Charge(int64_t bytes, absl::string_view what) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (bytes < 0 || bytes > limit_ - used_) {
        return absl::ResourceExhaustedError(
            absl::StrCat(what, ": ", bytes,
                         " bytes would take the shared memory this server holds past its "
                         "limit of ",
                         limit_, " bytes (", used_,
                         " in use by all callers; "
                         "--shared_memory_limit_bytes)"));
      }
      used_ += bytes;
    }
    // A non-null pointer whose deleter gives the bytes back.
    return std::shared_ptr<void>(this, [bytes](MappedBytes* self) {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->used_ -= bytes;
    });
  }

  int64_t limit() const { return limit_; }
  int64_t used() const {
    std::lock_guard<std::mutex> lock(mu_);
    return used_;
  }

 private:
  const int64_t limit_;
  mutable std::mutex mu_;
  int64_t used_ = 0;
};

}  // namespace tc::server
