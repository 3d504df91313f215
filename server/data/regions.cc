#include "server/data/regions.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/calls/grpc_status.h"
#include "server/data/resident.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

namespace tc::server {

namespace {

// Longest message a client sends ("register"); anything longer is an error.
constexpr size_t kMaxMessage = 256;
// The connection id of a refused socket, and how many are held at once.
constexpr uint64_t kRefused = 0;
constexpr size_t kMaxRefused = 64;
// sizeof(cudaIpcMemHandle_t).
constexpr size_t kIpcHandleBytes = 64;

std::string Errno(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// Reads one message of at most kMaxMessage bytes into `buf` without waiting, and takes every
// descriptor attached to it into `fds` (so that none leaks, whatever the message says); its
// msg_flags into `flags`. The bytes read; <= 0 where the connection closed or failed.
ssize_t ReceiveMessage(int conn, char* buf, std::vector<int>* fds, int* flags) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  iovec iov{buf, kMaxMessage};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t got = recvmsg(conn, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (got < 0) return got;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < n; ++k) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
      fds->push_back(fd);
    }
  }
  *flags = msg.msg_flags;
  return got;
}

}  // namespace

absl::Status CheckRegionRange(const Region& r, int64_t offset, int64_t n, int64_t align,
                              const std::string& what) {
  if (offset < 0 || n < 0 || offset > r.bytes || n > r.bytes - offset) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": bytes [", offset, ", +", n,
                                                   ") are outside region '", r.id, "' of ",
                                                   r.bytes, " bytes"));
  }
  if (align > 1 && offset % align != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": region offset ", offset,
                                                   " is not a multiple of the element size ",
                                                   align));
  }
  return absl::OkStatus();
}

RegionStore::RegionStore(RegionOptions options, runtime::DeviceSet* devices, MappedBytes* mapped)
    : options_(options), devices_(devices), mapped_(mapped) {}

RegionStore::~RegionStore() {
  if (server_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    server_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (!address_.empty() && address_[0] != '@') unlink(address_.c_str());
}

absl::Status RegionStore::Listen(const std::string& address) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const bool abstract = absl::StartsWith(address, "@");
  if (address.size() < 2 || address.size() >= sizeof(sa.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("region socket '", address,
                                                   "': needs 1 to ", sizeof(sa.sun_path) - 2,
                                                   " characters"));
  }
  std::memcpy(sa.sun_path, address.data(), address.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
  if (abstract) {
    sa.sun_path[0] = '\0';
  } else {
    len += 1;
    // A socket file left by an earlier server that did not stop cleanly.
    struct stat st;
    if (lstat(address.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(address.c_str());
  }
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return absl::InternalError(Errno("socket"));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
    absl::Status failed = absl::UnavailableError(Errno(absl::StrCat("region socket ", address)));
    close(listen_fd_);
    listen_fd_ = -1;  // so that another address may be tried
    return failed;
  }
  if (listen(listen_fd_, 64) != 0) return absl::InternalError(Errno("listen"));
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return absl::InternalError(Errno("eventfd"));
  address_ = address;
  server_ = std::thread([this] { Serve(); });
  return absl::OkStatus();
}

bool RegionStore::OpenConnection(uint64_t connection, int64_t pid, int64_t uid,
                                 std::string* why) {
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

void RegionStore::CloseConnection(uint64_t connection) { Drop(connection); }

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

void RegionStore::Serve() {
  // Index 0: the wake-up, 1: the listening socket, then one entry per connection.
  std::vector<pollfd> fds = {{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
  std::vector<uint64_t> ids = {0, 0};
  uint64_t next_id = 1;
  // Refused connections, held until they close or this time passes.
  absl::flat_hash_map<int, absl::Time> refused_until;
  auto erase_at = [&](size_t i) {
    close(fds[i].fd);
    fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(i));
  };
  auto close_at = [&](size_t i) {
    Drop(ids[i]);
    erase_at(i);
  };
  auto close_ids = [&](const std::vector<uint64_t>& gone) {
    for (uint64_t id : gone) {
      for (size_t i = 2; i < fds.size(); ++i) {
        if (ids[i] == id) {
          close_at(i);
          break;
        }
      }
    }
  };
  for (;;) {
    const int n = poll(fds.data(), fds.size(), 1000);
    const absl::Time now = absl::Now();
    ExpireTickets(now);
    close_ids(IdleConnections(now, /*one=*/false));
    if (n < 0 && errno != EINTR) return;
    if (n <= 0) continue;
    if (fds[0].revents != 0) break;
    // Requests on connections already open first: a burst of new ones waits a turn.
    for (size_t i = fds.size(); i-- > 2;) {
      bool drop = (fds[i].revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
      if (ids[i] == kRefused) {
        // Whatever the refused caller sends is read and dropped (descriptors closed) so that
        // closing leaves its one reply readable: a socket closed with unread data resets its
        // peer, refusal and all.
        if (!drop && (fds[i].revents & POLLIN)) Discard(fds[i].fd);
        if (drop || now >= refused_until[fds[i].fd]) {
          refused_until.erase(fds[i].fd);
          erase_at(i);
        }
        continue;
      }
      if (!drop && (fds[i].revents & POLLIN)) {
        const std::string reply = Receive(fds[i].fd, ids[i]);
        if (reply.empty()) {
          drop = true;
        } else if (send(fds[i].fd, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) {
          drop = true;
        }
      }
      if (drop) close_at(i);
    }
    if (fds[1].revents & POLLIN) {
      for (;;) {
        const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) break;
        ucred cred{};
        socklen_t cred_len = sizeof(cred);
        int64_t pid = -1, uid = -1;
        if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0) {
          pid = cred.pid;
          uid = cred.uid;
        }
        std::string why;
        bool opened = OpenConnection(next_id, pid, uid, &why);
        if (!opened && connections() >= options_.max_connections) {
          // Full, and this caller within its own limits: the connection idle longest that
          // holds nothing makes room.
          close_ids(IdleConnections(now, /*one=*/true));
          opened = OpenConnection(next_id, pid, uid, &why);
        }
        if (!opened) {
          // The refusal is the one reply the caller reads (to its first message); the socket
          // stays a moment, to read what the caller sends, unless too many are refused at once.
          (void)!send(c, why.data(), why.size(), MSG_NOSIGNAL);
          if (refused_until.size() >= kMaxRefused) {
            close(c);
          } else {
            refused_until[c] = now + absl::Seconds(2);
            fds.push_back({c, POLLIN, 0});
            ids.push_back(kRefused);
          }
          continue;
        }
        fds.push_back({c, POLLIN, 0});
        ids.push_back(next_id++);
      }
    }
  }
  for (size_t i = 2; i < fds.size(); ++i) close(fds[i].fd);
}

void RegionStore::Discard(int conn) {
  char buf[kMaxMessage];
  std::vector<int> fds;
  int flags = 0;
  (void)ReceiveMessage(conn, buf, &fds, &flags);
  for (int fd : fds) close(fd);
}

std::string RegionStore::Receive(int conn, uint64_t connection) {
  char buf[kMaxMessage];
  std::vector<int> received;
  int flags = 0;
  const ssize_t got = ReceiveMessage(conn, buf, &received, &flags);
  if (got <= 0 || (flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    for (int fd : received) close(fd);
    // Closed (or failed, or an empty message): the connection ends.
    if (got <= 0) return std::string();
    return "error message too long or too many descriptors: send \"register\" with one";
  }
  return HandleMessage(absl::string_view(buf, static_cast<size_t>(got)), std::move(received),
                       connection);
}

std::string RegionStore::HandleMessage(absl::string_view text, std::vector<int> fds,
                                       uint64_t connection) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = open_.find(connection); it != open_.end()) it->second.last_active = absl::Now();
  }
  std::string reply;
  if (text.size() > kMaxMessage) {
    reply = "error message too long: send \"register\" with one descriptor";
  } else if (absl::StartsWith(text, "cuda ") && fds.empty()) {
    reply = RegisterCuda(text.substr(5), connection);
  } else if (text != "register") {
    reply = "error unknown message: send \"register\" with a memfd attached (SCM_RIGHTS), or "
            "\"cuda UUID HANDLE\"";
  } else if (fds.size() != 1) {
    reply = "error \"register\" needs exactly one file descriptor attached (SCM_RIGHTS)";
  } else {
    reply = Register(fds[0], connection);
    fds.clear();  // Register took it.
  }
  for (int fd : fds) close(fd);
  return reply;
}

std::string RegionStore::Ticket(Pending pending) {
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

std::string RegionStore::RegisterCuda(absl::string_view args, uint64_t connection) {
  const size_t space = args.find(' ');
  const absl::string_view uuid = args.substr(0, space);
  const absl::string_view hex = space == absl::string_view::npos ? "" : args.substr(space + 1);
  runtime::Device* device = nullptr;
  for (int i = 0; i < devices_->size(); ++i) {
    if (!uuid.empty() && devices_->at(i).info().uuid == uuid) device = &devices_->at(i);
  }
  if (device == nullptr) {
    return absl::StrCat("error no GPU of this server has UUID '", Echo(uuid),
                        "' (ServerInfo lists its devices; the memory must be on one of them)");
  }
  if (device->failed()) return absl::StrCat("error ", device->health().message());
  if (hex.size() != 2 * kIpcHandleBytes ||
      !std::all_of(hex.begin(), hex.end(), [](char c) { return absl::ascii_isxdigit(c); })) {
    return absl::StrCat("error the CUDA IPC handle must be given as ", 2 * kIpcHandleBytes,
                        " hex digits (a cudaIpcMemHandle_t's ", kIpcHandleBytes, " bytes)");
  }
  Pending p;
  p.ipc_handle = absl::HexStringToBytes(hex);
  p.device = device;
  p.connection = connection;
  return Ticket(std::move(p));
}

std::string RegionStore::Register(int fd, uint64_t connection) {
  auto fail = [fd](const std::string& why) {
    close(fd);
    return "error " + why;
  };
  // Only a file that can be sealed against shrinking: a truncated mapping raises SIGBUS in
  // whoever touches it, and the seal makes truncation impossible from here on.
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return fail("the descriptor is not a sealable memfd; create it with "
                "memfd_create(name, MFD_ALLOW_SEALING)");
  }
  if ((seals & F_SEAL_SHRINK) == 0) {
    if ((seals & F_SEAL_SEAL) != 0) {
      return fail("the memfd cannot be sealed against shrinking: F_SEAL_SEAL is set without "
                  "F_SEAL_SHRINK (add F_SEAL_SHRINK before F_SEAL_SEAL, or leave both)");
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
      const int flags = fcntl(fd, F_GETFL);
      if (flags >= 0 && (flags & O_ACCMODE) == O_RDONLY) {
        return fail("the memfd was sent read-only, so it cannot be sealed against shrinking: "
                    "send a read-write descriptor (add F_SEAL_WRITE to make the region "
                    "input-only), or seal it with F_SEAL_SHRINK before sending");
      }
      return fail(Errno("the memfd cannot be sealed against shrinking"));
    }
    seals |= F_SEAL_SHRINK;
  }
  // Its size now that it can no longer shrink.
  struct stat st;
  if (fstat(fd, &st) != 0) return fail(Errno("fstat"));
  if (!S_ISREG(st.st_mode) || st.st_size <= 0) {
    return fail("the memfd is empty; size it (ftruncate) before registering it");
  }
  if (st.st_size > options_.quota_bytes || st.st_size > mapped_->limit()) {
    return fail(absl::StrCat("a region of ", st.st_size, " bytes exceeds this server's ",
                             st.st_size > options_.quota_bytes ? "per-client quota" : "limit",
                             " of ", std::min(options_.quota_bytes, mapped_->limit()),
                             " bytes"));
  }
  Pending p;
  p.fd = std::shared_ptr<const int>(new int(fd), [](const int* q) {
    close(*q);
    delete q;
  });
  p.bytes = st.st_size;
  // A write seal now or later makes the server's mapping read-only (a shared writable
  // mapping of a write-sealed memfd cannot be made).
  const int flags = fcntl(fd, F_GETFL);
  p.writable = (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) == 0 && flags >= 0 &&
               (flags & O_ACCMODE) != O_RDONLY;
  p.connection = connection;
  return Ticket(std::move(p));
}

absl::StatusOr<std::shared_ptr<Region>> RegionStore::Materialize(const Pending& p) {
  if (p.fd == nullptr) {
    if (p.device->failed()) return p.device->health();
    auto opened = p.device->OpenIpc(p.ipc_handle);
    if (!opened.ok()) return absl::InvalidArgumentError(opened.status().message());
    // Its size against the owner's quota: checked by the claim once it is known.
    auto charge = mapped_->Charge(opened->bytes, "the CUDA IPC memory");
    if (!charge.ok()) return charge.status();
    return std::make_shared<Region>(opened->data, opened->bytes, true, p.connection,
                                    std::move(opened->closer), p.device, *std::move(charge));
  }
  auto charge = mapped_->Charge(p.bytes, "the region");
  if (!charge.ok()) return charge.status();
  // The seals may have changed since the ticket: a write seal added since makes a writable
  // shared mapping impossible.
  const int seals = fcntl(*p.fd, F_GET_SEALS);
  const bool writable = p.writable && seals >= 0 &&
                        (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) == 0;
  const int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  const auto size = static_cast<size_t>(p.bytes);
  void* m = mmap(nullptr, size, prot, MAP_SHARED, *p.fd, 0);
  if (m == MAP_FAILED) {
    const std::string why = Errno(absl::StrCat("mapping the region's ", p.bytes, " bytes"));
    return errno == ENOMEM ? absl::ResourceExhaustedError(why) : absl::InvalidArgumentError(why);
  }
  std::shared_ptr<void> mapping(m, [size](void* q) { munmap(q, size); });
  return std::make_shared<Region>(static_cast<std::byte*>(m), p.bytes, writable, p.connection,
                                  std::move(mapping), nullptr, *std::move(charge));
}

absl::Status RegionStore::QuotaLocked(const std::string& owner, int64_t bytes) const {
  Usage u;
  if (auto it = usage_.find(owner); it != usage_.end()) u = it->second;
  if (u.regions < options_.max_regions && bytes <= options_.quota_bytes - u.bytes) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "registering ", bytes, " bytes would exceed this client's region quota (", u.regions,
      " of ", options_.max_regions, " regions, ", u.bytes, " of ", options_.quota_bytes,
      " bytes registered); unregister some first"));
}

absl::StatusOr<std::shared_ptr<Region>> RegionStore::Claim(const std::string& owner,
                                                          const std::string& ticket,
                                                          const std::string& name) {
  Pending p;
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
  for (int i = 0; options_.pin && region->device == nullptr && i < devices_->size() &&
                  region->pin == nullptr;
       ++i) {
    region->pin = devices_->at(i).PinHost(region->base, region->bytes, !region->writable);
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
          absl::StrCat("a shared-memory region named '", name, "' is already registered"));
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
  return it->second;
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

void RegionStore::Drop(uint64_t connection) {
  // Unmapped (and unpinned) outside the lock, once no request holds them; descriptors of
  // tickets closed there too.
  std::vector<std::shared_ptr<Region>> gone;
  std::vector<Pending> dropped;
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
  std::vector<Pending> gone;
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
    if (r->owner == owner) out.push_back(r);
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
