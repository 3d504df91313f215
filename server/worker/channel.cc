#include "server/worker/channel.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sched.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace tc::server::worker {
namespace {
constexpr int kMaxFds = 4;
}

Channel::~Channel() {
  if (fd_ >= 0) close(fd_);
}

absl::Status Channel::Send(const google::protobuf::MessageLite& m, const std::vector<int>& fds) {
  // Every packet starts with one marker byte, so that no message reads as the zero-length
  // packet that is the other end closing.
  std::string bytes(1, 'M');
  if (!m.AppendToString(&bytes) || bytes.size() > static_cast<size_t>(kMaxPacketBytes)) {
    return absl::InternalError("worker message too large to send");
  }
  if (fds.size() > static_cast<size_t>(kMaxFds)) return absl::InternalError("too many fds");
  iovec iov{bytes.data(), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  while (true) {
    const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n >= 0) return absl::OkStatus();
    if (errno == EINTR) continue;
    return absl::UnavailableError(absl::StrCat("send: ", strerror(errno)));
  }
}

absl::Status Channel::Receive(google::protobuf::MessageLite* m, std::vector<int>* fds) {
  buffer_.resize(kMaxPacketBytes);
  iovec iov{buffer_.data(), buffer_.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = -1;
  bool block = true;
  // A reply usually comes within microseconds: look for it a while before sleeping, which
  // saves the two wake-ups a round trip otherwise costs.
  const bool poll = spin_ > absl::ZeroDuration() &&
                    (gate_ == nullptr || gate_->polling.fetch_add(1) < gate_->max);
  if (poll) {
    const absl::Time until = absl::Now() + spin_;
    do {
      n = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
      if (n >= 0 || (errno != EAGAIN && errno != EINTR)) {
        block = false;
        break;
      }
      sched_yield();
    } while (absl::Now() < until);
  }
  if (spin_ > absl::ZeroDuration() && gate_ != nullptr) gate_->polling.fetch_sub(1);
  while (block) {
    n = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (n >= 0 || errno != EINTR) break;
  }
  if (n < 0) return absl::UnavailableError(absl::StrCat("receive: ", strerror(errno)));
  std::vector<int> got;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      got.push_back(fd);
    }
  }
  const auto close_all = [&got] {
    for (int fd : got) close(fd);
  };
  if (n == 0) {
    close_all();
    return absl::UnavailableError("the other process closed the connection");
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    close_all();
    return absl::InternalError("worker message truncated");
  }
  if (buffer_[0] != 'M' || !m->ParseFromArray(buffer_.data() + 1, static_cast<int>(n - 1))) {
    close_all();
    return absl::InternalError("worker message does not parse");
  }
  if (fds != nullptr) {
    *fds = std::move(got);
  } else {
    close_all();
  }
  return absl::OkStatus();
}

}  // namespace tc::server::worker
