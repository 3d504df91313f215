// What the fuzzers share: a service environment on the CPU device with small limits, so that
// whatever a crafted request asks for stays cheap to run.
#pragma once

#include <memory>

#include "runtime/cpu_device.h"
#include "server/data/resident.h"
#include "server/pipeline/job.h"

namespace tc::fuzz {

inline const server::ServiceEnv& FuzzEnv() {
  static auto* devices = [] {
    std::vector<std::unique_ptr<runtime::Device>> d;
    runtime::DeviceOptions o;
    o.memory_budget = 64 << 20;
    o.memory_wait = absl::ZeroDuration();
    d.push_back(std::make_unique<runtime::CpuDevice>(1, o));
    return new runtime::DeviceSet(std::move(d));
  }();
  static auto* resident = new server::ResidentStore({});
  static auto* metrics = new server::Metrics();
  static auto* auth = new server::Auth();
  static auto* env = [] {
    server::ServiceOptions o;
    o.max_request_bytes = 16 << 20;
    o.max_elements = 1 << 20;
    o.max_message_bytes = 16 << 20;
    static auto* life = new server::Lifecycle();
    // No regions: requests naming one get FAILED_PRECONDITION.
    return new server::ServiceEnv{devices, nullptr, resident, nullptr, metrics, auth, o, life};
  }();
  return *env;
}

// Runs a prepared job to completion on the CPU device (which finishes before Run returns).
inline absl::Status RunJob(server::ComputeJob& job) {
  auto out = job.AllocateOutput(absl::InfiniteFuture());
  if (!out.ok()) return out.status();
  absl::Status result;
  job.Run((*out)->data(), [&result](absl::Status s) { result = std::move(s); });
  return result;
}

}  // namespace tc::fuzz
