// A client over several replicas (client/replicas.h): what targets name them, stateless calls
// spread and retried past a replica that is gone, stateful ones kept on the home replica.
#include <signal.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/client.h"
#include "client/replicas.h"
#include "gtest/gtest.h"
#include "tests/support/server_binary.h"
#include "tests/support/server_process.h"

namespace tc {
namespace {

namespace v1 = ::tensorcompute::v1;
using client::ResolveReplicas;

TEST(ResolveReplicas, TargetsThatNameOneReplica) {
  for (const char* t : {"127.0.0.1:5000", "localhost:5000", "unix:/tmp/x.sock", "ipv4:1.2.3.4:5"}) {
    auto r = ResolveReplicas(t);
    ASSERT_TRUE(r.ok()) << t << ": " << r.status();
    EXPECT_EQ(r->addresses, std::vector<std::string>{t});
    EXPECT_EQ(r->balanced, "") << t;
  }
}

TEST(ResolveReplicas, ListsAndDns) {
  auto list = ResolveReplicas("127.0.0.1:5001, 127.0.0.1:5002,localhost:5003");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->addresses,
            (std::vector<std::string>{"127.0.0.1:5001", "127.0.0.1:5002", "localhost:5003"}));
  // By address, in the family most of them have.
  EXPECT_EQ(list->balanced.rfind("ipv4:127.0.0.1:5001,127.0.0.1:5002,127.0.0.1:5003", 0), 0u)
      << list->balanced;

  auto v4 = ResolveReplicas("ipv4:10.0.0.1:7,10.0.0.2:7");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->addresses, (std::vector<std::string>{"ipv4:10.0.0.1:7", "ipv4:10.0.0.2:7"}));
  EXPECT_EQ(v4->balanced, "ipv4:10.0.0.1:7,10.0.0.2:7");

  auto dns = ResolveReplicas("dns:///127.0.0.1:5004");
  ASSERT_TRUE(dns.ok()) << dns.status();
  EXPECT_EQ(dns->addresses, std::vector<std::string>{"ipv4:127.0.0.1:5004"});
  EXPECT_EQ(dns->balanced, "");  // one address: nothing to balance

  EXPECT_EQ(ResolveReplicas("127.0.0.1:1,nonsense").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ResolveReplicas("127.0.0.1:1,no-such-host.invalid:2").ok());
}

TEST(ResolveReplicas, ServiceConfigIsWhatGrpcTakes) {
  const std::string config = client::ServiceConfig(9, true);
  EXPECT_NE(config.find(R"("maxAttempts":5)"), std::string::npos) << config;  // gRPC's cap
  EXPECT_NE(config.find("round_robin"), std::string::npos);
  // A channel refuses a service config it cannot parse; this one must carry calls.
  testing::ServerProcess server(testing::ServerBinary(), {testing::BackendFlag()});
  ASSERT_NE(server.port(), 0);
  client::Client c(absl::StrCat(server.target(), ",", server.target()));
  auto ops = c.ListOps();
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_GT(ops->ops_size(), 10);
}

v1::Tensor F32(const std::vector<float>& v) {
  v1::Tensor t;
  t.set_dtype(v1::float32);
  t.add_shape(static_cast<int64_t>(v.size()));
  t.set_data(v.data(), v.size() * sizeof(float));
  return t;
}

std::vector<float> Floats(const v1::Tensor& t) {
  std::vector<float> out(t.data().size() / sizeof(float));
  std::memcpy(out.data(), t.data().data(), t.data().size());
  return out;
}

class ReplicasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> targets;
    for (int i = 0; i < 3; ++i) {
      servers_.push_back(std::make_unique<testing::ServerProcess>(
          testing::ServerBinary(),
          std::vector<std::string>{testing::BackendFlag(), "--shutdown_grace_seconds=5"}));
      ASSERT_NE(servers_.back()->port(), 0);
      targets.push_back(servers_.back()->target());
    }
    target_ = absl::StrJoin(targets, ",");
  }

  int64_t ResidentOn(int i) {
    client::Client c(servers_[i]->target());
    auto info = c.ServerInfo();
    return info.ok() ? info->resident_tensors() : -1;
  }

  // `n` adds of fresh operands through `c`, each checked; the failures' statuses.
  std::vector<std::string> Adds(client::Client& c, int n, std::mt19937& rng) {
    std::vector<std::string> failures;
    std::uniform_real_distribution<float> u(-10, 10);
    for (int k = 0; k < n; ++k) {
      std::vector<float> a(1 + k % 37), b(a.size());
      for (size_t j = 0; j < a.size(); ++j) {
        a[j] = u(rng);
        b[j] = u(rng);
      }
      auto out = c.Compute("add", {F32(a), F32(b)});
      if (!out.ok()) {
        failures.push_back(out.status().ToString());
        continue;
      }
      std::vector<float> got = Floats(*out);
      for (size_t j = 0; j < a.size(); ++j) {
        if (got.size() != a.size() || got[j] != a[j] + b[j]) {
          failures.push_back(absl::StrCat("wrong result at call ", k));
          break;
        }
      }
    }
    return failures;
  }

  std::vector<std::unique_ptr<testing::ServerProcess>> servers_;
  std::string target_;
};

TEST_F(ReplicasTest, ResidentTensorsStayOnTheHomeReplica) {
  client::Client c(target_);
  ASSERT_EQ(c.replicas().size(), 3u);
  int home = -1;
  for (int i = 0; i < 3; ++i) {
    if (c.home() == servers_[i]->target()) home = i;
  }
  ASSERT_GE(home, 0) << c.home();
  auto up = c.Upload(F32({1, 2, 3}));
  ASSERT_TRUE(up.ok()) << up.status();
  // Twenty computes on the handle: every one finds it (it lives on the home replica only).
  for (int k = 0; k < 20; ++k) {
    v1::ComputeRequest req;
    req.set_op("mul");
    v1::Tensor* in = req.add_inputs();
    in->set_handle(up->tensor().handle());
    *req.add_inputs() = F32({2, 2, 2});
    auto out = c.Compute(req);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Floats(*out), (std::vector<float>{2, 4, 6}));
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ResidentOn(i), i == home ? 1 : 0) << i;
}

TEST_F(ReplicasTest, StatelessCallsGoOnPastReplicasThatStopOrDie) {
  client::Client c(target_);
  std::mt19937 rng(std::random_device{}());
  EXPECT_EQ(Adds(c, 60, rng), std::vector<std::string>{});
  // One replica drains and exits, another is killed; the third answers everything, the home
  // replica among the stopped ones or not.
  ASSERT_EQ(servers_[0]->Terminate(30), 0);
  EXPECT_EQ(Adds(c, 60, rng), std::vector<std::string>{});
  const int pid = servers_[1]->pid();
  ASSERT_GT(pid, 0);
  kill(pid, SIGKILL);
  servers_[1]->WaitExit(10);
  EXPECT_EQ(Adds(c, 60, rng), std::vector<std::string>{});
}

// Large stateless calls (spread over connections, through resident tensors on one replica)
// go on past a home replica that is killed, and move off one that freezes within the
// client's bound; a replica killed and started again on its port serves again.
TEST_F(ReplicasTest, LargeCallsMoveOffGoneAndFrozenReplicas) {
  client::ClientOptions o;
  o.spread_bytes = 1 << 20;
  o.connections = 4;
  o.spread_replicas = false;  // every call to home first, while it answers
  o.home = servers_[0]->target();
  client::Client c(target_, o);
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-10, 10);
  std::vector<float> a(600 * 1000), b(a.size());
  for (size_t j = 0; j < a.size(); ++j) {
    a[j] = u(rng);
    b[j] = u(rng);
  }
  auto add = [&]() -> std::string {
    auto out = c.Compute("add", {F32(a), F32(b)});
    if (!out.ok()) return out.status().ToString();
    std::vector<float> got = Floats(*out);
    if (got.size() != a.size()) return "wrong size";
    for (size_t j = 0; j < a.size(); ++j) {
      if (got[j] != a[j] + b[j]) return absl::StrCat("wrong at ", j);
    }
    return "";
  };
  EXPECT_EQ(add(), "");
  // Home killed: the call goes to another replica, which becomes home.
  kill(servers_[0]->pid(), SIGKILL);
  servers_[0]->WaitExit(10);
  EXPECT_EQ(add(), "");
  EXPECT_NE(c.home(), servers_[0]->target());
  // Home frozen: the call moves on within keepalive + its timeout, or the try's deadline.
  ASSERT_TRUE(c.Rehome(servers_[1]->target()).ok());
  EXPECT_EQ(add(), "");  // connections to replica 1 are open
  kill(servers_[1]->pid(), SIGSTOP);
  const absl::Time start = absl::Now();
  EXPECT_EQ(add(), "");
  const absl::Duration took = absl::Now() - start;
  kill(servers_[1]->pid(), SIGCONT);
  EXPECT_LT(took, absl::Seconds(8)) << took;
  EXPECT_NE(c.home(), servers_[1]->target());
}
}  // namespace
}  // namespace tc
