// What the parts of RemoteDevice share (remote_device.h): a worker process and a connection
// to it, the lane over a connection, the devices of this process, and the timings. Included by
// the files that define RemoteDevice, by idea:
//   remote_device.cc      spawning the worker, supervising and replacing it;
//   remote_calls.cc       the lane pool (connections) and the request/reply protocol;
//   remote_memory.cc      allocation, frees carried along with requests, writes and reads;
//   remote_sharing.cc     device-to-device copies through another worker's exported pool;
//   remote_host_maps.cc   callers' shared memory mapped by the worker too;
//   remote_run.cc         runs: sent without waiting, completed by one thread, small ones inline.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/worker/channel.h"
#include "server/worker/remote_device.h"
#include "tensorcompute/worker/worker.pb.h"

namespace tc::server::worker {

namespace pb = ::tensorcompute::worker;

// How long a worker's device may take to come up (a GPU's first context: seconds).
inline constexpr int kStartTimeoutMs = 120000;
// The wait before a new worker; doubled while workers keep failing soon after they start.
inline constexpr absl::Duration kFirstBackoff = absl::Milliseconds(500);
inline constexpr absl::Duration kMaxBackoff = absl::Seconds(30);
// A worker that served this long before failing starts the next one after the first backoff.
inline constexpr absl::Duration kHealthyRun = absl::Seconds(60);
// How long a caller polls for a worker's reply before it sleeps.
inline constexpr absl::Duration kReplySpin = absl::Microseconds(50);
// How long the completion thread of a GPU's worker polls after a reply before it sleeps: past
// the gap between one request's reply and the next request's (a client's round trip), so that
// a steady stream of requests costs it no wake-ups.
inline constexpr absl::Duration kCompletionPoll = absl::Microseconds(500);
// With this many runs awaited by the completion thread, a small request's caller waits for its
// own reply instead: one thread finishing every reply would become the bottleneck.
inline constexpr int kAwaitedAtMost = 4;
// Frees one request carries at most (up to 10 bytes each in a message of at most 192 KiB).
inline constexpr size_t kFreesPerRequest = 4096;

inline uint64_t Address(const std::byte* p) { return reinterpret_cast<uintptr_t>(p); }

// The devices of this process not yet destroyed: one device asks another (an importer to let
// go of an allocation, an exporter to free it after) only while it is here.
inline std::mutex peers_mu;
inline std::set<const RemoteDevice*>& Peers() {
  static auto* peers = new std::set<const RemoteDevice*>;
  return *peers;
}
template <typename F>
bool WithPeer(const RemoteDevice* d, F f) {
  std::lock_guard<std::mutex> lock(peers_mu);
  if (Peers().count(d) == 0) return false;
  f();
  return true;
}

struct RemoteDevice::Worker {
  pid_t pid = 0;
  std::unique_ptr<Channel> control;
  absl::Time started;
  ~Worker() {
    control.reset();  // The worker leaves when its control connection closes...
    if (pid > 0) {
      kill(pid, SIGKILL);  // ...and at once when told.
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
};

struct RemoteDevice::Connection {
  std::unique_ptr<Channel> channel;
  std::byte* staging = nullptr;
  int64_t staging_bytes = 0;
  // Requests sent whose reply is yet to be received (writes and reads in a pipeline: the
  // lane's owner alone), and the half of the staging buffer the next one uses.
  int pending = 0;
  int next_half = 0;
  int64_t generation = 0;
  // One exchange at a time: a call waits while a run's reply is awaited.
  std::mutex mu;
  std::condition_variable idle;
  bool running = false;
  // The run in flight: what its reply leaves in the staging buffer is taken out by
  // `take_out` before the connection serves another exchange; then `done`.
  std::function<void(const absl::Status& io, const pb::Reply& reply)> take_out;
  std::function<void(absl::Status)> done;
  ~Connection() {
    if (staging != nullptr) munmap(staging, static_cast<size_t>(staging_bytes));
  }
};

// Half a connection's staging buffer (4 KiB aligned): transfers alternate between the two.
inline int64_t Half(const RemoteDevice::Connection& c) {
  const int64_t half = c.staging_bytes / 2 / 4096 * 4096;
  return half > 0 ? half : c.staging_bytes;
}

class RemoteLane final : public runtime::Lane {
 public:
  RemoteLane(std::shared_ptr<RemoteDevice::Connection> c, std::function<void()> give_back)
      : connection(std::move(c)), give_back_(std::move(give_back)) {}
  ~RemoteLane() override { give_back_(); }
  // Null where no worker could be reached: every call on the lane then fails.
  std::shared_ptr<RemoteDevice::Connection> connection;

 private:
  std::function<void()> give_back_;
};

// The connection of a lane of `d`'s (AcquireLane): UNAVAILABLE, or the device's failure,
// where no worker could be reached when the lane was taken.
absl::StatusOr<RemoteDevice::Connection*> LaneConnection(runtime::Lane& lane,
                                                         const runtime::Device& d);

}  // namespace tc::server::worker
