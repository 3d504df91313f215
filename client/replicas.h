// Several servers behind one client target: the replicas a target names, and the gRPC service
// config that spreads stateless calls over them per call and retries those that are safe to
// retry on another replica.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tc::client {

struct Replicas {
  // One channel target per replica, each reaching that replica alone.
  std::vector<std::string> addresses;
  // The target of a channel balanced over all of them; empty where the target names one.
  std::string balanced;
};

// "host:port,host:port,..." lists replicas (each resolved here to its addresses);
// "ipv4:a:p,b:p" and "ipv6:[a]:p,..." list them as gRPC writes them; "dns:///name:port" names
// every address DNS gives for the name (a Kubernetes headless Service). Any other target
// (one host:port, unix:path) is one replica.
absl::StatusOr<Replicas> ResolveReplicas(const std::string& target);

// Compute, ListOps and Health.Check retried on UNAVAILABLE up to `attempts` tries in all (gRPC
// caps it at 5), with backoff, within gRPC's retry throttling (a budget of 100 tokens: a
// failure takes one, a success gives back 0.1, and retries stop below 50): a server that
// refuses a call while it drains, a connection lost before the answer, a balancer's 502.
// `balanced`: also round_robin over the replicas that report SERVING on grpc.health.v1 (one
// that starts draining is left out at once).
std::string ServiceConfig(int attempts, bool balanced);

}  // namespace tc::client
