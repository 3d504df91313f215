// RemoteDevice (remote_device.h): the worker's memory allocated and freed (frees go along
// with the next request), bytes written to it and read back through the staging buffer.
#include "server/worker/remote_device_internal.h"

#include <algorithm>
#include <cstring>

namespace tc::server::worker {

absl::StatusOr<std::byte*> RemoteDevice::RawAllocate(int64_t bytes, bool zero, runtime::Lane* lane,
                                                     void** tag) {
  std::shared_ptr<Connection> own;
  Connection* c = nullptr;
  if (lane != nullptr) {
    auto lc = LaneConnection(*lane, *this);
    if (!lc.ok()) return lc.status();
    c = *lc;
  } else {
    auto taken = Take();
    if (!taken.ok()) return taken.status();
    own = *std::move(taken);
    c = own.get();
  }
  pb::Request request;
  request.mutable_allocate()->set_bytes(bytes);
  request.mutable_allocate()->set_zero(zero);
  pb::Reply reply;
  absl::Status s = Call(*c, request, &reply);
  // The tag is the generation the bytes belong to: a worker since replaced took them along.
  // Read before the connection goes back: Give() drops one of a replaced worker.
  const int64_t g = c->generation;
  Give(std::move(own));
  if (!s.ok()) return s;
  *tag = reinterpret_cast<void*>(static_cast<uintptr_t>(g));
  return reinterpret_cast<std::byte*>(static_cast<uintptr_t>(reply.data()));
}

void RemoteDevice::RawFree(std::byte* p, int64_t /*bytes*/, void* tag) {
  const auto g = static_cast<int64_t>(reinterpret_cast<uintptr_t>(tag));
  if (g != generation()) return;  // Gone with the worker it belonged to.
  const uint64_t address = Address(p);
  Importers importers;
  std::string shared;
  {
    std::lock_guard<std::mutex> lock(share_mu_);
    if (pool_generation_ == g) {
      auto it = exported_.find(address);
      if (it != exported_.end()) {
        importers = std::move(it->second.importers);
        shared = std::move(it->second.shared);
        exported_.erase(it);
      }
    }
  }
  if (importers.empty()) {
    QueueFree(address, g);
    return;
  }
  // Other workers keep it mapped: freed once each of them let go of it.
  auto left = std::make_shared<std::atomic<size_t>>(importers.size());
  const std::function<void()> then = [this, left, address, g] {
    if (left->fetch_sub(1) != 1) return;
    WithPeer(this, [&] { QueueFree(address, g); });
  };
  const std::string key = PoolKey(g);
  for (const auto& importer : importers) {
    const RemoteDevice* d = importer.first;
    PendingUnshare u{importer.second, key, shared, false, then};
    if (!WithPeer(d, [&] { d->QueueUnshare(std::move(u)); })) then();
  }
}

void RemoteDevice::QueueFree(uint64_t address, int64_t g) {
  std::lock_guard<std::mutex> lock(frees_mu_);
  if (frees_generation_ != g) {
    if (g < frees_generation_) return;  // A worker since replaced took it along.
    frees_.clear();
    frees_generation_ = g;
  }
  frees_.push_back(address);
}

void RemoteDevice::FlushFrees() {
  {
    std::lock_guard<std::mutex> lock(frees_mu_);
    if (frees_.empty() && unmaps_.empty()) return;
  }
  if (flushing_.exchange(true)) return;  // The last one is still on its way.
  auto c = Take();
  if (!c.ok()) {
    flushing_ = false;
    return;
  }
  pb::Request request;  // No body: the frees alone.
  // Answered through the completion thread: a worker that does not answer never holds up the
  // supervisor.
  std::shared_ptr<Connection> connection = *std::move(c);
  Send(connection, request, nullptr, 0, 0, [this, connection](absl::Status) {
    Give(connection);
    flushing_ = false;
  });
}

absl::Status RemoteDevice::DoWrite(runtime::Lane& lane, runtime::Storage& dst, int64_t offset,
                                   const void* src, int64_t n) {
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) return c.status();
  Connection& cn = **c;
  const auto* from = static_cast<const std::byte*>(src);
  // Through the two halves of the staging buffer in turn: one is filled while the worker
  // copies the other to the device. Each write's outcome is the next exchange's on the lane.
  const int64_t half = Half(cn);
  for (int64_t done = 0; done < n;) {
    const int64_t m = std::min(n - done, half);
    const int64_t at = cn.next_half * half;
    std::memcpy(cn.staging + at, from + done, static_cast<size_t>(m));
    if (absl::Status s = Settle(cn); !s.ok()) return s;
    pb::Request request;
    auto* w = request.mutable_write();
    w->set_data(Address(dst.data()));
    w->set_offset(offset + done);
    w->set_bytes(m);
    w->set_staging_at(at);
    if (absl::Status s = Post(cn, request); !s.ok()) return s;
    cn.next_half ^= 1;
    done += m;
  }
  return absl::OkStatus();
}

absl::Status RemoteDevice::DoRead(runtime::Lane& lane, const runtime::Storage& src, int64_t offset,
                                  void* dst, int64_t n) {
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) return c.status();
  return ReadVia(**c, src.data() + offset, n, static_cast<std::byte*>(dst));
}

absl::Status RemoteDevice::ReadVia(Connection& c, const std::byte* src, int64_t n,
                                   std::byte* dst) const {
  if (absl::Status s = Settle(c); !s.ok()) return s;
  // Two reads in flight, each into its half of the staging buffer: one half is copied out
  // here while the worker fills the other.
  const int64_t half = Half(c);
  const int64_t chunks = (n + half - 1) / half;
  const auto post = [&](int64_t k) {
    pb::Request request;
    auto* r = request.mutable_read();
    r->set_data(Address(src));
    r->set_offset(k * half);
    r->set_bytes(std::min(half, n - k * half));
    r->set_staging_at((k % 2) * half);
    return Post(c, request);
  };
  absl::Status s;
  for (int64_t k = 0; k < std::min<int64_t>(chunks, 2) && s.ok(); ++k) s = post(k);
  for (int64_t k = 0; k < chunks && s.ok(); ++k) {
    s = ReceiveOne(c);
    if (!s.ok()) break;
    std::memcpy(dst + k * half, c.staging + (k % 2) * half,
                static_cast<size_t>(std::min(half, n - k * half)));
    if (k + 2 < chunks) s = post(k + 2);
  }
  if (!s.ok()) (void)Settle(c);
  return s;
}

absl::Status RemoteDevice::ReadAddress(const std::byte* src, int64_t n, std::byte* dst) const {
  auto c = Take();
  if (!c.ok()) return c.status();
  absl::Status s = ReadVia(**c, src, n, dst);
  Give(*std::move(c));
  return s;
}

}  // namespace tc::server::worker
