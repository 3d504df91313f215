#include "server/worker/channel.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sched.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "util/fd_passing.h"

namespace tc::server::worker {
namespace {
constexpr int kMaxFds = 4;  // of the worker protocol (fd_passing.h takes up to 16)
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
  if (SendWithFds(fd_, bytes.data(), bytes.size(), fds.data(), static_cast<int>(fds.size())) >= 0) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat("send: ", strerror(errno)));
}

absl::Status Channel::Receive(google::protobuf::MessageLite* m, std::vector<int>* fds) {
  buffer_.resize(kMaxPacketBytes);
  std::vector<int> got;
  int msg_flags = 0;
  const auto receive = [&](int flags) {
    return ReceiveWithFds(fd_, buffer_.data(), buffer_.size(), &got, &msg_flags, flags);
  };
  ssize_t n = -1;
  bool block = true;
  // A reply usually comes within microseconds: look for it a while before sleeping, which
  // saves the two wake-ups a round trip otherwise costs.
  const bool poll = spin_ > absl::ZeroDuration() &&
                    (gate_ == nullptr || gate_->polling.fetch_add(1) < gate_->max);
  if (poll) {
    const absl::Time until = absl::Now() + spin_;
    do {
      n = receive(MSG_DONTWAIT);
      if (n >= 0 || (errno != EAGAIN && errno != EINTR)) {
        block = false;
        break;
      }
      sched_yield();
    } while (absl::Now() < until);
  }
  if (spin_ > absl::ZeroDuration() && gate_ != nullptr) gate_->polling.fetch_sub(1);
  while (block) {
    n = receive(0);
    if (n >= 0 || errno != EINTR) break;
  }
  if (n < 0) return absl::UnavailableError(absl::StrCat("receive: ", strerror(errno)));
  const auto close_all = [&got] {
    for (int fd : got) close(fd);
  };
  if (n == 0) {
    close_all();
    return absl::UnavailableError("the other process closed the connection");
  }
  if (msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
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
