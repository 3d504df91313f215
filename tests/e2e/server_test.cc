// The real server binary on 127.0.0.1, called through the C++ client.
#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/tensor_text.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/wire_tensors.h"
#include "tests/support/server_binary.h"
#include "tests/support/server_process.h"

namespace tc {
namespace {

namespace v1 = ::tensorcompute::v1;
using client::Client;

using testing::Floats;

using testing::Values;

using testing::BackendFlag;
using testing::ServerBinary;

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess(ServerBinary(), {BackendFlag()});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_GT(server_->port(), 0) << "server did not start";
    client_ = std::make_unique<Client>(server_->target());
  }
  void ExpectHealthy() {
    auto h = client_->Health();
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(*h, "SERVING");
  }

  static testing::ServerProcess* server_;
  std::unique_ptr<Client> client_;
};

testing::ServerProcess* ServerTest::server_ = nullptr;

TEST_F(ServerTest, HealthIsServing) {
  ExpectHealthy();
  auto svc = client_->Health("tensorcompute.v1.TensorService");
  ASSERT_TRUE(svc.ok()) << svc.status();
  EXPECT_EQ(*svc, "SERVING");
  EXPECT_EQ(client_->Health("no.such.Service").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ServerTest, ListOpsDescribesAdd) {
  auto ops = client_->ListOps();
  ASSERT_TRUE(ops.ok()) << ops.status();
  bool found = false;
  for (const v1::OpInfo& op : ops->ops()) {
    if (op.name() != "add") continue;
    found = true;
    EXPECT_EQ(op.arity(), 2);
    ASSERT_EQ(op.attributes_size(), 1);
    EXPECT_EQ(op.attributes(0).name(), "alpha");
    EXPECT_EQ(op.attributes(0).type(), "float");
    EXPECT_FALSE(op.attributes(0).required());
    EXPECT_EQ(op.attributes(0).default_value(), "1");
    EXPECT_EQ(op.dtypes_size(), 10);  // every dtype
  }
  EXPECT_TRUE(found);
}

TEST_F(ServerTest, BroadcastAdd) {
  v1::Attribute alpha;
  alpha.set_float_value(2);
  auto out = client_->Compute(
      "add", {Floats({2, 1, 3}, {1, 2, 3, 4, 5, 6}), Floats({2, 1}, {10, 20})}, {{"alpha", alpha}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype(), v1::float32);
  EXPECT_EQ(std::vector<int64_t>(out->shape().begin(), out->shape().end()),
            (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(std::vector<int64_t>(out->strides().begin(), out->strides().end()),
            (std::vector<int64_t>{6, 3, 1}));
  EXPECT_EQ(Values(*out), (std::vector<float>{21, 22, 23, 41, 42, 43, 24, 25, 26, 44, 45, 46}));
}

TEST_F(ServerTest, StridedViewsWithOffsetsAndNegativeStrides) {
  // Storage 0..11; a is its [3,2] transpose-like view [[7,5],[3,1]...]: offset 7, strides -2,-1.
  std::vector<float> storage(12);
  for (int i = 0; i < 12; ++i) storage[i] = static_cast<float>(i);
  v1::Tensor a = Floats({3, 2}, storage);
  a.add_strides(-3);
  a.add_strides(-1);
  a.set_offset(7);  // rows 7,6 / 4,3 / 1,0
  v1::Tensor b = Floats({2}, storage);
  b.add_strides(0);  // broadcast element 5
  b.set_offset(5);
  auto out = client_->Compute("add", {a, b});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values(*out), (std::vector<float>{12, 11, 9, 8, 6, 5}));
}

// A strided bool view's unreached bytes may hold anything, inline and streamed alike.
TEST_F(ServerTest, BoolViewsLeaveUnreachedBytesAlone) {
  v1::ComputeRequest req;
  req.set_op("logical_not");
  v1::Tensor* t = req.add_inputs();
  t->set_dtype(v1::bool_);
  t->add_shape(3);
  t->add_strides(2);
  t->set_offset(1);
  t->set_data(std::string("\xbd\x01\xbd\x00\xbd\x01", 6));  // bytes 1, 3, 5
  for (const bool streamed : {false, true}) {
    auto out = streamed ? client_->ComputeStreamed(req, 2) : client_->Compute(req);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->data(), std::string("\x00\x01\x00", 3)) << streamed;
  }
  t->set_offset(0);  // bytes 0, 2, 4
  for (const bool streamed : {false, true}) {
    auto out = streamed ? client_->ComputeStreamed(req, 2) : client_->Compute(req);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << streamed;
    EXPECT_NE(out.status().message().find("byte 0 is 189"), std::string::npos) << out.status();
  }
}

// Inputs and outputs of a MiB or more go through the server's reused buffers: views into
// them, outputs with gaps (zero, whatever an earlier call left in a reused buffer), checks on
// their bytes, over calls one after another.
TEST_F(ServerTest, LargeUnaryCallsThroughReusedBuffers) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> value(-100, 100);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = value(rng);
    return v;
  };
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    // An output of about 2.8 MB, then one with gaps whose storage takes a buffer of the same
    // size (2.4 MB, both rounded to 3 MiB).
    const std::vector<float> x = random(700001), y = random(700001);
    auto full = client_->Compute("add", {Floats({700001}, x), Floats({700001}, y)});
    ASSERT_TRUE(full.ok()) << full.status();
    std::vector<float> got = Values(*full);
    ASSERT_EQ(got.size(), x.size());
    for (size_t i = 0; i < x.size(); i += 997) ASSERT_EQ(got[i], x[i] + y[i]) << i;

    // a: n elements read backwards from an offset; b contiguous; the output every other
    // element.
    const int64_t n = 300007;
    const std::vector<float> a = random(static_cast<size_t>(n) + 5), b = random(n);
    v1::ComputeRequest r;
    r.set_op("add");
    v1::Tensor* ta = r.add_inputs();
    *ta = Floats({n}, a);
    ta->add_strides(-1);
    ta->set_offset(n + 4);
    *r.add_inputs() = Floats({n}, b);
    r.add_output_strides(2);
    auto out = client_->Compute(r);
    ASSERT_TRUE(out.ok()) << out.status();
    got = Values(*out);
    ASSERT_EQ(got.size(), static_cast<size_t>(2 * n - 1));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[static_cast<size_t>(2 * i)],
                a[static_cast<size_t>(n + 4 - i)] + b[static_cast<size_t>(i)])
          << i;
      if (i + 1 < n) {
        ASSERT_EQ(got[static_cast<size_t>(2 * i + 1)], 0.0f) << i;
      }
    }
  }
  // A large bool input is checked byte by byte; a large data field beside a handle refused.
  v1::ComputeRequest bad;
  bad.set_op("logical_not");
  v1::Tensor* t = bad.add_inputs();
  t->set_dtype(v1::bool_);
  t->add_shape(int64_t{2} << 20);
  t->mutable_data()->assign(size_t{2} << 20, '\1');
  (*t->mutable_data())[1500000] = 7;
  auto refused = client_->Compute(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("byte 1500000 is 7"), std::string::npos)
      << refused.status();
  (*t->mutable_data())[1500000] = 0;
  auto fine = client_->Compute(bad);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->data()[1500000], 1);
  EXPECT_EQ(fine->data()[0], 0);
  t->set_handle("resident-1");
  refused = client_->Compute(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("both handle and data are set"), std::string::npos)
      << refused.status();
  ExpectHealthy();
}

TEST_F(ServerTest, OutputDtypeAndLayoutOptions) {
  v1::ComputeRequest r;
  r.set_op("add");
  // a: [2,3] stored transposed (column-major), b: scalar.
  v1::Tensor a = Floats({2, 3}, {1, 4, 2, 5, 3, 6});
  a.add_strides(1);
  a.add_strides(2);
  *r.add_inputs() = a;
  *r.add_inputs() = Floats({}, {10});
  r.set_output_layout(v1::OUTPUT_LAYOUT_LIKE_FIRST_INPUT);
  auto out = client_->Compute(r);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(std::vector<int64_t>(out->strides().begin(), out->strides().end()),
            (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Values(*out), (std::vector<float>{11, 14, 12, 15, 13, 16}));

  r.clear_output_layout();
  r.add_output_strides(8);  // rows 8 apart: gaps stay zero
  r.add_output_strides(2);
  out = client_->Compute(r);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->data().size(), 4u * 13);
  std::vector<float> v = Values(*out);
  EXPECT_EQ((std::vector<float>{v[0], v[2], v[4], v[8], v[10], v[12]}),
            (std::vector<float>{11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(v[1], 0);

  r.clear_output_strides();
  r.add_output_strides(1);
  r.add_output_strides(1);
  auto overlap = client_->Compute(r);
  EXPECT_EQ(overlap.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(overlap.status().message().find("overlap"), absl::string_view::npos)
      << overlap.status();

  r.clear_output_strides();
  r.set_output_dtype(v1::float64);
  out = client_->Compute(r);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype(), v1::float64);
  r.set_output_dtype(v1::int32);
  auto unsafe = client_->Compute(r);
  EXPECT_EQ(unsafe.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unsafe.status().message().find("unsafe cast"), absl::string_view::npos)
      << unsafe.status();
}

// plan_only: the output's metadata as running the request would give it, from inputs sent with
// their data or described by their metadata alone; the same checks, nothing run or kept.
TEST_F(ServerTest, PlanOnlyAnswersWithTheOutputsMetadata) {
  auto described = [](v1::Tensor t) {
    t.set_storage_bytes(static_cast<int64_t>(t.data().size()));
    t.clear_data();
    return t;
  };
  auto meta = [](const v1::Tensor& t) {
    return std::make_tuple(
        t.dtype(), std::vector<int64_t>(t.shape().begin(), t.shape().end()),
        std::vector<int64_t>(t.strides().begin(), t.strides().end()),
        // A reply with data spans storage_bytes of it.
        t.data().empty() ? t.storage_bytes() : static_cast<int64_t>(t.data().size()), t.offset());
  };
  v1::Tensor ints;
  ints.set_dtype(v1::int32);
  ints.add_shape(2);
  ints.add_shape(1);
  const int32_t iv[2] = {7, -3};
  ints.set_data(std::string(reinterpret_cast<const char*>(iv), sizeof(iv)));
  v1::Tensor transposed = Floats({2, 3}, {1, 4, 2, 5, 3, 6});
  transposed.add_strides(1);
  transposed.add_strides(2);
  std::vector<v1::ComputeRequest> requests(4);
  requests[0].set_op("add");
  *requests[0].add_inputs() = Floats({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  *requests[0].add_inputs() = ints;
  requests[1].set_expression("a < b * 2");
  *requests[1].add_inputs() = transposed;
  *requests[1].add_inputs() = Floats({}, {3});
  requests[2] = requests[1];
  requests[2].set_output_layout(v1::OUTPUT_LAYOUT_LIKE_FIRST_INPUT);
  requests[3].set_op("mul");
  *requests[3].add_inputs() = transposed;
  *requests[3].add_inputs() = ints;
  requests[3].set_output_dtype(v1::float64);
  requests[3].add_output_strides(8);
  requests[3].add_output_strides(2);
  for (size_t k = 0; k < requests.size(); ++k) {
    SCOPED_TRACE(k);
    auto ran = client_->Compute(requests[k]);
    ASSERT_TRUE(ran.ok()) << ran.status();
    v1::ComputeRequest plan = requests[k];
    plan.set_plan_only(true);
    auto planned = client_->Compute(plan);
    ASSERT_TRUE(planned.ok()) << planned.status();
    EXPECT_EQ(meta(*planned), meta(*ran));
    EXPECT_TRUE(planned->data().empty());
    for (v1::Tensor& t : *plan.mutable_inputs()) t = described(t);
    planned = client_->Compute(plan);
    ASSERT_TRUE(planned.ok()) << planned.status();
    EXPECT_EQ(meta(*planned), meta(*ran));
  }
  // Nothing is kept: the reply has no handle.
  v1::ComputeRequest kept = requests[0];
  kept.set_plan_only(true);
  kept.set_keep_output_resident(true);
  auto planned = client_->Compute(kept);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_TRUE(planned->handle().empty());
  // A resident input, by its handle alone.
  auto up = client_->Upload(Floats({3}, {1, 2, 3}));
  ASSERT_TRUE(up.ok()) << up.status();
  v1::ComputeRequest on_resident;
  on_resident.set_op("neg");
  on_resident.set_plan_only(true);
  on_resident.add_inputs()->set_handle(up->tensor().handle());
  planned = client_->Compute(on_resident);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(std::vector<int64_t>(planned->shape().begin(), planned->shape().end()),
            std::vector<int64_t>{3});
  // The checks of a run: shapes that do not broadcast, a view past its storage, a handle that
  // does not exist; and plan_only through ComputeStream.
  v1::ComputeRequest bad = requests[0];
  bad.set_plan_only(true);
  *bad.mutable_inputs(1) = described(Floats({4}, {1, 2, 3, 4}));
  EXPECT_EQ(client_->Compute(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = requests[0];
  bad.set_plan_only(true);
  *bad.mutable_inputs(0) = described(bad.inputs(0));
  bad.mutable_inputs(0)->set_storage_bytes(20);
  auto past = client_->Compute(bad);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument) << past.status();
  on_resident.mutable_inputs(0)->set_handle(std::string(32, 'f'));
  EXPECT_EQ(client_->Compute(on_resident).status().code(), absl::StatusCode::kNotFound);
  v1::ComputeRequest streamed = requests[0];
  streamed.set_plan_only(true);
  auto via_stream = client_->ComputeStreamed(streamed);
  EXPECT_EQ(via_stream.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(via_stream.status().message().find("plan_only"), absl::string_view::npos)
      << via_stream.status();
  ExpectHealthy();
}

TEST_F(ServerTest, IntegerDivisionByZeroIsAnErrorNotACrash) {
  v1::ComputeRequest r;
  r.set_op("remainder");
  for (int k = 0; k < 2; ++k) {
    v1::Tensor* t = r.add_inputs();
    t->set_dtype(v1::int32);
    t->add_shape(2);
    const int32_t vals[2] = {std::numeric_limits<int32_t>::min(), k == 0 ? 5 : 0};
    t->set_data(std::string(reinterpret_cast<const char*>(vals), 8));
  }
  auto out = client_->Compute(r);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("division by zero"), absl::string_view::npos);
  ExpectHealthy();
}

TEST_F(ServerTest, BadInputsAreRejectedAndServerStaysHealthy) {
  struct Case {
    const char* name;
    v1::ComputeRequest request;
    const char* fragment;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, const char* fragment, auto mutate) {
    v1::ComputeRequest r;
    r.set_op("add");
    *r.add_inputs() = Floats({2, 3}, {1, 2, 3, 4, 5, 6});
    *r.add_inputs() = Floats({3}, {1, 2, 3});
    mutate(r);
    cases.push_back({name, std::move(r), fragment});
  };
  add("unknown op", "unknown op 'frobnicate'", [](auto& r) { r.set_op("frobnicate"); });
  add("blob too short", "storage holds 5",
      [](auto& r) { r.mutable_inputs(0)->mutable_data()->resize(20); });
  add("blob not whole elements", "not a whole number",
      [](auto& r) { r.mutable_inputs(1)->mutable_data()->push_back('x'); });
  add("strides outside", "reach elements", [](auto& r) {
    r.mutable_inputs(0)->add_strides(3);
    r.mutable_inputs(0)->add_strides(2);
  });
  add("negative offset reach", "reach elements -2",
      [](auto& r) { r.mutable_inputs(1)->add_strides(-1); });
  add("stride count", "1 strides given for rank 2",
      [](auto& r) { r.mutable_inputs(0)->add_strides(1); });
  add("negative dim", "negative", [](auto& r) { r.mutable_inputs(0)->set_shape(1, -3); });
  add("unknown dtype", "unknown dtype enum value 77",
      [](auto& r) { r.mutable_inputs(0)->set_dtype(static_cast<v1::DType>(77)); });
  add("missing dtype", "dtype is missing",
      [](auto& r) { r.mutable_inputs(1)->set_dtype(v1::DTYPE_UNSPECIFIED); });
  add("unsupported dtype", "does not accept dtype float32",
      [](auto& r) { r.set_op("bitwise_and"); });
  add("no broadcast", "cannot be broadcast", [](auto& r) {
    r.mutable_inputs(1)->set_shape(0, 2);
    r.mutable_inputs(1)->mutable_data()->resize(8);
  });
  add("arity", "takes 2 inputs, got 1", [](auto& r) { r.mutable_inputs()->RemoveLast(); });
  add("unknown attribute", "no attribute 'beta'",
      [](auto& r) { (*r.mutable_attributes())["beta"].set_float_value(1); });
  add("attribute type", "must be of type float",
      [](auto& r) { (*r.mutable_attributes())["alpha"].set_string_value("x"); });
  add("overflowing shape", "more than 2^63", [](auto& r) {
    v1::Tensor* t = r.mutable_inputs(0);
    t->clear_shape();
    for (int i = 0; i < 3; ++i) t->add_shape(int64_t{1} << 30);
    for (int i = 0; i < 3; ++i) t->add_strides(0);
  });
  add("rank above limit", "rank 9 exceeds this server's limit of 8", [](auto& r) {
    for (int i = 0; i < 8; ++i) r.mutable_inputs(1)->add_shape(1);
  });
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto out = client_->Compute(c.request);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
    EXPECT_NE(out.status().message().find(c.fragment), absl::string_view::npos) << out.status();
    ExpectHealthy();
  }
}

TEST_F(ServerTest, ConcurrentClients) {
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Client c(server_->target());
      for (int i = 0; i < 25; ++i) {
        const float x = static_cast<float>(t * 100 + i);
        auto out = c.Compute("add", {Floats({3}, {x, x, x}), Floats({}, {1})});
        if (out.ok() && Values(*out) == std::vector<float>{x + 1, x + 1, x + 1}) ++ok;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(ok.load(), 200);
}

// What ghz and grpcurl do: list services, then fetch the file that defines one.
TEST_F(ServerTest, ReflectionServesTheContract) {
  auto channel = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->ServerReflectionInfo(&ctx);
  grpc::reflection::v1alpha::ServerReflectionRequest req;
  grpc::reflection::v1alpha::ServerReflectionResponse resp;

  req.set_list_services("");
  ASSERT_TRUE(stream->Write(req));
  ASSERT_TRUE(stream->Read(&resp));
  std::vector<std::string> services;
  for (const auto& s : resp.list_services_response().service()) services.push_back(s.name());
  EXPECT_NE(std::find(services.begin(), services.end(), "tensorcompute.v1.TensorService"),
            services.end());
  EXPECT_NE(std::find(services.begin(), services.end(), "grpc.health.v1.Health"), services.end());

  req.set_file_containing_symbol("tensorcompute.v1.TensorService");
  ASSERT_TRUE(stream->Write(req));
  ASSERT_TRUE(stream->Read(&resp));
  ASSERT_TRUE(resp.has_file_descriptor_response()) << resp.DebugString();
  ASSERT_GE(resp.file_descriptor_response().file_descriptor_proto_size(), 1);
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(resp.file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(file.package(), "tensorcompute.v1");
  ASSERT_EQ(file.service_size(), 1);
  std::vector<std::string> methods;
  for (const auto& m : file.service(0).method()) methods.push_back(m.name());
  EXPECT_NE(std::find(methods.begin(), methods.end(), "Compute"), methods.end());
  EXPECT_NE(std::find(methods.begin(), methods.end(), "ListOps"), methods.end());
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(ServerLimits, OversizedRequestAndResponseAreRefused) {
  testing::ServerProcess server(ServerBinary(), {BackendFlag(), "--max_message_bytes=1048576"});
  ASSERT_GT(server.port(), 0);
  Client c(server.target());
  // 2 MiB in: refused by gRPC before it is parsed.
  auto big =
      c.Compute("add", {Floats({1 << 19}, std::vector<float>(1 << 19, 1.0f)), Floats({}, {1})});
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  // 8 bytes in, 4 MiB out: refused before the result is allocated.
  auto wide = c.Compute("add", {Floats({1024, 1}, std::vector<float>(1024, 1.0f)),
                                Floats({1, 1024}, std::vector<float>(1024, 1.0f))});
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kResourceExhausted) << wide.status();
  EXPECT_NE(wide.status().message().find("over this server's limit"), absl::string_view::npos);
  auto h = c.Health();
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, "SERVING");
}

TEST(ServerLifecycle, SigtermStopsCleanly) {
  testing::ServerProcess server(ServerBinary(), {BackendFlag()});
  ASSERT_GT(server.port(), 0);
  Client c(server.target());
  ASSERT_TRUE(c.Health().ok());
  const int status = server.Terminate(20);
  ASSERT_NE(status, -1) << "server did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ServerLifecycle, BadFlagExitsWithoutServing) {
  testing::ServerProcess server(ServerBinary(), {"--backend=quantum"});
  EXPECT_EQ(server.port(), 0);
  EXPECT_FALSE(server.running());
}

}  // namespace
}  // namespace tc
