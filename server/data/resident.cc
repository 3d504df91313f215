#include "server/data/resident.h"

#include <sys/random.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tc::server {

std::string NewHandle() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string out;
  for (unsigned char b : bytes) absl::StrAppendFormat(&out, "%02x", b);
  return out;
}

ResidentStore::ResidentStore(ResidentOptions options) : options_(options) {
  sweeper_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      stop_cv_.wait_for(lock, std::chrono::seconds(1));
      if (stop_) break;
      lock.unlock();
      Sweep(absl::Now());
      lock.lock();
    }
  });
}

ResidentStore::~ResidentStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  sweeper_.join();
}

absl::Duration ResidentStore::Ttl(int64_t ttl_seconds) const {
  if (ttl_seconds <= 0) return options_.default_ttl;
  return std::min(absl::Seconds(ttl_seconds), options_.max_ttl);
}

absl::Status ResidentStore::CheckQuota(const std::string& owner, int64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = usage_.find(owner);
  const Usage u = it == usage_.end() ? Usage{} : it->second;
  if (u.tensors + 1 > options_.max_tensors) {
    return absl::ResourceExhaustedError(
        absl::StrCat("resident tensor quota: this client already keeps ", u.tensors,
                     " tensors (limit ", options_.max_tensors, "); release some first"));
  }
  if (bytes > options_.quota_bytes - u.bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "resident tensor quota: keeping ", runtime::FormatBytes(bytes),
        " more would exceed this client's ", runtime::FormatBytes(options_.quota_bytes), " (",
        runtime::FormatBytes(u.bytes), " kept); release some first"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ResidentTensor>> ResidentStore::Add(const std::string& owner,
                                                                   runtime::StoragePtr storage,
                                                                   const TensorView& view,
                                                                   int64_t ttl_seconds) {
  if (auto s = CheckQuota(owner, storage->bytes()); !s.ok()) return s;
  auto t = std::make_shared<ResidentTensor>();
  t->handle = NewHandle();
  t->owner = owner;
  t->view = view;
  t->view.data = storage->data();
  t->view.storage_bytes = storage->bytes();
  t->storage = std::move(storage);
  t->expires = absl::Now() + Ttl(ttl_seconds);
  std::lock_guard<std::mutex> lock(mu_);
  Usage& u = usage_[owner];
  u.bytes += t->storage->bytes();
  ++u.tensors;
  total_bytes_ += t->storage->bytes();
  tensors_[t->handle] = t;
  return t;
}

absl::StatusOr<std::shared_ptr<ResidentTensor>> ResidentStore::Find(const std::string& owner,
                                                                    const std::string& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tensors_.find(handle);
  if (it == tensors_.end() || it->second->owner != owner || it->second->expires <= absl::Now()) {
    return absl::NotFoundError(absl::StrCat("no resident tensor with handle '", handle,
                                            "' (never created, released, or expired)"));
  }
  return it->second;
}

absl::StatusOr<int64_t> ResidentStore::Release(const std::string& owner,
                                               const std::string& handle) {
  std::shared_ptr<ResidentTensor> t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tensors_.find(handle);
    if (it == tensors_.end() || it->second->owner != owner) {
      return absl::NotFoundError(absl::StrCat("no resident tensor with handle '", handle,
                                              "' (never created, released, or expired)"));
    }
    t = std::move(it->second);
    tensors_.erase(it);
    Usage& u = usage_[owner];
    u.bytes -= t->storage->bytes();
    --u.tensors;
    if (u.tensors == 0) usage_.erase(owner);
    total_bytes_ -= t->storage->bytes();
  }
  // The storage itself goes when the last request using it finishes.
  return t->storage->bytes();
}

int ResidentStore::PlaceSession(const std::string& owner, const std::string& session,
                                const std::function<bool(int)>& keep,
                                const std::function<int(const std::vector<int>&)>& choose) {
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = affinity_.find(session);
  if (it != affinity_.end() && keep(it->second.position)) {
    it->second.last = now;
    return it->second.position;
  }
  std::vector<int>& counts = owner_sessions_[owner];
  const int position = choose(counts);
  if (position < 0) return position;
  if (counts.size() <= static_cast<size_t>(position)) counts.resize(position + 1, 0);
  if (it != affinity_.end()) {
    // The session moves.
    --counts[it->second.position];
    ++counts[position];
    it->second.position = position;
    it->second.last = now;
    return position;
  }
  int owned = 0;
  for (int c : counts) owned += c;
  if (owned < kMaxSessionsPerOwner && affinity_.size() < static_cast<size_t>(kMaxSessions)) {
    affinity_[session] = Affinity{owner, position, now};
    ++counts[position];
  } else if (owned == 0) {
    owner_sessions_.erase(owner);
  }
  return position;
}

int64_t ResidentStore::sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(affinity_.size());
}

absl::StatusOr<runtime::Device*> PlaceResident(runtime::DeviceSet& devices, ResidentStore& store,
                                               const std::string& owner, const std::string& session,
                                               int64_t bytes, std::optional<int> wanted) {
  if (wanted.has_value()) {
    for (int i = 0; i < devices.size(); ++i) {
      runtime::Device& d = devices.at(i);
      if (d.info().index != *wanted) continue;
      if (absl::Status h = d.health(); !h.ok()) return h;
      return &d;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("this server has no device ", *wanted, " (ServerInfo lists its devices)"));
  }
  if (devices.size() == 1) return &devices.at(0);
  const auto room = [&devices, bytes](int i) {
    const runtime::Device& d = devices.at(i);
    return !d.failed() && d.memory_budget() - d.memory_in_use() >= bytes;
  };
  const auto choose = [&](const std::vector<int>& sessions) {
    // Usable first, then with room, then fewest of this owner's sessions, then most free.
    const auto key = [&](int i) {
      const runtime::Device& d = devices.at(i);
      const int used = i < static_cast<int>(sessions.size()) ? sessions[i] : 0;
      return std::make_tuple(room(i), -used, d.memory_budget() - d.memory_in_use());
    };
    int best = -1;
    for (int i = 0; i < devices.size(); ++i) {
      if (devices.at(i).failed()) continue;
      if (best < 0 || key(i) > key(best)) best = i;
    }
    return best;
  };
  const int position = store.PlaceSession(owner, session, room, choose);
  // Every device failed: the first one answers with its failure.
  return &devices.at(position < 0 ? 0 : position);
}

int ResidentStore::Sweep(absl::Time now) {
  std::vector<std::shared_ptr<ResidentTensor>> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = affinity_.begin(); it != affinity_.end();) {
      if (now - it->second.last > absl::Minutes(10)) {
        auto owner = owner_sessions_.find(it->second.owner);
        if (owner != owner_sessions_.end()) {
          --owner->second[it->second.position];
          if (std::all_of(owner->second.begin(), owner->second.end(),
                          [](int c) { return c == 0; })) {
            owner_sessions_.erase(owner);
          }
        }
        affinity_.erase(it++);
      } else {
        ++it;
      }
    }
    for (auto it = tensors_.begin(); it != tensors_.end();) {
      if (it->second->expires <= now) {
        auto& t = it->second;
        Usage& u = usage_[t->owner];
        u.bytes -= t->storage->bytes();
        --u.tensors;
        if (u.tensors == 0) usage_.erase(t->owner);
        total_bytes_ -= t->storage->bytes();
        expired.push_back(std::move(t));
        tensors_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  // Freed outside the lock.
  return static_cast<int>(expired.size());
}

int64_t ResidentStore::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(tensors_.size());
}

int64_t ResidentStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_bytes_;
}

}  // namespace tc::server
