#include "server/pipeline/host_buffers.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace tc::server {

struct HostBuffers::State {
  int64_t keep_bytes = 0;
  Pin pin;
  mutable std::mutex mu;
  // Idle buffers, the most recently returned at the back.
  std::list<Buffer*> idle;
  int64_t idle_bytes = 0;
  int64_t lent_bytes = 0;
  bool closed = false;
};

HostBuffers::HostBuffers(int64_t keep_bytes, Pin pin) : state_(std::make_shared<State>()) {
  state_->keep_bytes = std::max<int64_t>(keep_bytes, 0);
  state_->pin = std::move(pin);
}

HostBuffers::~HostBuffers() {
  std::list<Buffer*> idle;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->closed = true;
    idle.swap(state_->idle);
    state_->idle_bytes = 0;
  }
  for (Buffer* b : idle) Free(b);
}

void HostBuffers::Free(Buffer* b) {
  b->pin_.reset();  // Unpinned before it is unmapped.
  munmap(b->data_, static_cast<size_t>(b->size_));
  delete b;
}

int64_t HostBuffers::RoundedSize(int64_t n) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (n <= kMiB) return kMiB;
  // The power of two at or below n, then the first of its quarter steps at or above n.
  int64_t base = kMiB;
  while (base <= n / 2) base *= 2;
  const int64_t step = std::max(base / 4, kMiB);
  const int64_t rounded = (n + step - 1) / step * step;
  return rounded;
}

HostBuffers::Lease HostBuffers::Acquire(int64_t n) {
  if (n <= 0) return nullptr;
  const int64_t size = RoundedSize(n);
  if (size < n) return nullptr;  // (Overflowed.)
  Buffer* b = nullptr;
  std::shared_ptr<State> state = state_;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    // The most recently returned buffer of that size: the likeliest to be in the caches.
    for (auto it = state->idle.rbegin(); it != state->idle.rend(); ++it) {
      if ((*it)->size_ == size) {
        b = *it;
        state->idle.erase(std::next(it).base());
        state->idle_bytes -= size;
        break;
      }
    }
    if (b != nullptr) state->lent_bytes += size;
  }
  if (b == nullptr) {
    void* p = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    // Fewer pages to fault and to pin, where the kernel has huge ones to give.
    (void)madvise(p, static_cast<size_t>(size), MADV_HUGEPAGE);
    b = new Buffer();
    b->data_ = static_cast<std::byte*>(p);
    b->size_ = size;
    // Pinning touches every page; without a pin they are faulted in here, once, rather than
    // on the way of the first request that writes them.
    if (state->pin) b->pin_ = state->pin(p, size);
    if (b->pin_ == nullptr) std::memset(p, 0, static_cast<size_t>(size));
    std::lock_guard<std::mutex> lock(state->mu);
    state->lent_bytes += size;
  }
  return Lease(b, [state](Buffer* back) {
    std::vector<Buffer*> drop;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->lent_bytes -= back->size_;
      if (state->closed || back->size_ > state->keep_bytes) {
        drop.push_back(back);
      } else {
        state->idle.push_back(back);
        state->idle_bytes += back->size_;
        while (state->idle_bytes > state->keep_bytes) {
          Buffer* old = state->idle.front();
          state->idle.pop_front();
          state->idle_bytes -= old->size_;
          drop.push_back(old);
        }
      }
    }
    for (Buffer* d : drop) Free(d);
  });
}

int64_t HostBuffers::idle_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->idle_bytes;
}

int64_t HostBuffers::lent_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->lent_bytes;
}

grpc::Slice LeasedSlice(HostBuffers::Lease lease, size_t n) {
  auto* held = new HostBuffers::Lease(std::move(lease));
  return grpc::Slice((*held)->data(), n,
                     [](void* p) { delete static_cast<HostBuffers::Lease*>(p); }, held);
}

}  // namespace tc::server
