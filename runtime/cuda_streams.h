// A CUDA stream as the device's lane (decision 6): the stream with its pinned staging buffers,
// its kernels' error flag, slots for the results of the runs in flight, and the thread that
// waits for those runs in order and reports them.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "runtime/device.h"

namespace tc::runtime {
class CudaDevice;
}  // namespace tc::runtime

namespace tc::runtime::gpu {

// Outputs up to this size come back with the completion instead of a separate Read.
constexpr int64_t kReadBackBytes = 256 << 10;
// Runs in flight per stream, each with its own slot for results.
constexpr int kSlots = 8;

// Where one run's results land on the host (pinned), and the event that says they have.
struct Slot {
  int* host_error = nullptr;
  std::byte* read_back = nullptr;
  cudaEvent_t event = nullptr;
  // Device memory for one small run (inputs, flag, output): reused with the slot, so small
  // runs allocate nothing.
  std::byte* block = nullptr;
};

struct Completion {
  int slot;
  std::function<void(absl::Status)> done;
  std::string op;
  ReadBack read_back;
  // Where in the slot's buffer the read-back starts, and where the error flag landed.
  int64_t read_back_offset = 0;
  const int* error = nullptr;
};

// A stream with its staging buffers, error flag, result slots, and the thread that waits for
// its runs to complete (in order, as the stream runs them) and calls their `done`.
struct Stream {
  CudaDevice* device = nullptr;
  cudaStream_t stream = nullptr;
  // Two pinned buffers, so one fills while the other's copy runs; each with the event of its
  // last copy.
  std::byte* pinned[2] = {};
  cudaEvent_t done[2] = {};
  // The kernels' error flag: reset before and copied out after each run, in stream order.
  int* dev_error = nullptr;
  Slot slots[kSlots];
  // Guards the staging buffers and the order of what requests sharing the stream issue.
  std::mutex mu;
  std::atomic<int> users{0};
  // The staging buffer the next Write starts with: consecutive writes alternate.
  int next = 0;

  std::mutex slot_mu;
  std::condition_variable slot_freed;
  std::vector<int> free_slots;

  std::mutex wait_mu;
  std::condition_variable wait_cv;
  std::deque<std::unique_ptr<Completion>> pending;
  // pending.size(), readable without the lock: the waiter spins on it a little before it
  // sleeps, so that a run arriving soon after the last one is seen without a wake-up.
  std::atomic<int> pending_count{0};
  bool stop = false;
  std::thread waiter;
};

// Creates the stream, its staging buffers (`staging_bytes` each), flag and slots, and starts
// its waiter on device `index`. `device` is set by the device before any run.
absl::Status StartStream(Stream& s, int index, int64_t staging_bytes);
// Stops the waiter (after it has reported every run), then frees what StartStream made.
void StopStream(Stream& s);

// A free result slot of the stream, or -1 (without waiting) when all are in flight.
int TryAcquireSlot(Stream& s);
// A free result slot, waiting for one if all are in flight.
int AcquireSlot(Stream& s);
void ReleaseSlot(Stream& s, int k);
// Hands a run issued on the stream to its waiter.
void Enqueue(Stream& s, std::unique_ptr<Completion> c);

struct CudaLane final : Lane {
  explicit CudaLane(Stream* s) : stream(s) { s->users.fetch_add(1); }
  ~CudaLane() override { stream->users.fetch_sub(1); }
  Stream* stream;
};

}  // namespace tc::runtime::gpu
