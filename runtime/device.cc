#include "runtime/device.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tc::runtime {

Storage::Storage(Device* device, std::byte* data, int64_t bytes, void* tag)
    : device_(device), data_(data), bytes_(bytes), tag_(tag), generation_(device->generation()) {}

Storage::~Storage() { device_->Free(data_, bytes_, tag_); }

absl::Status Storage::usable() const {
  if (absl::Status h = device_->health(); !h.ok()) return h;
  if (generation_ != device_->generation()) {
    return absl::UnavailableError(absl::StrCat(
        "device ", device_->info().index, " (", device_->info().kind,
        ") failed and started over since these bytes were stored: they were lost with it"));
  }
  return absl::OkStatus();
}

Device::Device(DeviceInfo info, int64_t budget, const DeviceOptions& options)
    : info_(std::move(info)),
      memory_(budget, options.memory_wait),
      fault_(options.inject_fault_at_run) {}

absl::Status Device::Charge(int64_t n, absl::Time deadline) {
  return memory_.Charge(n, deadline, [&] {
    return absl::ResourceExhaustedError(absl::StrCat(
        "device ", info_.index, " (", info_.kind, ") has no room for ", FormatBytes(n), ": ",
        FormatBytes(memory_in_use()), " of its ", FormatBytes(memory_budget()), " budget in use"));
  });
}

absl::StatusOr<std::shared_ptr<void>> Device::Reserve(int64_t bytes, absl::Time deadline) {
  if (bytes < 0) return absl::InvalidArgumentError("negative reservation size");
  if (absl::Status s = Charge(bytes, deadline); !s.ok()) return s;
  return std::shared_ptr<void>(this, [bytes](Device* d) { d->memory_.Uncharge(bytes); });
}

absl::StatusOr<StoragePtr> Device::Allocate(int64_t bytes, bool zero, absl::Time deadline,
                                            Lane* lane) {
  if (bytes < 0) return absl::InvalidArgumentError("negative allocation size");
  if (failed()) return health();
  const int64_t n = std::max<int64_t>(bytes, 1);
  if (absl::Status s = Charge(n, deadline); !s.ok()) return s;
  void* tag = nullptr;
  absl::StatusOr<std::byte*> p = RawAllocate(n, zero, lane, &tag);
  if (!p.ok()) {
    memory_.Uncharge(n);
    if (absl::IsResourceExhausted(p.status())) {
      return absl::ResourceExhaustedError(absl::StrCat("device ", info_.index, " (", info_.kind,
                                                       ") is out of memory allocating ",
                                                       FormatBytes(n)));
    }
    // The device failed underneath (the raw allocator marked it so where the error is one
    // it cannot recover from): answered like every request after a failure.
    return failed() ? health() : p.status();
  }
  return std::make_shared<Storage>(this, *p, n, tag);
}

void Device::Free(std::byte* p, int64_t bytes, void* tag) {
  RawFree(p, bytes, tag);
  memory_.Uncharge(bytes);
}

absl::Status Device::health() const {
  if (!failed()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "device ", info_.index, " (", info_.kind, ") has failed and ",
      recovers() ? "is starting over in a new worker process" : "needs a server restart", ": ",
      health_.failure().message()));
}

void Device::MarkFailed(const absl::Status& why) {
  if (health_.MarkFailed(why) && on_failure_) on_failure_(*this, why);
}

void Device::MarkRecovered() {
  generation_.fetch_add(1, std::memory_order_acq_rel);
  health_.Reset();
  if (on_recovery_) on_recovery_(*this);
}

namespace {

absl::Status PastTheEnd(const char* what) {
  return absl::OutOfRangeError(absl::StrCat(what, " past the end of the storage"));
}

// [offset, offset + n) inside `storage`: OUT_OF_RANGE naming what went past its end.
absl::Status CheckRange(const Storage& storage, int64_t offset, int64_t n, const char* what) {
  if (offset < 0 || n < 0 || offset > storage.bytes() - n) return PastTheEnd(what);
  return absl::OkStatus();
}

}  // namespace

absl::Status Device::Write(Lane& lane, Storage& dst, int64_t offset, const void* src, int64_t n) {
  if (absl::Status s = CheckRange(dst, offset, n, "write"); !s.ok()) return s;
  return DoWrite(lane, dst, offset, src, n);
}

absl::Status Device::WritePieces(Lane& lane, Storage& dst, int64_t offset,
                                 const std::vector<HostPiece>& pieces) {
  int64_t n = 0;
  for (const HostPiece& p : pieces) {
    if (p.bytes < 0 || p.bytes > dst.bytes() - n) return PastTheEnd("write");
    n += p.bytes;
  }
  if (absl::Status s = CheckRange(dst, offset, n, "write"); !s.ok()) return s;
  return DoWritePieces(lane, dst, offset, pieces);
}

absl::Status Device::CopyFromDevice(Lane& lane, Storage& dst, int64_t offset, const Device& from,
                                    const std::byte* src, int64_t n) {
  if (absl::Status s = CheckRange(dst, offset, n, "copy"); !s.ok()) return s;
  return DoCopyFromDevice(lane, dst, offset, from, src, n);
}

absl::Status Device::Read(Lane& lane, const Storage& src, int64_t offset, void* dst, int64_t n) {
  if (absl::Status s = CheckRange(src, offset, n, "read"); !s.ok()) return s;
  return DoRead(lane, src, offset, dst, n);
}

absl::Status Device::ReadPinned(Lane& lane, const Storage& src, int64_t offset, void* dst,
                                int64_t n) {
  if (absl::Status s = CheckRange(src, offset, n, "read"); !s.ok()) return s;
  return DoReadPinned(lane, src, offset, dst, n);
}

absl::Status Device::WritePinned(Lane& lane, Storage& dst, int64_t offset, const void* src,
                                 int64_t n) {
  if (absl::Status s = CheckRange(dst, offset, n, "write"); !s.ok()) return s;
  return DoWritePinned(lane, dst, offset, src, n);
}

absl::Status IpcMemory::CopyFromExported(Lane& lane, Storage& dst, int64_t offset,
                                         const std::string& pool_key, int pool_fd,
                                         const std::string& allocation, int64_t src_offset,
                                         int64_t n) {
  if (src_offset < 0) return PastTheEnd("copy");
  if (absl::Status s = CheckRange(dst, offset, n, "copy"); !s.ok()) return s;
  return DoCopyFromExported(lane, dst, offset, pool_key, pool_fd, allocation, src_offset, n);
}

absl::Status Device::DoWritePieces(Lane& lane, Storage& dst, int64_t offset,
                                   const std::vector<HostPiece>& pieces) {
  for (const HostPiece& p : pieces) {
    if (auto s = DoWrite(lane, dst, offset, p.data, p.bytes); !s.ok()) return s;
    offset += p.bytes;
  }
  return absl::OkStatus();
}

absl::Status Device::DoCopyFromDevice(Lane& /*lane*/, Storage& dst, int64_t offset,
                                      const Device& from, const std::byte* src, int64_t n) {
  if (!host_memory() || !from.host_memory()) {
    return absl::UnimplementedError(absl::StrCat("no copy from device ", from.info().index, " (",
                                                 from.info().kind, ") to device ", info_.index,
                                                 " (", info_.kind, ")"));
  }
  if (n > 0) std::memcpy(dst.data() + offset, src, static_cast<size_t>(n));
  return absl::OkStatus();
}

DeviceSet::DeviceSet(std::vector<std::unique_ptr<Device>> devices) : devices_(std::move(devices)) {
  if (devices_.empty()) return;
  tile_rule_ = devices_[0]->tile_rule();
  for (const auto& d : devices_) {
    if (d->tile_rule() != tile_rule_) tile_rule_ = TileRule::kDense;
  }
}

Device& DeviceSet::LeastLoaded() const {
  const int n = size();
  const int start = n > 1 ? static_cast<int>(next_.fetch_add(1, std::memory_order_relaxed) % n) : 0;
  // Usable ones first; then fewest requests in flight; then not nearly full (an eighth of
  // its budget free or more).
  const auto key = [](const Device& x) {
    const bool full = x.memory_budget() - x.memory_in_use() < x.memory_budget() / 8;
    return std::make_tuple(x.failed(), x.in_flight(), full);
  };
  Device* best = devices_[start].get();
  for (int k = 1; k < n; ++k) {
    Device* d = devices_[(start + k) % n].get();
    if (key(*d) < key(*best)) best = d;
  }
  return *best;
}

int DeviceSet::usable() const {
  int n = 0;
  for (const auto& d : devices_) n += d->failed() ? 0 : 1;
  return n;
}

bool DeviceSet::needs_restart() const {
  for (const auto& d : devices_) {
    if (d->failed() && !d->recovers()) return true;
  }
  return false;
}

std::string FormatBytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", v, kUnits[u]);
}

}  // namespace tc::runtime
