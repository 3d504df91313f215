// The service's options and what its handlers, reactors and jobs share: everything a piece of
// the server needs to know of the service without the gRPC service class itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/env/auth.h"
#include "server/env/metrics.h"

namespace tc {
class ThreadPool;
namespace runtime {
class DeviceSet;
}
}  // namespace tc

namespace tc::server {

// What the rooms above own; the environment only points at them.
class ResidentStore;
class RegionStore;
class HostBuffers;

struct ServiceOptions {
  // Largest message either way; a unary result larger than this gets RESOURCE_EXHAUSTED
  // before any memory is taken for it (ComputeStream has no such ceiling).
  int64_t max_message_bytes = int64_t{256} << 20;
  // Largest sum of one request's input storage, streamed and resident included.
  int64_t max_request_bytes = int64_t{64} << 30;
  // Most elements in any one input or output.
  int64_t max_elements = int64_t{1} << 36;
  int max_rank = 8;
  // Requests admitted per device at once; more get RESOURCE_EXHAUSTED.
  int max_concurrent_per_device = 256;
  // Chunk size of streamed replies unless the client asks for another (Download).
  int64_t chunk_bytes = int64_t{1} << 20;
  // For ServerInfo.
  std::string backend;
  int metrics_port = -1;
  // This process's id (ServerInfoResponse.instance): random, new at every start.
  std::string instance;
};

// The server's own drain: once draining, calls that arrive are refused UNAVAILABLE by the
// handlers, and the ones admitted before are counted until they finish, so that the process
// can wait for them before it shuts gRPC down (gRPC 1.51 answers calls that arrive during its
// Shutdown with CANCELLED, and closes connections as soon as the last call ends).
class Lifecycle {
 public:
  // False (nothing counted) once draining.
  bool Enter() {
    active_.fetch_add(1, std::memory_order_acq_rel);
    if (draining_.load(std::memory_order_acquire)) {
      Leave();
      return false;
    }
    return true;
  }
  void Leave() { active_.fetch_sub(1, std::memory_order_acq_rel); }
  // Counts one more in flight, draining or not: for work that something counted already holds
  // (so the count cannot have reached zero), to be counted until that work ends too.
  void Hold() { active_.fetch_add(1, std::memory_order_acq_rel); }
  void StartDraining() { draining_.store(true, std::memory_order_release); }
  bool draining() const { return draining_.load(std::memory_order_acquire); }
  int active() const { return active_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};
};

// What a call that arrives while the server drains is answered.
inline absl::Status ShuttingDown() {
  return absl::UnavailableError("the server is shutting down; retry on another replica");
}

// What the service's handlers and reactors share.
struct ServiceEnv {
  runtime::DeviceSet* devices;
  ThreadPool* pool;
  ResidentStore* resident;
  RegionStore* regions;
  Metrics* metrics;
  const Auth* auth;
  ServiceOptions options;
  Lifecycle* life;
  // Reused host buffers for large unary inputs and outputs; null: plain memory per request.
  HostBuffers* host_buffers = nullptr;
};

}  // namespace tc::server
