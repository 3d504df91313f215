#include "client/replicas.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tc::client {
namespace {

// "host:port" or "[v6]:port" -> host, port.
bool SplitHostPort(absl::string_view hp, std::string* host, std::string* port) {
  if (absl::StartsWith(hp, "[")) {
    const size_t close = hp.find(']');
    if (close == absl::string_view::npos || close + 1 >= hp.size() || hp[close + 1] != ':') {
      return false;
    }
    *host = std::string(hp.substr(1, close - 1));
    *port = std::string(hp.substr(close + 2));
  } else {
    const size_t colon = hp.rfind(':');
    if (colon == absl::string_view::npos || colon == 0) return false;
    *host = std::string(hp.substr(0, colon));
    *port = std::string(hp.substr(colon + 1));
  }
  return !host->empty() && !port->empty();
}

// Every address of host:port, as "ipv4:a.b.c.d:port" or "ipv6:[...]:port" targets.
absl::StatusOr<std::vector<std::string>> Resolve(absl::string_view hp) {
  std::string host, port;
  if (!SplitHostPort(hp, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat("replica '", hp, "' is not host:port"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); e != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", hp, ": ", gai_strerror(e)));
  }
  std::vector<std::string> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, text, sizeof text);
      out.push_back(absl::StrCat("ipv4:", text, ":", port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, text,
                sizeof text);
      out.push_back(absl::StrCat("ipv6:[", text, "]:", port));
    }
  }
  freeaddrinfo(res);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) return absl::UnavailableError(absl::StrCat(hp, " has no address"));
  return out;
}

// One "ipv4:" or "ipv6:" target listing `addresses` (as Resolve writes them), with those of
// the family most of them have.
std::string ListTarget(const std::vector<std::string>& addresses) {
  std::vector<std::string> v4, v6;
  for (const std::string& a : addresses) {
    if (absl::StartsWith(a, "ipv4:")) v4.push_back(a.substr(5));
    if (absl::StartsWith(a, "ipv6:")) v6.push_back(a.substr(5));
  }
  return v4.size() >= v6.size() ? absl::StrCat("ipv4:", absl::StrJoin(v4, ","))
                                : absl::StrCat("ipv6:", absl::StrJoin(v6, ","));
}

}  // namespace

absl::StatusOr<Replicas> ResolveReplicas(const std::string& target) {
  Replicas r;
  if (absl::StartsWith(target, "ipv4:") || absl::StartsWith(target, "ipv6:")) {
    const std::string scheme = target.substr(0, 5);
    for (absl::string_view a : absl::StrSplit(target.substr(5), ',', absl::SkipEmpty())) {
      r.addresses.push_back(absl::StrCat(scheme, a));
    }
    if (r.addresses.size() > 1) r.balanced = target;
    if (r.addresses.empty()) r.addresses.push_back(target);
    return r;
  }
  if (absl::StartsWith(target, "dns:")) {
    absl::string_view name = absl::StripPrefix(target, "dns:");
    if (absl::StartsWith(name, "//")) {
      // dns://authority/name: the authority (a DNS server) is gRPC's business.
      name = name.substr(2);
      const size_t slash = name.find('/');
      name = slash == absl::string_view::npos ? absl::string_view() : name.substr(slash + 1);
    }
    auto addresses = Resolve(name);
    if (!addresses.ok()) return addresses.status();
    r.addresses = *addresses;
    if (r.addresses.size() > 1) r.balanced = target;
    return r;
  }
  if (absl::StrContains(target, ',') && !absl::StartsWith(target, "unix:")) {
    std::vector<std::string> all;
    for (absl::string_view hp : absl::StrSplit(target, ',', absl::SkipEmpty())) {
      auto addresses = Resolve(absl::StripAsciiWhitespace(hp));
      if (!addresses.ok()) return addresses.status();
      // The replica as it was named (gRPC resolves it, and TLS checks the name); the list's
      // target by address.
      r.addresses.push_back(std::string(absl::StripAsciiWhitespace(hp)));
      all.insert(all.end(), addresses->begin(), addresses->end());
    }
    if (r.addresses.size() > 1) r.balanced = ListTarget(all);
    return r;
  }
  r.addresses.push_back(target);
  return r;
}

std::string ServiceConfig(int attempts, bool balanced) {
  attempts = std::clamp(attempts, 1, 5);  // gRPC caps maxAttempts at 5
  std::string retry;
  if (attempts > 1) {
    retry = absl::StrCat(R"(,"retryPolicy":{"maxAttempts":)", attempts,
                         R"(,"initialBackoff":"0.1s","maxBackoff":"0.5s","backoffMultiplier":2,)"
                         R"("retryableStatusCodes":["UNAVAILABLE"]})");
  }
  return absl::StrCat("{",
                      balanced ? R"("loadBalancingConfig":[{"round_robin":{}}],)"
                                 R"("healthCheckConfig":{"serviceName":""},)"
                               : "",
                      R"("methodConfig":[{"name":[)"
                      R"({"service":"tensorcompute.v1.TensorService","method":"Compute"},)"
                      R"({"service":"tensorcompute.v1.TensorService","method":"ListOps"},)"
                      R"({"service":"grpc.health.v1.Health","method":"Check"}])",
                      retry, "}],", R"("retryThrottling":{"maxTokens":100,"tokenRatio":0.1}})");
}

}  // namespace tc::client
