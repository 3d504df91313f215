#include "runtime/health.h"

namespace tc::runtime {

absl::Status Health::failure() const {
  if (!failed()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

bool Health::MarkFailed(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_.load(std::memory_order_relaxed)) return false;
  failure_ = why;
  failed_.store(true, std::memory_order_release);
  return true;
}

void Health::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  failure_ = absl::OkStatus();
  failed_.store(false, std::memory_order_release);
}

}  // namespace tc::runtime
