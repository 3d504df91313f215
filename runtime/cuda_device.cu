#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/thread_pool.h"
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

// A stream with its staging buffers and error flag.
struct Stream {
  cudaStream_t stream = nullptr;
  // Two pinned buffers, so one fills while the other's copy runs; each with the event of its
  // last copy.
  std::byte* pinned[2] = {};
  cudaEvent_t done[2] = {};
  // The kernels' error flag (device) and where it lands on the host (pinned).
  int* dev_error = nullptr;
  int* host_error = nullptr;
  // Small outputs land here (pinned) and the completion copies them out.
  std::byte* read_back = nullptr;
  // Staging buffers and the error flag belong to one request at a time.
  std::mutex mu;
  std::atomic<int> users{0};
  // The staging buffer the next Write starts with: consecutive writes alternate.
  int next = 0;
};

// Outputs up to this size come back with the completion instead of a separate Read.
constexpr int64_t kReadBackBytes = 256 << 10;

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
  // Runs `done` callbacks: CUDA host functions must not call CUDA themselves.
  std::unique_ptr<ThreadPool> completions;

  ~Impl() {
    (void)cudaSetDevice(index);
    for (auto& s : streams) {
      if (s->stream != nullptr) (void)cudaStreamSynchronize(s->stream);
      for (int i = 0; i < 2; ++i) {
        if (s->pinned[i] != nullptr) (void)cudaFreeHost(s->pinned[i]);
        if (s->done[i] != nullptr) (void)cudaEventDestroy(s->done[i]);
      }
      if (s->dev_error != nullptr) (void)cudaFree(s->dev_error);
      if (s->host_error != nullptr) (void)cudaFreeHost(s->host_error);
      if (s->read_back != nullptr) (void)cudaFreeHost(s->read_back);
      if (s->stream != nullptr) (void)cudaStreamDestroy(s->stream);
    }
    completions.reset();
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
    TC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&s->host_error, sizeof(int)), "cudaMallocHost");
    TC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&s->read_back, kReadBackBytes), "cudaMallocHost");
    impl->streams.push_back(std::move(s));
  }
  impl->completions = std::make_unique<ThreadPool>(1);

  DeviceInfo info;
  info.kind = "cuda";
  info.name = prop.name;
  info.index = index;
  info.total_memory = static_cast<int64_t>(total_bytes);
  info.multiprocessors = prop.multiProcessorCount;
  info.streams = nstreams;
  return std::unique_ptr<CudaDevice>(new CudaDevice(std::move(info), budget, options, std::move(impl)));
}

CudaDevice::CudaDevice(DeviceInfo info, int64_t budget, const DeviceOptions& options,
                       std::unique_ptr<Impl> impl)
    : Device(std::move(info), budget, options.memory_wait), impl_(std::move(impl)) {}

CudaDevice::~CudaDevice() = default;

std::unique_ptr<Lane> CudaDevice::AcquireLane() {
  Stream* best = impl_->streams.front().get();
  for (auto& s : impl_->streams) {
    if (s->users.load() < best->users.load()) best = s.get();
  }
  return std::make_unique<CudaLane>(best);
}

std::byte* CudaDevice::RawAllocate(int64_t bytes, bool zero, Lane* lane, void** tag) {
  if (cudaSetDevice(impl_->index) != cudaSuccess) return nullptr;
  void* p = nullptr;
  if (lane != nullptr) {
    // In the lane's order: ready for everything issued on it afterwards, no wait here.
    Stream& s = *static_cast<CudaLane*>(lane)->stream;
    std::lock_guard<std::mutex> lock(s.mu);
    if (cudaMallocFromPoolAsync(&p, static_cast<size_t>(bytes), impl_->pool, s.stream) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    if (zero) (void)cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), s.stream);
    // Freed on the same stream, after everything issued on it before.
    *tag = &s;
    return static_cast<std::byte*>(p);
  }
  std::lock_guard<std::mutex> lock(impl_->alloc_mu);
  if (cudaMallocFromPoolAsync(&p, static_cast<size_t>(bytes), impl_->pool,
                              impl_->alloc_stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (zero) (void)cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), impl_->alloc_stream);
  if (cudaStreamSynchronize(impl_->alloc_stream) != cudaSuccess) {
    (void)cudaFreeAsync(p, impl_->alloc_stream);
    return nullptr;
  }
  return static_cast<std::byte*>(p);
}

void CudaDevice::RawFree(std::byte* p, int64_t /*bytes*/, void* tag) {
  (void)cudaSetDevice(impl_->index);
  // Every use of the memory has completed as far as the host knows (the last reference is
  // gone), except perhaps work on the stream it was allocated on: free it in that order.
  if (tag != nullptr) {
    Stream& s = *static_cast<Stream*>(tag);
    std::lock_guard<std::mutex> lock(s.mu);
    (void)cudaFreeAsync(p, s.stream);
    return;
  }
  std::lock_guard<std::mutex> lock(impl_->alloc_mu);
  (void)cudaFreeAsync(p, impl_->alloc_stream);
}

absl::Status CudaDevice::Write(Lane& lane, Storage& dst, int64_t offset, const void* src,
                               int64_t n) {
  if (offset < 0 || n < 0 || offset > dst.bytes() - n) {
    return absl::OutOfRangeError("write past the end of the storage");
  }
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->index), "cudaSetDevice");
  std::lock_guard<std::mutex> lock(s.mu);
  const auto* from = static_cast<const std::byte*>(src);
  const int64_t chunk = impl_->staging_bytes;
  int& b = s.next;
  for (int64_t done = 0; done < n; done += chunk, b ^= 1) {
    const int64_t len = std::min(chunk, n - done);
    // The buffer's previous copy must have left it before it is filled again.
    TC_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.done[b]), "cudaEventSynchronize");
    std::memcpy(s.pinned[b], from + done, static_cast<size_t>(len));
    TC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.data() + offset + done, s.pinned[b],
                                            static_cast<size_t>(len), cudaMemcpyHostToDevice,
                                            s.stream),
                            "cudaMemcpyAsync to device");
    TC_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.done[b], s.stream), "cudaEventRecord");
  }
  // `src` has been copied into pinned memory: the caller may reuse it. The copies themselves
  // complete in stream order.
  return absl::OkStatus();
}

absl::Status CudaDevice::Sync(Lane& lane) {
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->index), "cudaSetDevice");
  TC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
  return absl::OkStatus();
}

int64_t CudaDevice::max_read_back() const { return kReadBackBytes; }

absl::Status CudaDevice::Read(Lane& lane, const Storage& src, int64_t offset, void* dst,
                              int64_t n) {
  if (offset < 0 || n < 0 || offset > src.bytes() - n) {
    return absl::OutOfRangeError("read past the end of the storage");
  }
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->index), "cudaSetDevice");
  std::lock_guard<std::mutex> lock(s.mu);
  auto* to = static_cast<std::byte*>(dst);
  const int64_t chunk = impl_->staging_bytes;
  const int64_t chunks = (n + chunk - 1) / chunk;
  auto issue = [&](int64_t c) -> absl::Status {
    const int64_t at = c * chunk;
    const int64_t len = std::min(chunk, n - at);
    TC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.pinned[c & 1], src.data() + offset + at,
                                            static_cast<size_t>(len), cudaMemcpyDeviceToHost,
                                            s.stream),
                            "cudaMemcpyAsync to host");
    TC_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.done[c & 1], s.stream), "cudaEventRecord");
    return absl::OkStatus();
  };
  // Two copies in flight; each buffer is drained to `dst` while the other one fills.
  for (int64_t c = 0; c < std::min<int64_t>(chunks, 2); ++c) {
    if (auto st = issue(c); !st.ok()) return st;
  }
  for (int64_t c = 0; c < chunks; ++c) {
    TC_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.done[c & 1]), "cudaEventSynchronize");
    const int64_t at = c * chunk;
    std::memcpy(to + at, s.pinned[c & 1], static_cast<size_t>(std::min(chunk, n - at)));
    if (c + 2 < chunks) {
      if (auto st = issue(c + 2); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

namespace {

struct Completion {
  ThreadPool* pool;
  Stream* stream;
  std::function<void(absl::Status)> done;
  std::string op;
  Device::ReadBack read_back;
  int error = 0;
};

// Runs on CUDA's callback thread after everything before it on the stream: no CUDA calls here.
void CUDART_CB OnStreamDone(void* arg) {
  auto* c = static_cast<Completion*>(arg);
  c->error = *c->stream->host_error;
  // Before anything later on the stream can overwrite the lane's read-back buffer.
  if (c->read_back.bytes > 0) {
    std::memcpy(c->read_back.host, c->stream->read_back, static_cast<size_t>(c->read_back.bytes));
  }
  c->pool->Schedule([c] {
    std::unique_ptr<Completion> owned(c);
    // A failed kernel leaves an error on the stream; report it instead of the result.
    auto status = [&]() -> absl::Status {
      if (cudaError_t e = cudaStreamQuery(owned->stream->stream);
          e != cudaSuccess && e != cudaErrorNotReady) {
        return CudaError(e, "kernel");
      }
      if (owned->error != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("integer division by zero in '", owned->op, "'"));
      }
      return absl::OkStatus();
    };
    owned->done(status());
  });
}

}  // namespace

void CudaDevice::Run(Lane& lane, const PreparedOp& op, std::vector<TensorView> inputs,
                     std::byte* out, std::function<void(absl::Status)> done,
                     ReadBack read_back) {
  if (read_back.bytes > kReadBackBytes || read_back.bytes < 0) {
    done(absl::InternalError("read-back larger than the device's read-back buffer"));
    return;
  }
  if (op.plan.numel == 0) {
    done(absl::OkStatus());
    return;
  }
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  auto enqueue = [&]() -> absl::Status {
    TC_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->index), "cudaSetDevice");
    // Requests sharing the stream must not interleave their flag resets and launches.
    std::lock_guard<std::mutex> lock(s.mu);
    char* base[kMaxOperands] = {};
    base[0] = reinterpret_cast<char*>(out) + op.plan.offsets[0];
    for (size_t i = 0; i < inputs.size(); ++i) {
      base[i + 1] = const_cast<char*>(reinterpret_cast<const char*>(inputs[i].data)) +
                    op.plan.offsets[i + 1];
    }
    // The flag is reset, set by the kernel and copied out in stream order, and the host
    // function reads it before anything later on the stream can run.
    TC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s.dev_error, 0, sizeof(int), s.stream),
                            "cudaMemsetAsync");
    const cuda::LaunchEnv env{impl_->multiprocessors, s.stream, s.dev_error};
    if (auto st = cuda::LaunchOp(op, base, env); !st.ok()) return st;
    TC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.host_error, s.dev_error, sizeof(int),
                                            cudaMemcpyDeviceToHost, s.stream),
                            "cudaMemcpyAsync to host");
    if (read_back.bytes > 0) {
      TC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.read_back, out, static_cast<size_t>(read_back.bytes),
                                              cudaMemcpyDeviceToHost, s.stream),
                              "cudaMemcpyAsync to host");
    }
    auto* c = new Completion{impl_->completions.get(), &s, std::move(done), op.op->spec.name,
                             read_back};
    if (cudaError_t e = cudaLaunchHostFunc(s.stream, &OnStreamDone, c); e != cudaSuccess) {
      done = std::move(c->done);
      delete c;
      return CudaError(e, "cudaLaunchHostFunc");
    }
    return absl::OkStatus();
  };
  if (absl::Status st = enqueue(); !st.ok()) done(std::move(st));
}

}  // namespace tc::runtime
