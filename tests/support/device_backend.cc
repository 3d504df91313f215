#include "tests/support/device_backend.h"

#include <future>

namespace tc::runtime {

absl::Status DeviceBackend::Run(const PreparedOp& op, absl::Span<const TensorView> inputs,
                                std::byte* out) {
  const absl::Time deadline = absl::InfiniteFuture();
  std::unique_ptr<Lane> lane = device_->AcquireLane();
  if (QuickRuns* quick = device_->quick_runs(); small_first_ && quick != nullptr) {
    std::promise<absl::Status> finished;
    std::function<void(absl::Status)> done = [&finished](absl::Status s) {
      finished.set_value(std::move(s));
    };
    const std::vector<TensorView> host(inputs.begin(), inputs.end());
    if (quick->TryRunSmall(*lane, op, host, out, done)) return finished.get_future().get();
  }
  std::vector<StoragePtr> storages;
  std::vector<TensorView> views(inputs.begin(), inputs.end());
  for (TensorView& v : views) {
    auto s = device_->Allocate(v.storage_bytes, false, deadline);
    if (!s.ok()) return s.status();
    if (auto st = device_->Write(*lane, **s, 0, v.data, v.storage_bytes); !st.ok()) return st;
    v.data = (*s)->data();
    storages.push_back(*std::move(s));
  }
  const int64_t out_bytes = op.plan.out_storage_bytes;
  auto dev_out = device_->Allocate(out_bytes, op.plan.out_has_gaps, deadline);
  if (!dev_out.ok()) return dev_out.status();
  std::promise<absl::Status> finished;
  device_->Run(*lane, op, std::move(views), (*dev_out)->data(),
               [&finished](absl::Status s) { finished.set_value(std::move(s)); });
  if (absl::Status st = finished.get_future().get(); !st.ok()) return st;
  return device_->Read(*lane, **dev_out, 0, out, out_bytes);
}

}  // namespace tc::runtime
