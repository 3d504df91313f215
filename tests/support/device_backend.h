// A blocking Backend over a runtime Device: copies host inputs into device storage, runs, and
// copies the result back. What tests and benchmarks use to drive a device like the server does.
#pragma once

#include "kernels/engine.h"
#include "tests/support/backend.h"
#include "runtime/device.h"

namespace tc::runtime {

class DeviceBackend final : public Backend {
 public:
  // `small_first`: run what fits through Device::TryRunSmall, like the server's small
  // requests; the rest (and everything when it is false) through storage copies and Run.
  explicit DeviceBackend(Device* device, bool small_first = false)
      : device_(device), small_first_(small_first) {}
  absl::string_view name() const override { return device_->info().kind; }
  TileRule tile_rule() const override { return device_->tile_rule(); }
  absl::Status Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                   std::byte* out) override;

 private:
  Device* device_;
  bool small_first_;
};

}  // namespace tc::runtime
