#include "server/data/regions.h"

#include <fcntl.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/env/grpc_status.h"
#include "server/data/resident.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

namespace tc::server {

absl::Status CheckRegionRange(const Region& r, int64_t offset, int64_t n, int64_t align,
                              const std::string& what) {
  if (offset < 0 || n < 0 || offset > r.bytes || n > r.bytes - offset) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": bytes [", offset, ", +", n,
                                                   ") are outside region '", r.id, "' of ", r.bytes,
                                                   " bytes"));
  }
  if (align > 1 && offset % align != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": region offset ", offset, " is not a multiple of the element size ", align));
  }
  return absl::OkStatus();
}

RegionStore::RegionStore(RegionOptions options, runtime::DeviceSet* devices, MappedBytes* mapped)
    : options_(options), devices_(devices), mapped_(mapped) {}

RegionStore::~RegionStore() = default;

bool RegionStore::OpenConnection(uint64_t connection, int64_t pid, int64_t uid, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  int same_pid = 0, same_uid = 0;
  for (const auto& [id, c] : open_) {
    same_pid += pid >= 0 && c.pid == pid;
    same_uid += uid >= 0 && c.uid == uid;
  }
  if (same_pid >= options_.max_connections_per_process) {
    *why = absl::StrCat("error this process has ", same_pid,
                        " connections to the region socket, its limit: use one");
    return false;
  }
  if (same_uid >= options_.max_connections_per_user) {
    *why = absl::StrCat("error this user has ", same_uid,
                        " connections to the region socket, its limit");
    return false;
  }
  if (static_cast<int>(open_.size()) >= options_.max_connections) {
    *why = absl::StrCat("error the region socket has ", open_.size(),
                        " connections, each holding regions or tickets: try again later");
    return false;
  }
  open_[connection] = Connection{pid, uid, absl::Now(), 0};
  return true;
}

void RegionStore::Touch(uint64_t connection) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = open_.find(connection); it != open_.end()) it->second.last_active = absl::Now();
}

int RegionStore::connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(open_.size());
}

std::vector<uint64_t> RegionStore::IdleConnections(absl::Time now, bool one) const {
  std::vector<uint64_t> out;
  std::lock_guard<std::mutex> lock(mu_);
  const Connection* oldest = nullptr;
  uint64_t oldest_id = 0;
  for (const auto& [id, c] : open_) {
    if (c.held > 0) continue;
    if (one) {
      if (oldest == nullptr || c.last_active < oldest->last_active) {
        oldest = &c;
        oldest_id = id;
      }
    } else if (now - c.last_active >= options_.idle_timeout) {
      out.push_back(id);
    }
  }
  if (oldest != nullptr) out.push_back(oldest_id);
  return out;
}

std::string RegionStore::Ticket(Offer pending) {
  const uint64_t connection = pending.connection;
  std::lock_guard<std::mutex> lock(mu_);
  auto conn = open_.find(connection);
  if (conn == open_.end()) return "error the connection is closing";
  int mine = 0;
  for (const auto& [ticket, p] : pending_) mine += p.connection == connection;
  if (mine >= options_.max_pending) {
    return absl::StrCat("error more than ", options_.max_pending,
                        " tickets not yet claimed on this connection: claim them "
                        "(RegisterRegion) first");
  }
  if (static_cast<int>(pending_.size()) >= options_.max_pending_total) {
    return absl::StrCat("error the server holds ", pending_.size(),
                        " tickets not yet claimed, its limit: try again later");
  }
  const std::string ticket = NewHandle();
  const int64_t bytes = pending.bytes;
  const bool sized = pending.fd != nullptr;
  pending.expires = absl::Now() + options_.ticket_ttl;
  pending_[ticket] = std::move(pending);
  conn->second.held += 1;
  // A handle's extent is known once it is opened, at the claim.
  return sized ? absl::StrCat("ticket ", ticket, " ", bytes) : absl::StrCat("ticket ", ticket);
}

absl::StatusOr<std::shared_ptr<Region>> RegionStore::Materialize(const Offer& p) {
  if (p.fd == nullptr) {
    if (p.device->failed()) return p.device->health();
    runtime::IpcMemory* ipc = p.device->ipc();
    if (ipc == nullptr) {
      return absl::InvalidArgumentError("this server's devices do not open CUDA IPC handles");
    }
    auto opened = ipc->OpenIpc(p.ipc_handle);
    if (!opened.ok()) return absl::InvalidArgumentError(opened.status().message());
    // Its size against the owner's quota: checked by the claim once it is known.
    auto charge = mapped_->Charge(opened->bytes, "the CUDA IPC memory");
    if (!charge.ok()) return charge.status();
    return std::make_shared<Region>(DeviceMemory{opened->data, p.device, std::move(opened->closer)},
                                    opened->bytes, true, p.connection, *std::move(charge));
  }
  auto charge = mapped_->Charge(p.bytes, "the region");
  if (!charge.ok()) return charge.status();
  // The seals may have changed since the ticket: a write seal added since makes a writable
  // shared mapping impossible.
  const int seals = fcntl(*p.fd, F_GET_SEALS);
  const bool writable =
      p.writable && seals >= 0 && (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) == 0;
  const int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  const auto size = static_cast<size_t>(p.bytes);
  void* m = mmap(nullptr, size, prot, MAP_SHARED, *p.fd, 0);
  if (m == MAP_FAILED) {
    const std::string why =
        absl::StrCat("mapping the region's ", p.bytes, " bytes: ", std::strerror(errno));
    return errno == ENOMEM ? absl::ResourceExhaustedError(why) : absl::InvalidArgumentError(why);
  }
  std::shared_ptr<void> mapping(m, [size](void* q) { munmap(q, size); });
  return std::make_shared<Region>(HostMapping{static_cast<std::byte*>(m), std::move(mapping), {}},
                                  p.bytes, writable, p.connection, *std::move(charge));
}

absl::Status RegionStore::QuotaLocked(const std::string& owner, int64_t bytes) const {
  Usage u;
  if (auto it = usage_.find(owner); it != usage_.end()) u = it->second;
  if (u.regions < options_.max_regions && bytes <= options_.quota_bytes - u.bytes) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("registering ", bytes, " bytes would exceed this client's region quota (",
                   u.regions, " of ", options_.max_regions, " regions, ", u.bytes, " of ",
                   options_.quota_bytes, " bytes registered); unregister some first"));
}

absl::StatusOr<std::shared_ptr<Region>> RegionStore::Claim(const std::string& owner,
                                                           const std::string& ticket,
                                                           const std::string& name) {
  Offer p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(ticket);
    if (it == pending_.end()) {
      return absl::NotFoundError(
          "no such region ticket (unknown, already claimed, expired, or its socket connection "
          "closed)");
    }
    p = std::move(it->second);
    pending_.erase(it);
    if (auto c = open_.find(p.connection); c != open_.end()) {
      c->second.held -= 1;
      c->second.last_active = absl::Now();  // Not idle while its region is made.
    }
    // A handle's size is known once it is opened: its count and the bytes so far first.
    if (auto q = QuotaLocked(owner, p.bytes); !q.ok()) return q;
  }
  // Mapped (or opened) and pinned for the GPU before anyone can use it, outside the lock
  // (pinning a large mapping takes milliseconds).
  auto made = Materialize(p);
  if (!made.ok()) return made.status();
  std::shared_ptr<Region> region = *std::move(made);
  // One pin serves every device of this process; a device computed for by another process
  // (a worker) maps the file there itself.
  if (const auto* host = std::get_if<HostMapping>(&region->memory()); options_.pin && host) {
    std::vector<std::shared_ptr<void>> pins;
    bool pinned_here = false;
    for (int i = 0; i < devices_->size(); ++i) {
      runtime::HostMaps* maps = devices_->at(i).host_maps();
      if (maps == nullptr || (!maps->maps_shared_memory_itself() && pinned_here)) continue;
      const int fd = p.fd != nullptr ? *p.fd : -1;
      auto pin = maps->MapShared(host->base, region->bytes, !region->writable, fd);
      if (pin == nullptr) continue;
      pinned_here = pinned_here || !maps->maps_shared_memory_itself();
      pins.push_back(std::move(pin));
    }
    if (pins.size() == 1) {
      region->SetPin(std::move(pins[0]));
    } else if (!pins.empty()) {
      auto all = std::make_shared<std::vector<std::shared_ptr<void>>>(std::move(pins));
      region->SetPin(std::shared_ptr<void>(all, all.get()));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_.contains(region->connection)) {
    return absl::NotFoundError("the region's socket connection closed while it was claimed");
  }
  if (auto q = QuotaLocked(owner, region->bytes); !q.ok()) return q;  // Others claimed since.
  AddLocked(owner, name, region);
  return region;
}

void RegionStore::AddLocked(const std::string& owner, const std::string& name,
                            const std::shared_ptr<Region>& region) {
  Usage& u = usage_[owner];
  u.regions += 1;
  u.bytes += region->bytes;
  total_bytes_ += region->bytes;
  if (auto c = open_.find(region->connection); c != open_.end()) c->second.held += 1;
  region->id = NewHandle();
  region->owner = owner;
  region->name = name;
  regions_[region->id] = region;
}

absl::StatusOr<std::shared_ptr<Region>> RegionStore::Adopt(const std::string& owner,
                                                           const std::string& name,
                                                           std::shared_ptr<Region> region) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, r] : regions_) {
    if (r->owner == owner && r->connection == kNoConnection && r->name == name) {
      return absl::AlreadyExistsError(
          absl::StrCat("a shared-memory region named '", Echo(name), "' is already registered"));
    }
  }
  if (auto q = QuotaLocked(owner, region->bytes); !q.ok()) return q;
  AddLocked(owner, name, region);
  return region;
}

absl::StatusOr<std::shared_ptr<Region>> RegionStore::Find(const std::string& owner,
                                                          const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second->owner != owner) {
    return absl::NotFoundError(absl::StrCat(
        "no such region '", Echo(id), "' (unknown, unregistered, or its client disconnected)"));
  }
  if (it->second->file() != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region '", Echo(id), "' is system shared memory, which KServe v2 requests name"));
  }
  return it->second;
}

absl::StatusOr<std::shared_ptr<Region>> RegionStore::FindNamed(const std::string& owner,
                                                               const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, r] : regions_) {
    if (r->owner == owner && r->connection == kNoConnection && r->name == name) return r;
  }
  return absl::NotFoundError(
      absl::StrCat("no shared-memory region named '", Echo(name), "' is registered"));
}

void RegionStore::Remove(const std::string& id) {
  auto it = regions_.find(id);
  if (it == regions_.end()) return;
  const Region& r = *it->second;
  auto u = usage_.find(r.owner);
  if (u != usage_.end()) {
    u->second.bytes -= r.bytes;
    if (--u->second.regions == 0) usage_.erase(u);
  }
  total_bytes_ -= r.bytes;
  if (auto c = open_.find(r.connection); c != open_.end()) {
    c->second.held -= 1;
    c->second.last_active = absl::Now();
  }
  regions_.erase(it);
}

absl::Status RegionStore::Unregister(const std::string& owner, const std::string& id) {
  std::shared_ptr<Region> gone;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second->owner != owner) {
    return absl::NotFoundError(absl::StrCat("no such region '", Echo(id), "'"));
  }
  gone = it->second;
  Remove(id);
  return absl::OkStatus();
}

void RegionStore::CloseConnection(uint64_t connection) {
  // Unmapped (and unpinned) outside the lock, once no request holds them; descriptors of
  // tickets closed there too.
  std::vector<std::shared_ptr<Region>> gone;
  std::vector<Offer> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(connection);
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    if (it->second.connection == connection) {
      dropped.push_back(std::move(it->second));
      pending_.erase(it);
    }
    it = next;
  }
  std::vector<std::string> ids;
  for (const auto& [id, r] : regions_) {
    if (r->connection == connection) ids.push_back(id);
  }
  for (const std::string& id : ids) {
    gone.push_back(regions_[id]);
    Remove(id);
  }
}

void RegionStore::ExpireTickets(absl::Time now) {
  std::vector<Offer> gone;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    if (it->second.expires <= now) {
      if (auto c = open_.find(it->second.connection); c != open_.end()) {
        c->second.held -= 1;
        c->second.last_active = now;
      }
      gone.push_back(std::move(it->second));
      pending_.erase(it);
    }
    it = next;
  }
}

std::vector<std::shared_ptr<Region>> RegionStore::List(const std::string& owner) const {
  std::vector<std::shared_ptr<Region>> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, r] : regions_) {
    if (r->owner == owner && r->file() == nullptr) out.push_back(r);
  }
  return out;
}

std::vector<std::shared_ptr<Region>> RegionStore::ListNamed(const std::string& owner,
                                                            const std::string& name) const {
  std::vector<std::shared_ptr<Region>> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, r] : regions_) {
    if (r->owner == owner && r->connection == kNoConnection && (name.empty() || r->name == name)) {
      out.push_back(r);
    }
  }
  return out;
}

int64_t RegionStore::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(regions_.size());
}

int64_t RegionStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_bytes_;
}

}  // namespace tc::server
