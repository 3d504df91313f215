#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_env.h"
#include "runtime/cuda_device.h"

namespace tc::runtime {

namespace {

absl::Status CudaError(cudaError_t e, absl::string_view what) {
  return absl::InternalError(absl::StrCat("CUDA ", what, " failed: ", cudaGetErrorString(e)));
}

#define TC_CUDA_RETURN_IF_ERROR(expr, what)         \
  do {                                              \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess) \
      return CudaError(e_, what);                   \
  } while (0)

// In the device's methods: an error that leaves the context unusable also fails the device.
#define TC_CUDA_CHECK(expr, what)                   \
  do {                                              \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess) \
      return CudaFailure(e_, what);                 \
  } while (0)

// Errors after which every later call in the context fails the same way ("sticky" in the
// CUDA runtime's documentation): the process has to start over to use the GPU again.
bool IsSticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
      return true;
    default:
      return false;
  }
}

// What a test's injected fault runs: a trap, which the driver reports as a launch failure.
__global__ void InjectedFault() { __trap(); }

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

// A free result slot of the stream, or -1 (without waiting) when all are in flight.
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

// Waits for each run on the stream in turn, then reports it: the error flag, the read-back
// copied out of its slot, and `done`.
void WaitLoop(Stream& s, int device) {
  (void)cudaSetDevice(device);
  for (;;) {
    Completion* c;
    if (s.pending_count.load(std::memory_order_acquire) == 0) {
      const auto until = std::chrono::steady_clock::now() + kWaiterSpin;
      while (s.pending_count.load(std::memory_order_acquire) == 0 &&
             std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
      }
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

struct CudaLane final : Lane {
  explicit CudaLane(Stream* s) : stream(s) { s->users.fetch_add(1); }
  ~CudaLane() override { stream->users.fetch_sub(1); }
  Stream* stream;
};

}  // namespace

struct CudaDevice::Impl {
  int index = 0;
  int multiprocessors = 0;
  int64_t staging_bytes = 0;
  cudaMemPool_t pool = nullptr;
  // Allocations and frees are ordered on this stream; each allocation is waited for before
  // its memory is handed out, and frees come only after the host saw every use complete.
  cudaStream_t alloc_stream = nullptr;
  std::mutex alloc_mu;
  std::vector<std::unique_ptr<Stream>> streams;
  ~Impl() {
    (void)cudaSetDevice(index);
    for (auto& s : streams) {
      if (s->waiter.joinable()) {
        {
          std::lock_guard<std::mutex> lock(s->wait_mu);
          s->stop = true;
        }
        s->wait_cv.notify_all();
        s->waiter.join();
      }
    }
    for (auto& s : streams) {
      if (s->stream != nullptr) (void)cudaStreamSynchronize(s->stream);
      for (int i = 0; i < 2; ++i) {
        if (s->pinned[i] != nullptr) (void)cudaFreeHost(s->pinned[i]);
        if (s->done[i] != nullptr) (void)cudaEventDestroy(s->done[i]);
      }
      if (s->dev_error != nullptr) (void)cudaFree(s->dev_error);
      for (Slot& slot : s->slots) {
        if (slot.host_error != nullptr) (void)cudaFreeHost(slot.host_error);
        if (slot.read_back != nullptr) (void)cudaFreeHost(slot.read_back);
        if (slot.event != nullptr) (void)cudaEventDestroy(slot.event);
        if (slot.block != nullptr) (void)cudaFree(slot.block);
      }
      if (s->stream != nullptr) (void)cudaStreamDestroy(s->stream);
    }
    if (alloc_stream != nullptr) {
      (void)cudaStreamSynchronize(alloc_stream);
      (void)cudaStreamDestroy(alloc_stream);
    }
    if (pool != nullptr) (void)cudaMemPoolDestroy(pool);
  }
};

int CudaDevice::Count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // Clear the sticky "no device" error.
    return 0;
  }
  return n;
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(int index,
                                                               const DeviceOptions& options) {
  const int count = Count();
  if (index < 0 || index >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", index, " is not available (", count, " visible)"));
  }
  TC_CUDA_RETURN_IF_ERROR(cudaSetDevice(index), "cudaSetDevice");
  auto impl = std::make_unique<Impl>();
  impl->index = index;
  impl->staging_bytes = std::max<int64_t>(options.staging_bytes, 64 << 10);
  cudaDeviceProp prop{};
  TC_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  impl->multiprocessors = prop.multiProcessorCount;
  size_t free_bytes = 0, total_bytes = 0;
  TC_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const int64_t budget = options.memory_budget > 0
                             ? options.memory_budget
                             : static_cast<int64_t>(static_cast<double>(free_bytes) * 0.9);

  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = index;
  TC_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&impl->pool, &props), "cudaMemPoolCreate");
  // Keep freed memory in the pool up to the budget instead of returning it at every sync.
  uint64_t threshold = static_cast<uint64_t>(budget);
  TC_CUDA_RETURN_IF_ERROR(
      cudaMemPoolSetAttribute(impl->pool, cudaMemPoolAttrReleaseThreshold, &threshold),
      "cudaMemPoolSetAttribute");
  TC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->alloc_stream, cudaStreamNonBlocking),
                          "cudaStreamCreate");
  const int nstreams = std::max(options.streams, 1);
  for (int i = 0; i < nstreams; ++i) {
    auto s = std::make_unique<Stream>();
    TC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
                            "cudaStreamCreate");
    for (int b = 0; b < 2; ++b) {
      TC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&s->pinned[b], impl->staging_bytes),
                              "cudaMallocHost");
      TC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s->done[b], cudaEventDisableTiming),
                              "cudaEventCreate");
    }
    TC_CUDA_RETURN_IF_ERROR(cudaMalloc(&s->dev_error, sizeof(int)), "cudaMalloc");
    for (int k = 0; k < kSlots; ++k) {
      Slot& slot = s->slots[k];
      TC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&slot.host_error, sizeof(int)), "cudaMallocHost");
      TC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&slot.read_back, kReadBackBytes), "cudaMallocHost");
      TC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&slot.event, cudaEventDisableTiming),
                              "cudaEventCreate");
      TC_CUDA_RETURN_IF_ERROR(cudaMalloc(&slot.block, kReadBackBytes), "cudaMalloc");
      s->free_slots.push_back(k);
    }
    Stream* raw = s.get();
    s->waiter = std::thread([raw, index] { WaitLoop(*raw, index); });
    impl->streams.push_back(std::move(s));
  }

  DeviceInfo info;
  info.kind = "cuda";
  info.name = prop.name;
  info.index = index;
  info.total_memory = static_cast<int64_t>(total_bytes);
  info.multiprocessors = prop.multiProcessorCount;
  info.streams = nstreams;
  for (unsigned char byte : prop.uuid.bytes) {
    absl::StrAppend(&info.uuid, absl::Hex(byte, absl::kZeroPad2));
  }
  return std::unique_ptr<CudaDevice>(new CudaDevice(std::move(info), budget, options, std::move(impl)));
}

CudaDevice::CudaDevice(DeviceInfo info, int64_t budget, const DeviceOptions& options,
                       std::unique_ptr<Impl> impl)
    : Device(std::move(info), budget, options), impl_(std::move(impl)) {
  // Before any run: the waiters read it only after a run completes.
  for (auto& s : impl_->streams) s->device = this;
}

absl::Status CudaDevice::CudaFailure(int error, absl::string_view what) {
  const auto e = static_cast<cudaError_t>(error);
  absl::Status st = CudaError(e, what);
  if (IsSticky(e)) MarkFailed(st);
  return st;
}

CudaDevice::~CudaDevice() = default;

std::unique_ptr<Lane> CudaDevice::AcquireLane() {
  Stream* best = impl_->streams.front().get();
  for (auto& s : impl_->streams) {
    if (s->users.load() < best->users.load()) best = s.get();
  }
  return std::make_unique<CudaLane>(best);
}

absl::StatusOr<std::byte*> CudaDevice::RawAllocate(int64_t bytes, bool zero, Lane* lane,
                                                    void** tag) {
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  // Out of memory is the caller's RESOURCE_EXHAUSTED; anything else (a context broken by an
  // earlier fault answers every call with that fault) is a device failure.
  const auto allocated = [&](cudaError_t e) -> absl::Status {
    if (e == cudaSuccess) return absl::OkStatus();
    (void)cudaGetLastError();
    if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError("out of memory");
    return CudaFailure(e, "cudaMallocFromPoolAsync");
  };
  void* p = nullptr;
  if (lane != nullptr) {
    // In the lane's order: ready for everything issued on it afterwards, no wait here.
    // Stream operations are thread-safe; this one may land between another request's, which
    // is harmless.
    Stream& s = *static_cast<CudaLane*>(lane)->stream;
    if (absl::Status st = allocated(cudaMallocFromPoolAsync(
            &p, static_cast<size_t>(bytes), impl_->pool, s.stream));
        !st.ok()) {
      return st;
    }
    if (zero) (void)cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), s.stream);
    // Freed on the same stream, after everything issued on it before.
    *tag = &s;
    return static_cast<std::byte*>(p);
  }
  std::lock_guard<std::mutex> lock(impl_->alloc_mu);
  if (absl::Status st = allocated(cudaMallocFromPoolAsync(
          &p, static_cast<size_t>(bytes), impl_->pool, impl_->alloc_stream));
      !st.ok()) {
    return st;
  }
  if (zero) (void)cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), impl_->alloc_stream);
  if (cudaError_t e = cudaStreamSynchronize(impl_->alloc_stream); e != cudaSuccess) {
    (void)cudaFreeAsync(p, impl_->alloc_stream);
    return CudaFailure(e, "cudaStreamSynchronize");
  }
  return static_cast<std::byte*>(p);
}

void CudaDevice::RawFree(std::byte* p, int64_t /*bytes*/, void* tag) {
  (void)cudaSetDevice(impl_->index);
  // Every use of the memory has completed as far as the host knows (the last reference is
  // gone), except perhaps work on the stream it was allocated on: free it in that order.
  // No lock: freeing may be the last thing a completion does, and must never wait on a
  // thread that waits for completions.
  if (tag != nullptr) {
    (void)cudaFreeAsync(p, static_cast<Stream*>(tag)->stream);
    return;
  }
  (void)cudaFreeAsync(p, impl_->alloc_stream);
}

absl::Status CudaDevice::Write(Lane& lane, Storage& dst, int64_t offset, const void* src,
                               int64_t n) {
  if (offset < 0 || n < 0 || offset > dst.bytes() - n) {
    return absl::OutOfRangeError("write past the end of the storage");
  }
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  std::lock_guard<std::mutex> lock(s.mu);
  const auto* from = static_cast<const std::byte*>(src);
  const int64_t chunk = impl_->staging_bytes;
  int& b = s.next;
  for (int64_t done = 0; done < n; done += chunk, b ^= 1) {
    const int64_t len = std::min(chunk, n - done);
    // The buffer's previous copy must have left it before it is filled again.
    TC_CUDA_CHECK(cudaEventSynchronize(s.done[b]), "cudaEventSynchronize");
    std::memcpy(s.pinned[b], from + done, static_cast<size_t>(len));
    TC_CUDA_CHECK(cudaMemcpyAsync(dst.data() + offset + done, s.pinned[b],
                                            static_cast<size_t>(len), cudaMemcpyHostToDevice,
                                            s.stream),
                            "cudaMemcpyAsync to device");
    TC_CUDA_CHECK(cudaEventRecord(s.done[b], s.stream), "cudaEventRecord");
  }
  // `src` has been copied into pinned memory: the caller may reuse it. The copies themselves
  // complete in stream order.
  return absl::OkStatus();
}

absl::Status CudaDevice::WritePieces(Lane& lane, Storage& dst, int64_t offset,
                                     const std::vector<HostPiece>& pieces) {
  int64_t n = 0;
  for (const HostPiece& p : pieces) n += p.bytes;
  if (offset < 0 || n < 0 || offset > dst.bytes() - n) {
    return absl::OutOfRangeError("write past the end of the storage");
  }
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  std::lock_guard<std::mutex> lock(s.mu);
  const int64_t chunk = impl_->staging_bytes;
  int& b = s.next;
  // The pieces are packed into one staging buffer after another; each full buffer (and the
  // last one) goes to the device as one copy.
  int64_t filled = 0;
  int64_t done = 0;
  auto flush = [&]() -> absl::Status {
    TC_CUDA_CHECK(cudaMemcpyAsync(dst.data() + offset + done, s.pinned[b],
                                  static_cast<size_t>(filled), cudaMemcpyHostToDevice, s.stream),
                  "cudaMemcpyAsync to device");
    TC_CUDA_CHECK(cudaEventRecord(s.done[b], s.stream), "cudaEventRecord");
    done += filled;
    filled = 0;
    b ^= 1;
    return absl::OkStatus();
  };
  for (const HostPiece& p : pieces) {
    const auto* from = static_cast<const std::byte*>(p.data);
    for (int64_t at = 0; at < p.bytes;) {
      if (filled == 0) {
        // The buffer's previous copy must have left it before it is filled again.
        TC_CUDA_CHECK(cudaEventSynchronize(s.done[b]), "cudaEventSynchronize");
      }
      const int64_t len = std::min(chunk - filled, p.bytes - at);
      std::memcpy(static_cast<std::byte*>(s.pinned[b]) + filled, from + at,
                  static_cast<size_t>(len));
      filled += len;
      at += len;
      if (filled == chunk) {
        if (auto st = flush(); !st.ok()) return st;
      }
    }
  }
  if (filled > 0) return flush();
  return absl::OkStatus();
}

std::shared_ptr<void> CudaDevice::PinHost(void* p, int64_t n, bool read_only) {
  if (cudaSetDevice(impl_->index) != cudaSuccess) return nullptr;
  // Portable: pinned for every device's context, so one pin serves them all.
  unsigned flags = cudaHostRegisterPortable;
  if (read_only) flags |= cudaHostRegisterReadOnly;
  if (cudaHostRegister(p, static_cast<size_t>(n), flags) != cudaSuccess) {
    (void)cudaGetLastError();  // Not sticky: copies stage instead.
    return nullptr;
  }
  return std::shared_ptr<void>(p, [](void* q) { (void)cudaHostUnregister(q); });
}

absl::StatusOr<SharedDeviceMemory> CudaDevice::OpenIpc(absl::string_view handle) {
  cudaIpcMemHandle_t h;
  if (handle.size() != sizeof(h.reserved)) {
    return absl::InvalidArgumentError(absl::StrCat("a CUDA IPC handle has ", sizeof(h.reserved),
                                                   " bytes, not ", handle.size()));
  }
  std::memcpy(h.reserved, handle.data(), sizeof(h.reserved));
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  void* p = nullptr;
  if (cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
      e != cudaSuccess) {
    (void)cudaGetLastError();  // A bad handle is the caller's error, not the device's.
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open the CUDA IPC handle on device ", impl_->index, ": ",
                     cudaGetErrorString(e), " (is the memory still allocated?)"));
  }
  const int index = impl_->index;
  std::shared_ptr<void> closer(p, [index](void* q) {
    (void)cudaSetDevice(index);
    (void)cudaIpcCloseMemHandle(q);
  });
  // The allocation's true extent, from the driver: what the caller says is not trusted, and a
  // kernel that strayed past it would fail the whole device.
  // (Through the runtime's entry point: linking libcuda would keep the server from starting
  // on machines without a driver, where it runs the CPU backend.)
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CUdeviceptr base = 0;
  size_t bytes = 0;
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr ||
      reinterpret_cast<GetAddressRange>(fn)(&base, &bytes, reinterpret_cast<CUdeviceptr>(p)) !=
          CUDA_SUCCESS ||
      base != reinterpret_cast<CUdeviceptr>(p)) {
    (void)cudaGetLastError();
    return absl::InvalidArgumentError("cannot find the extent of the shared CUDA allocation");
  }
  return SharedDeviceMemory{static_cast<std::byte*>(p), static_cast<int64_t>(bytes),
                            std::move(closer)};
}

absl::Status CudaDevice::WritePinned(Lane& lane, Storage& dst, int64_t offset, const void* src,
                                     int64_t n) {
  if (offset < 0 || n < 0 || offset > dst.bytes() - n) {
    return absl::OutOfRangeError("write past the end of the storage");
  }
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  std::lock_guard<std::mutex> lock(s.mu);
  TC_CUDA_CHECK(cudaMemcpyAsync(dst.data() + offset, src, static_cast<size_t>(n),
                                cudaMemcpyHostToDevice, s.stream),
                "cudaMemcpyAsync to device");
  return absl::OkStatus();
}

absl::Status CudaDevice::Sync(Lane& lane) {
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  TC_CUDA_CHECK(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
  return absl::OkStatus();
}

int64_t CudaDevice::max_read_back() const { return kReadBackBytes; }

absl::Status CudaDevice::Read(Lane& lane, const Storage& src, int64_t offset, void* dst,
                              int64_t n) {
  if (offset < 0 || n < 0 || offset > src.bytes() - n) {
    return absl::OutOfRangeError("read past the end of the storage");
  }
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  std::lock_guard<std::mutex> lock(s.mu);
  auto* to = static_cast<std::byte*>(dst);
  const int64_t chunk = impl_->staging_bytes;
  const int64_t chunks = (n + chunk - 1) / chunk;
  auto issue = [&](int64_t c) -> absl::Status {
    const int64_t at = c * chunk;
    const int64_t len = std::min(chunk, n - at);
    TC_CUDA_CHECK(cudaMemcpyAsync(s.pinned[c & 1], src.data() + offset + at,
                                            static_cast<size_t>(len), cudaMemcpyDeviceToHost,
                                            s.stream),
                            "cudaMemcpyAsync to host");
    TC_CUDA_CHECK(cudaEventRecord(s.done[c & 1], s.stream), "cudaEventRecord");
    return absl::OkStatus();
  };
  // Two copies in flight; each buffer is drained to `dst` while the other one fills.
  for (int64_t c = 0; c < std::min<int64_t>(chunks, 2); ++c) {
    if (auto st = issue(c); !st.ok()) return st;
  }
  for (int64_t c = 0; c < chunks; ++c) {
    TC_CUDA_CHECK(cudaEventSynchronize(s.done[c & 1]), "cudaEventSynchronize");
    const int64_t at = c * chunk;
    std::memcpy(to + at, s.pinned[c & 1], static_cast<size_t>(std::min(chunk, n - at)));
    if (c + 2 < chunks) {
      if (auto st = issue(c + 2); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

void CudaDevice::Run(Lane& lane, const PreparedOp& op, std::vector<TensorView> inputs,
                     std::byte* out, std::function<void(absl::Status)> done,
                     ReadBack read_back) {
  if ((read_back.bytes > kReadBackBytes && !read_back.pinned) || read_back.bytes < 0) {
    done(absl::InternalError("read-back larger than the device's read-back buffer"));
    return;
  }
  if (op.plan.numel == 0) {
    done(absl::OkStatus());
    return;
  }
  if (failed()) {
    done(health());
    return;
  }
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  auto enqueue = [&]() -> absl::Status {
    TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
    // A slot for this run's results, taken before the stream's lock: one frees up as the
    // waiter reports earlier runs, and the waiter never needs that lock.
    const int slot_index = AcquireSlot(s);
    Slot& slot = s.slots[slot_index];
    char* base[kMaxOperands] = {};
    OperandBases(op.plan, out, inputs, base);
    auto issue = [&]() -> absl::Status {
      // Requests sharing the stream must not interleave their flag resets and launches.
      std::lock_guard<std::mutex> lock(s.mu);
      // The flag is reset, set by the kernel and copied out in stream order.
      TC_CUDA_CHECK(cudaMemsetAsync(s.dev_error, 0, sizeof(int), s.stream),
                              "cudaMemsetAsync");
      const cuda::LaunchEnv env{impl_->multiprocessors, s.stream, s.dev_error, nullptr};
      if (InjectFaultNow()) InjectedFault<<<1, 1, 0, s.stream>>>();
      if (auto st = cuda::LaunchOp(op, base, env); !st.ok()) return st;
      TC_CUDA_CHECK(cudaMemcpyAsync(slot.host_error, s.dev_error, sizeof(int),
                                              cudaMemcpyDeviceToHost, s.stream),
                              "cudaMemcpyAsync to host");
      if (read_back.bytes > 0) {
        // Pinned host memory takes the copy directly; other memory through the slot's buffer.
        void* to = read_back.pinned ? read_back.host : slot.read_back;
        TC_CUDA_CHECK(cudaMemcpyAsync(to, out,
                                                static_cast<size_t>(read_back.bytes),
                                                cudaMemcpyDeviceToHost, s.stream),
                                "cudaMemcpyAsync to host");
      }
      TC_CUDA_CHECK(cudaEventRecord(slot.event, s.stream), "cudaEventRecord");
      return absl::OkStatus();
    };
    if (absl::Status st = issue(); !st.ok()) {
      ReleaseSlot(s, slot_index);
      return st;
    }
    Enqueue(s, std::make_unique<Completion>(Completion{slot_index, std::move(done),
                                                       op.op->spec.name, read_back, 0,
                                                       slot.host_error}));
    return absl::OkStatus();
  };
  if (absl::Status st = enqueue(); !st.ok()) done(std::move(st));
}

int64_t CudaDevice::max_small_bytes() const { return kReadBackBytes; }

namespace {
constexpr int64_t Align256(int64_t n) { return (n + 255) & ~int64_t{255}; }
}  // namespace

bool CudaDevice::TryRunSmall(Lane& lane, const PreparedOp& op,
                             const std::vector<TensorView>& host_inputs, std::byte* host_out,
                             std::function<void(absl::Status)>& done) {
  const Plan& plan = op.plan;
  // One block on the device and one slot buffer on the host: [inputs... | flag | output].
  // The flag travels up as a zero with the inputs and comes back with the output: one copy
  // each way.
  int64_t in_bytes = 0;
  for (const TensorView& v : host_inputs) in_bytes += Align256(v.storage_bytes);
  const int64_t flag_at = in_bytes;
  const int64_t out_at = flag_at + 256;
  const int64_t total = out_at + plan.out_storage_bytes;
  if (total > kReadBackBytes || plan.numel == 0 || failed()) return false;
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  const int slot_index = TryAcquireSlot(s);
  if (slot_index < 0) return false;
  Slot& slot = s.slots[slot_index];
  // The slot's own device block: free like the slot, since its last run has been reported.
  std::byte* dev = slot.block;
  const std::byte* dev_inputs[kMaxOperands - 1] = {};
  int64_t at = 0;
  for (size_t i = 0; i < host_inputs.size(); ++i) {
    // The slot's buffer is free: its last run has been reported. The upload out of it comes
    // before the read-back into it on the stream.
    std::memcpy(slot.read_back + at, host_inputs[i].data,
                static_cast<size_t>(host_inputs[i].storage_bytes));
    dev_inputs[i] = dev + at;
    at += Align256(host_inputs[i].storage_bytes);
  }
  char* base[kMaxOperands] = {};
  OperandBases(plan, dev + out_at, absl::MakeConstSpan(dev_inputs, host_inputs.size()), base);
  std::memset(slot.read_back + flag_at, 0, sizeof(int));
  auto issue = [&]() -> absl::Status {
    TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
    std::lock_guard<std::mutex> lock(s.mu);
    TC_CUDA_CHECK(cudaMemcpyAsync(dev, slot.read_back,
                                            static_cast<size_t>(flag_at + sizeof(int)),
                                            cudaMemcpyHostToDevice, s.stream),
                            "cudaMemcpyAsync to device");
    if (plan.out_has_gaps) {
      // What lies between the output's elements reads as zeros.
      TC_CUDA_CHECK(cudaMemsetAsync(dev + out_at, 0,
                                              static_cast<size_t>(plan.out_storage_bytes),
                                              s.stream),
                              "cudaMemsetAsync");
    }
    const cuda::LaunchEnv env{impl_->multiprocessors, s.stream,
                              reinterpret_cast<int*>(dev + flag_at), nullptr};
    if (InjectFaultNow()) InjectedFault<<<1, 1, 0, s.stream>>>();
    if (auto st = cuda::LaunchOp(op, base, env); !st.ok()) return st;
    TC_CUDA_CHECK(cudaMemcpyAsync(slot.read_back + flag_at, dev + flag_at,
                                            static_cast<size_t>(total - flag_at),
                                            cudaMemcpyDeviceToHost, s.stream),
                            "cudaMemcpyAsync to host");
    TC_CUDA_CHECK(cudaEventRecord(slot.event, s.stream), "cudaEventRecord");
    return absl::OkStatus();
  };
  if (absl::Status st = issue(); !st.ok()) {
    ReleaseSlot(s, slot_index);
    done(std::move(st));
    return true;
  }
  Enqueue(s, std::make_unique<Completion>(Completion{
                 slot_index, std::move(done), op.op->spec.name,
                 ReadBack{host_out, plan.out_storage_bytes}, out_at,
                 reinterpret_cast<const int*>(slot.read_back + flag_at)}));
  return true;
}

}  // namespace tc::runtime
