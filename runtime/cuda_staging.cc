// Copies between host and device through each stream's pair of pinned staging buffers
// (decision 7): one fills while the other's copy runs; the host side of a large copy is split
// among the device's copy threads. Memory the caller pinned skips them.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "runtime/cuda_device_impl.h"

namespace tc::runtime {

using gpu::CudaLane;
using gpu::kReadBackBytes;
using gpu::Stream;

void CudaDevice::Impl::HostCopy(void* dst, const void* src, int64_t n) {
  // Pieces of at least 512 KiB: below that, waking the pool costs more than one thread's copy.
  constexpr int64_t kPiece = int64_t{512} << 10;
  if (copy_pool == nullptr || n < 2 * kPiece) {
    std::memcpy(dst, src, static_cast<size_t>(n));
    return;
  }
  auto* to = static_cast<std::byte*>(dst);
  const auto* from = static_cast<const std::byte*>(src);
  copy_pool->ParallelFor(n, kPiece, [&](int64_t begin, int64_t end) {
    std::memcpy(to + begin, from + begin, static_cast<size_t>(end - begin));
  });
}

absl::Status CudaDevice::DoWrite(Lane& lane, Storage& dst, int64_t offset, const void* src,
                                 int64_t n) {
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
    impl_->HostCopy(s.pinned[b], from + done, len);
    TC_CUDA_CHECK(cudaMemcpyAsync(dst.data() + offset + done, s.pinned[b], static_cast<size_t>(len),
                                  cudaMemcpyHostToDevice, s.stream),
                  "cudaMemcpyAsync to device");
    TC_CUDA_CHECK(cudaEventRecord(s.done[b], s.stream), "cudaEventRecord");
  }
  // `src` has been copied into pinned memory: the caller may reuse it. The copies themselves
  // complete in stream order.
  return absl::OkStatus();
}

absl::Status CudaDevice::DoWritePieces(Lane& lane, Storage& dst, int64_t offset,
                                       const std::vector<HostPiece>& pieces) {
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
      impl_->HostCopy(static_cast<std::byte*>(s.pinned[b]) + filled, from + at, len);
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

absl::Status CudaDevice::DoWritePinned(Lane& lane, Storage& dst, int64_t offset, const void* src,
                                       int64_t n) {
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  std::lock_guard<std::mutex> lock(s.mu);
  TC_CUDA_CHECK(cudaMemcpyAsync(dst.data() + offset, src, static_cast<size_t>(n),
                                cudaMemcpyHostToDevice, s.stream),
                "cudaMemcpyAsync to device");
  return absl::OkStatus();
}

absl::Status CudaDevice::DoCopyFromDevice(Lane& lane, Storage& dst, int64_t offset,
                                          const Device& from, const std::byte* src, int64_t n) {
  const auto* peer = dynamic_cast<const CudaDevice*>(&from);
  if (peer == nullptr) return Device::DoCopyFromDevice(lane, dst, offset, from, src, n);
  if (n == 0) return absl::OkStatus();
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  std::lock_guard<std::mutex> lock(s.mu);
  // Direct over the link where ConnectPeers enabled it; the driver stages through the host
  // otherwise. Ordered on this device's stream; the source is final (nothing writes it).
  TC_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data() + offset, impl_->index, src, peer->impl_->index,
                                    static_cast<size_t>(n), s.stream),
                "cudaMemcpyPeerAsync");
  return absl::OkStatus();
}

absl::Status CudaDevice::Sync(Lane& lane) {
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  TC_CUDA_CHECK(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
  return absl::OkStatus();
}

int64_t CudaDevice::max_read_back() const { return kReadBackBytes; }

absl::Status CudaDevice::DoRead(Lane& lane, const Storage& src, int64_t offset, void* dst,
                                int64_t n) {
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
                                  static_cast<size_t>(len), cudaMemcpyDeviceToHost, s.stream),
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
    impl_->HostCopy(to + at, s.pinned[c & 1], std::min(chunk, n - at));
    if (c + 2 < chunks) {
      if (auto st = issue(c + 2); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::DoReadPinned(Lane& lane, const Storage& src, int64_t offset, void* dst,
                                      int64_t n) {
  if (n == 0) return absl::OkStatus();
  Stream& s = *static_cast<CudaLane&>(lane).stream;
  TC_CUDA_CHECK(cudaSetDevice(impl_->index), "cudaSetDevice");
  std::lock_guard<std::mutex> lock(s.mu);
  TC_CUDA_CHECK(cudaMemcpyAsync(dst, src.data() + offset, static_cast<size_t>(n),
                                cudaMemcpyDeviceToHost, s.stream),
                "cudaMemcpyAsync to host");
  TC_CUDA_CHECK(cudaEventRecord(s.done[0], s.stream), "cudaEventRecord");
  TC_CUDA_CHECK(cudaEventSynchronize(s.done[0]), "cudaEventSynchronize");
  return absl::OkStatus();
}

}  // namespace tc::runtime
