// TLS, mutual TLS and bearer tokens against the real server binary, with certificates made by
// openssl for the test; and resident tensors that other identities cannot see.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/support/server_binary.h"
#include "tests/support/server_process.h"
#include "tests/support/wire_tensors.h"

namespace tc {
namespace {

namespace v1 = ::tensorcompute::v1;
using client::Client;
using client::ClientOptions;
using client::SharedRegion;
using testing::Floats;

using testing::BackendFlag;
using testing::ServerBinary;

// A CA, a server certificate for 127.0.0.1 and localhost, a client certificate from the same
// CA, and a client certificate from another CA.
class Pki {
 public:
  Pki() {
    char tmpl[] = "/tmp/tc-pki-XXXXXX";
    dir_ = mkdtemp(tmpl);
    const std::string script = R"(
set -e
cd ")" + dir_ + R"("
q() { "$@" >/dev/null 2>&1; }
q openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=tc-test-ca
q openssl req -x509 -newkey rsa:2048 -nodes -keyout rogue-ca.key -out rogue-ca.pem -days 2 -subj /CN=rogue
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > san.ext
q openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost
q openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile san.ext
q openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=alice
q openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2
q openssl req -newkey rsa:2048 -nodes -keyout rogue.key -out rogue.csr -subj /CN=mallory
q openssl x509 -req -in rogue.csr -CA rogue-ca.pem -CAkey rogue-ca.key -CAcreateserial -out rogue.pem -days 2
printf '# name:token\nalice:alice-token-0123456789abcdef\nbob:bob-token-0123456789abcdef0\n' > tokens
)";
    ok_ = std::system(("bash -c '" + Escape(script) + "'").c_str()) == 0;
  }
  ~Pki() { std::system(("rm -rf " + dir_).c_str()); }
  bool ok() const { return ok_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  static std::string Escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '\'') {
        out += "'\\''";
      } else {
        out += c;
      }
    }
    return out;
  }
  std::string dir_;
  bool ok_ = false;
};

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pki_ = new Pki(); }
  static void TearDownTestSuite() { delete pki_; }
  void SetUp() override { ASSERT_TRUE(pki_->ok()) << "openssl could not make the test PKI"; }

  static std::unique_ptr<testing::ServerProcess> Start(std::vector<std::string> flags) {
    flags.push_back(BackendFlag());
    return std::make_unique<testing::ServerProcess>(ServerBinary(), flags);
  }
  static absl::StatusCode ComputeCode(Client& c) {
    return c.Compute("neg", {Floats({2}, {1, 2})}).status().code();
  }
  static Pki* pki_;
};

Pki* SecurityTest::pki_ = nullptr;

TEST_F(SecurityTest, TlsServesOnlyTls) {
  auto server =
      Start({"--tls_cert=" + pki_->path("server.pem"), "--tls_key=" + pki_->path("server.key")});
  ASSERT_GT(server->port(), 0);
  ClientOptions plain;
  plain.timeout = absl::Seconds(3);
  Client insecure(server->target(), plain);
  EXPECT_EQ(ComputeCode(insecure), absl::StatusCode::kUnavailable);

  ClientOptions tls;
  tls.tls_ca_file = pki_->path("ca.pem");
  Client secure(server->target(), tls);
  EXPECT_EQ(ComputeCode(secure), absl::StatusCode::kOk);
  auto h = secure.Health();
  ASSERT_TRUE(h.ok()) << h.status();

  // A CA that did not sign the server's certificate: the client refuses the server.
  ClientOptions wrong_ca = tls;
  wrong_ca.tls_ca_file = pki_->path("rogue-ca.pem");
  wrong_ca.timeout = absl::Seconds(3);
  Client doubtful(server->target(), wrong_ca);
  EXPECT_EQ(ComputeCode(doubtful), absl::StatusCode::kUnavailable);
}

// A container's HEALTHCHECK runs `tensorcompute-cli health` with a fixed command line; with
// TENSORCOMPUTE_TLS_* in its environment it reaches a TLS server, without them it does not.
TEST_F(SecurityTest, CliHealthTakesTlsFilesFromTheEnvironment) {
  auto server =
      Start({"--tls_cert=" + pki_->path("server.pem"), "--tls_key=" + pki_->path("server.key")});
  ASSERT_GT(server->port(), 0);
  const std::string health = std::string(TC_CLI_BINARY) +
                             " --timeout=3 --target=" + server->target() +
                             " health >/dev/null 2>&1";
  const std::string with_tls = "TENSORCOMPUTE_TLS_CA=" + pki_->path("ca.pem") + " " + health;
  EXPECT_EQ(std::system(with_tls.c_str()), 0) << with_tls;
  const std::string plain = "env -u TENSORCOMPUTE_TLS_CA " + health;
  EXPECT_NE(std::system(plain.c_str()), 0) << plain;
}

TEST_F(SecurityTest, MutualTlsRequiresAClientCertificateFromTheCa) {
  auto server =
      Start({"--tls_cert=" + pki_->path("server.pem"), "--tls_key=" + pki_->path("server.key"),
             "--tls_client_ca=" + pki_->path("ca.pem")});
  ASSERT_GT(server->port(), 0);
  ClientOptions no_cert;
  no_cert.tls_ca_file = pki_->path("ca.pem");
  no_cert.timeout = absl::Seconds(3);
  Client anonymous(server->target(), no_cert);
  EXPECT_EQ(ComputeCode(anonymous), absl::StatusCode::kUnavailable);

  ClientOptions rogue = no_cert;
  rogue.tls_cert_file = pki_->path("rogue.pem");
  rogue.tls_key_file = pki_->path("rogue.key");
  Client mallory(server->target(), rogue);
  EXPECT_EQ(ComputeCode(mallory), absl::StatusCode::kUnavailable);

  ClientOptions good = no_cert;
  good.tls_cert_file = pki_->path("client.pem");
  good.tls_key_file = pki_->path("client.key");
  Client alice(server->target(), good);
  EXPECT_EQ(ComputeCode(alice), absl::StatusCode::kOk);
}

TEST_F(SecurityTest, BearerTokensAndResidentTensorOwnership) {
  auto server = Start({"--auth_tokens_file=" + pki_->path("tokens")});
  ASSERT_GT(server->port(), 0);
  Client nobody(server->target());
  EXPECT_EQ(ComputeCode(nobody), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(nobody.ListOps().status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(nobody.ServerInfo().status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(nobody.Upload(Floats({2}, {1, 2})).status().code(), absl::StatusCode::kUnauthenticated);
  v1::ComputeRequest req;
  req.set_op("neg");
  *req.add_inputs() = Floats({2}, {1, 2});
  EXPECT_EQ(nobody.ComputeStreamed(req).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(nobody.Download("00000000000000000000000000000000").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(nobody.Release({"00000000000000000000000000000000"}).status().code(),
            absl::StatusCode::kUnauthenticated);
  // Probes need no token.
  auto h = nobody.Health();
  ASSERT_TRUE(h.ok()) << h.status();

  ClientOptions wrong;
  wrong.token = "alice-token-0123456789abcdeX";
  Client guesser(server->target(), wrong);
  auto r = guesser.Compute("neg", {Floats({2}, {1, 2})});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(r.status().message().find("alice-token"), std::string::npos) << r.status();

  ClientOptions a, b;
  a.token = "alice-token-0123456789abcdef";
  b.token = "bob-token-0123456789abcdef0";
  Client alice(server->target(), a), bob(server->target(), b);
  EXPECT_EQ(ComputeCode(alice), absl::StatusCode::kOk);

  // Alice's tensor does not exist for Bob: the same answer as for a handle never made.
  auto up = alice.Upload(Floats({3}, {1, 2, 3}));
  ASSERT_TRUE(up.ok()) << up.status();
  const std::string handle = up->tensor().handle();
  v1::Tensor mine;
  mine.set_handle(handle);
  auto theirs = bob.Download(handle);
  auto never = bob.Download("0123456789abcdef0123456789abcdef");
  EXPECT_EQ(theirs.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(never.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(theirs.status().message()).substr(0, 30),
            std::string(never.status().message()).substr(0, 30));
  EXPECT_EQ(bob.Compute("neg", {mine}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(bob.Release({handle}).status().code(), absl::StatusCode::kNotFound);
  v1::ComputeRequest stream_req;
  stream_req.set_op("neg");
  *stream_req.add_inputs() = mine;
  EXPECT_EQ(bob.ComputeStreamed(stream_req).status().code(), absl::StatusCode::kNotFound);
  // Still Alice's.
  auto back = alice.Download(handle);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(testing::Values(*back), (std::vector<float>{1, 2, 3}));
  EXPECT_TRUE(alice.Release({handle}).ok());
}

// The C++ client's regions against the region socket's limits: a refusal is read and passed
// on, and a connection the server closed as idle is opened again.
TEST_F(SecurityTest, ClientRegionsMeetTheSocketsLimits) {
  auto server = Start({"--region_connections_per_process=1", "--region_idle_seconds=1"});
  ASSERT_GT(server->port(), 0);
  Client first(server->target()), second(server->target());
  auto compute_in = [](Client& c, SharedRegion& r) -> absl::StatusOr<std::vector<float>> {
    const std::vector<float> x = {1.5f, -2.0f, 3.25f};
    std::memcpy(r.data(), x.data(), sizeof(float) * x.size());
    v1::ComputeRequest req;
    req.set_op("neg");
    *req.add_inputs() = r.Input(v1::float32, {3});
    auto out = c.Compute(req);
    if (!out.ok()) return out.status();
    return testing::Values(*out);
  };
  const std::vector<float> negated = {-1.5f, 2.0f, -3.25f};
  auto a = first.CreateRegion(4096);
  ASSERT_TRUE(a.ok()) << a.status();
  auto got = compute_in(first, **a);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, negated);
  // This process has its one connection: the second client is told so.
  auto refused = second.CreateRegion(4096);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("this process has 1 connections"), std::string::npos)
      << refused.status();
  // Unregistered, the first connection holds nothing and closes when idle; the client
  // connects again by itself.
  a->reset();
  absl::SleepFor(absl::Seconds(3));
  auto b = first.CreateRegion(4096);
  ASSERT_TRUE(b.ok()) << b.status();
  got = compute_in(first, **b);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, negated);
}

TEST_F(SecurityTest, BadTokenFilesStopTheServer) {
  const std::string weak = pki_->path("weak-tokens");
  std::ofstream(weak) << "carol:short\n";
  auto server = Start({"--auth_tokens_file=" + weak});
  EXPECT_EQ(server->port(), 0);
  auto missing = Start({"--tls_cert=" + pki_->path("server.pem")});
  EXPECT_EQ(missing->port(), 0);
}

}  // namespace
}  // namespace tc
