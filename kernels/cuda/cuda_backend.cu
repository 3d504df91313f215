#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/ops/op_list.h"

namespace tc {
namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(absl::StrCat("CUDA ", what, " failed: ", cudaGetErrorString(e)));
}

#define TC_CUDA_RETURN_IF_ERROR(expr, what)         \
  do {                                              \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess) \
      return CudaError(e_, what);                   \
  } while (0)

// Everything a kernel needs, passed by value as a kernel parameter.
template <int kOps>
struct KernelParams {
  int ndim;
  int64_t numel;
  int64_t sizes[kMaxRank];
  int64_t strides[kOps][kMaxRank];
  char* base[kOps];
};

template <typename T, int N, typename F, size_t... I>
__device__ __forceinline__ void ApplyDense(const F& f, const KernelParams<N + 1>& p, int64_t i,
                                           std::index_sequence<I...>) {
  reinterpret_cast<T*>(p.base[0])[i] = f(reinterpret_cast<const T*>(p.base[I + 1])[i]...);
}

// Every operand dense: element i of each operand is at index i.
template <typename T, int N, typename F>
__global__ void ContiguousKernel(F f, KernelParams<N + 1> p) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.numel;
       i += step) {
    ApplyDense<T, N>(f, p, i, std::make_index_sequence<N>{});
  }
}

template <typename T, int N, typename F, size_t... I>
__device__ __forceinline__ void ApplyStrided(const F& f, const KernelParams<N + 1>& p,
                                             const int64_t* off, std::index_sequence<I...>) {
  *reinterpret_cast<T*>(p.base[0] + off[0]) =
      f(*reinterpret_cast<const T*>(p.base[I + 1] + off[I + 1])...);
}

// General layout: per-operand byte offsets from the linear index, dim 0 fastest.
template <typename T, int N, typename F>
__global__ void StridedKernel(F f, KernelParams<N + 1> p) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.numel;
       i += step) {
    int64_t off[N + 1] = {};
    int64_t rest = i;
    for (int d = 0; d < p.ndim; ++d) {
      const int64_t q = rest / p.sizes[d];
      const int64_t idx = rest - q * p.sizes[d];
      rest = q;
#pragma unroll
      for (int k = 0; k <= N; ++k) off[k] += idx * p.strides[k][d];
    }
    ApplyStrided<T, N>(f, p, off, std::make_index_sequence<N>{});
  }
}

constexpr int kThreads = 256;

template <typename T, int N, typename F>
absl::Status LaunchTyped(const F& f, const Plan& plan, char* const* base, int sms,
                         cudaStream_t stream) {
  KernelParams<N + 1> p{};
  p.ndim = plan.ndim;
  p.numel = plan.numel;
  for (int d = 0; d < plan.ndim; ++d) {
    p.sizes[d] = plan.sizes[d];
    for (int k = 0; k <= N; ++k) p.strides[k][d] = plan.strides[k][d];
  }
  for (int k = 0; k <= N; ++k) p.base[k] = base[k];
  const int64_t blocks_needed = (plan.numel + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<int64_t>(blocks_needed, int64_t{sms} * 16));
  if (plan.path == Path::kContiguous) {
    ContiguousKernel<T, N><<<blocks, kThreads, 0, stream>>>(f, p);
  } else {
    StridedKernel<T, N><<<blocks, kThreads, 0, stream>>>(f, p);
  }
  TC_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "kernel launch");
  return absl::OkStatus();
}

using Launcher = absl::Status (*)(const PreparedOp&, char* const*, int, cudaStream_t);

template <typename F>
absl::Status Launch(const PreparedOp& op, char* const* base, int sms, cudaStream_t stream) {
  const F f = F::Make(op.attrs);
  switch (op.plan.compute_dtype) {
    case DType::kFloat32:
      return LaunchTyped<float, F::kArity>(f, op.plan, base, sms, stream);
    default:
      return absl::UnimplementedError(absl::StrCat("op '", op.op->spec.name,
                                                   "' has no CUDA kernel for ",
                                                   DTypeName(op.plan.compute_dtype)));
  }
}

constexpr Launcher kLaunchers[] = {
#define TC_LAUNCHER(F) &Launch<F>,
    TC_FOR_EACH_OP(TC_LAUNCHER)
#undef TC_LAUNCHER
};

}  // namespace

int CudaBackend::DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // Clear the sticky "no device" error.
    return 0;
  }
  return n;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int device) {
  const int count = DeviceCount();
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " is not available (", count, " visible)"));
  }
  TC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "cudaSetDevice");
  int sms = 0;
  TC_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                          "cudaDeviceGetAttribute");
  return std::unique_ptr<CudaBackend>(new CudaBackend(device, sms));
}

CudaBackend::~CudaBackend() {
  for (void* s : all_streams_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(s));
}

void* CudaBackend::AcquireStream(absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_streams_.empty()) {
      void* s = free_streams_.back();
      free_streams_.pop_back();
      return s;
    }
  }
  cudaStream_t s = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess) {
    status.Update(CudaError(e, "cudaStreamCreate"));
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  all_streams_.push_back(s);
  return s;
}

void CudaBackend::ReleaseStream(void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  free_streams_.push_back(stream);
}

absl::Status CudaBackend::Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                              std::byte* out) {
  if (op.plan.numel == 0) return absl::OkStatus();
  TC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
  absl::Status status;
  auto stream = static_cast<cudaStream_t>(AcquireStream(status));
  if (stream == nullptr) return status;

  // Device copies of each input's storage and the output; freed on the stream at the end.
  void* dev[kMaxOperands] = {};
  const int nops = static_cast<int>(inputs.size()) + 1;
  auto run = [&]() -> absl::Status {
    TC_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&dev[0], op.plan.out_bytes(), stream),
                            "cudaMallocAsync");
    for (size_t i = 0; i < inputs.size(); ++i) {
      const size_t bytes = std::max<int64_t>(inputs[i].storage_bytes, 1);
      TC_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&dev[i + 1], bytes, stream), "cudaMallocAsync");
      TC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev[i + 1], inputs[i].data,
                                              inputs[i].storage_bytes, cudaMemcpyHostToDevice,
                                              stream),
                              "cudaMemcpyAsync to device");
    }
    char* base[kMaxOperands] = {};
    for (int k = 0; k < nops; ++k) base[k] = static_cast<char*>(dev[k]) + op.plan.offsets[k];
    if (auto s = kLaunchers[op.op->index](op, base, multiprocessors_, stream); !s.ok()) return s;
    TC_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(out, dev[0], op.plan.out_bytes(), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync to host");
    return absl::OkStatus();
  };
  status.Update(run());
  for (int k = 0; k < nops; ++k) {
    if (dev[k] != nullptr) (void)cudaFreeAsync(dev[k], stream);
  }
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    status.Update(CudaError(e, "cudaStreamSynchronize"));
  }
  ReleaseStream(stream);
  return status;
}

}  // namespace tc
