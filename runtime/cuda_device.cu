// CudaDevice: creation, runs and CUDA IPC. Its streams and their completion thread are in
// cuda_streams.cc, its memory pool in cuda_memory.cc, its staging copies in cuda_staging.cc,
// error classification in cuda_errors.cc.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/expr_kernels.h"
#include "kernels/cuda/launch_env.h"
#include "runtime/cuda_device_impl.h"

namespace tc::runtime {

using gpu::AcquireSlot;
using gpu::Completion;
using gpu::CudaLane;
using gpu::Enqueue;
using gpu::kReadBackBytes;
using gpu::ReleaseSlot;
using gpu::Slot;
using gpu::Stream;
using gpu::TryAcquireSlot;

namespace {

// What a test's injected fault runs: a trap, which the driver reports as a launch failure.
__global__ void InjectedFault() { __trap(); }

constexpr int64_t Align256(int64_t n) { return (n + 255) & ~int64_t{255}; }

// Device memory that this device reads through a mapping (another process's pool): a kernel
// reads it over the link, where the copy engines would stage it through the host.
__global__ void CopyWide(int4* __restrict__ dst, const int4* __restrict__ src, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Two loads in flight per thread before the stores.
  for (; i + stride < n; i += 2 * stride) {
    const int4 a = src[i];
    const int4 b = src[i + stride];
    dst[i] = a;
    dst[i + stride] = b;
  }
  if (i < n) dst[i] = src[i];
}

__global__ void CopyNarrow(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src,
                           int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = src[i];
  }
}

}  // namespace

cudaError_t gpu::CopyMapped(void* dst, const void* src, int64_t n, int multiprocessors,
                            cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 512;
  const bool wide = reinterpret_cast<uintptr_t>(dst) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(src) % 16 == 0 && n % 16 == 0;
  const int64_t items = wide ? n / 16 : n;
  const int64_t wanted = (items + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<int64_t>(wanted, int64_t{8} * multiprocessors));
  if (wide) {
    CopyWide<<<blocks, kThreads, 0, stream>>>(static_cast<int4*>(dst),
                                              static_cast<const int4*>(src), items);
  } else {
    CopyNarrow<<<blocks, kThreads, 0, stream>>>(static_cast<unsigned char*>(dst),
                                                static_cast<const unsigned char*>(src), items);
  }
  return cudaGetLastError();
}

CudaDevice::Impl::~Impl() {
  (void)cudaSetDevice(index);
  for (auto& s : streams) gpu::StopStream(*s);
  if (alloc_stream != nullptr) {
    (void)cudaStreamSynchronize(alloc_stream);
    (void)cudaStreamDestroy(alloc_stream);
  }
  if (pool != nullptr) (void)cudaMemPoolDestroy(pool);
  imports.clear();  // Unmapped before the pools they came from go.
  for (auto& [key, p] : imported) (void)cudaMemPoolDestroy(p);
}

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
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int copy_threads =
      options.copy_threads > 0 ? options.copy_threads : std::clamp(hardware / 2, 1, 8);
  if (copy_threads > 1) impl->copy_pool = std::make_unique<ThreadPool>(copy_threads - 1);
  cudaDeviceProp prop{};
  TC_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  impl->multiprocessors = prop.multiProcessorCount;
  impl->arch = prop.major * 10 + prop.minor;
  cuda::ExprKernelCache::Shared().Warm(impl->arch);
  size_t free_bytes = 0, total_bytes = 0;
  TC_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const int64_t budget = options.memory_budget > 0
                             ? options.memory_budget
                             : static_cast<int64_t>(static_cast<double>(free_bytes) * 0.9);

  if (absl::Status st = CreateMemoryPool(*impl, budget, options.shareable_memory); !st.ok()) {
    return st;
  }
  const int nstreams = std::max(options.streams, 1);
  for (int i = 0; i < nstreams; ++i) {
    impl->streams.push_back(std::make_unique<gpu::Stream>());
    if (absl::Status st = gpu::StartStream(*impl->streams.back(), index, impl->staging_bytes);
        !st.ok()) {
      return st;
    }
  }

  DeviceInfo info;
  info.kind = "cuda";
  info.name = prop.name;
  info.index = options.report_index >= 0 ? options.report_index : index;
  info.total_memory = static_cast<int64_t>(total_bytes);
  info.multiprocessors = prop.multiProcessorCount;
  info.streams = nstreams;
  for (unsigned char byte : prop.uuid.bytes) {
    absl::StrAppend(&info.uuid, absl::Hex(byte, absl::kZeroPad2));
  }
  return std::unique_ptr<CudaDevice>(
      new CudaDevice(std::move(info), budget, options, std::move(impl)));
}

CudaDevice::CudaDevice(DeviceInfo info, int64_t budget, const DeviceOptions& options,
                       std::unique_ptr<Impl> impl)
    : Device(std::move(info), budget, options), impl_(std::move(impl)) {
  Offer(this, this, this);
  // Before any run: the waiters read it only after a run completes.
  for (auto& s : impl_->streams) s->device = this;
}

absl::Status CudaDevice::CudaFailure(int error, absl::string_view what) {
  const auto e = static_cast<cudaError_t>(error);
  absl::Status st = gpu::CudaError(e, what);
  if (gpu::IsSticky(e)) MarkFailed(st);
  return st;
}

CudaDevice::~CudaDevice() = default;

void CudaDevice::ConnectPeers(const std::vector<CudaDevice*>& devices) {
  for (CudaDevice* a : devices) {
    for (CudaDevice* b : devices) {
      const int ai = a->impl_->index, bi = b->impl_->index;
      if (ai == bi) continue;  // One GPU's memory (two devices on it only in tests).
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, ai, bi) != cudaSuccess || can == 0) {
        (void)cudaGetLastError();
        continue;
      }
      // a reaches b: ordinary allocations (regions opened by IPC) and b's pool.
      if (cudaSetDevice(ai) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      const cudaError_t e = cudaDeviceEnablePeerAccess(bi, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
        continue;
      }
      (void)cudaGetLastError();
      cudaMemAccessDesc access{};
      access.location.type = cudaMemLocationTypeDevice;
      access.location.id = ai;
      access.flags = cudaMemAccessFlagsProtReadWrite;
      if (cudaMemPoolSetAccess(b->impl_->pool, &access, 1) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      a->info_.peers.push_back(b->info_.index);
    }
  }
}

std::unique_ptr<Lane> CudaDevice::AcquireLane() {
  Stream* best = impl_->streams.front().get();
  for (auto& s : impl_->streams) {
    if (s->users.load() < best->users.load()) best = s.get();
  }
  return std::make_unique<CudaLane>(best);
}

absl::StatusOr<SharedDeviceMemory> CudaDevice::OpenIpc(absl::string_view handle) {
  cudaIpcMemHandle_t h;
  if (handle.size() != sizeof(h.reserved)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CUDA IPC handle has ", sizeof(h.reserved), " bytes, not ", handle.size()));
  }
  std::memcpy(h.reserved, handle.data(), sizeof(h.reserved));
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  void* p = nullptr;
  if (cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
      e != cudaSuccess) {
    (void)cudaGetLastError();  // A bad handle is the caller's error, not the device's.
    return absl::InvalidArgumentError(absl::StrCat("cannot open the CUDA IPC handle on device ",
                                                   impl_->index, ": ", cudaGetErrorString(e),
                                                   " (is the memory still allocated?)"));
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

namespace {

// `op` made ready on this thread, or null where it is not ready at once (a new expression,
// whose kernel the call starts compiling: the request then goes the long way and waits for
// it there) or cannot be made ready (the long way reports why).
std::shared_ptr<const cuda::ReadyLaunch> ReadyAtOnce(const PreparedOp& op, std::byte* out,
                                                     absl::Span<const std::byte* const> inputs,
                                                     int multiprocessors, int arch) {
  struct Answer {
    std::mutex mu;
    bool late = false;
    std::shared_ptr<const cuda::ReadyLaunch> ready;
  };
  auto answer = std::make_shared<Answer>();
  cuda::Prepare(op, out, inputs, multiprocessors, arch,
                [answer](absl::StatusOr<cuda::ReadyLaunch> ready) {
                  std::lock_guard<std::mutex> lock(answer->mu);
                  if (!answer->late && ready.ok()) {
                    answer->ready = std::make_shared<const cuda::ReadyLaunch>(*std::move(ready));
                  }
                });
  std::lock_guard<std::mutex> lock(answer->mu);
  answer->late = true;
  return answer->ready;
}

}  // namespace

void CudaDevice::Issue(Stream& s, const Launch& launch, int* error,
                       const std::function<absl::Status()>& before,
                       const std::function<absl::Status()>& after,
                       std::unique_ptr<Completion> completion) {
  auto issue = [&]() -> absl::Status {
    TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
    // Requests sharing the stream must not interleave their copies, flag resets and launches.
    std::lock_guard<std::mutex> lock(s.mu);
    if (absl::Status st = before(); !st.ok()) return st;
    const cuda::LaunchEnv env{impl_->multiprocessors, s.stream, error, nullptr};
    if (InjectFaultNow()) InjectedFault<<<1, 1, 0, s.stream>>>();
    if (absl::Status st = launch(env); !st.ok()) return st;
    if (absl::Status st = after(); !st.ok()) return st;
    TC_CUDA_CHECK(cudaEventRecord(s.slots[completion->slot].event, s.stream), "cudaEventRecord");
    return absl::OkStatus();
  };
  if (absl::Status st = issue(); !st.ok()) {
    ReleaseSlot(s, completion->slot);
    completion->done(std::move(st));
    return;
  }
  Enqueue(s, std::move(completion));
}

void CudaDevice::Run(Lane& lane, const PreparedOp& op, std::vector<TensorView> inputs,
                     std::byte* out, std::function<void(absl::Status)> done, ReadBack read_back) {
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
  const std::byte* data[kMaxIterOperands - 1] = {};
  if (inputs.size() > std::size(data)) {
    done(absl::InternalError("more inputs than any run takes"));
    return;
  }
  for (size_t k = 0; k < inputs.size(); ++k) data[k] = inputs[k].data;
  // An op is ready at once; a new expression once its kernel is compiled, on the compiling
  // thread (this one returns at once).
  cuda::Prepare(
      op, out, absl::MakeConstSpan(data, inputs.size()), impl_->multiprocessors, impl_->arch,
      [this, &s, out, done = std::move(done),
       read_back](absl::StatusOr<cuda::ReadyLaunch> ready) mutable {
        if (!ready.ok()) {
          done(ready.status());
          return;
        }
        // What the launch holds stays until the run completes.
        auto held = std::make_shared<const cuda::ReadyLaunch>(*std::move(ready));
        auto finish = [done = std::move(done), held](absl::Status st) { done(std::move(st)); };
        RunOn(s, held->enqueue, out, std::move(finish), read_back, held->label);
      });
}

bool CudaDevice::TryRun(Lane& lane, const PreparedOp& op, const std::vector<TensorView>& inputs,
                        std::byte* out, std::function<void(absl::Status)>& done) {
  // What Run reports at once, it reports.
  if (op.plan.numel == 0 || failed() || inputs.size() >= static_cast<size_t>(kMaxIterOperands)) {
    return false;
  }
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  const int slot_index = TryAcquireSlot(s);
  if (slot_index < 0) return false;
  const std::byte* data[kMaxIterOperands - 1] = {};
  for (size_t k = 0; k < inputs.size(); ++k) data[k] = inputs[k].data;
  std::shared_ptr<const cuda::ReadyLaunch> ready = ReadyAtOnce(
      op, out, absl::MakeConstSpan(data, inputs.size()), impl_->multiprocessors, impl_->arch);
  if (ready == nullptr) {
    ReleaseSlot(s, slot_index);
    return false;
  }
  auto finish = [done = std::move(done), ready](absl::Status st) { done(std::move(st)); };
  RunOn(s, ready->enqueue, out, std::move(finish), {}, ready->label, slot_index);
  return true;
}

void CudaDevice::RunOn(Stream& s, const Launch& launch, std::byte* out,
                       std::function<void(absl::Status)> done, ReadBack read_back,
                       const std::string& label, int slot_index) {
  // (Issue makes this device current.)
  // A slot for this run's results, taken before the stream's lock: one frees up as the
  // waiter reports earlier runs, and the waiter never needs that lock.
  if (slot_index < 0) slot_index = AcquireSlot(s);
  Slot& slot = s.slots[slot_index];
  // The stream's flag is reset, set by the kernel and copied out in stream order.
  const auto before = [&]() -> absl::Status {
    TC_CUDA_CHECK(cudaMemsetAsync(s.dev_error, 0, sizeof(int), s.stream), "cudaMemsetAsync");
    return absl::OkStatus();
  };
  const auto after = [&]() -> absl::Status {
    TC_CUDA_CHECK(cudaMemcpyAsync(slot.host_error, s.dev_error, sizeof(int), cudaMemcpyDeviceToHost,
                                  s.stream),
                  "cudaMemcpyAsync to host");
    if (read_back.bytes > 0) {
      // Pinned host memory takes the copy directly; other memory through the slot's buffer.
      void* to = read_back.pinned ? read_back.host : slot.read_back;
      TC_CUDA_CHECK(cudaMemcpyAsync(to, out, static_cast<size_t>(read_back.bytes),
                                    cudaMemcpyDeviceToHost, s.stream),
                    "cudaMemcpyAsync to host");
    }
    return absl::OkStatus();
  };
  Issue(s, launch, s.dev_error, before, after,
        std::make_unique<Completion>(
            Completion{slot_index, std::move(done), label, read_back, 0, slot.host_error}));
}

int64_t CudaDevice::max_small_bytes() const { return kReadBackBytes; }

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
  if (total > kReadBackBytes || plan.numel == 0 || failed() ||
      host_inputs.size() >= static_cast<size_t>(kMaxIterOperands)) {
    return false;
  }
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  const int slot_index = TryAcquireSlot(s);
  if (slot_index < 0) return false;
  Slot& slot = s.slots[slot_index];
  // The slot's own device block: free like the slot, since its last run has been reported.
  std::byte* dev = slot.block;
  const std::byte* dev_inputs[kMaxIterOperands - 1] = {};
  int64_t at = 0;
  for (size_t i = 0; i < host_inputs.size(); ++i) {
    dev_inputs[i] = dev + at;
    at += Align256(host_inputs[i].storage_bytes);
  }
  std::shared_ptr<const cuda::ReadyLaunch> ready =
      ReadyAtOnce(op, dev + out_at, absl::MakeConstSpan(dev_inputs, host_inputs.size()),
                  impl_->multiprocessors, impl_->arch);
  if (ready == nullptr) {
    ReleaseSlot(s, slot_index);
    return false;
  }
  for (size_t i = 0; i < host_inputs.size(); ++i) {
    // The slot's buffer is free: its last run has been reported. The upload out of it comes
    // before the read-back into it on the stream.
    std::memcpy(slot.read_back + (dev_inputs[i] - dev), host_inputs[i].data,
                static_cast<size_t>(host_inputs[i].storage_bytes));
  }
  std::memset(slot.read_back + flag_at, 0, sizeof(int));
  const auto before = [&]() -> absl::Status {
    TC_CUDA_CHECK(cudaMemcpyAsync(dev, slot.read_back, static_cast<size_t>(flag_at + sizeof(int)),
                                  cudaMemcpyHostToDevice, s.stream),
                  "cudaMemcpyAsync to device");
    if (plan.out_has_gaps) {
      // What lies between the output's elements reads as zeros.
      TC_CUDA_CHECK(
          cudaMemsetAsync(dev + out_at, 0, static_cast<size_t>(plan.out_storage_bytes), s.stream),
          "cudaMemsetAsync");
    }
    return absl::OkStatus();
  };
  const auto after = [&]() -> absl::Status {
    TC_CUDA_CHECK(
        cudaMemcpyAsync(slot.read_back + flag_at, dev + flag_at,
                        static_cast<size_t>(total - flag_at), cudaMemcpyDeviceToHost, s.stream),
        "cudaMemcpyAsync to host");
    return absl::OkStatus();
  };
  // What the launch holds stays until the run completes.
  auto finish = [done = std::move(done), ready](absl::Status st) { done(std::move(st)); };
  Issue(s, ready->enqueue, reinterpret_cast<int*>(dev + flag_at), before, after,
        std::make_unique<Completion>(Completion{
            slot_index, std::move(finish), ready->label, ReadBack{host_out, plan.out_storage_bytes},
            out_at, reinterpret_cast<const int*>(slot.read_back + flag_at)}));
  return true;
}

}  // namespace tc::runtime
