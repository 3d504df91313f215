// RemoteDevice (remote_device.h): device-to-device copies, the bytes read in place from the
// exporting worker's memory pool, and that pool's allocations let go of once every importer has.
#include "server/worker/remote_device_internal.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include "server/env/log.h"

namespace tc::server::worker {

void RemoteDevice::QueueUnshare(PendingUnshare u) const {
  {
    std::lock_guard<std::mutex> lock(unshare_mu_);
    unshares_.push_back(std::move(u));
  }
  wake_.notify_all();
}

void RemoteDevice::SendUnshares() {
  std::vector<PendingUnshare> batch;
  {
    std::lock_guard<std::mutex> lock(unshare_mu_);
    if (unshares_.empty()) return;
    batch.swap(unshares_);
  }
  const auto run = [](std::vector<std::function<void()>>& thens) {
    for (auto& t : thens) {
      if (t) t();
    }
  };
  // By pool and kind; at most this many allocations a message (up to 70 bytes each).
  constexpr size_t kPerRequest = 1024;
  std::map<std::pair<std::string, bool>, std::vector<PendingUnshare*>> groups;
  std::vector<std::function<void()>> now;
  const int64_t g = generation();
  for (PendingUnshare& u : batch) {
    // A worker since replaced had its mappings end with it.
    if (u.generation != g || failed()) {
      now.push_back(std::move(u.then));
    } else {
      groups[{u.pool_key, u.pool}].push_back(&u);
    }
  }
  run(now);
  for (auto& [what, us] : groups) {
    for (size_t i = 0; i < us.size(); i += kPerRequest) {
      std::vector<std::function<void()>> thens;
      pb::Request request;
      auto* unshare = request.mutable_unshare();
      unshare->set_pool_key(what.first);
      unshare->set_pool(what.second);
      for (size_t j = i; j < std::min(us.size(), i + kPerRequest); ++j) {
        if (!what.second) unshare->add_shared(us[j]->shared);
        thens.push_back(std::move(us[j]->then));
      }
      auto c = Take();
      if (!c.ok()) {  // No worker to ask: its mappings are gone, or go with it.
        run(thens);
        continue;
      }
      std::shared_ptr<Connection> connection = *std::move(c);
      Send(connection, request, nullptr, 0, 0,
           [this, connection, thens = std::move(thens), run](absl::Status) mutable {
             Give(connection);
             run(thens);
           });
    }
  }
}

void RemoteDevice::ForgetExports(int64_t g) {
  Importers importers;
  {
    std::lock_guard<std::mutex> lock(share_mu_);
    if (pool_generation_ != g) return;
    importers.swap(pool_importers_);
    exported_.clear();
    if (pool_fd_ >= 0) close(pool_fd_);
    pool_fd_ = -1;
    pool_generation_ = -1;
  }
  const std::string key = PoolKey(g);
  for (const auto& importer : importers) {
    const RemoteDevice* d = importer.first;
    PendingUnshare u{importer.second, key, "", true, nullptr};
    WithPeer(d, [&] { d->QueueUnshare(std::move(u)); });
  }
}

absl::Status RemoteDevice::DoCopyFromDevice(runtime::Lane& lane, runtime::Storage& dst,
                                            int64_t offset, const runtime::Device& from,
                                            const std::byte* src, int64_t n) {
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) return c.status();
  if (&from == this) {
    pb::Request request;
    auto* copy = request.mutable_copy();
    copy->set_data(Address(dst.data()));
    copy->set_offset(offset);
    copy->set_src(Address(src));
    copy->set_bytes(n);
    pb::Reply reply;
    return Call(**c, request, &reply);
  }
  const auto* other = dynamic_cast<const RemoteDevice*>(&from);
  if (other == nullptr) return Device::DoCopyFromDevice(lane, dst, offset, from, src, n);
  bool try_sharing = n > 0;
  {
    std::lock_guard<std::mutex> lock(share_mu_);
    try_sharing =
        try_sharing && std::find(unshared_.begin(), unshared_.end(), other) == unshared_.end();
  }
  if (try_sharing) {
    absl::Status s = CopyShared(lane, dst, offset, *other, src, n);
    if (s.code() != absl::StatusCode::kFailedPrecondition &&
        s.code() != absl::StatusCode::kUnimplemented) {
      return s;
    }
    {
      std::lock_guard<std::mutex> lock(share_mu_);
      unshared_.push_back(other);
    }
    Log(absl::StrCat("device ", info_.index, " copies from device ", other->info().index,
                     " through the host: ", s.message()));
  }
  // Between workers: through the host, a staging buffer's worth at a time.
  std::vector<std::byte> buffer(static_cast<size_t>(std::min(n, staging_bytes_)));
  for (int64_t done = 0; done < n;) {
    const int64_t m = std::min(n - done, static_cast<int64_t>(buffer.size()));
    if (absl::Status s = other->ReadAddress(src + done, m, buffer.data()); !s.ok()) return s;
    if (absl::Status s = Write(lane, dst, offset + done, buffer.data(), m); !s.ok()) return s;
    done += m;
  }
  return absl::OkStatus();
}

std::string RemoteDevice::PoolKey(int64_t g) const {
  return absl::StrCat("device ", info_.index, " worker ", g);
}

absl::StatusOr<int> RemoteDevice::SharedPool(Connection& c, std::string* key) const {
  *key = PoolKey(c.generation);
  const auto copy = [this]() -> absl::StatusOr<int> {
    const int fd = fcntl(pool_fd_, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return absl::ResourceExhaustedError(absl::StrCat("dup: ", strerror(errno)));
    return fd;
  };
  {
    std::lock_guard<std::mutex> lock(share_mu_);
    if (pool_fd_ >= 0 && pool_generation_ == c.generation) return copy();
  }
  // Asked without the lock held: a free (which takes it) never waits for a worker.
  pb::Request request;
  auto* share = request.mutable_share();
  share->set_pool(true);  // The pool alone.
  pb::Reply reply;
  std::vector<int> fds;
  absl::Status s = Call(c, request, &reply, {}, &fds);
  if (!s.ok()) {
    for (int fd : fds) close(fd);
    return s;
  }
  if (fds.size() != 1) {
    for (int fd : fds) close(fd);
    return absl::FailedPreconditionError("the worker sent no memory pool");
  }
  std::lock_guard<std::mutex> lock(share_mu_);
  if (pool_generation_ == c.generation && pool_fd_ >= 0) {
    close(fds[0]);  // Another caller got it first.
  } else if (c.generation >= pool_generation_) {
    if (pool_fd_ >= 0) close(pool_fd_);
    pool_fd_ = fds[0];
    pool_generation_ = c.generation;
    exported_.clear();  // Of a worker since replaced.
    pool_importers_.clear();
  } else {
    // Of a worker since replaced: handed out this once.
    return fds[0];
  }
  return copy();
}

absl::StatusOr<RemoteDevice::SharedRange> RemoteDevice::ShareWith(
    const std::byte* src, int64_t n, const RemoteDevice* importer,
    int64_t importer_generation) const {
  const uint64_t at = Address(src);
  const auto record = [&](Importers& to) {
    const auto who = std::make_pair(importer, importer_generation);
    if (std::find(to.begin(), to.end(), who) == to.end()) to.push_back(who);
  };
  {
    std::lock_guard<std::mutex> lock(share_mu_);
    auto it = exported_.upper_bound(at);
    if (pool_fd_ >= 0 && pool_generation_ == generation() && it != exported_.begin()) {
      --it;
      const uint64_t into = at - it->first;
      if (into <= static_cast<uint64_t>(it->second.bytes) &&
          n <= it->second.bytes - static_cast<int64_t>(into)) {
        const int fd = fcntl(pool_fd_, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) return absl::ResourceExhaustedError(absl::StrCat("dup: ", strerror(errno)));
        record(it->second.importers);
        record(pool_importers_);
        return SharedRange{PoolKey(pool_generation_), it->second.shared, static_cast<int64_t>(into),
                           fd};
      }
    }
  }
  // Not shared yet: asked of the worker that holds the bytes.
  auto theirs = Take();
  if (!theirs.ok()) return theirs.status();
  SharedRange range;
  pb::Request share;
  share.mutable_share()->set_data(at);
  share.mutable_share()->set_bytes(n);
  pb::Reply shared;
  absl::StatusOr<int> pool = SharedPool(**theirs, &range.pool_key);
  absl::Status s = pool.ok() ? Call(**theirs, share, &shared) : pool.status();
  const int64_t g = (*theirs)->generation;
  Give(*std::move(theirs));
  if (s.ok() && (shared.data() > at || shared.bytes() < n ||
                 static_cast<int64_t>(shared.data()) > shared.bytes() - n)) {
    s = absl::InternalError("the worker shared an allocation that does not hold the bytes");
  }
  if (!s.ok()) {
    if (pool.ok()) close(*pool);
    return s;
  }
  range.pool_fd = *pool;
  range.shared = shared.shared();
  range.offset = static_cast<int64_t>(shared.data());
  std::lock_guard<std::mutex> lock(share_mu_);
  if (pool_generation_ == g) {
    Exported& e = exported_[at - shared.data()];
    e.bytes = shared.bytes();
    e.shared = shared.shared();
    record(e.importers);
    record(pool_importers_);
  }
  return range;
}

absl::Status RemoteDevice::CopyShared(runtime::Lane& lane, runtime::Storage& dst, int64_t offset,
                                      const RemoteDevice& from, const std::byte* src, int64_t n) {
  auto c = LaneConnection(lane, *this);
  if (!c.ok()) return c.status();
  // The exporter's storage stays allocated until this returns: the caller holds it.
  auto range = from.ShareWith(src, n, this, (*c)->generation);
  if (!range.ok()) return range.status();
  pb::Request request;
  auto* copy = request.mutable_copy_shared();
  copy->set_data(Address(dst.data()));
  copy->set_offset(offset);
  copy->set_pool_key(range->pool_key);
  copy->set_shared(range->shared);
  copy->set_src_offset(range->offset);
  copy->set_bytes(n);
  pb::Reply reply;
  absl::Status s = Call(**c, request, &reply, {range->pool_fd});
  close(range->pool_fd);
  return s;
}

}  // namespace tc::server::worker
