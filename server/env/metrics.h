// Prometheus metrics: counters and latency histograms kept by the service, gauges read at
// scrape time, rendered in the text exposition format and served over HTTP by civetweb.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

struct mg_context;

namespace tc::server {

// When a compute request reached each stage, as its call and its job stamp them (unset:
// absl::InfinitePast()): admitted to a device, its inputs on that device, its kernels started
// and finished there.
struct StageTimes {
  absl::Time admitted = absl::InfinitePast();
  absl::Time staged = absl::InfinitePast();
  absl::Time ran = absl::InfinitePast();
  absl::Time computed = absl::InfinitePast();
};

// Per model (op), every compute request since the server started, as the open inference
// protocol's statistics report them (KServe v2 ModelStatistics).
struct ModelTotals {
  struct Duration {
    uint64_t count = 0;
    uint64_t ns = 0;
    void Add(absl::Duration d) {
      ++count;
      ns += static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(d)));
    }
  };
  // Whole requests, from arrival to answer.
  Duration success, fail;
  // Successful requests' stages: arrival to admission, admission to inputs staged, the
  // kernels, and the kernels' end to the answer (the result read back and encoded).
  Duration queue, compute_input, compute_infer, compute_output;
  // The last request's arrival, milliseconds since the epoch.
  uint64_t last_inference_ms = 0;
};

class Metrics {
 public:
  // Upper bounds of the latency buckets, seconds.
  static constexpr std::array<double, 16> kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                      0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                      1,      2.5,     10,     60};

  // One finished RPC: `op` empty where the method has none.
  void RecordCall(absl::string_view method, absl::string_view op, absl::string_view code,
                  absl::Duration latency);
  void AddBytes(absl::string_view method, int64_t received, int64_t sent);
  // One compute request of model `model` finished: `ok` or not, arrived at `arrival`,
  // answered at `finish`, its stages as stamped.
  void RecordInference(absl::string_view model, bool ok, absl::Time arrival, absl::Time finish,
                       const StageTimes& stages);
  // Every model's totals so far (models without a request absent).
  std::map<std::string, ModelTotals, std::less<>> InferenceTotals() const;
  // Input bytes a request copied from the device holding them to the one it ran on.
  void AddPeerCopy(int64_t bytes) { peer_copy_bytes_.fetch_add(bytes, std::memory_order_relaxed); }

  // A gauge computed at scrape time: name, help, and a function returning (labels, value)
  // pairs, labels already rendered ("device=\"0\""). `type` "counter" for a value that only
  // grows.
  using GaugeFn = std::function<std::vector<std::pair<std::string, double>>()>;
  void AddGauge(std::string name, std::string help, GaugeFn fn, std::string type = "gauge");

  // The text exposition format (version 0.0.4).
  std::string Render() const;

 private:
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> buckets{};
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> calls_;
  std::map<std::pair<std::string, std::string>, Histogram> latency_;
  std::map<std::string, std::pair<int64_t, int64_t>> bytes_;
  std::map<std::string, ModelTotals, std::less<>> models_;
  struct Gauge {
    std::string name, help, type;
    GaugeFn fn;
  };
  std::vector<Gauge> gauges_;
  std::atomic<int64_t> peer_copy_bytes_{0};
};

// Serves GET /metrics from a civetweb server on its own threads.
class MetricsHttpServer {
 public:
  // `port` 0 picks a free one.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address,
                                                                  int port, const Metrics* metrics);
  ~MetricsHttpServer();
  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  ::mg_context* ctx_ = nullptr;
  std::string address_;  // Where the listener is reached from this process.
  int port_ = 0;
};

}  // namespace tc::server
