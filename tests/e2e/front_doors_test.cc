// One request, two front doors: every bad request below is sent as a tensorcompute.v1 Compute
// and as a KServe v2 ModelInfer of the same op, inputs and attributes, and must get the same
// status code from both; where the fault lies past the protocol (the engine's checks: shapes,
// dtypes, attributes, expressions, division by zero) the same words too. The one difference
// is the protocol's own: an unknown model is NOT_FOUND in KServe v2, as Triton answers it.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tensorcompute/v1/tensor_service.grpc.pb.h"
#include "tests/support/server_binary.h"
#include "tests/support/server_process.h"

namespace tc {
namespace {

namespace v1 = ::tensorcompute::v1;
namespace inf = ::inference;

struct Input {
  // The expression's variable; an op's inputs are INPUT0, INPUT1... in KServe v2.
  std::string name;
  v1::DType dtype;
  const char* datatype;  // KServe v2's name of it
  std::vector<int64_t> shape;
  std::string bytes;
};

template <typename T>
Input In(std::string name, v1::DType dtype, const char* datatype, std::vector<int64_t> shape,
         const std::vector<T>& values) {
  return {std::move(name), dtype, datatype, std::move(shape),
          std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T))};
}

Input F32(std::vector<int64_t> shape, std::vector<float> v, std::string name = "") {
  return In(std::move(name), v1::float32, "FP32", std::move(shape), v);
}
Input I32(std::vector<int64_t> shape, std::vector<int32_t> v, std::string name = "") {
  return In(std::move(name), v1::int32, "INT32", std::move(shape), v);
}
// A tensor that announces `shape` and carries no bytes: refused before its bytes would count.
Input Huge(std::vector<int64_t> shape) { return {"", v1::float32, "FP32", std::move(shape), ""}; }

using AttrValue = std::variant<int64_t, double, std::string>;

struct Case {
  std::string name;
  // An op, or empty for `expression`.
  std::string op;
  std::string expression;
  std::vector<Input> inputs;
  std::vector<std::pair<std::string, AttrValue>> attrs;
  // What both messages say; with `same_words`, the two messages are equal.
  std::string fragment;
  bool same_words = true;
};

class FrontDoorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess(
        testing::ServerBinary(),
        {testing::BackendFlag(), "--max_rank=6", "--max_elements=4000000"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_GT(server_->port(), 0) << "server did not start";
    auto channel = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
    v1_ = v1::TensorService::NewStub(channel);
    v2_ = inf::GRPCInferenceService::NewStub(channel);
  }

  grpc::Status SendV1(const Case& c) {
    v1::ComputeRequest r;
    r.set_op(c.op);
    r.set_expression(c.expression);
    for (const Input& in : c.inputs) {
      v1::Tensor* t = r.add_inputs();
      t->set_dtype(in.dtype);
      for (int64_t d : in.shape) t->add_shape(d);
      t->set_data(in.bytes);
      if (!c.expression.empty()) r.add_input_names(in.name);
    }
    for (const auto& [key, value] : c.attrs) {
      v1::Attribute& a = (*r.mutable_attributes())[key];
      if (const auto* i = std::get_if<int64_t>(&value)) a.set_int_value(*i);
      if (const auto* d = std::get_if<double>(&value)) a.set_float_value(*d);
      if (const auto* s = std::get_if<std::string>(&value)) a.set_string_value(*s);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::ComputeResponse response;
    return v1_->Compute(&ctx, r, &response);
  }

  grpc::Status SendV2(const Case& c) {
    inf::ModelInferRequest r;
    r.set_model_name(c.expression.empty() ? c.op : "expression");
    if (!c.expression.empty())
      (*r.mutable_parameters())["expression"].set_string_param(c.expression);
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const Input& in = c.inputs[i];
      auto* t = r.add_inputs();
      t->set_name(c.expression.empty() ? absl::StrCat("INPUT", i) : in.name);
      t->set_datatype(in.datatype);
      for (int64_t d : in.shape) t->add_shape(d);
      r.add_raw_input_contents(in.bytes);
    }
    for (const auto& [key, value] : c.attrs) {
      inf::InferParameter& p = (*r.mutable_parameters())[key];
      if (const auto* i = std::get_if<int64_t>(&value)) p.set_int64_param(*i);
      if (const auto* d = std::get_if<double>(&value)) p.set_double_param(*d);
      if (const auto* s = std::get_if<std::string>(&value)) p.set_string_param(*s);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    inf::ModelInferResponse response;
    return v2_->ModelInfer(&ctx, r, &response);
  }

  static testing::ServerProcess* server_;
  std::unique_ptr<v1::TensorService::Stub> v1_;
  std::unique_ptr<inf::GRPCInferenceService::Stub> v2_;
};

testing::ServerProcess* FrontDoorsTest::server_ = nullptr;

TEST_F(FrontDoorsTest, TheSameFaultGetsTheSameAnswerFromBothProtocols) {
  const std::vector<Case> cases = {
      {"shapes that do not broadcast",
       "add",
       "",
       {F32({2, 3}, {1, 2, 3, 4, 5, 6}), F32({2}, {1, 2})},
       {},
       "cannot be broadcast together"},
      {"integer division by zero",
       "floor_divide",
       "",
       {I32({2}, {1, 2}), I32({2}, {1, 0})},
       {},
       "division by zero"},
      {"a dtype the op does not take",
       "bitwise_and",
       "",
       {F32({1}, {1}), F32({1}, {2})},
       {},
       "bitwise_and"},
      {"an attribute the op does not have",
       "add",
       "",
       {F32({1}, {1}), F32({1}, {2})},
       {{"beta", int64_t{2}}},
       "beta"},
      {"an attribute of the wrong type",
       "clamp",
       "",
       {F32({1}, {1})},
       {{"min", std::string("low")}},
       "min"},
      {"an integral alpha for integers",
       "add",
       "",
       {I32({1}, {1}), I32({1}, {2})},
       {{"alpha", 0.5}},
       "alpha"},
      {"an expression that does not parse",
       "",
       "a +* b",
       {F32({1}, {1}, "a"), F32({1}, {2}, "b")},
       {},
       "expression"},
      {"an expression calling what is not an op",
       "",
       "frobnicate(a)",
       {F32({1}, {1}, "a")},
       {},
       "frobnicate"},
      {"an expression whose inputs do not broadcast",
       "",
       "x * y + 1",
       {F32({3}, {1, 2, 3}, "x"), F32({2}, {1, 2}, "y")},
       {},
       "cannot be broadcast together"},
      {"an expression dividing integers by zero",
       "",
       "a // (b - b)",
       {I32({2}, {1, 2}, "a"), I32({2}, {3, 4}, "b")},
       {},
       "by zero"},
      {"a literal that does not fit",
       "",
       "a + 300",
       {In<int8_t>("a", v1::int8, "INT8", {1}, {1})},
       {},
       "300 does not fit int8"},
      // Faults the protocols word in their own terms (an input's name, a model for an op):
      // the same code, the same substance.
      {"more elements than the server takes",
       "neg",
       "",
       {Huge({int64_t{1} << 23})},
       {},
       "8388608 elements exceed this server's limit of 4000000",
       false},
      {"a rank above the server's",
       "neg",
       "",
       {F32({1, 1, 1, 1, 1, 1, 1}, {1})},
       {},
       "rank 7 exceeds this server's limit of 6",
       false},
      {"a shape whose element count overflows",
       "neg",
       "",
       {Huge({int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 31})},
       {},
       "has more than 2^63 elements",
       false},
      {"too few inputs for the op", "add", "", {F32({1}, {1})}, {}, "takes 2 inputs, got 1", false},
      {"bytes that do not fill the shape",
       "neg",
       "",
       {In<float>("", v1::float32, "FP32", {3}, {1, 2})},
       {},
       "",
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const grpc::Status a = SendV1(c);
    const grpc::Status b = SendV2(c);
    EXPECT_FALSE(a.ok());
    EXPECT_EQ(a.error_code(), b.error_code())
        << "v1: " << a.error_message() << "\nv2: " << b.error_message();
    EXPECT_NE(a.error_message().find(c.fragment), std::string::npos) << a.error_message();
    EXPECT_NE(b.error_message().find(c.fragment), std::string::npos) << b.error_message();
    if (c.same_words) {
      EXPECT_EQ(a.error_message(), b.error_message());
    }
  }
  // The protocol's own difference: an unknown op is a bad argument to Compute, an unknown
  // model NOT_FOUND to ModelInfer (as Triton answers).
  Case unknown{"unknown", "no_such_op", "", {F32({1}, {1})}, {}, "no_such_op"};
  const grpc::Status a = SendV1(unknown);
  const grpc::Status b = SendV2(unknown);
  EXPECT_EQ(a.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << a.error_message();
  EXPECT_EQ(b.error_code(), grpc::StatusCode::NOT_FOUND) << b.error_message();
  EXPECT_NE(a.error_message().find("no_such_op"), std::string::npos) << a.error_message();
  EXPECT_NE(b.error_message().find("no_such_op"), std::string::npos) << b.error_message();
}

}  // namespace
}  // namespace tc
