// A blocking Backend over a runtime Device: copies host inputs into device storage, runs, and
// copies the result back. What tests and benchmarks use to drive a device like the server does.
#pragma once

#include "kernels/engine.h"
#include "runtime/device.h"

namespace tc::runtime {

class DeviceBackend final : public Backend {
 public:
  explicit DeviceBackend(Device* device) : device_(device) {}
  absl::string_view name() const override { return device_->info().kind; }
  absl::Status Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                   std::byte* out) override;

 private:
  Device* device_;
};

}  // namespace tc::runtime
