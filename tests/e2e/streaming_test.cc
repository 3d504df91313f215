// Streaming, resident tensors, limits and ServerInfo against the real server binary on
// 127.0.0.1 ($TC_SERVER_BINARY and $TC_TEST_BACKEND as in server_test).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>

#include "client/client.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/server_binary.h"
#include "tests/support/server_process.h"
#include "tests/support/wire_tensors.h"

// The next this many TCP connects of this process (IPv4 or IPv6: gRPC connects to 127.0.0.1
// through an IPv6 socket) fail at once with an unrelated errno, as gRPC 1.51 can report a
// good one (it reads errno after other calls): libc's connect, interposed for this binary.
std::atomic<int> g_failing_connects{0};

extern "C" int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  using Connect = int (*)(int, const struct sockaddr*, socklen_t);
  static const Connect real = reinterpret_cast<Connect>(dlsym(RTLD_NEXT, "connect"));
  if (addr != nullptr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6)) {
    int left = g_failing_connects.load();
    while (left > 0 && !g_failing_connects.compare_exchange_weak(left, left - 1)) {
    }
    if (left > 0) {
      errno = ENOENT;
      return -1;
    }
  }
  return real(fd, addr, len);
}

namespace tc {
namespace {

namespace v1 = ::tensorcompute::v1;
using client::Client;
using testing::Floats;
using testing::Values;

using testing::BackendFlag;
using testing::ServerBinary;

std::vector<float> RandomFloats(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-100, 100);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A server of its own per test, with extra flags.
class Server {
 public:
  explicit Server(std::vector<std::string> flags = {}) {
    flags.push_back(BackendFlag());
    process_ = std::make_unique<testing::ServerProcess>(ServerBinary(), flags);
    client_ = std::make_unique<Client>(process_->target());
  }
  Client& client() { return *client_; }
  std::string target() const { return process_->target(); }
  int port() const { return process_->port(); }
  int pid() const { return process_->pid(); }
  int Terminate() { return process_->Terminate(30); }
  void ExpectHealthy() {
    auto h = client_->Health();
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(*h, "SERVING");
  }
  // Device memory in use on every device, summed.
  int64_t MemoryInUse() {
    auto info = client_->ServerInfo();
    EXPECT_TRUE(info.ok()) << info.status();
    int64_t sum = 0;
    if (info.ok()) {
      for (const auto& d : info->devices()) sum += d.memory_in_use_bytes();
    }
    return sum;
  }
  // Waits (up to 5 s) for the memory in use to come back to `baseline`.
  void ExpectMemoryBackTo(int64_t baseline) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (MemoryInUse() != baseline && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(MemoryInUse(), baseline);
  }

 private:
  std::unique_ptr<testing::ServerProcess> process_;
  std::unique_ptr<Client> client_;
};

v1::ComputeRequest AddRequest(v1::Tensor a, v1::Tensor b) {
  v1::ComputeRequest req;
  req.set_op("add");
  *req.add_inputs() = std::move(a);
  *req.add_inputs() = std::move(b);
  return req;
}

TEST(ServerInfoTest, DescribesDevicesLimitsAndMetrics) {
  Server server({"--max_rank=5", "--resident_quota_bytes=12345678"});
  ASSERT_GT(server.port(), 0);
  auto info = server.client().ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->version().empty());
  EXPECT_FALSE(info->build().empty());
  EXPECT_TRUE(info->backend() == "cpu" || info->backend() == "cuda") << info->backend();
  ASSERT_GE(info->devices_size(), 1);
  for (const auto& d : info->devices()) {
    EXPECT_EQ(d.kind(), info->backend());
    EXPECT_GT(d.memory_total_bytes(), 0);
    EXPECT_GT(d.memory_budget_bytes(), 0);
    EXPECT_EQ(d.memory_in_use_bytes(), 0);
  }
  EXPECT_EQ(info->limits().max_rank(), 5);
  EXPECT_EQ(info->limits().resident_quota_bytes(), 12345678);
  EXPECT_GT(info->limits().chunk_bytes(), 0);
  EXPECT_GT(info->metrics_port(), 0);
  EXPECT_EQ(info->resident_tensors(), 0);

  // The rank limit applies.
  v1::Tensor t = Floats({1, 1, 1, 1, 1, 2}, {1, 2});
  auto r = server.client().Compute("neg", {t});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("limit of 5"), std::string::npos) << r.status();
}

class StreamingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Server>(std::vector<std::string>{"--chunk_bytes=65536"});
    ASSERT_GT(server_->port(), 0);
  }
  Client& client() { return server_->client(); }
  std::unique_ptr<Server> server_;
};

TEST_F(StreamingTest, StreamedComputeMatchesUnary) {
  const uint64_t seed = std::random_device()();
  for (int64_t rows : {1, 7, 333}) {
    const int64_t cols = 1031;
    auto a = RandomFloats(rows * cols, seed + rows);
    auto b = RandomFloats(cols, seed + rows + 1);
    v1::ComputeRequest req = AddRequest(Floats({rows, cols}, a), Floats({cols}, b));
    auto unary = client().Compute(req);
    ASSERT_TRUE(unary.ok()) << unary.status();
    // Odd chunk sizes: chunks do not line up with elements.
    for (int64_t chunk : {int64_t{7}, int64_t{4099}, int64_t{1} << 20}) {
      if (chunk < 100 && rows > 7) continue;  // Tiny chunks only where they stay quick.
      auto streamed = client().ComputeStreamed(req, chunk);
      ASSERT_TRUE(streamed.ok()) << streamed.status();
      EXPECT_EQ(streamed->data(), unary->data()) << rows << " rows, chunk " << chunk;
      EXPECT_EQ(streamed->storage_bytes(), rows * cols * 4);
      EXPECT_EQ(streamed->shape_size(), 2);
    }
  }
  server_->ExpectMemoryBackTo(0);
}

// Requests of a mebibyte and more go as one message with their inputs' bytes beside it (never
// copied into it), the output read straight out of the received slices: results as computed
// here for sizes either side of that threshold, reversed, offset and broadcast views, a
// resident input beside an inline one, and into the caller's own memory; a bad view is still
// refused with the input it is about.
TEST_F(StreamingTest, LargeUnaryCallsCarryTheirBytesBesideTheMessage) {
  const uint64_t seed = std::random_device()();
  for (int64_t n : {131071, 131072, 131073, 262144, 1000003}) {
    // a: reversed, its storage one element longer than the view.
    const std::vector<float> storage = RandomFloats(n + 1, seed + n);
    v1::Tensor a = Floats({n}, storage);
    a.add_strides(-1);
    a.set_offset(n);
    const std::vector<float> b = RandomFloats(n, seed + n + 1);
    const v1::ComputeRequest req = AddRequest(a, Floats({n}, b));
    auto got = client().Compute(req);
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<float> out = Values(*got);
    ASSERT_EQ(static_cast<int64_t>(out.size()), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], storage[n - i] + b[i]) << n << ": " << i;

    // The same from the caller's memory into the caller's memory.
    v1::ComputeRequest outside = req;
    outside.mutable_inputs(0)->clear_data();
    outside.mutable_inputs(1)->clear_data();
    const std::vector<Client::ExternalBytes> bytes = {
        {storage.data(), static_cast<int64_t>(storage.size() * 4)},
        {b.data(), static_cast<int64_t>(b.size() * 4)}};
    std::vector<std::byte> dst;
    auto into = client().ComputeFrom(outside, bytes, [&dst](int64_t size) {
      dst.resize(static_cast<size_t>(size));
      return dst.data();
    });
    ASSERT_TRUE(into.ok()) << into.status();
    EXPECT_TRUE(into->data().empty());
    EXPECT_EQ(into->storage_bytes(), n * 4);
    ASSERT_EQ(dst.size(), got->data().size());
    EXPECT_EQ(std::memcmp(dst.data(), got->data().data(), dst.size()), 0) << n;
  }
  // Broadcast, the large input offset by one element, the small one resident.
  const int64_t rows = 301, cols = 1031;
  const std::vector<float> x = RandomFloats(rows * cols + 1, seed + 1);
  v1::Tensor big = Floats({rows, cols}, x);
  big.set_offset(1);
  const std::vector<float> y = RandomFloats(cols, seed + 2);
  auto up = client().Upload(Floats({cols}, y));
  ASSERT_TRUE(up.ok()) << up.status();
  v1::Tensor resident;
  resident.set_handle(up->tensor().handle());
  auto mixed = client().Compute(AddRequest(big, resident));
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  const std::vector<float> m = Values(*mixed);
  ASSERT_EQ(static_cast<int64_t>(m.size()), rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(m[i], x[1 + i] + y[i % cols]) << i;
  ASSERT_TRUE(client().Release({up->tensor().handle()}).ok());
  // A view past its storage.
  v1::Tensor past = Floats({rows, cols}, x);
  past.set_offset(2);
  auto bad = client().Compute(AddRequest(past, Floats({cols}, y)));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("input 0"), std::string::npos) << bad.status();
  server_->ExpectMemoryBackTo(0);
  server_->ExpectHealthy();
}

// A call sending the caller's memory without a copy that ends early (its deadline passes
// mid-send) returns only once gRPC has let go of that memory: the caller frees it at once, and
// under AddressSanitizer any later read of it by gRPC would be reported. Then the server and
// the client serve on as before.
TEST_F(StreamingTest, CallsThatEndMidSendGiveTheCallersMemoryBack) {
  const uint64_t seed = std::random_device()();
  const int64_t n = int64_t{4} << 20;
  const std::vector<float> b = RandomFloats(n, seed);
  int ended_early = 0;
  for (int i = 0; i < 24; ++i) {
    client::ClientOptions o;
    o.connections = 1;
    o.retry_attempts = 0;
    o.timeout = absl::Microseconds(500 * (1 + i % 8));
    Client hurried(server_->target(), o);
    auto a = std::make_unique<std::vector<float>>(RandomFloats(n, seed + i));
    v1::ComputeRequest req = AddRequest(Floats({n}, {}), Floats({n}, {}));
    req.mutable_inputs(0)->clear_data();
    req.mutable_inputs(1)->clear_data();
    const std::vector<Client::ExternalBytes> bytes = {{a->data(), n * 4}, {b.data(), n * 4}};
    absl::StatusOr<v1::Tensor> got =
        i % 2 == 0 ? hurried.ComputeFrom(req, bytes)
                   : hurried.ComputeStreamed(AddRequest(Floats({n}, *a), Floats({n}, b)));
    a.reset();  // Given back at once, and overwritten by the next allocations.
    if (!got.ok()) {
      ++ended_early;
      EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
    }
  }
  EXPECT_GT(ended_early, 0);
  const std::vector<float> x = RandomFloats(n, seed + 99);
  auto sum = client().Compute(AddRequest(Floats({n}, x), Floats({n}, b)));
  ASSERT_TRUE(sum.ok()) << sum.status();
  const std::vector<float> out = Values(*sum);
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(out[i], x[i] + b[i]) << i;
  server_->ExpectHealthy();
}

// Requests served on the server's devices so far.
int64_t RequestsServed(Client& c) {
  auto info = c.ServerInfo();
  EXPECT_TRUE(info.ok()) << info.status();
  int64_t sum = 0;
  if (info.ok()) {
    for (const auto& d : info->devices()) sum += d.requests_total();
  }
  return sum;
}

// A large request cut into pipelined slices by its output's rows gives exactly what one call
// gives (the same reply, field for field), on reversed and offset views, inputs broadcast along
// the rows (sent whole with each slice), a column broadcast cut with the rows, mixed dtypes,
// odd row counts, over one connection and several; into the caller's memory too. A request
// that cannot be cut so (a transposed input would be sent many times) is one call; an error in
// one slice is the call's error.
TEST_F(StreamingTest, PipelinedSlicesGiveWhatOneCallGives) {
  const uint64_t seed = std::random_device()();
  client::ClientOptions whole_options;
  whole_options.slice_bytes = 0;
  Client whole(server_->target(), whole_options);
  for (int connections : {1, 3}) {
    client::ClientOptions o;
    o.connections = connections;
    o.slice_bytes = 1 << 16;
    o.slice_part_bytes = 40000 + connections;
    o.spread_bytes = int64_t{1} << 40;
    Client sliced(server_->target(), o);
    const int64_t rows = 1001 + connections, cols = 257;
    // a: rows reversed, one element in; b: one row, broadcast; c: int16 column, cut.
    const std::vector<float> x = RandomFloats(rows * cols + 1, seed + connections);
    v1::Tensor a = Floats({rows, cols}, x);
    a.add_strides(-cols);
    a.add_strides(1);
    a.set_offset(1 + (rows - 1) * cols);
    const v1::Tensor b = Floats({cols}, RandomFloats(cols, seed + 7));
    std::vector<int16_t> col(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      col[static_cast<size_t>(i)] = static_cast<int16_t>(i * 37 - 500);
    }
    v1::Tensor c;
    c.set_dtype(v1::int16);
    c.add_shape(rows);
    c.add_shape(1);
    c.set_data(std::string(reinterpret_cast<const char*>(col.data()), col.size() * 2));
    v1::Tensor transposed = Floats({cols, rows}, RandomFloats(rows * cols, seed + 9));
    transposed.add_strides(1);
    transposed.add_strides(cols);
    struct Case {
      const char* name;
      v1::ComputeRequest request;
      bool cut;
    };
    std::vector<Case> cases;
    cases.push_back({"reversed + row", AddRequest(a, b), true});
    cases.push_back({"reversed * int16 column", AddRequest(a, c), true});
    cases.back().request.set_op("mul");
    cases.push_back({"int16 column - row", AddRequest(c, b), false});  // Too little to cut.
    cases.back().request.set_op("sub");
    cases.push_back({"transposed + row",
                     AddRequest(transposed, Floats({rows}, RandomFloats(rows, seed))), false});
    // Inner dimensions transposed: cut by rows into C order, but not into the first input's
    // order, which is not C's.
    v1::Tensor inner = Floats({rows, 3, 5}, RandomFloats(rows * 15, seed + 11));
    for (int64_t st : {15, 1, 3}) inner.add_strides(st);
    const v1::Tensor dense = Floats({rows, 3, 5}, RandomFloats(rows * 15, seed + 12));
    cases.push_back({"inner transposed + dense", AddRequest(inner, dense), true});
    cases.push_back(
        {"inner transposed + dense, laid out like the first", AddRequest(inner, dense), false});
    cases.back().request.set_output_layout(v1::OUTPUT_LAYOUT_LIKE_FIRST_INPUT);
    cases.push_back({"reversed + row, strided output", AddRequest(a, b), false});
    cases.back().request.add_output_strides(1);
    cases.back().request.add_output_strides(rows);
    for (const Case& k : cases) {
      auto one = whole.Compute(k.request);
      ASSERT_TRUE(one.ok()) << k.name << ": " << one.status();
      const int64_t before = RequestsServed(server_->client());
      auto got = sliced.Compute(k.request);
      const int64_t calls = RequestsServed(server_->client()) - before;
      ASSERT_TRUE(got.ok()) << k.name << ": " << got.status();
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*one, *got))
          << k.name << "\n"
          << one->ShortDebugString().substr(0, 200) << "\n"
          << got->ShortDebugString().substr(0, 200);
      if (k.cut) {
        EXPECT_GT(calls, 2) << k.name;
      } else {
        EXPECT_EQ(calls, 1) << k.name;
      }
    }
    // From the caller's memory into the caller's memory.
    v1::ComputeRequest outside = AddRequest(a, b);
    outside.mutable_inputs(0)->clear_data();
    outside.mutable_inputs(1)->clear_data();
    const std::vector<Client::ExternalBytes> bytes = {
        {x.data(), static_cast<int64_t>(x.size() * 4)},
        {b.data().data(), static_cast<int64_t>(b.data().size())}};
    std::vector<std::byte> dst;
    int allocations = 0;
    auto into = sliced.ComputeFrom(outside, bytes, [&](int64_t size) {
      ++allocations;
      dst.resize(static_cast<size_t>(size));
      return dst.data();
    });
    ASSERT_TRUE(into.ok()) << into.status();
    EXPECT_EQ(allocations, 1);
    auto one = whole.Compute(AddRequest(a, b));
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(into->storage_bytes(), static_cast<int64_t>(one->data().size()));
    ASSERT_EQ(dst.size(), one->data().size());
    EXPECT_EQ(std::memcmp(dst.data(), one->data().data(), dst.size()), 0);
    // An integer division by zero in one slice only.
    std::vector<int32_t> num(static_cast<size_t>(rows * 64), 7), den(num.size(), 1);
    den[den.size() - 3] = 0;
    v1::ComputeRequest div;
    div.set_op("floor_divide");
    for (const auto* v : {&num, &den}) {
      v1::Tensor* t = div.add_inputs();
      t->set_dtype(v1::int32);
      t->add_shape(rows);
      t->add_shape(64);
      t->set_data(std::string(reinterpret_cast<const char*>(v->data()), v->size() * 4));
    }
    auto bad_one = whole.Compute(div);
    auto bad = sliced.Compute(div);
    EXPECT_EQ(bad_one.status().code(), absl::StatusCode::kInvalidArgument) << bad_one.status();
    EXPECT_EQ(bad.status().code(), bad_one.status().code()) << bad.status();
  }
  server_->ExpectMemoryBackTo(0);
  server_->ExpectHealthy();
}

// Compute spread over several connections (parts uploaded in parallel, one Compute, parts
// downloaded in parallel) gives what one unary call gives, on strided, offset and broadcast
// views, odd sizes and odd chunks, and leaves nothing resident behind.
TEST_F(StreamingTest, ComputeSpreadOverConnectionsMatchesUnary) {
  const uint64_t seed = std::random_device()();
  client::ClientOptions o;
  o.connections = 3;
  o.spread_bytes = 1;  // Every request with inline bytes.
  o.chunk_bytes = 4099;
  Client spread(server_->target(), o);
  for (int64_t rows : {1, 5, 301}) {
    const int64_t cols = 1027;
    // a: the transpose of a [cols, rows + 1] storage, starting one element in.
    auto storage = RandomFloats(cols * (rows + 1) + 1, seed + rows);
    v1::Tensor a = Floats({rows, cols}, storage);
    a.add_strides(1);
    a.add_strides(rows + 1);
    a.set_offset(1);
    auto b = RandomFloats(cols, seed + rows + 7);
    v1::ComputeRequest req = AddRequest(a, Floats({cols}, b));
    auto unary = client().Compute(req);
    ASSERT_TRUE(unary.ok()) << unary.status();
    auto got = spread.Compute(req);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->data(), unary->data()) << rows << " rows";
    EXPECT_TRUE(got->handle().empty());
    ASSERT_EQ(got->shape_size(), 2);
    const std::vector<float> out = Values(*got);
    for (int64_t i = 0; i < rows; i += std::max<int64_t>(1, rows / 7)) {
      for (int64_t j = 0; j < cols; j += 13) {
        ASSERT_EQ(out[i * cols + j], storage[1 + i + j * (rows + 1)] + b[j]) << i << "," << j;
      }
    }
  }
  // Kept resident: a handle, whose bytes are the same.
  auto x = RandomFloats(100003, seed);
  v1::ComputeRequest keep = AddRequest(Floats({100003}, x), Floats({}, {0.5f}));
  keep.set_keep_output_resident(true);
  auto kept = spread.Compute(keep);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_FALSE(kept->handle().empty());
  auto down = spread.Download(kept->handle());
  ASSERT_TRUE(down.ok()) << down.status();
  const std::vector<float> k = Values(*down);
  ASSERT_EQ(k.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(k[i], x[i] + 0.5f) << i;
  ASSERT_TRUE(spread.Release({kept->handle()}).ok());

  // A bad request is refused with the reason, and what the spread reserved is released.
  auto bad = spread.Compute(
      AddRequest(Floats({3, 4}, RandomFloats(12, 1)), Floats({5}, RandomFloats(5, 2))));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  v1::Tensor short_storage = Floats({10}, RandomFloats(9, 3));
  auto bad_view = spread.Compute("neg", {short_storage});
  EXPECT_EQ(bad_view.status().code(), absl::StatusCode::kInvalidArgument) << bad_view.status();
  EXPECT_NE(bad_view.status().message().find("input 0"), std::string::npos) << bad_view.status();
  auto info = client().ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->resident_tensors(), 0);
  server_->ExpectMemoryBackTo(0);
  server_->ExpectHealthy();
}

// Lanes whose first connects fail (gRPC 1.51 can fail a good one) connect again and the
// spread call goes through.
TEST_F(StreamingTest, SpreadLanesConnectAgainAfterAFailedConnect) {
  client::ClientOptions o;
  o.connections = 4;
  o.spread_bytes = 1;
  Client spread(server_->target(), o);
  auto x = RandomFloats(40009, std::random_device()());
  v1::ComputeRequest req = AddRequest(Floats({40009}, x), Floats({}, {2.0f}));
  ASSERT_TRUE(spread.ServerInfo().ok());  // The home connection, before any lane.
  g_failing_connects = 8;
  auto got = spread.Compute(req);
  const int left = g_failing_connects.exchange(0);
  EXPECT_EQ(left, 0) << "the lanes did not connect";
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<float> out = Values(*got);
  ASSERT_EQ(out.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(out[i], x[i] + 2.0f) << i;
  server_->ExpectMemoryBackTo(0);
}

// Downloads in chunks large enough to be read into the server's reused host buffers: whole,
// and in parts that start off any chunk or page boundary, twice (the second time into
// buffers that held the first tensor's bytes), exactly the bytes uploaded.
TEST_F(StreamingTest, LargeDownloadChunksAreExact) {
  const uint64_t seed = std::random_device()();
  client::ClientOptions o;
  o.chunk_bytes = (int64_t{1} << 20) + 12;
  o.connections = 3;
  o.spread_bytes = 1;
  Client c(server_->target(), o);
  for (int round = 0; round < 2; ++round) {
    const int64_t n = (int64_t{5} << 18) + 13 + round * 1001;  // 5 MiB and some, as floats
    const std::vector<float> x = RandomFloats(n, seed + round);
    auto up = c.Upload(Floats({n}, x));
    ASSERT_TRUE(up.ok()) << up.status();
    const std::string handle = up->tensor().handle();
    auto whole = c.Download(handle);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(Values(*whole), x) << "round " << round;
    // Three parts of n * 4 / 3 bytes each (odd offsets), over three connections.
    std::vector<float> parts(n, -1.0f);
    ASSERT_TRUE(c.DownloadInto(handle, n * 4, reinterpret_cast<std::byte*>(parts.data())).ok());
    EXPECT_EQ(parts, x) << "round " << round;
    ASSERT_TRUE(c.Release({handle}).ok());
  }
  server_->ExpectMemoryBackTo(0);
  server_->ExpectHealthy();
}

TEST_F(StreamingTest, ResidentTensorsAreViewsWithoutCopies) {
  // A 3x4 matrix uploaded once, then used whole and as its transpose.
  std::vector<float> m(12);
  for (int i = 0; i < 12; ++i) m[i] = static_cast<float>(i);
  auto up = client().Upload(Floats({3, 4}, m), 0, 5);
  ASSERT_TRUE(up.ok()) << up.status();
  const std::string handle = up->tensor().handle();
  EXPECT_EQ(handle.size(), 32u);
  EXPECT_EQ(up->bytes_received(), 48);
  EXPECT_GT(up->expires_unix_seconds(), 0);

  v1::Tensor whole;
  whole.set_handle(handle);
  auto doubled = client().Compute("add", {whole, whole});
  ASSERT_TRUE(doubled.ok()) << doubled.status();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(Values(*doubled)[i], 2.0f * i);

  v1::Tensor transposed;
  transposed.set_handle(handle);
  transposed.set_dtype(v1::float32);
  for (int64_t d : {4, 3}) transposed.add_shape(d);
  for (int64_t s : {1, 4}) transposed.add_strides(s);
  v1::Tensor row = Floats({3}, {100, 200, 300});
  auto sum = client().Compute("add", {transposed, row});
  ASSERT_TRUE(sum.ok()) << sum.status();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(Values(*sum)[i * 3 + j], m[j * 4 + i] + 100.0f * (j + 1));
  }

  // A view reaching outside the storage is refused.
  v1::Tensor outside = transposed;
  outside.set_offset(1);
  auto bad = client().Compute("neg", {outside});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();

  // Output kept resident, then downloaded.
  v1::ComputeRequest req = AddRequest(whole, Floats({}, {0.5f}));
  req.set_keep_output_resident(true);
  auto kept = client().Compute(req);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(kept->data().empty());
  EXPECT_EQ(kept->storage_bytes(), 48);
  auto down = client().Download(kept->handle());
  ASSERT_TRUE(down.ok()) << down.status();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(Values(*down)[i], i + 0.5f);

  auto info = client().ServerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->resident_tensors(), 2);
  EXPECT_EQ(info->resident_bytes(), 96);
  // The heap as the server's allocator counts it (the resident tensors are in it), or -1 where
  // it cannot (AddressSanitizer's malloc).
  if (info->heap_allocated_bytes() != -1) {
    EXPECT_GE(info->heap_allocated_bytes(), 96);
    EXPECT_GE(info->heap_free_bytes(), 0);
  }

  auto released = client().Release({handle, kept->handle()});
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 96);
  EXPECT_EQ(client().Compute("neg", {whole}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client().Download(handle).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client().Release({handle}).status().code(), absl::StatusCode::kNotFound);
  server_->ExpectMemoryBackTo(0);
}

TEST_F(StreamingTest, StreamedInputsMixWithResidentAndInlineOnes) {
  const int64_t n = 100003;
  auto a = RandomFloats(n, 1), b = RandomFloats(n, 2);
  auto up = client().Upload(Floats({n}, b));
  ASSERT_TRUE(up.ok()) << up.status();
  v1::Tensor resident;
  resident.set_handle(up->tensor().handle());
  v1::ComputeRequest req = AddRequest(Floats({n}, a), resident);
  req.set_keep_output_resident(true);
  auto out = client().ComputeStreamed(req, 10000);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_FALSE(out->handle().empty());
  auto down = client().Download(out->handle());
  ASSERT_TRUE(down.ok()) << down.status();
  auto got = Values(*down);
  ASSERT_EQ(got.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], a[i] + b[i]) << i;
  ASSERT_TRUE(client().Release({up->tensor().handle(), out->handle()}).ok());
  server_->ExpectMemoryBackTo(0);
}

TEST_F(StreamingTest, OneTensorUploadedInPartsOverSeveralConnections) {
  const int64_t n = 300001;
  auto values = RandomFloats(n, 7);
  const std::string bytes(reinterpret_cast<const char*>(values.data()), n * 4);
  // Reserve: a header without data.
  v1::Tensor meta = Floats({n}, {});
  meta.set_storage_bytes(n * 4);
  grpc::ClientContext ctx;
  auto channel = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
  auto stub = v1::TensorService::NewStub(channel);
  v1::UploadResponse reserved;
  {
    auto w = stub->Upload(&ctx, &reserved);
    v1::UploadRequest h;
    *h.mutable_header()->mutable_tensor() = meta;
    ASSERT_TRUE(w->Write(h));
    w->WritesDone();
    ASSERT_TRUE(w->Finish().ok());
  }
  const std::string handle = reserved.tensor().handle();
  ASSERT_FALSE(handle.empty());
  // Three parts, each on its own channel (its own connection), concurrently.
  const int64_t part = (n * 4 + 2) / 3;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int p = 0; p < 3; ++p) {
    threads.emplace_back([&, p] {
      grpc::ChannelArguments args;
      args.SetInt("grpc.channel_id", p);  // Distinct arguments: distinct connections.
      auto ch =
          grpc::CreateCustomChannel(server_->target(), grpc::InsecureChannelCredentials(), args);
      auto s = v1::TensorService::NewStub(ch);
      grpc::ClientContext c;
      v1::UploadResponse r;
      auto w = s->Upload(&c, &r);
      const int64_t begin = p * part;
      const int64_t end = std::min<int64_t>(begin + part, n * 4);
      v1::UploadRequest h;
      h.mutable_header()->set_handle(handle);
      h.mutable_header()->set_offset(begin);
      bool good = w->Write(h);
      for (int64_t at = begin; good && at < end; at += 65536) {
        v1::UploadRequest m;
        m.mutable_chunk()->set_offset(at);
        m.mutable_chunk()->set_data(bytes.substr(at, std::min<int64_t>(65536, end - at)));
        good = w->Write(m);
      }
      w->WritesDone();
      if (w->Finish().ok() && r.bytes_received() == end - begin) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 3);
  // Each part is readable as soon as its upload has returned.
  auto down = client().Download(handle);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(down->data(), bytes);
  ASSERT_TRUE(client().Release({handle}).ok());
}

TEST_F(StreamingTest, MalformedStreamsAreRefused) {
  auto stub = v1::TensorService::NewStub(
      grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  const v1::ComputeStreamRequest header = testing::StreamHeader("neg", v1::float32, 4, 4);
  auto chunk = [](int tensor, int64_t offset, int64_t len) {
    v1::ComputeStreamRequest m;
    m.mutable_chunk()->set_tensor(tensor);
    m.mutable_chunk()->set_offset(offset);
    m.mutable_chunk()->set_data(std::string(len, '\0'));
    return m;
  };
  struct Case {
    const char* name;
    std::vector<v1::ComputeStreamRequest> messages;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"no header", {}, "ended before its header"},
      {"chunk first", {chunk(0, 0, 16)}, "before the header"},
      {"out of order", {header, chunk(0, 8, 8), chunk(0, 0, 8)}, "in order"},
      {"missing bytes", {header, chunk(0, 0, 8)}, "8 of its 16 bytes"},
      {"overrun", {header, chunk(0, 0, 20)}, "overruns"},
      {"unknown tensor", {header, chunk(3, 0, 4)}, "not a streamed input"},
      {"two headers", {header, header}, "second header"},
      {"empty message", {header, v1::ComputeStreamRequest()}, "neither header nor chunk"},
  };
  for (const Case& c : cases) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub->ComputeStream(&ctx);
    for (const auto& m : c.messages) stream->Write(m);
    stream->WritesDone();
    v1::TensorStreamMessage out;
    while (stream->Read(&out)) {
    }
    grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.name << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.expect), std::string::npos)
        << c.name << ": " << s.error_message();
    server_->ExpectHealthy();
  }
  // Unary Compute does not take streamed inputs.
  v1::ComputeRequest req = header.header();
  auto r = client().Compute(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("ComputeStream"), std::string::npos) << r.status();
  server_->ExpectMemoryBackTo(0);
}

TEST_F(StreamingTest, CancelAndDeadlineFreeTheirMemory) {
  auto stub = v1::TensorService::NewStub(
      grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  const v1::ComputeStreamRequest header = testing::StreamHeader("neg", v1::float32, 1 << 20, 4);
  v1::ComputeStreamRequest part;
  part.mutable_chunk()->set_data(std::string(1 << 20, '\1'));
  {
    // Cancelled by the client after a quarter of the input.
    grpc::ClientContext ctx;
    auto stream = stub->ComputeStream(&ctx);
    ASSERT_TRUE(stream->Write(header));
    ASSERT_TRUE(stream->Write(part));
    // The server has taken the input's storage.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (server_->MemoryInUse() == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_GE(server_->MemoryInUse(), 4 << 20);
    ctx.TryCancel();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  server_->ExpectMemoryBackTo(0);
  {
    // The deadline passes while the server waits for the rest.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    auto stream = stub->ComputeStream(&ctx);
    stream->Write(header);
    stream->Write(part);
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  server_->ExpectMemoryBackTo(0);
  server_->ExpectHealthy();
}

TEST(LimitsTest, MemoryBudgetQuotaAndConcurrency) {
  Server server({"--memory_budget=4194304", "--memory_wait_ms=50", "--resident_quota_bytes=1048576",
                 "--max_concurrent_per_device=1", "--resident_ttl_seconds=600"});
  ASSERT_GT(server.port(), 0);
  Client& client = server.client();
  // 3 MiB in and 3 MiB out do not fit a 4 MiB budget.
  const int64_t n = 3 << 18;
  v1::ComputeRequest big;
  big.set_op("neg");
  *big.add_inputs() = Floats({n}, std::vector<float>(n, 1.0f));
  auto r = client.ComputeStreamed(big, 1 << 20);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("budget"), std::string::npos) << r.status();
  server.ExpectHealthy();
  server.ExpectMemoryBackTo(0);

  // Quota: 600 KiB kept, 600 KiB more refused, fine again after a release.
  const int64_t m = 600 << 8;
  auto first = client.Upload(Floats({m}, std::vector<float>(m, 2.0f)));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = client.Upload(Floats({m}, std::vector<float>(m, 3.0f)));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  EXPECT_NE(second.status().message().find("quota"), std::string::npos) << second.status();
  ASSERT_TRUE(client.Release({first->tensor().handle()}).ok());
  second = client.Upload(Floats({m}, std::vector<float>(m, 3.0f)));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(client.Release({second->tensor().handle()}).ok());
  // A release returns before the storage is freed: wait for it, so the count below starts
  // from nothing but the streams' own inputs.
  server.ExpectMemoryBackTo(0);

  // One request at a time per device: with a stream holding each device, the next request
  // is refused as busy (however many devices the server has).
  auto info = client.ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  const int devices = info->devices_size();
  ASSERT_GT(devices, 0);
  auto stub = v1::TensorService::NewStub(
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<
      std::unique_ptr<grpc::ClientReaderWriter<v1::ComputeStreamRequest, v1::TensorStreamMessage>>>
      streams;
  const v1::ComputeStreamRequest header = testing::StreamHeader("neg", v1::float32, 4, 4);
  for (int d = 0; d < devices; ++d) {
    const int64_t before = server.MemoryInUse();
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(stub->ComputeStream(contexts.back().get()));
    ASSERT_TRUE(streams.back()->Write(header));
    // The stream's header has been handled (and its device admitted it) once its input's
    // storage is taken: the next one goes to a device still free.
    for (int i = 0; i < 200 && server.MemoryInUse() == before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_GT(server.MemoryInUse(), before);
  }
  auto busy = client.Compute("neg", {Floats({1}, {1.0f})});
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kResourceExhausted) << busy.status();
  EXPECT_NE(busy.status().message().find("busy"), std::string::npos) << busy.status();
  for (int d = 0; d < devices; ++d) {
    contexts[d]->TryCancel();
    grpc::Status held = streams[d]->Finish();
    EXPECT_EQ(held.error_code(), grpc::StatusCode::CANCELLED) << held.error_message();
  }
  server.ExpectMemoryBackTo(0);
  auto after = client.Compute("neg", {Floats({1}, {1.0f})});
  EXPECT_TRUE(after.ok()) << after.status();
}

TEST(ExpiryTest, ResidentTensorsExpire) {
  Server server;
  ASSERT_GT(server.port(), 0);
  auto up = server.client().Upload(Floats({4}, {1, 2, 3, 4}), /*ttl_seconds=*/1);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(server.client().Download(up->tensor().handle()).status().code(), absl::StatusCode::kOk);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(server.client().Download(up->tensor().handle()).status().code(),
            absl::StatusCode::kNotFound);
  server.ExpectMemoryBackTo(0);
  auto info = server.client().ServerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->resident_tensors(), 0);
}

// SIGTERM under load: health turns NOT_SERVING for watchers, new calls get UNAVAILABLE, the
// request in flight finishes with every byte, and the process exits 0 well within the grace.
TEST(DrainTest, SigtermLetsInFlightWorkFinish) {
  Server server({"--shutdown_grace_seconds=20"});
  ASSERT_GT(server.port(), 0);
  auto channel = grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext watch_ctx;
  grpc::health::v1::HealthCheckRequest hreq;
  auto watch = health->Watch(&watch_ctx, hreq);
  grpc::health::v1::HealthCheckResponse hresp;
  ASSERT_TRUE(watch->Read(&hresp));
  EXPECT_EQ(hresp.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  // A streamed request in flight: its header and a quarter of its input sent.
  const int64_t n = 1 << 20;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 1000);
  const std::string bytes(reinterpret_cast<const char*>(values.data()), n * 4);
  auto stub = v1::TensorService::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->ComputeStream(&ctx);
  const v1::ComputeStreamRequest header = testing::StreamHeader("neg", v1::float32, n, 4);
  ASSERT_TRUE(stream->Write(header));
  const int64_t quarter = n;  // bytes
  auto chunk = [&](int64_t at, int64_t len) {
    v1::ComputeStreamRequest m;
    m.mutable_chunk()->set_offset(at);
    m.mutable_chunk()->set_data(bytes.substr(at, len));
    return m;
  };
  ASSERT_TRUE(stream->Write(chunk(0, quarter)));
  // In flight means the server has taken the call (and the input's storage): a call still in
  // the transport when the signal comes is a new call, refused.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.MemoryInUse() < n * 4 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE(server.MemoryInUse(), n * 4);

  const auto signalled = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(server.pid(), SIGTERM), 0);
  // Health first.
  ASSERT_TRUE(watch->Read(&hresp));
  EXPECT_EQ(hresp.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  watch_ctx.TryCancel();
  (void)watch->Finish();
  // New calls are refused.
  absl::Status refused;
  for (int i = 0; i < 100; ++i) {
    refused = server.client().Compute("neg", {Floats({1}, {1.0f})}).status();
    if (refused.code() == absl::StatusCode::kUnavailable) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  // The request in flight completes.
  for (int64_t at = quarter; at < n * 4; at += quarter)
    ASSERT_TRUE(stream->Write(chunk(at, quarter)));
  stream->WritesDone();
  v1::TensorStreamMessage m;
  std::string out;
  while (stream->Read(&m)) {
    if (m.has_chunk()) out += m.chunk().data();
  }
  grpc::Status st = stream->Finish();
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(out.size(), bytes.size());
  for (int64_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, out.data() + i * 4, 4);
    ASSERT_EQ(f, -values[i]) << i;
  }
  const int status = server.Terminate();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::seconds(15));
}

// No 2 GiB ceiling: 2^31 + 4097 bytes through one ComputeStream, every byte checked, neither
// side ever holding the tensor in one message.
TEST(LargeStreamTest, MoreThanTwoGibibytes) {
  Server server;
  ASSERT_GT(server.port(), 0);
  const int64_t n = (int64_t{1} << 31) + 4097;
  auto pattern = [](int64_t i) {
    return static_cast<unsigned char>(i ^ (i >> 9) ^ (i >> 21) ^ (i >> 31));
  };
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto stub = v1::TensorService::NewStub(
      grpc::CreateCustomChannel(server.target(), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  auto stream = stub->ComputeStream(&ctx);
  std::thread writer([&] {
    const v1::ComputeStreamRequest header = testing::StreamHeader("bitwise_not", v1::uint8, n, 1);
    bool ok = stream->Write(header);
    const int64_t chunk = 4 << 20;
    v1::ComputeStreamRequest m;
    for (int64_t at = 0; ok && at < n; at += chunk) {
      const int64_t len = std::min(chunk, n - at);
      std::string* data = m.mutable_chunk()->mutable_data();
      data->resize(len);
      for (int64_t i = 0; i < len; ++i) (*data)[i] = static_cast<char>(pattern(at + i));
      m.mutable_chunk()->set_offset(at);
      ok = stream->Write(m);
    }
    stream->WritesDone();
  });
  v1::TensorStreamMessage msg;
  int64_t got = 0, wrong = 0;
  bool header = false;
  while (stream->Read(&msg)) {
    if (msg.has_header()) {
      header = true;
      EXPECT_EQ(msg.header().storage_bytes(), n);
      ASSERT_EQ(msg.header().shape_size(), 1);
      EXPECT_EQ(msg.header().shape(0), n);
      continue;
    }
    const std::string& d = msg.chunk().data();
    ASSERT_EQ(msg.chunk().offset(), got);
    for (size_t i = 0; i < d.size(); ++i) {
      wrong += static_cast<unsigned char>(d[i]) !=
               static_cast<unsigned char>(~pattern(got + static_cast<int64_t>(i)));
    }
    got += static_cast<int64_t>(d.size());
  }
  writer.join();
  grpc::Status s = stream->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(header);
  EXPECT_EQ(got, n);
  EXPECT_EQ(wrong, 0);
  server.ExpectMemoryBackTo(0);
}

}  // namespace
}  // namespace tc
