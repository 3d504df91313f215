#include "server/data/region_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/env/grpc_status.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#include "util/fd_passing.h"

namespace tc::server {

namespace {

// Longest message a client sends ("register"); anything longer is an error.
constexpr size_t kMaxMessage = 256;
// The connection id of a refused socket, and how many are held at once.
constexpr uint64_t kRefused = 0;
constexpr size_t kMaxRefused = 64;
// sizeof(cudaIpcMemHandle_t).
constexpr size_t kIpcHandleBytes = 64;

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

// Reads one message of at most kMaxMessage bytes into `buf` without waiting, and takes every
// descriptor attached to it into `fds` (so that none leaks, whatever the message says); its
// msg_flags into `flags`. The bytes read; <= 0 where the connection closed or failed.
ssize_t ReceiveMessage(int conn, char* buf, std::vector<int>* fds, int* flags) {
  return ReceiveWithFds(conn, buf, kMaxMessage, fds, flags, MSG_DONTWAIT);
}

std::string OfferCuda(RegionStore& store, absl::string_view args, uint64_t connection) {
  runtime::DeviceSet& devices = *store.devices();
  const size_t space = args.find(' ');
  const absl::string_view uuid = args.substr(0, space);
  const absl::string_view hex = space == absl::string_view::npos ? "" : args.substr(space + 1);
  runtime::Device* device = nullptr;
  for (int i = 0; i < devices.size(); ++i) {
    if (!uuid.empty() && devices.at(i).info().uuid == uuid) device = &devices.at(i);
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
  Offer p;
  p.ipc_handle = absl::HexStringToBytes(hex);
  p.device = device;
  p.connection = connection;
  return store.Ticket(std::move(p));
}

std::string OfferMemfd(RegionStore& store, int fd, uint64_t connection) {
  const int64_t quota = store.options().quota_bytes;
  const int64_t limit = store.mapped()->limit();
  auto fail = [fd](const std::string& why) {
    close(fd);
    return "error " + why;
  };
  // Only a file that can be sealed against shrinking: a truncated mapping raises SIGBUS in
  // whoever touches it, and the seal makes truncation impossible from here on.
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return fail(
        "the descriptor is not a sealable memfd; create it with "
        "memfd_create(name, MFD_ALLOW_SEALING)");
  }
  if ((seals & F_SEAL_SHRINK) == 0) {
    if ((seals & F_SEAL_SEAL) != 0) {
      return fail(
          "the memfd cannot be sealed against shrinking: F_SEAL_SEAL is set without "
          "F_SEAL_SHRINK (add F_SEAL_SHRINK before F_SEAL_SEAL, or leave both)");
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
      const int flags = fcntl(fd, F_GETFL);
      if (flags >= 0 && (flags & O_ACCMODE) == O_RDONLY) {
        return fail(
            "the memfd was sent read-only, so it cannot be sealed against shrinking: "
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
  if (st.st_size > quota || st.st_size > limit) {
    return fail(absl::StrCat("a region of ", st.st_size, " bytes exceeds this server's ",
                             st.st_size > quota ? "per-client quota" : "limit", " of ",
                             std::min(quota, limit), " bytes"));
  }
  Offer p;
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
  return store.Ticket(std::move(p));
}

}  // namespace

std::string HandleRegionMessage(RegionStore& store, absl::string_view text, std::vector<int> fds,
                                uint64_t connection) {
  store.Touch(connection);
  std::string reply;
  if (text.size() > kMaxMessage) {
    reply = "error message too long: send \"register\" with one descriptor";
  } else if (absl::StartsWith(text, "cuda ") && fds.empty()) {
    reply = OfferCuda(store, text.substr(5), connection);
  } else if (text != "register") {
    reply =
        "error unknown message: send \"register\" with a memfd attached (SCM_RIGHTS), or "
        "\"cuda UUID HANDLE\"";
  } else if (fds.size() != 1) {
    reply = "error \"register\" needs exactly one file descriptor attached (SCM_RIGHTS)";
  } else {
    reply = OfferMemfd(store, fds[0], connection);
    fds.clear();  // OfferMemfd took it.
  }
  for (int fd : fds) close(fd);
  return reply;
}

RegionSocket::~RegionSocket() {
  if (server_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    server_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (!address_.empty() && address_[0] != '@') unlink(address_.c_str());
}

absl::Status RegionSocket::Listen(const std::string& address) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const bool abstract = absl::StartsWith(address, "@");
  if (address.size() < 2 || address.size() >= sizeof(sa.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("region socket '", address, "': needs 1 to ",
                                                   sizeof(sa.sun_path) - 2, " characters"));
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
  store_->set_address(address);
  server_ = std::thread([this] { Serve(); });
  return absl::OkStatus();
}

void RegionSocket::Serve() {
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
    store_->CloseConnection(ids[i]);
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
    store_->ExpireTickets(now);
    close_ids(store_->IdleConnections(now, /*one=*/false));
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
        bool opened = store_->OpenConnection(next_id, pid, uid, &why);
        if (!opened && store_->connections() >= store_->options().max_connections) {
          // Full, and this caller within its own limits: the connection idle longest that
          // holds nothing makes room.
          close_ids(store_->IdleConnections(now, /*one=*/true));
          opened = store_->OpenConnection(next_id, pid, uid, &why);
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

void RegionSocket::Discard(int conn) {
  char buf[kMaxMessage];
  std::vector<int> fds;
  int flags = 0;
  (void)ReceiveMessage(conn, buf, &fds, &flags);
  for (int fd : fds) close(fd);
}

std::string RegionSocket::Receive(int conn, uint64_t connection) {
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
  return HandleRegionMessage(*store_, absl::string_view(buf, static_cast<size_t>(got)),
                             std::move(received), connection);
}

}  // namespace tc::server
