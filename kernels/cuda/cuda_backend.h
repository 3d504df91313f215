// The CUDA backend: runs plans on one GPU. Plain C++ interface; the CUDA code stays in the .cu.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/engine.h"

namespace tc {

class CudaBackend : public Backend {
 public:
  // Number of usable CUDA devices; 0 when there is no driver or no device.
  static int DeviceCount();
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int device = 0);
  ~CudaBackend() override;

  absl::string_view name() const override { return "cuda"; }
  // Copies the inputs' storage to the device, runs the plan, and copies the result back.
  absl::Status Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                   std::byte* out) override;

  int device() const { return device_; }
  int multiprocessors() const { return multiprocessors_; }

 private:
  CudaBackend(int device, int multiprocessors) : device_(device), multiprocessors_(multiprocessors) {}
  // Streams are reused across calls; each call holds one for its duration.
  void* AcquireStream(absl::Status& status);
  void ReleaseStream(void* stream);

  int device_;
  int multiprocessors_;
  std::mutex mu_;
  std::vector<void*> free_streams_;
  std::vector<void*> all_streams_;
};

}  // namespace tc
