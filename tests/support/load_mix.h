// A mixed load for fault and soak tests: client threads, each with its own channel, issuing
// small unary adds, large streamed multiplies, resident round trips (upload, compute on the
// handle keeping the output resident, download, release), streams cancelled half way and
// large requests with deadlines too short to finish. Every result that comes back is checked
// element by element; every status is counted by kind and code, and a status the run does not
// allow is an unexpected error.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tc::testing {

// kCross: two tensors kept on devices 0 and 1 (on a server of one device, both on it), added
// by a request that runs on one of them with the other's bytes copied there.
enum class LoadKind { kSmall, kStreamed, kResident, kCancel, kDeadline, kCross };
constexpr int kLoadKinds = 6;
const char* LoadKindName(LoadKind k);

struct LoadMixOptions {
  std::string target;
  int clients = 16;
  // How often each kind is picked, relative to the others.
  int weights[kLoadKinds] = {8, 1, 1, 0, 0, 0};
  // float32 elements per input of a streamed request, and of a resident tensor.
  int64_t streamed_elements = int64_t{1} << 20;
  int64_t resident_elements = int64_t{1} << 18;
  // Deadline of the deadline kind's calls (its op takes longer than this to run).
  absl::Duration short_deadline = absl::Milliseconds(3);
  // Deadline of every other call.
  absl::Duration deadline = absl::Seconds(60);
  // Codes allowed besides OK (and CANCELLED / DEADLINE_EXCEEDED for the kinds that ask for
  // them), for example UNAVAILABLE while the server drains.
  std::set<absl::StatusCode> allowed;
  uint64_t seed = 1;
  // Calls each client makes before it stops by itself (0: until Stop).
  int64_t calls_per_client = 0;
};

struct LoadMixReport {
  int64_t ok[kLoadKinds] = {};
  int64_t failed[kLoadKinds] = {};
  // Results whose values were wrong (always unexpected).
  int64_t wrong = 0;
  int64_t unexpected = 0;
  int64_t shutdown_cancelled = 0;
  int64_t finished_in_drain = 0;
  std::map<absl::StatusCode, int64_t> codes;
  // The first few unexpected errors, for the test's message.
  std::vector<std::string> samples;
  int64_t with(absl::StatusCode code) const {
    auto it = codes.find(code);
    return it == codes.end() ? 0 : it->second;
  }
  int64_t total_ok() const;
  int64_t total() const;
  std::string Summary() const;
};

class LoadMix {
 public:
  explicit LoadMix(LoadMixOptions options);
  ~LoadMix();
  void Start();
  // Stops issuing new calls and waits for the ones in flight.
  void Stop();
  // Waits for clients with a call budget to use it up.
  void Wait();
  // From `margin` before `signal` on, a call may also end CANCELLED with gRPC's own "CANCELLED"
  // message: what a gRPC 1.51 server answers to calls that reach it after its Shutdown began,
  // instead of UNAVAILABLE (grpc/grpc#41785). Those are counted in `shutdown_cancelled`. `margin`
  // before the signal: a call that began just before it may reach the server only after.
  // MarkShutdown also counts the calls that began before `signal` and ended OK after it (in flight
  // when it came) in `finished_in_drain`.
  void MarkShutdown(absl::Time signal, absl::Duration margin) {
    signal_ns_ = absl::ToUnixNanos(signal);
    cancel_from_ns_ = absl::ToUnixNanos(signal - margin);
  }
  LoadMixReport report() const;

 private:
  void Worker(int index);
  void Count(LoadKind kind, const absl::Status& status, bool allowed_extra, absl::Time start);
  void Unexpected(const std::string& what);

  LoadMixOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> cancel_from_ns_{INT64_MAX};
  std::atomic<int64_t> signal_ns_{INT64_MAX};
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  LoadMixReport report_;
};

// What the server holds, for baselines: device memory in use (all devices), resident tensors,
// and the process's resident set size.
struct ServerFootprint {
  int64_t device_bytes = -1;
  int64_t resident_tensors = -1;
  int64_t rss_kb = -1;
  // The server's heap (ServerInfo): bytes in use, and freed bytes it keeps for reuse; -1
  // where its allocator cannot say.
  int64_t heap_allocated_bytes = -1;
  int64_t heap_free_bytes = -1;
  // RSS less the heap's free bytes: what the server holds in use, without the high-water mark
  // its allocator keeps after a burst (RSS itself where the free bytes are unknown).
  int64_t in_use_kb() const {
    return heap_free_bytes >= 0 ? std::max<int64_t>(0, rss_kb - (heap_free_bytes >> 10)) : rss_kb;
  }
  std::string ToString() const;
};
ServerFootprint Footprint(const std::string& target, int pid);

}  // namespace tc::testing
