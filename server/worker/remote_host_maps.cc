// RemoteDevice (remote_device.h): callers' shared memory mapped by the worker as well, so
// writes from it and read-backs into it need no staging buffer.
#include "server/worker/remote_device_internal.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>

namespace tc::server::worker {

std::shared_ptr<void> RemoteDevice::MapShared(void* p, int64_t n, bool read_only, int fd) {
  if (fd < 0 || n <= 0) return nullptr;
  const int mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (mine < 0) return nullptr;
  const uint64_t key = Address(static_cast<std::byte*>(p));
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    if (host_maps_.count(key) != 0) {
      close(mine);
      return nullptr;
    }
    id = ++host_ids_;
    host_maps_[key] = HostMap{n, read_only, mine, -1, id};
  }
  // Mapped by the worker now (pinning takes milliseconds: not in a request's way later).
  absl::Status s;
  if (auto c = Take(); c.ok()) {
    s = MapHost(**c, id);
    Give(*std::move(c));
  } else {
    s = c.status();
  }
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(host_mu_);
    close(host_maps_[key].fd);
    host_maps_.erase(key);
    return nullptr;
  }
  return std::shared_ptr<void>(p, [this, key](void*) {
    WithPeer(this, [&] { const_cast<RemoteDevice*>(this)->UnmapHost(key); });
  });
}

void RemoteDevice::UnmapHost(uint64_t key) {
  int64_t g = -1;
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    auto it = host_maps_.find(key);
    if (it == host_maps_.end()) return;
    close(it->second.fd);
    g = it->second.generation;
    id = it->second.id;
    host_maps_.erase(it);
  }
  if (g != generation()) return;  // Gone with the worker that mapped it.
  std::lock_guard<std::mutex> lock(frees_mu_);
  if (unmaps_generation_ != g) {
    unmaps_.clear();
    unmaps_generation_ = g;
  }
  unmaps_.push_back(id);
}

absl::StatusOr<std::pair<uint64_t, int64_t>> RemoteDevice::FindHost(const void* p,
                                                                    int64_t n) const {
  const uint64_t at = Address(static_cast<const std::byte*>(p));
  std::lock_guard<std::mutex> lock(host_mu_);
  auto it = host_maps_.upper_bound(at);
  if (it != host_maps_.begin() && n >= 0) {
    --it;
    const uint64_t into = at - it->first;
    if (into <= static_cast<uint64_t>(it->second.bytes) &&
        static_cast<uint64_t>(n) <= static_cast<uint64_t>(it->second.bytes) - into) {
      return std::make_pair(it->second.id, static_cast<int64_t>(into));
    }
  }
  return absl::NotFoundError("not in shared memory this device maps");
}

bool RemoteDevice::Reaches(const void* host, int64_t n) const { return FindHost(host, n).ok(); }

absl::Status RemoteDevice::MapHost(Connection& c, uint64_t id) const {
  pb::Request request;
  int fd = -1;
  const auto find = [this, id] {
    return std::find_if(host_maps_.begin(), host_maps_.end(),
                        [id](const auto& e) { return e.second.id == id; });
  };
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    auto it = find();
    if (it == host_maps_.end()) return absl::NotFoundError("shared memory no longer mapped");
    if (it->second.generation == c.generation) return absl::OkStatus();
    fd = fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
    auto* m = request.mutable_map_host();
    m->set_key(id);
    m->set_bytes(it->second.bytes);
    m->set_read_only(it->second.read_only);
  }
  if (fd < 0) return absl::ResourceExhaustedError(absl::StrCat("dup: ", strerror(errno)));
  pb::Reply reply;
  absl::Status s = Call(c, request, &reply, {fd});
  close(fd);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(host_mu_);
  auto it = find();
  if (it != host_maps_.end()) it->second.generation = c.generation;
  return absl::OkStatus();
}

absl::Status RemoteDevice::DoWritePinned(runtime::Lane& lane, runtime::Storage& dst, int64_t offset,
                                         const void* src, int64_t n) {
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) return c.status();
  auto from = FindHost(src, n);
  if (!from.ok() || !MapHost(**c, from->first).ok()) return Write(lane, dst, offset, src, n);
  // Straight from the worker's own mapping; the outcome is the next exchange's on the lane.
  if (absl::Status s = Settle(**c); !s.ok()) return s;
  pb::Request request;
  auto* w = request.mutable_write();
  w->set_data(Address(dst.data()));
  w->set_offset(offset);
  w->set_bytes(n);
  w->mutable_host()->set_key(from->first);
  w->mutable_host()->set_at(from->second);
  return Post(**c, request);
}

}  // namespace tc::server::worker
