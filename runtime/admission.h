// Requests admitted to one device and not yet finished: what placement balances on and the
// per-device limit bounds.
#pragma once

#include <atomic>
#include <cstdint>

namespace tc::runtime {

class AdmissionCount {
 public:
  // Admits one request unless `limit` are in flight already.
  bool TryAdmit(int limit) {
    int cur = in_flight_.load(std::memory_order_relaxed);
    while (cur < limit) {
      if (in_flight_.compare_exchange_weak(cur, cur + 1, std::memory_order_relaxed)) {
        admitted_.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
    }
    return false;
  }
  void Leave() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }
  int in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  // Requests admitted so far.
  int64_t admitted() const { return admitted_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int> in_flight_{0};
  std::atomic<int64_t> admitted_{0};
};

// One admitted request's slot, given back when it goes.
class Admission {
 public:
  Admission() = default;
  explicit Admission(AdmissionCount* count) : count_(count) {}
  Admission(Admission&& o) noexcept : count_(o.count_) { o.count_ = nullptr; }
  Admission& operator=(Admission&& o) noexcept {
    if (this != &o) {
      if (count_ != nullptr) count_->Leave();
      count_ = o.count_;
      o.count_ = nullptr;
    }
    return *this;
  }
  ~Admission() {
    if (count_ != nullptr) count_->Leave();
  }

 private:
  AdmissionCount* count_ = nullptr;
};

}  // namespace tc::runtime
