// Device memory from a stream-ordered pool (decision 5): allocations on the requesting lane's
// stream need no wait, frees follow the last use in stream order.
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

#include "runtime/cuda_device_impl.h"

namespace tc::runtime {

using gpu::CudaLane;
using gpu::Stream;

absl::Status CreateMemoryPool(CudaDevice::Impl& impl, int64_t budget, bool shareable) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = impl.index;
  if (shareable) {
    // Exported as a file descriptor, passed to the other process over a unix socket.
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    if (cudaMemPoolCreate(&impl.pool, &props) == cudaSuccess) {
      impl.shareable = true;
    } else {
      (void)cudaGetLastError();  // Not here: an ordinary pool, copies go through the host.
      props.handleTypes = cudaMemHandleTypeNone;
    }
  }
  if (!impl.shareable) {
    TC_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&impl.pool, &props), "cudaMemPoolCreate");
  }
  // The device's current pool: what runs allocate for themselves in stream order
  // (cudaMallocAsync: an expression's intermediate values while its kernel compiles) comes
  // from it too.
  TC_CUDA_RETURN_IF_ERROR(cudaDeviceSetMemPool(impl.index, impl.pool), "cudaDeviceSetMemPool");
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
  // Whole 16-byte blocks: kernels that read a misaligned run as the aligned blocks around it
  // (LoadUnaligned) may read the rest of the block that holds a storage's last byte.
  bytes = (bytes + 15) / 16 * 16;
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
    if (absl::Status st = allocated(
            cudaMallocFromPoolAsync(&p, static_cast<size_t>(bytes), impl_->pool, s.stream));
        !st.ok()) {
      return st;
    }
    if (zero) (void)cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), s.stream);
    // Freed on the same stream, after everything issued on it before.
    *tag = &s;
    return static_cast<std::byte*>(p);
  }
  std::lock_guard<std::mutex> lock(impl_->alloc_mu);
  if (absl::Status st = allocated(cudaMallocFromPoolAsync(&p, static_cast<size_t>(bytes),
                                                          impl_->pool, impl_->alloc_stream));
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

namespace tc::runtime {

absl::StatusOr<int> CudaDevice::ExportMemoryPool() {
  if (!impl_->shareable) {
    return absl::FailedPreconditionError("this device's memory pool cannot be shared");
  }
  int fd = -1;
  if (cudaError_t e = cudaMemPoolExportToShareableHandle(&fd, impl_->pool,
                                                         cudaMemHandleTypePosixFileDescriptor, 0);
      e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("exporting the memory pool: ", cudaGetErrorString(e)));
  }
  return fd;
}

absl::StatusOr<std::string> CudaDevice::ExportAllocation(const std::byte* p) {
  if (!impl_->shareable) {
    return absl::FailedPreconditionError("this device's memory pool cannot be shared");
  }
  cudaMemPoolPtrExportData data{};
  if (cudaError_t e = cudaMemPoolExportPointer(&data, const_cast<std::byte*>(p));
      e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("exporting an allocation: ", cudaGetErrorString(e)));
  }
  return std::string(reinterpret_cast<const char*>(data.reserved), sizeof(data.reserved));
}

absl::Status CudaDevice::DoCopyFromExported(Lane& lane, Storage& dst, int64_t offset,
                                            const std::string& pool_key, int pool_fd,
                                            const std::string& allocation, int64_t src_offset,
                                            int64_t n) {
  cudaMemPoolPtrExportData data{};
  if (allocation.size() != sizeof(data.reserved)) {
    return absl::InvalidArgumentError("an exported allocation has the wrong size");
  }
  std::memcpy(data.reserved, allocation.data(), sizeof(data.reserved));
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  // Errors of importing are the exporter's or the link's, not this device's failure: the
  // caller copies through the host instead.
  const auto refused = [](cudaError_t e, absl::string_view what) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
  };
  std::shared_ptr<void> mapped;
  {
    std::lock_guard<std::mutex> lock(impl_->imported_mu);
    cudaMemPool_t pool = nullptr;
    auto it = impl_->imported.find(pool_key);
    if (it != impl_->imported.end()) {
      pool = it->second;
    } else {
      if (pool_fd < 0) return absl::FailedPreconditionError("that memory pool is not imported");
      if (cudaError_t e = cudaMemPoolImportFromShareableHandle(
              &pool, reinterpret_cast<void*>(static_cast<intptr_t>(pool_fd)),
              cudaMemHandleTypePosixFileDescriptor, 0);
          e != cudaSuccess) {
        return refused(e, "importing a memory pool");
      }
      // This device reads it (over the link between the two GPUs).
      cudaMemAccessDesc access{};
      access.location.type = cudaMemLocationTypeDevice;
      access.location.id = impl_->index;
      access.flags = cudaMemAccessFlagsProtReadWrite;
      if (cudaError_t e = cudaMemPoolSetAccess(pool, &access, 1); e != cudaSuccess) {
        (void)cudaMemPoolDestroy(pool);
        return refused(e, "reaching an imported memory pool");
      }
      impl_->imported.emplace(pool_key, pool);
    }
    auto& of_pool = impl_->imports[pool_key];
    auto found = of_pool.find(allocation);
    if (found == of_pool.end()) {
      void* p = nullptr;
      if (cudaError_t e = cudaMemPoolImportPointer(&p, pool, &data); e != cudaSuccess) {
        return refused(e, "importing an allocation");
      }
      const int index = impl_->index;
      std::shared_ptr<void> own(p, [index](void* q) {
        (void)cudaSetDevice(index);
        (void)cudaFree(q);
      });
      found = of_pool.emplace(allocation, Impl::Import{std::move(own), 0}).first;
      if (++impl_->import_count > Impl::kMaxImports) {
        // The least recently used goes (freeing early is always allowed; a copy from it
        // still in progress holds it until done).
        std::map<std::string, Impl::Import>* oldest_pool = nullptr;
        std::map<std::string, Impl::Import>::iterator oldest;
        for (auto& [k, imports] : impl_->imports) {
          for (auto i = imports.begin(); i != imports.end(); ++i) {
            if (i != found && (oldest_pool == nullptr || i->second.used < oldest->second.used)) {
              oldest_pool = &imports;
              oldest = i;
            }
          }
        }
        if (oldest_pool != nullptr) {
          oldest_pool->erase(oldest);
          --impl_->import_count;
        }
      }
    }
    found->second.used = ++impl_->import_clock;
    mapped = found->second.p;
  }
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  std::lock_guard<std::mutex> lock(s.mu);
  if (n > 0) {
    cudaError_t e =
        gpu::CopyMapped(dst.data() + offset, static_cast<std::byte*>(mapped.get()) + src_offset, n,
                        impl_->multiprocessors, s.stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s.stream);
    if (e != cudaSuccess) return CudaFailure(e, "copying from another worker's device");
  }
  return absl::OkStatus();
}

void CudaDevice::ForgetExported(const std::string& pool_key,
                                const std::vector<std::string>& allocations, bool whole_pool) {
  (void)cudaSetDevice(impl_->index);
  std::vector<std::shared_ptr<void>> gone;
  cudaMemPool_t pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->imported_mu);
    auto of_pool = impl_->imports.find(pool_key);
    if (of_pool != impl_->imports.end()) {
      if (whole_pool) {
        for (auto& [k, i] : of_pool->second) gone.push_back(std::move(i.p));
        impl_->import_count -= of_pool->second.size();
        impl_->imports.erase(of_pool);
      } else {
        for (const std::string& a : allocations) {
          auto i = of_pool->second.find(a);
          if (i == of_pool->second.end()) continue;
          gone.push_back(std::move(i->second.p));
          of_pool->second.erase(i);
          --impl_->import_count;
        }
      }
    }
    if (whole_pool) {
      auto found = impl_->imported.find(pool_key);
      if (found != impl_->imported.end()) {
        pool = found->second;
        impl_->imported.erase(found);
      }
    }
  }
  // Unmapped here, before this returns (the exporter frees only after that), and outside
  // the lock: cudaFree waits for the device.
  gone.clear();
  if (pool != nullptr) (void)cudaMemPoolDestroy(pool);
}

}  // namespace tc::runtime
