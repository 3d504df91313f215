// One connection between the front door and a device's worker process: a SOCK_SEQPACKET
// socket carrying one protobuf message per packet, optionally with descriptors (SCM_RIGHTS).
#pragma once

#include <atomic>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"

namespace tc::server::worker {

// The largest message (a Run with an expression's text and its views fits many times over).
// Below the socket's default send buffer (212,992 bytes on Linux), past which a packet fails
// to send as if the other end had gone.
inline constexpr int kMaxPacketBytes = 192 << 10;

// How many channels of a process may poll at once: each one polling keeps a core busy.
struct PollGate {
  explicit PollGate(int max_polling) : max(max_polling) {}
  const int max;
  std::atomic<int> polling{0};
};

class Channel {
 public:
  // Takes `fd`.
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  int fd() const { return fd_; }
  // How long Receive polls before it sleeps (0: it sleeps at once), where `gate` (if given)
  // lets it poll at all.
  void set_spin(absl::Duration d, PollGate* gate = nullptr) {
    spin_ = d;
    gate_ = gate;
  }
  // UNAVAILABLE where the other end has gone.
  absl::Status Send(const google::protobuf::MessageLite& m, const std::vector<int>& fds = {});
  // The next message, and the descriptors that came with it (owned by the caller). UNAVAILABLE
  // at the other end's close, INTERNAL for a packet that does not parse.
  absl::Status Receive(google::protobuf::MessageLite* m, std::vector<int>* fds = nullptr);

 private:
  int fd_;
  absl::Duration spin_ = absl::ZeroDuration();
  PollGate* gate_ = nullptr;
  std::vector<char> buffer_;
};

}  // namespace tc::server::worker
