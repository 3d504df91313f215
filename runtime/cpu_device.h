// The CPU device: host memory and the CPU backend. Ops run on the calling thread (with the
// backend's workers), so `done` is called before Run returns.
#pragma once

#include "runtime/device.h"
#include "util/thread_pool.h"

namespace tc::runtime {

class CpuDevice final : public Device {
 public:
  // `threads`: CPU backend threads (0: one per hardware thread). `index`: its place among
  // the server's devices (more than one CPU device only in tests of several devices).
  CpuDevice(int threads, const DeviceOptions& options, int index = 0);

  bool host_memory() const override { return true; }
  TileRule tile_rule() const override { return TileRule::kAnyPermuted; }
  std::unique_ptr<Lane> AcquireLane() override { return std::make_unique<Lane>(); }
  absl::Status Sync(Lane& /*lane*/) override { return absl::OkStatus(); }
  void Run(Lane& lane, const PreparedOp& op, std::vector<TensorView> inputs, std::byte* out,
           std::function<void(absl::Status)> done, ReadBack read_back = {}) override;

 protected:
  absl::Status DoWrite(Lane& lane, Storage& dst, int64_t offset, const void* src,
                       int64_t n) override;
  absl::Status DoRead(Lane& lane, const Storage& src, int64_t offset, void* dst,
                      int64_t n) override;
  absl::StatusOr<std::byte*> RawAllocate(int64_t bytes, bool zero, Lane* lane, void** tag) override;
  void RawFree(std::byte* p, int64_t bytes, void* tag) override;

 private:
  // Workers that share each op with the calling thread.
  ThreadPool pool_;
};

// Physical memory of this machine in bytes.
int64_t PhysicalMemoryBytes();

}  // namespace tc::runtime
