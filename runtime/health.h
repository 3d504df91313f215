// Whether a device still serves: the first error it cannot recover from (on a GPU, a sticky
// CUDA error after which its context is unusable) is kept, and everything after it is
// refused with that error's message. And the test-only fault a device injects on its n-th run.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>

#include "absl/status/status.h"

namespace tc::runtime {

class Health {
 public:
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // OK while usable; else the first error.
  absl::Status failure() const;
  // Records the first unrecoverable error; true for that first one only (the caller tells
  // whoever listens, with no lock held).
  bool MarkFailed(const absl::Status& why);
  // Usable again (a device whose worker process was replaced).
  void Reset();

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  absl::Status failure_;
};

// Test only: a fault asked for at the `at`-th run (0: never).
class FaultInjection {
 public:
  explicit FaultInjection(int64_t at) : at_(at) {}
  // Counts a run; true for the one run where the fault was asked for.
  bool Now() { return at_ > 0 && runs_.fetch_add(1, std::memory_order_relaxed) + 1 == at_; }

 private:
  const int64_t at_;
  std::atomic<int64_t> runs_{0};
};

}  // namespace tc::runtime
