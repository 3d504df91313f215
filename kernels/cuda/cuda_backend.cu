#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch_env.h"
#include "kernels/ops/op_list.h"

namespace tc {
namespace cuda {

// Defined in launch.cuh, instantiated in ops_*.cu.
template <typename F>
absl::Status Launch(const PreparedOp& op, char* const* base, const LaunchEnv& env);

}  // namespace cuda

namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(absl::StrCat("CUDA ", what, " failed: ", cudaGetErrorString(e)));
}

#define TC_CUDA_RETURN_IF_ERROR(expr, what)         \
  do {                                              \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess) \
      return CudaError(e_, what);                   \
  } while (0)

using Launcher = absl::Status (*)(const PreparedOp&, char* const*, const cuda::LaunchEnv&);

constexpr Launcher kLaunchers[] = {
#define TC_LAUNCHER(F) &cuda::Launch<F>,
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

  // Device copies of each input's storage, the output, and the error flag; freed on the
  // stream at the end.
  void* dev[kMaxOperands] = {};
  int* dev_error = nullptr;
  int host_error = 0;
  const int nops = static_cast<int>(inputs.size()) + 1;
  const int64_t out_bytes = op.plan.out_storage_bytes;
  auto run = [&]() -> absl::Status {
    TC_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&dev[0], out_bytes, stream), "cudaMallocAsync");
    if (out_bytes != op.plan.numel * ItemSize(op.plan.out_dtype)) {
      // Output strides with gaps: what lies between elements reads as zeros.
      TC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dev[0], 0, out_bytes, stream), "cudaMemsetAsync");
    }
    TC_CUDA_RETURN_IF_ERROR(cudaMallocAsync(reinterpret_cast<void**>(&dev_error), sizeof(int), stream),
                            "cudaMallocAsync");
    TC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dev_error, 0, sizeof(int), stream), "cudaMemsetAsync");
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
    const cuda::LaunchEnv env{multiprocessors_, stream, dev_error};
    if (auto s = kLaunchers[op.op->index](op, base, env); !s.ok()) return s;
    TC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, dev[0], out_bytes, cudaMemcpyDeviceToHost, stream),
                            "cudaMemcpyAsync to host");
    TC_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(&host_error, dev_error, sizeof(int), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync to host");
    return absl::OkStatus();
  };
  status.Update(run());
  for (int k = 0; k < nops; ++k) {
    if (dev[k] != nullptr) (void)cudaFreeAsync(dev[k], stream);
  }
  if (dev_error != nullptr) (void)cudaFreeAsync(dev_error, stream);
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    status.Update(CudaError(e, "cudaStreamSynchronize"));
  }
  ReleaseStream(stream);
  if (status.ok() && host_error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("integer division by zero in '", op.op->spec.name, "'"));
  }
  return status;
}

}  // namespace tc
