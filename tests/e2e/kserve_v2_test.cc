// The real server binary on 127.0.0.1, called only through the open inference protocol's
// messages (inference.GRPCInferenceService, generated from proto/inference), as a C++ client
// written for Triton would; results against a reference computed here.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tests/support/raw_call.h"
#include "tests/support/server_binary.h"
#include "tests/support/server_process.h"

namespace tc {
namespace {

namespace inf = ::inference;

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
std::vector<T> Values(const std::string& raw) {
  std::vector<T> v(raw.size() / sizeof(T));
  std::memcpy(v.data(), raw.data(), v.size() * sizeof(T));
  return v;
}

void AddInput(inf::ModelInferRequest* r, const std::string& name, const std::string& datatype,
              const std::vector<int64_t>& shape, std::string raw) {
  auto* in = r->add_inputs();
  in->set_name(name);
  in->set_datatype(datatype);
  for (int64_t d : shape) in->add_shape(d);
  r->add_raw_input_contents(std::move(raw));
}

class KServeV2Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess(testing::ServerBinary(), {testing::BackendFlag()});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_GT(server_->port(), 0) << "server did not start";
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    stub_ = inf::GRPCInferenceService::NewStub(
        grpc::CreateCustomChannel(server_->target(), grpc::InsecureChannelCredentials(), args));
  }

  grpc::Status Infer(const inf::ModelInferRequest& request, inf::ModelInferResponse* response) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->ModelInfer(&ctx, request, response);
  }

  void ExpectReady() {
    grpc::ClientContext ctx;
    inf::ServerReadyResponse r;
    ASSERT_TRUE(stub_->ServerReady(&ctx, inf::ServerReadyRequest(), &r).ok());
    EXPECT_TRUE(r.ready());
  }

  static testing::ServerProcess* server_;
  std::unique_ptr<inf::GRPCInferenceService::Stub> stub_;
};

testing::ServerProcess* KServeV2Test::server_ = nullptr;

TEST_F(KServeV2Test, LiveReadyAndMetadata) {
  {
    grpc::ClientContext ctx;
    inf::ServerLiveResponse r;
    ASSERT_TRUE(stub_->ServerLive(&ctx, inf::ServerLiveRequest(), &r).ok());
    EXPECT_TRUE(r.live());
  }
  ExpectReady();
  grpc::ClientContext ctx;
  inf::ModelMetadataRequest req;
  req.set_name("mul");
  inf::ModelMetadataResponse r;
  ASSERT_TRUE(stub_->ModelMetadata(&ctx, req, &r).ok());
  ASSERT_EQ(r.inputs_size(), 2);
  EXPECT_EQ(r.inputs(1).name(), "INPUT1");
  EXPECT_EQ(r.inputs(1).datatype(), "FP32");
  ASSERT_EQ(r.outputs_size(), 1);
  EXPECT_EQ(r.outputs(0).name(), "OUTPUT0");
  ASSERT_EQ(r.outputs(0).shape_size(), 1);
  EXPECT_EQ(r.outputs(0).shape(0), -1);
}

TEST_F(KServeV2Test, BroadcastAddMatchesTheReference) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  const int64_t rows = 37, cols = 101;
  std::vector<float> a(rows * cols), b(cols);
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);
  inf::ModelInferRequest req;
  req.set_model_name("add");
  req.set_id("cpp-1");
  AddInput(&req, "INPUT0", "FP32", {rows, cols}, Bytes(a));
  AddInput(&req, "INPUT1", "FP32", {cols}, Bytes(b));
  (*req.mutable_parameters())["alpha"].set_double_param(0.5);
  inf::ModelInferResponse resp;
  grpc::Status s = Infer(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.id(), "cpp-1");
  ASSERT_EQ(resp.outputs_size(), 1);
  EXPECT_EQ(resp.outputs(0).datatype(), "FP32");
  ASSERT_EQ(resp.outputs(0).shape_size(), 2);
  EXPECT_EQ(resp.outputs(0).shape(0), rows);
  EXPECT_EQ(resp.outputs(0).shape(1), cols);
  const std::vector<float> out = Values<float>(resp.raw_output_contents(0));
  ASSERT_EQ(out.size(), a.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      ASSERT_EQ(out[i * cols + j], a[i * cols + j] + 0.5f * b[j]) << i << "," << j;
    }
  }
}

// Raw inputs of a megabyte and more are taken out of the message as it is parsed and small
// ones left in it: in any mix, and in any order of the inputs, each entry stays its input's;
// a large output comes back beside the response message, byte for byte.
TEST_F(KServeV2Test, LargeAndSmallRawInputsInAnyOrder) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  const int64_t rows = 601, cols = 1031;  // x: 2.4 MiB; the condition 0.6 MiB; y one row
  std::vector<uint8_t> cond(rows * cols);
  std::vector<float> x(rows * cols), y(cols);
  for (uint8_t& c : cond) c = rng() % 2;
  for (float& v : x) v = normal(rng);
  for (float& v : y) v = normal(rng);
  inf::ModelInferRequest req;
  req.set_model_name("where");
  AddInput(&req, "INPUT2", "FP32", {cols}, Bytes(y));
  AddInput(&req, "INPUT1", "FP32", {rows, cols}, Bytes(x));
  AddInput(&req, "INPUT0", "BOOL", {rows, cols}, Bytes(cond));
  for (int round = 0; round < 2; ++round) {
    inf::ModelInferResponse resp;
    grpc::Status s = Infer(req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(resp.raw_output_contents_size(), 1);
    const std::vector<float> out = Values<float>(resp.raw_output_contents(0));
    ASSERT_EQ(out.size(), x.size());
    for (int64_t i = 0; i < rows * cols; ++i) {
      ASSERT_EQ(out[i], cond[i] ? x[i] : y[i % cols]) << i;
    }
    // The second time with the large input first.
    std::swap(*req.mutable_inputs(0), *req.mutable_inputs(1));
    std::swap(*req.mutable_raw_input_contents(0), *req.mutable_raw_input_contents(1));
  }
  // Entries that do not match their inputs' sizes are refused as before.
  std::swap(*req.mutable_raw_input_contents(0), *req.mutable_raw_input_contents(1));
  inf::ModelInferResponse resp;
  grpc::Status s = Infer(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  // Bytes that are no ModelInferRequest get a status saying so.
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto channel =
      grpc::CreateCustomChannel(server_->target(), grpc::InsecureChannelCredentials(), args);
  std::string junk = req.SerializeAsString();
  junk.resize(junk.size() - 100);  // cut inside the large entry
  s = testing::RawUnaryCall(channel, "/inference.GRPCInferenceService/ModelInfer", junk);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  ExpectReady();
}

TEST_F(KServeV2Test, IntegerAndBoolDatatypes) {
  inf::ModelInferRequest req;
  req.set_model_name("maximum");
  AddInput(&req, "INPUT0", "INT8", {4}, Bytes(std::vector<int8_t>{-128, 5, 0, 127}));
  AddInput(&req, "INPUT1", "INT8", {4}, Bytes(std::vector<int8_t>{-3, 7, -1, -127}));
  inf::ModelInferResponse resp;
  ASSERT_TRUE(Infer(req, &resp).ok());
  EXPECT_EQ(resp.outputs(0).datatype(), "INT8");
  EXPECT_EQ(Values<int8_t>(resp.raw_output_contents(0)), (std::vector<int8_t>{-3, 7, 0, 127}));

  inf::ModelInferRequest cmp;
  cmp.set_model_name("lt");
  AddInput(&cmp, "INPUT0", "INT64", {3}, Bytes(std::vector<int64_t>{1, 5, int64_t{1} << 40}));
  AddInput(&cmp, "INPUT1", "INT64", {}, Bytes(std::vector<int64_t>{5}));
  inf::ModelInferResponse r2;
  ASSERT_TRUE(Infer(cmp, &r2).ok());
  EXPECT_EQ(r2.outputs(0).datatype(), "BOOL");
  EXPECT_EQ(Values<uint8_t>(r2.raw_output_contents(0)), (std::vector<uint8_t>{1, 0, 0}));
}

TEST_F(KServeV2Test, ErrorsLeaveTheServerServing) {
  inf::ModelInferRequest req;
  req.set_model_name("no_such_model");
  AddInput(&req, "INPUT0", "FP32", {1}, Bytes(std::vector<float>{1}));
  inf::ModelInferResponse resp;
  grpc::Status s = Infer(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("'no_such_model'"), std::string::npos) << s.error_message();

  req.set_model_name("neg");
  req.mutable_inputs(0)->set_datatype("FP64");
  s = Infer(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("8 bytes"), std::string::npos) << s.error_message();

  req.mutable_inputs(0)->set_datatype("STRING");
  s = Infer(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // A shape whose element count overflows.
  req.mutable_inputs(0)->set_datatype("FP32");
  req.mutable_inputs(0)->clear_shape();
  for (int i = 0; i < 4; ++i) req.mutable_inputs(0)->add_shape(int64_t{1} << 20);
  s = Infer(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // More elements than the server takes: the code and words of v1's Compute (bad_input_test).
  req.mutable_inputs(0)->clear_shape();
  req.mutable_inputs(0)->add_shape(int64_t{1} << 37);
  s = Infer(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(
      s.error_message().find("137438953472 elements exceed this server's limit of 68719476736"),
      std::string::npos)
      << s.error_message();
  ExpectReady();
}

TEST_F(KServeV2Test, StreamAnswersEachRequestInOrder) {
  grpc::ClientContext ctx;
  auto stream = stub_->ModelStreamInfer(&ctx);
  for (int i = 0; i < 6; ++i) {
    inf::ModelInferRequest req;
    req.set_model_name(i == 3 ? "nope" : "mul");
    req.set_id(std::to_string(i));
    AddInput(&req, "INPUT0", "FP32", {2}, Bytes(std::vector<float>{float(i), 2}));
    AddInput(&req, "INPUT1", "FP32", {2}, Bytes(std::vector<float>{3, float(i)}));
    ASSERT_TRUE(stream->Write(req));
  }
  stream->WritesDone();
  inf::ModelStreamInferResponse r;
  int n = 0;
  while (stream->Read(&r)) {
    EXPECT_EQ(r.infer_response().id(), std::to_string(n));
    // Each response is its request's last, as Triton marks it.
    ASSERT_EQ(r.infer_response().parameters().count("triton_final_response"), 1u);
    EXPECT_TRUE(r.infer_response().parameters().at("triton_final_response").bool_param());
    if (n == 3) {
      EXPECT_NE(r.error_message().find("'nope'"), std::string::npos) << r.error_message();
    } else {
      EXPECT_EQ(r.error_message(), "");
      EXPECT_EQ(Values<float>(r.infer_response().raw_output_contents(0)),
                (std::vector<float>{3.0f * n, 2.0f * n}));
    }
    ++n;
  }
  EXPECT_EQ(n, 6);
  EXPECT_TRUE(stream->Finish().ok());
}

// Methods this server does not serve (Triton's statistics and repository methods, a typo)
// say so by name instead of gRPC's empty UNIMPLEMENTED.
TEST_F(KServeV2Test, UnservedMethodsSayWhat) {
  auto channel = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
  for (const char* method :
       {"/inference.GRPCInferenceService/RepositoryModelLoad",
        "/inference.GRPCInferenceService/LogSettings", "/tensorcompute.v1.TensorService/Nope"}) {
    const grpc::Status status = testing::RawUnaryCall(channel, method, "");
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << method;
    EXPECT_NE(
        status.error_message().find(std::string("method '") + method + "' is not served here"),
        std::string::npos)
        << status.error_message();
  }
  ExpectReady();
}

}  // namespace
}  // namespace tc
