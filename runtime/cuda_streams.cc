#include "runtime/cuda_streams.h"

#include <atomic>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/cuda_device.h"
#include "runtime/cuda_errors.h"

namespace tc::runtime::gpu {

int TryAcquireSlot(Stream& s) {
  std::lock_guard<std::mutex> lock(s.slot_mu);
  if (s.free_slots.empty()) return -1;
  const int k = s.free_slots.back();
  s.free_slots.pop_back();
  return k;
}

int AcquireSlot(Stream& s) {
  std::unique_lock<std::mutex> lock(s.slot_mu);
  s.slot_freed.wait(lock, [&] { return !s.free_slots.empty(); });
  const int k = s.free_slots.back();
  s.free_slots.pop_back();
  return k;
}

void ReleaseSlot(Stream& s, int k) {
  {
    std::lock_guard<std::mutex> lock(s.slot_mu);
    s.free_slots.push_back(k);
  }
  s.slot_freed.notify_one();
}

void Enqueue(Stream& s, std::unique_ptr<Completion> c) {
  {
    std::lock_guard<std::mutex> lock(s.wait_mu);
    s.pending.push_back(std::move(c));
    s.pending_count.fetch_add(1, std::memory_order_release);
  }
  s.wait_cv.notify_one();
}

namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// How long an idle waiter keeps looking for new runs before it sleeps, and how long it
// polls a run's event before it lets the driver put it to sleep.
constexpr auto kWaiterSpin = std::chrono::microseconds(2000);
constexpr auto kPollFor = std::chrono::microseconds(1000);
// At most this many idle waiters spin at once, over every stream of every device: each spinning
// one keeps a core busy, and with several GPUs (a waiter per stream each) the rest would take
// the cores that gRPC's and the request pool's threads need. The others sleep at once.
constexpr int kMaxSpinning = 4;
std::atomic<int> spinning{0};

// Waits for each run on the stream in turn, then reports it: the error flag, the read-back
// copied out of its slot, and `done`.
void WaitLoop(Stream& s, int device) {
  (void)cudaSetDevice(device);
  for (;;) {
    Completion* c;
    if (s.pending_count.load(std::memory_order_acquire) == 0) {
      if (spinning.fetch_add(1, std::memory_order_relaxed) < kMaxSpinning) {
        const auto until = std::chrono::steady_clock::now() + kWaiterSpin;
        while (s.pending_count.load(std::memory_order_acquire) == 0 &&
               std::chrono::steady_clock::now() < until) {
          std::this_thread::yield();
        }
      }
      spinning.fetch_sub(1, std::memory_order_relaxed);
    }
    {
      std::unique_lock<std::mutex> lock(s.wait_mu);
      s.wait_cv.wait(lock, [&] { return s.stop || !s.pending.empty(); });
      if (s.pending.empty()) return;
      c = s.pending.front().get();
    }
    Slot& slot = s.slots[c->slot];
    auto outcome = [&]() -> absl::Status {
      // Small runs finish within microseconds: poll for those, then sleep in the driver.
      const auto until = std::chrono::steady_clock::now() + kPollFor;
      cudaError_t e;
      while ((e = cudaEventQuery(slot.event)) == cudaErrorNotReady &&
             std::chrono::steady_clock::now() < until) {
        // About a microsecond between queries, so the poll does not crowd the driver's lock
        // that threads submitting work need too.
        for (int k = 0; k < 64; ++k) CpuRelax();
      }
      if (e == cudaErrorNotReady) e = cudaEventSynchronize(slot.event);
      if (e != cudaSuccess) return s.device->CudaFailure(e, "kernel");
      if (*c->error != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("integer division by zero in '", c->op, "'"));
      }
      if (c->read_back.bytes > 0 && !c->read_back.pinned) {
        std::memcpy(c->read_back.host, slot.read_back + c->read_back_offset,
                    static_cast<size_t>(c->read_back.bytes));
      }
      return absl::OkStatus();
    };
    absl::Status status = outcome();
    ReleaseSlot(s, c->slot);
    std::unique_ptr<Completion> owned;
    {
      std::lock_guard<std::mutex> lock(s.wait_mu);
      owned = std::move(s.pending.front());
      s.pending.pop_front();
      s.pending_count.fetch_sub(1, std::memory_order_release);
    }
    owned->done(std::move(status));
  }
}

}  // namespace

absl::Status StartStream(Stream& s, int index, int64_t staging_bytes) {
  TC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking),
                          "cudaStreamCreate");
  for (int b = 0; b < 2; ++b) {
    TC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&s.pinned[b], staging_bytes), "cudaMallocHost");
    TC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.done[b], cudaEventDisableTiming),
                            "cudaEventCreate");
  }
  TC_CUDA_RETURN_IF_ERROR(cudaMalloc(&s.dev_error, sizeof(int)), "cudaMalloc");
  for (int k = 0; k < kSlots; ++k) {
    Slot& slot = s.slots[k];
    TC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&slot.host_error, sizeof(int)), "cudaMallocHost");
    TC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&slot.read_back, kReadBackBytes), "cudaMallocHost");
    TC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&slot.event, cudaEventDisableTiming),
                            "cudaEventCreate");
    TC_CUDA_RETURN_IF_ERROR(cudaMalloc(&slot.block, kReadBackBytes), "cudaMalloc");
    s.free_slots.push_back(k);
  }
  Stream* raw = &s;
  s.waiter = std::thread([raw, index] { WaitLoop(*raw, index); });
  return absl::OkStatus();
}

void StopStream(Stream& s) {
  if (s.waiter.joinable()) {
    {
      std::lock_guard<std::mutex> lock(s.wait_mu);
      s.stop = true;
    }
    s.wait_cv.notify_all();
    s.waiter.join();
  }
  if (s.stream != nullptr) (void)cudaStreamSynchronize(s.stream);
  for (int i = 0; i < 2; ++i) {
    if (s.pinned[i] != nullptr) (void)cudaFreeHost(s.pinned[i]);
    if (s.done[i] != nullptr) (void)cudaEventDestroy(s.done[i]);
  }
  if (s.dev_error != nullptr) (void)cudaFree(s.dev_error);
  for (Slot& slot : s.slots) {
    if (slot.host_error != nullptr) (void)cudaFreeHost(slot.host_error);
    if (slot.read_back != nullptr) (void)cudaFreeHost(slot.read_back);
    if (slot.event != nullptr) (void)cudaEventDestroy(slot.event);
    if (slot.block != nullptr) (void)cudaFree(slot.block);
  }
  if (s.stream != nullptr) (void)cudaStreamDestroy(s.stream);
}

}  // namespace tc::runtime::gpu
