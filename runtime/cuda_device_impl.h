// What CudaDevice holds, shared by the files that implement it (cuda_device.cu, the memory
// pool in cuda_memory.cc, the staging copies in cuda_staging.cc). Not for other code.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cuda_device.h"
#include "runtime/cuda_errors.h"
#include "runtime/cuda_streams.h"
#include "util/thread_pool.h"

namespace tc::runtime {

struct CudaDevice::Impl {
  int index = 0;
  int multiprocessors = 0;
  // Compute capability as 90 for 9.0: what expression kernels are compiled for.
  int arch = 0;
  int64_t staging_bytes = 0;
  // Splits large host copies to and from the staging buffers (DeviceOptions::copy_threads);
  // null where one thread copies.
  std::unique_ptr<ThreadPool> copy_pool;
  // memcpy, on the copy pool's threads and the caller's where `n` is large.
  void HostCopy(void* dst, const void* src, int64_t n);
  // The stream-ordered memory pool (decision 5), cuda_memory.cc.
  cudaMemPool_t pool = nullptr;
  // Whether other processes can import the pool (DeviceOptions::shareable_memory).
  bool shareable = false;
  // Pools of other processes' devices imported here, by the key their exporter gave.
  std::mutex imported_mu;
  std::map<std::string, cudaMemPool_t> imported;
  // Allocations of those pools mapped here, kept across copies (mapping one costs
  // milliseconds): by pool key, then by what names the allocation. The exporter frees an
  // allocation only after this process let go of it (ForgetExported); a copy in progress
  // holds its mapping. At most kMaxImports, the least recently used let go first.
  struct Import {
    std::shared_ptr<void> p;
    uint64_t used = 0;
  };
  std::map<std::string, std::map<std::string, Import>> imports;
  uint64_t import_clock = 0;
  static constexpr size_t kMaxImports = 1024;
  size_t import_count = 0;
  // Allocations and frees are ordered on this stream; each allocation is waited for before
  // its memory is handed out, and frees come only after the host saw every use complete.
  cudaStream_t alloc_stream = nullptr;
  std::mutex alloc_mu;
  std::vector<std::unique_ptr<gpu::Stream>> streams;
  ~Impl();
};

namespace gpu {
// Copies `n` bytes on `stream` with a kernel of the current device: for memory the device
// reaches only through a mapping (another process's pool).
cudaError_t CopyMapped(void* dst, const void* src, int64_t n, int multiprocessors,
                       cudaStream_t stream);
}  // namespace gpu

// Creates the device's memory pool, keeping up to `budget` bytes of freed memory; one other
// processes can import where `shareable` and the driver allows.
absl::Status CreateMemoryPool(CudaDevice::Impl& impl, int64_t budget, bool shareable);

}  // namespace tc::runtime
