// KServe v2's conversion on its own (server/kserve/convert.h): a ModelInferRequest into the
// pipeline's ComputeSpec (inputs by name into the op's order, raw contents used where they
// lie, typed contents converted, parameters as attributes, every refusal with its code), and
// a ComputeResult back into the model's response. Values are fresh random ones each run.
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/engine.h"
#include "server/kserve/convert.h"
#include "server/kserve/models.h"
#include "tests/support/random_tensors.h"

namespace tc::server {
namespace {

using Request = inf::ModelInferRequest;

std::mt19937_64& Rng() {
  static std::mt19937_64 rng(testing::TestSeed());
  return rng;
}

std::string RawFloats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> RandomFloats(int n) {
  std::uniform_real_distribution<float> d(-100, 100);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(Rng());
  return v;
}

Request::InferInputTensor* AddInput(Request* r, const std::string& name, const char* datatype,
                                    std::vector<int64_t> shape) {
  auto* in = r->add_inputs();
  in->set_name(name);
  in->set_datatype(datatype);
  for (int64_t d : shape) in->add_shape(d);
  return in;
}

struct Converted {
  absl::Status status;
  ComputeSpec spec;
  std::optional<ShmTarget> output_shm;
};

Converted Convert(const Request& r, const ServiceOptions& options = {}) {
  Converted c;
  c.status = ToComputeSpec(r, options, /*shm=*/nullptr, /*budget=*/nullptr, &c.spec, &c.output_shm);
  return c;
}

void ExpectRefused(const Request& r, absl::StatusCode code, const std::string& words,
                   const ServiceOptions& options = {}) {
  const Converted c = Convert(r, options);
  EXPECT_EQ(c.status.code(), code) << c.status;
  EXPECT_NE(std::string(c.status.message()).find(words), std::string::npos)
      << "'" << c.status.message() << "' does not say '" << words << "'";
}

TEST(KServeConvert, RawInputsGoToTheirOpSlotsAndStayWhereTheyLie) {
  const int n = 1 + static_cast<int>(Rng()() % 97);  // odd sizes included
  const std::vector<float> a = RandomFloats(n), b = RandomFloats(n);
  Request r;
  r.set_model_name("add");
  r.set_id("call-7");
  // INPUT1 first: the names, not the order, say which argument each is.
  AddInput(&r, "INPUT1", "FP32", {n});
  AddInput(&r, "INPUT0", "FP32", {1, n});
  r.add_raw_input_contents(RawFloats(b));
  r.add_raw_input_contents(RawFloats(a));
  (*r.mutable_parameters())["alpha"].set_double_param(2.5);
  const Converted c = Convert(r);
  ASSERT_TRUE(c.status.ok()) << c.status;
  ASSERT_NE(c.spec.op, nullptr);
  EXPECT_EQ(c.spec.op->spec.name, "add");
  ASSERT_EQ(c.spec.inputs.size(), 2u);
  const InputSpec& x = c.spec.inputs[0];
  const InputSpec& y = c.spec.inputs[1];
  EXPECT_EQ(x.source, InputSource::kInline);
  EXPECT_EQ(x.view.shape, (DimVector{1, n}));
  EXPECT_EQ(y.view.shape, (DimVector{n}));
  EXPECT_EQ(x.view.strides, (DimVector{n, 1}));
  // Not copied: the spec points into the request.
  EXPECT_EQ(x.bytes.data(), r.raw_input_contents(1).data());
  EXPECT_EQ(y.bytes.data(), r.raw_input_contents(0).data());
  EXPECT_EQ(x.what, "input 'INPUT0'");
  EXPECT_TRUE(c.spec.owned.empty());
  ASSERT_TRUE(c.spec.attrs.contains("alpha"));
  EXPECT_EQ(std::get<double>(c.spec.attrs.at("alpha")), 2.5);
  EXPECT_FALSE(c.output_shm.has_value());
}

TEST(KServeConvert, TypedContentsBecomeLittleEndianBytes) {
  const int n = 1 + static_cast<int>(Rng()() % 33);
  Request r;
  r.set_model_name("where");
  auto* cond = AddInput(&r, "INPUT0", "BOOL", {n});
  auto* x = AddInput(&r, "INPUT1", "INT64", {n});
  auto* y = AddInput(&r, "INPUT2", "INT64", {1});
  std::vector<int64_t> xs;
  for (int i = 0; i < n; ++i) {
    const bool c = (Rng()() & 1) != 0;
    cond->mutable_contents()->add_bool_contents(c);
    xs.push_back(static_cast<int64_t>(Rng()()));
    x->mutable_contents()->add_int64_contents(xs.back());
  }
  y->mutable_contents()->add_int64_contents(-3);
  const Converted c = Convert(r);
  ASSERT_TRUE(c.status.ok()) << c.status;
  ASSERT_EQ(c.spec.inputs.size(), 3u);
  const InputSpec& cs = c.spec.inputs[0];
  ASSERT_EQ(cs.bytes.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(static_cast<bool>(cs.bytes[static_cast<size_t>(i)]),
              r.inputs(0).contents().bool_contents(i));
  }
  const InputSpec& xsp = c.spec.inputs[1];
  ASSERT_EQ(xsp.bytes.size(), xs.size() * 8);
  EXPECT_EQ(std::memcmp(xsp.bytes.data(), xs.data(), xs.size() * 8), 0);
  EXPECT_EQ(c.spec.inputs[2].view.dtype, DType::kInt64);
  // The converted bytes are the spec's own.
  EXPECT_EQ(c.spec.owned.size(), 3u);
}

TEST(KServeConvert, AnExpressionTakesItsInputsByTheirNames) {
  Request r;
  r.set_model_name(kExpressionModel);
  AddInput(&r, "x", "FP32", {3})->mutable_contents()->add_fp32_contents(1);
  r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(2);
  r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(3);
  (*r.mutable_parameters())[kExpressionParameter].set_string_param("x * 2 + 1");
  const Converted c = Convert(r);
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.spec.op, nullptr);
  EXPECT_EQ(c.spec.expression, "x * 2 + 1");
  EXPECT_EQ(c.spec.input_names, std::vector<std::string>{"x"});
}

TEST(KServeConvert, EachRefusalWithItsCode) {
  const auto add = [](int inputs) {
    Request r;
    r.set_model_name("add");
    for (int i = 0; i < inputs; ++i) {
      AddInput(&r, InputName(i), "FP32", {2});
      r.add_raw_input_contents(RawFloats({1, 2}));
    }
    return r;
  };
  Request r = add(2);
  r.set_model_name("no_such_op");
  ExpectRefused(r, absl::StatusCode::kNotFound, "no_such_op");
  ExpectRefused(add(3), absl::StatusCode::kInvalidArgument, "takes");
  r = add(2);
  r.set_model_version("7");
  ExpectRefused(r, absl::StatusCode::kNotFound, "7");
  r = add(2);
  r.mutable_inputs(1)->set_name("INPUT01");
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "has no input 'INPUT01'");
  r = add(2);
  r.mutable_inputs(1)->set_name("INPUT0");
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "given twice");
  r = add(2);
  r.mutable_inputs(0)->set_datatype("FP128");
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "'FP128' is not served");
  r = add(2);
  r.set_raw_input_contents(1, RawFloats({1, 2, 3}));
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "raw_input_contents[1] has 12");
  r = add(2);
  r.add_raw_input_contents(RawFloats({1, 2}));
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "raw_input_contents has 3 entries");
  r = add(2);
  r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "not taken together");
  r = add(2);
  r.mutable_inputs(0)->set_shape(0, -2);
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "input 'INPUT0'");
  r = add(2);
  (*r.mutable_parameters())["alpha"];  // no value (its type is the engine's to check)
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "parameter 'alpha' has no value");
  r = add(2);
  r.add_outputs()->set_name("OUTPUT1");
  ExpectRefused(r, absl::StatusCode::kInvalidArgument, "has no output 'OUTPUT1'");
  r = add(2);
  (*r.mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param("r");
  (*r.mutable_inputs(0)->mutable_parameters())["shared_memory_byte_size"].set_int64_param(8);
  EXPECT_FALSE(Convert(r).status.ok());  // No shared memory without a lookup.

  Request e;
  e.set_model_name(kExpressionModel);
  AddInput(&e, "x", "FP32", {1})->mutable_contents()->add_fp32_contents(1);
  ExpectRefused(e, absl::StatusCode::kInvalidArgument, "needs the request parameter");
  (*e.mutable_parameters())[kExpressionParameter].set_string_param("x + 1");
  (*e.mutable_parameters())["alpha"].set_double_param(2);
  ExpectRefused(e, absl::StatusCode::kInvalidArgument, "written inside an expression");

  // The server's limits, as v1 checks them.
  ServiceOptions small;
  small.max_elements = 3;
  EXPECT_TRUE(Convert(add(2), small).status.ok());  // 2 elements: within
  r = add(2);
  r.mutable_inputs(0)->set_shape(0, 4);
  ExpectRefused(r, absl::StatusCode::kResourceExhausted, "elements exceed", small);
}

TEST(KServeConvert, TheResultBecomesTheModelsResponse) {
  // At least 32 bytes: a shorter string lives inside its object, and moves as a copy.
  const int n = 8 + static_cast<int>(Rng()() % 50);
  const std::vector<float> values = RandomFloats(n);
  TensorView in{DType::kFloat32, {n}, {1}, 0, nullptr, n * 4};
  in.data = reinterpret_cast<const std::byte*>(values.data());
  const TensorView ins[] = {in};
  auto op = PrepareOp("neg", ins, {});
  ASSERT_TRUE(op.ok()) << op.status();
  ComputeResult result(ComputeResult::Bytes::kString);
  std::byte* out = result.PrepareOutput(op->plan);
  std::memcpy(out, values.data(), values.size() * 4);
  const char* where = reinterpret_cast<const char*>(result.bytes());

  Request r;
  r.set_model_name("neg");
  r.set_id("req-1");
  inf::ModelInferResponse response;
  ASSERT_TRUE(ToInferResponse(r, result, std::nullopt, &response).ok());
  EXPECT_EQ(response.model_name(), "neg");
  EXPECT_EQ(response.model_version(), kVersion);
  EXPECT_EQ(response.id(), "req-1");
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), kOutputName);
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  ASSERT_EQ(response.outputs(0).shape_size(), 1);
  EXPECT_EQ(response.outputs(0).shape(0), n);
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0), RawFloats(values));
  // Moved, not copied.
  EXPECT_EQ(response.raw_output_contents(0).data(), where);

  // An output bound for shared memory too small for it.
  ComputeResult again(ComputeResult::Bytes::kString);
  again.PrepareOutput(op->plan);
  ShmTarget tiny{nullptr, 0, n * 4 - 1};
  inf::ModelInferResponse refused;
  EXPECT_EQ(ToInferResponse(r, again, tiny, &refused).code(), absl::StatusCode::kInvalidArgument);

  // Nothing computed: no response to make.
  ComputeResult none(ComputeResult::Bytes::kString);
  inf::ModelInferResponse empty;
  EXPECT_EQ(ToInferResponse(r, none, std::nullopt, &empty).code(), absl::StatusCode::kInternal);
}

// On the wire, the output goes beside the message (a slice over the result's bytes): what
// arrives parses as the response protobuf writes, raw_output_contents and all.
TEST(KServeConvert, TheResponseOnTheWireCarriesTheBytesBesideTheMessage) {
  for (const int n : {0, 1, 5000, 300000}) {
    std::vector<float> values = RandomFloats(n);
    TensorView in{DType::kFloat32, {n}, {1}, 0, nullptr, n * 4};
    in.data = reinterpret_cast<const std::byte*>(values.data());
    const TensorView ins[] = {in};
    auto op = PrepareOp("neg", ins, {});
    ASSERT_TRUE(op.ok()) << op.status();
    ComputeResult result(ComputeResult::Bytes::kBuffer);
    std::byte* out = result.PrepareOutput(op->plan);
    if (n > 0) std::memcpy(out, values.data(), values.size() * 4);
    Request r;
    r.set_model_name("neg");
    r.set_id("wire");
    inf::ModelInferResponse meta;
    ASSERT_TRUE(ToInferResponse(r, result, std::nullopt, &meta, /*bytes_beside=*/true).ok());
    EXPECT_EQ(meta.raw_output_contents_size(), 0);
    grpc::ByteBuffer wire = EncodeInferResponse(meta, result, std::nullopt);
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(wire.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& sl : slices)
      bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    inf::ModelInferResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(bytes)) << n;
    EXPECT_EQ(parsed.id(), "wire");
    ASSERT_EQ(parsed.outputs_size(), 1);
    EXPECT_EQ(parsed.outputs(0).shape(0), n);
    ASSERT_EQ(parsed.raw_output_contents_size(), 1);
    EXPECT_EQ(parsed.raw_output_contents(0), RawFloats(values)) << n;
    // Exactly what protobuf writes for the same message.
    inf::ModelInferResponse whole = meta;
    whole.add_raw_output_contents(RawFloats(values));
    EXPECT_EQ(bytes, whole.SerializeAsString()) << n;
  }
}

}  // namespace
}  // namespace tc::server
