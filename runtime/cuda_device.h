// One GPU as a runtime Device: a pool of streams (lanes), each with a pair of pinned staging
// buffers, memory from a stream-ordered pool (cudaMallocFromPoolAsync) under the budget, and
// completion by a waiter thread per stream that polls each run's event slot in turn (then
// sleeps in the driver), so no caller's thread waits on a kernel (cuda_streams.cc).
// Plain C++ interface; the CUDA code stays in the .cu.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"

namespace tc::cuda {
struct LaunchEnv;
}  // namespace tc::cuda

namespace tc::runtime {

namespace gpu {
struct Completion;
struct Stream;
}  // namespace gpu

class CudaDevice final : public Device, public HostMaps, public IpcMemory, public QuickRuns {
 public:
  // Number of usable CUDA devices; 0 when there is no driver or no device.
  static int Count();
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(int index,
                                                            const DeviceOptions& options);
  ~CudaDevice() override;
  // Gives each pair of `devices` that can reach the other's memory directly peer access, to
  // ordinary allocations and to each other's memory pools, and records it in their infos'
  // `peers`. Pairs without it still copy (through the host). Before any request runs.
  static void ConnectPeers(const std::vector<CudaDevice*>& devices);

  bool host_memory() const override { return false; }
  std::unique_ptr<Lane> AcquireLane() override;
  absl::Status Sync(Lane& lane) override;
  std::shared_ptr<void> PinHost(void* p, int64_t n, bool read_only) override;
  absl::StatusOr<SharedDeviceMemory> OpenIpc(absl::string_view handle) override;
  absl::StatusOr<int> ExportMemoryPool() override;
  absl::StatusOr<std::string> ExportAllocation(const std::byte* p) override;
  void ForgetExported(const std::string& pool_key, const std::vector<std::string>& allocations,
                      bool whole_pool) override;
  int64_t max_read_back() const override;
  int64_t max_small_bytes() const override;
  bool TryRunSmall(Lane& lane, const PreparedOp& op, const std::vector<TensorView>& host_inputs,
                   std::byte* host_out, std::function<void(absl::Status)>& done) override;
  void Run(Lane& lane, const PreparedOp& op, std::vector<TensorView> inputs, std::byte* out,
           std::function<void(absl::Status)> done, ReadBack read_back = {}) override;
  bool TryRun(Lane& lane, const PreparedOp& op, const std::vector<TensorView>& inputs,
              std::byte* out, std::function<void(absl::Status)>& done) override;

  // A CUDA error as a status; one that leaves the context unusable also fails the device.
  absl::Status CudaFailure(int cuda_error, absl::string_view what);

  struct Impl;

 protected:
  absl::Status DoWrite(Lane& lane, Storage& dst, int64_t offset, const void* src,
                       int64_t n) override;
  absl::Status DoRead(Lane& lane, const Storage& src, int64_t offset, void* dst,
                      int64_t n) override;
  absl::Status DoReadPinned(Lane& lane, const Storage& src, int64_t offset, void* dst,
                            int64_t n) override;
  absl::Status DoCopyFromDevice(Lane& lane, Storage& dst, int64_t offset, const Device& from,
                                const std::byte* src, int64_t n) override;
  absl::Status DoCopyFromExported(Lane& lane, Storage& dst, int64_t offset,
                                  const std::string& pool_key, int pool_fd,
                                  const std::string& allocation, int64_t src_offset,
                                  int64_t n) override;
  absl::Status DoWritePieces(Lane& lane, Storage& dst, int64_t offset,
                             const std::vector<HostPiece>& pieces) override;
  absl::Status DoWritePinned(Lane& lane, Storage& dst, int64_t offset, const void* src,
                             int64_t n) override;
  absl::StatusOr<std::byte*> RawAllocate(int64_t bytes, bool zero, Lane* lane, void** tag) override;
  void RawFree(std::byte* p, int64_t bytes, void* tag) override;

 private:
  CudaDevice(DeviceInfo info, int64_t budget, const DeviceOptions& options,
             std::unique_ptr<Impl> impl);
  // What Run and TryRunSmall share: issues one run on `s` under its lock, in stream order
  // (`before`: copies in and the flag's reset; the fault a test may inject; the op's kernels
  // with `error` as their flag; `after`: the flag and any read-back out; the slot's event),
  // then queues `completion` for the stream's waiter. When anything fails to issue, the slot
  // is released and the completion's `done` gets the error.
  // Enqueues a run's kernels on the stream.
  using Launch = std::function<absl::Status(const cuda::LaunchEnv&)>;
  void Issue(gpu::Stream& s, const Launch& launch, int* error,
             const std::function<absl::Status()>& before,
             const std::function<absl::Status()>& after,
             std::unique_ptr<gpu::Completion> completion);
  // Run's part once its kernels are known: a result slot (`slot_index`, or one waited for
  // where it is -1), the flag's reset, the launch, the flag and any read-back out; `done`
  // reports `label`'s run.
  void RunOn(gpu::Stream& s, const Launch& launch, std::byte* out,
             std::function<void(absl::Status)> done, ReadBack read_back, const std::string& label,
             int slot_index = -1);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tc::runtime
