#include "runtime/memory_budget.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace tc::runtime {

absl::Status MemoryBudget::Charge(int64_t n, absl::Time deadline,
                                  const std::function<absl::Status()>& refusal) {
  if (n > limit_) return refusal();
  const absl::Time until = std::min(deadline, absl::Now() + wait_);
  std::unique_lock<std::mutex> lock(mu_);
  // Counted first, so concurrent requests never overshoot the budget together.
  while (in_use_.load(std::memory_order_relaxed) + n > limit_) {
    const absl::Time now = absl::Now();
    if (now >= until) return refusal();
    freed_.wait_for(lock, absl::ToChronoNanoseconds(until - now));
  }
  const int64_t used = in_use_.fetch_add(n, std::memory_order_relaxed) + n;
  if (used > peak_.load(std::memory_order_relaxed)) peak_.store(used, std::memory_order_relaxed);
  return absl::OkStatus();
}

void MemoryBudget::Uncharge(int64_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_use_.fetch_sub(n, std::memory_order_relaxed);
  }
  freed_.notify_all();
}

}  // namespace tc::runtime
