// A device's memory budget: the bytes it may hand out, those in use and the peak. A charge
// that does not fit waits a while for others to give bytes back, then is refused.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tc::runtime {

class MemoryBudget {
 public:
  MemoryBudget(int64_t limit, absl::Duration wait) : limit_(limit), wait_(wait) {}

  // Counts `n` bytes in use, waiting until `deadline` (at most the budget's wait) for room;
  // past it, the error `refusal` makes.
  absl::Status Charge(int64_t n, absl::Time deadline, const std::function<absl::Status()>& refusal);
  void Uncharge(int64_t n);

  int64_t limit() const { return limit_; }
  int64_t in_use() const { return in_use_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  const int64_t limit_;
  const absl::Duration wait_;
  std::atomic<int64_t> in_use_{0};
  std::atomic<int64_t> peak_{0};
  std::mutex mu_;
  std::condition_variable freed_;
};

}  // namespace tc::runtime
