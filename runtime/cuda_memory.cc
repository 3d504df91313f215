// Device memory from a stream-ordered pool (decision 5): allocations on the requesting lane's
// stream need no wait, frees follow the last use in stream order.
#include <mutex>

#include "runtime/cuda_device_impl.h"

namespace tc::runtime {

using gpu::CudaLane;
using gpu::Stream;

absl::Status CreateMemoryPool(CudaDevice::Impl& impl, int64_t budget) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = impl.index;
  TC_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&impl.pool, &props), "cudaMemPoolCreate");
  // Keep freed memory in the pool up to the budget instead of returning it at every sync.
  uint64_t threshold = static_cast<uint64_t>(budget);
  TC_CUDA_RETURN_IF_ERROR(
      cudaMemPoolSetAttribute(impl.pool, cudaMemPoolAttrReleaseThreshold, &threshold),
      "cudaMemPoolSetAttribute");
  TC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl.alloc_stream, cudaStreamNonBlocking),
                          "cudaStreamCreate");
  return absl::OkStatus();
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

}  // namespace tc::runtime
