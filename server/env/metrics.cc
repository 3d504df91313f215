#include "server/env/metrics.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tc::server {

namespace {

std::string Num(double v) { return absl::StrFormat("%.17g", v); }

// Label values escape backslash, quote and newline.
std::string Escape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void Header(std::string& out, absl::string_view name, absl::string_view type,
            absl::string_view help) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

void Metrics::RecordCall(absl::string_view method, absl::string_view op, absl::string_view code,
                         absl::Duration latency) {
  const double s = absl::ToDoubleSeconds(latency);
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_[{std::string(method), std::string(op), std::string(code)}];
  Histogram& h = latency_[{std::string(method), std::string(op)}];
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (s <= kBuckets[i]) ++h.buckets[i];
  }
  ++h.count;
  h.sum += s;
}

void Metrics::RecordInference(absl::string_view model, bool ok, absl::Time arrival,
                              absl::Time finish, const StageTimes& stages) {
  const auto set = [](absl::Time t) { return t != absl::InfinitePast(); };
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  if (it == models_.end()) it = models_.emplace(std::string(model), ModelTotals()).first;
  ModelTotals& m = it->second;
  m.last_inference_ms =
      std::max<uint64_t>(m.last_inference_ms, static_cast<uint64_t>(absl::ToUnixMillis(arrival)));
  if (!ok) {
    m.fail.Add(finish - arrival);
    return;
  }
  m.success.Add(finish - arrival);
  if (set(stages.admitted)) m.queue.Add(stages.admitted - arrival);
  if (set(stages.admitted) && set(stages.staged))
    m.compute_input.Add(stages.staged - stages.admitted);
  if (set(stages.ran) && set(stages.computed)) {
    m.compute_infer.Add(stages.computed - stages.ran);
    m.compute_output.Add(finish - stages.computed);
  }
}

std::map<std::string, ModelTotals, std::less<>> Metrics::InferenceTotals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return models_;
}

void Metrics::AddBytes(absl::string_view method, int64_t received, int64_t sent) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& b = bytes_[std::string(method)];
  b.first += received;
  b.second += sent;
}

void Metrics::AddGauge(std::string name, std::string help, GaugeFn fn, std::string type) {
  std::lock_guard<std::mutex> lock(mu_);
  gauges_.push_back({std::move(name), std::move(help), std::move(type), std::move(fn)});
}

std::string Metrics::Render() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  Header(out, "tensorcompute_requests_total", "counter",
         "Finished RPCs by method, op and status code.");
  for (const auto& [key, n] : calls_) {
    const auto& [method, op, code] = key;
    absl::StrAppend(&out, "tensorcompute_requests_total{method=\"", Escape(method), "\",op=\"",
                    Escape(op), "\",code=\"", Escape(code), "\"} ", n, "\n");
  }
  Header(out, "tensorcompute_request_duration_seconds", "histogram",
         "Time from the call's arrival to its status, by method and op.");
  for (const auto& [key, h] : latency_) {
    const std::string labels =
        absl::StrCat("method=\"", Escape(key.first), "\",op=\"", Escape(key.second), "\"");
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      absl::StrAppend(&out, "tensorcompute_request_duration_seconds_bucket{", labels, ",le=\"",
                      Num(kBuckets[i]), "\"} ", h.buckets[i], "\n");
    }
    absl::StrAppend(&out, "tensorcompute_request_duration_seconds_bucket{", labels,
                    ",le=\"+Inf\"} ", h.count, "\n");
    absl::StrAppend(&out, "tensorcompute_request_duration_seconds_sum{", labels, "} ", Num(h.sum),
                    "\n");
    absl::StrAppend(&out, "tensorcompute_request_duration_seconds_count{", labels, "} ", h.count,
                    "\n");
  }
  Header(out, "tensorcompute_received_bytes_total", "counter",
         "Tensor bytes received from clients, by method.");
  for (const auto& [method, b] : bytes_) {
    absl::StrAppend(&out, "tensorcompute_received_bytes_total{method=\"", Escape(method), "\"} ",
                    b.first, "\n");
  }
  Header(out, "tensorcompute_sent_bytes_total", "counter",
         "Tensor bytes sent to clients, by method.");
  for (const auto& [method, b] : bytes_) {
    absl::StrAppend(&out, "tensorcompute_sent_bytes_total{method=\"", Escape(method), "\"} ",
                    b.second, "\n");
  }
  Header(out, "tensorcompute_peer_copy_bytes_total", "counter",
         "Input bytes copied from the device holding them to the device a request ran on.");
  absl::StrAppend(&out, "tensorcompute_peer_copy_bytes_total ",
                  peer_copy_bytes_.load(std::memory_order_relaxed), "\n");
  for (const Gauge& g : gauges_) {
    Header(out, g.name, g.type, g.help);
    for (const auto& [labels, value] : g.fn()) {
      absl::StrAppend(&out, g.name, labels.empty() ? "" : "{", labels, labels.empty() ? "" : "}",
                      " ", Num(value), "\n");
    }
  }
  return out;
}

namespace {

int HandleMetrics(struct mg_connection* conn, void* data) {
  const auto* metrics = static_cast<const Metrics*>(data);
  const struct mg_request_info* info = mg_get_request_info(conn);
  if (std::string(info->request_method) != "GET") {
    mg_send_http_error(conn, 405, "only GET");
    return 405;
  }
  const std::string body = metrics->Render();
  mg_send_http_ok(conn, "text/plain; version=0.0.4; charset=utf-8",
                  static_cast<long long>(body.size()));
  mg_write(conn, body.data(), body.size());
  return 200;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, int port, const Metrics* metrics) {
  static const unsigned init = mg_init_library(0);
  (void)init;
  const std::string listen = address.empty() || address == "0.0.0.0"
                                 ? std::to_string(port)
                                 : absl::StrCat(address, ":", port);
  const char* options[] = {"listening_ports",    listen.c_str(), "num_threads", "2",
                           "request_timeout_ms", "10000",        nullptr};
  mg_callbacks callbacks{};
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->ctx_ = mg_start(&callbacks, nullptr, options);
  if (server->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", listen));
  }
  mg_set_request_handler(server->ctx_, "/metrics$", &HandleMetrics, const_cast<Metrics*>(metrics));
  mg_server_port ports[4] = {};
  if (mg_get_server_ports(server->ctx_, 4, ports) > 0) server->port_ = ports[0].port;
  server->address_ = address.empty() || address == "0.0.0.0" ? "127.0.0.1" : address;
  return server;
}

namespace {

// A connection to the listener that is closed at once (IPv4 or IPv6 literal addresses).
void Knock(const std::string& address, int port) {
  sockaddr_storage at{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&at);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&at);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v6);
  } else {
    return;
  }
  const int fd = socket(at.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)!connect(fd, reinterpret_cast<sockaddr*>(&at), len);
  close(fd);
}

}  // namespace

MetricsHttpServer::~MetricsHttpServer() {
  if (ctx_ == nullptr) return;
  // civetweb's listener notices mg_stop only when its poll times out (up to two seconds) or a
  // connection arrives: a connection is made for it, and again until it has gone, so a stop
  // takes milliseconds.
  std::atomic<bool> stopped{false};
  std::thread stopper([this, &stopped] {
    mg_stop(ctx_);
    stopped.store(true);
  });
  while (!stopped.load() && port_ > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!stopped.load()) Knock(address_, port_);
  }
  stopper.join();
}

}  // namespace tc::server
