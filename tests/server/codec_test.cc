// Wire tensors to views: every malformed field gets INVALID_ARGUMENT with a useful message.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "server/v1/codec.h"
#include "tests/support/wire_tensors.h"

namespace tc::server {
namespace {

using testing::Floats;

absl::Status DecodeOne(const v1::Tensor& t) {
  google::protobuf::RepeatedPtrField<v1::Tensor> ts;
  *ts.Add() = t;
  return DecodeInputs(ts).status();
}

void ExpectInvalid(const absl::Status& s, absl::string_view fragment) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(fragment), absl::string_view::npos)
      << "message '" << s.message() << "' lacks '" << fragment << "'";
}

TEST(Codec, DTypesMapBothWays) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    auto back = DTypeFromProto(DTypeToProto(t));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, t);
    EXPECT_EQ(v1::DType_Name(DTypeToProto(t)), DTypeName(t));
  }
  ExpectInvalid(DTypeFromProto(0).status(), "dtype is missing");
  ExpectInvalid(DTypeFromProto(99).status(), "unknown dtype enum value 99");
}

TEST(Codec, ContiguousByDefault) {
  google::protobuf::RepeatedPtrField<v1::Tensor> ts;
  *ts.Add() = Floats({2, 3}, {1, 2, 3, 4, 5, 6});
  auto d = DecodeInputs(ts);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->views[0].strides, (DimVector{3, 1}));
  EXPECT_EQ(d->views[0].storage_bytes, 24);
  EXPECT_TRUE(d->owned.empty());
}

// Only the bytes a bool view reaches must be 0 or 1.
TEST(Codec, BoolViewsAreCheckedWhereTheyReach) {
  auto bools = [](const std::string& bytes, DimVector shape, DimVector strides, int64_t offset) {
    v1::Tensor t;
    t.set_dtype(v1::bool_);
    for (int64_t d : shape) t.add_shape(d);
    for (int64_t s : strides) t.add_strides(s);
    t.set_offset(offset);
    t.set_data(bytes);
    return t;
  };
  // Every other byte, from the last one backwards: bytes 5, 3, 1.
  const std::string storage("\xbd\x01\xbd\x00\xbd\x01", 6);
  google::protobuf::RepeatedPtrField<v1::Tensor> ts;
  *ts.Add() = bools(storage, {3}, {-2}, 5);
  EXPECT_TRUE(DecodeInputs(ts).ok());
  // The same bytes, read whole or from byte 0 on: byte 0 is 189.
  ts.Clear();
  *ts.Add() = bools(storage, {3}, {2}, 0);
  EXPECT_EQ(DecodeInputs(ts).status().message(),
            "input 0: byte 0 is 189, but bool elements must be 0 or 1");
  ts.Clear();
  *ts.Add() = bools(storage, {6}, {}, 0);
  EXPECT_FALSE(DecodeInputs(ts).ok());
  // Broadcast dims and overlaps reach what their moving dims reach.
  ts.Clear();
  *ts.Add() = bools(storage, {4, 2, 3}, {0, 0, 2}, 1);
  EXPECT_TRUE(DecodeInputs(ts).ok());

  TensorView v;
  v.dtype = DType::kBool;
  v.shape = {2, 2};
  v.strides = {3, 1};
  v.offset = 1;
  v.storage_bytes = 6;
  EXPECT_EQ(ReachedBytes(v), (std::vector<bool>{false, true, true, false, true, true}));
  v.shape = {6};
  v.strides = {1};
  v.offset = 0;
  EXPECT_TRUE(ReachedBytes(v).empty());  // all of them
}

TEST(Codec, RejectsMalformedTensors) {
  v1::Tensor t = Floats({2, 3}, {1, 2, 3, 4, 5});
  ExpectInvalid(DecodeOne(t), "reach elements 0..5, but the storage holds 5");
  t = Floats({2, 3}, {1, 2, 3, 4, 5, 6});
  t.mutable_data()->push_back('x');
  ExpectInvalid(DecodeOne(t), "25 bytes is not a whole number of float32");
  t = Floats({2, 3}, {1, 2, 3, 4, 5, 6});
  t.add_strides(1);
  ExpectInvalid(DecodeOne(t), "1 strides given for rank 2");
  t.add_strides(4);
  ExpectInvalid(DecodeOne(t), "reach elements 0..9");
  t = Floats({2, -3}, {1, 2, 3, 4, 5, 6});
  ExpectInvalid(DecodeOne(t), "negative");
  t = Floats({2, 3}, {1, 2, 3, 4, 5, 6});
  t.set_dtype(v1::DTYPE_UNSPECIFIED);
  ExpectInvalid(DecodeOne(t), "input 0: dtype is missing");
  t.set_dtype(static_cast<v1::DType>(42));
  ExpectInvalid(DecodeOne(t), "unknown dtype");
  t = Floats({}, {1});
  for (int i = 0; i < 9; ++i) t.add_shape(1);
  ExpectInvalid(DecodeOne(t), "rank 9 exceeds the limit of 8");
  t = Floats({1 << 30, 1 << 30, 1 << 30}, {1});
  ExpectInvalid(DecodeOne(t), "more than 2^63");
  t = Floats({2}, {1, 2});
  t.set_offset(-1);
  ExpectInvalid(DecodeOne(t), "offset -1 is negative");
}

TEST(Codec, Attributes) {
  google::protobuf::Map<std::string, v1::Attribute> m;
  m["alpha"].set_float_value(2.5);
  m["n"].set_int_value(3);
  m["flag"].set_bool_value(true);
  m["dtype"].set_dtype_value(v1::int8);
  m["mode"].set_string_value("tanh");
  auto a = DecodeAttributes(m);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(std::get<double>(a->at("alpha")), 2.5);
  EXPECT_EQ(std::get<int64_t>(a->at("n")), 3);
  EXPECT_EQ(std::get<bool>(a->at("flag")), true);
  EXPECT_EQ(std::get<DType>(a->at("dtype")), DType::kInt8);
  EXPECT_EQ(std::get<std::string>(a->at("mode")), "tanh");
  m["empty"];
  ExpectInvalid(DecodeAttributes(m).status(), "attribute 'empty' has no value");
  m.erase("empty");
  m["dtype"].set_dtype_value(v1::DTYPE_UNSPECIFIED);
  ExpectInvalid(DecodeAttributes(m).status(), "attribute 'dtype': dtype is missing");
}

// A ComputeResponse as the client reads it: the ByteBuffer's slices joined and parsed.
v1::ComputeResponse Parse(grpc::ByteBuffer buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  v1::ComputeResponse m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

TEST(Codec, AReturnedOutputIsContiguousWithItsBytesBesideTheMessage) {
  TensorView in{DType::kFloat32, {2, 3}, {3, 1}, 0, nullptr, 24};
  std::vector<float> storage(6);
  in.data = reinterpret_cast<const std::byte*>(storage.data());
  const TensorView ins[] = {in, in};
  auto op = PrepareOp("add", ins, {});
  ASSERT_TRUE(op.ok()) << op.status();
  for (auto kind : {ComputeResult::Bytes::kBuffer, ComputeResult::Bytes::kString}) {
    ComputeResult r(kind);
    std::byte* p = r.PrepareOutput(op->plan);
    ASSERT_NE(p, nullptr);
    for (int i = 0; i < 24; ++i) p[i] = static_cast<std::byte>(i + 1);
    EXPECT_EQ(r.byte_size(), 24);
    const v1::ComputeResponse m = Parse(EncodeComputeResponse(r));
    EXPECT_FALSE(r.has_bytes());
    ASSERT_EQ(m.output().data().size(), 24u);
    for (int i = 0; i < 24; ++i) EXPECT_EQ(m.output().data()[i], static_cast<char>(i + 1));
    EXPECT_EQ(m.output().dtype(), v1::float32);
    EXPECT_EQ(m.output().shape_size(), 2);
    EXPECT_EQ(m.output().strides(0), 3);
    EXPECT_EQ(m.output().strides(1), 1);
    EXPECT_EQ(m.output().offset(), 0);
    EXPECT_TRUE(m.output().handle().empty());
  }
}

TEST(Codec, ResidentAndRegionOutputsCarryTheirPlaceAndNoBytes) {
  const TensorView v{DType::kInt16, {5}, {2}, 1, nullptr, 20};
  ComputeResult kept(ComputeResult::Bytes::kBuffer);
  kept.SetResident(v, "h-1");
  v1::ComputeResponse m = Parse(EncodeComputeResponse(kept));
  EXPECT_EQ(m.output().handle(), "h-1");
  EXPECT_EQ(m.output().dtype(), v1::int16);
  EXPECT_EQ(m.output().strides(0), 2);
  EXPECT_EQ(m.output().offset(), 1);
  EXPECT_EQ(m.output().storage_bytes(), 20);
  EXPECT_TRUE(m.output().data().empty());

  ComputeResult placed(ComputeResult::Bytes::kBuffer);
  placed.SetRegion(v, "r-7", 4096);
  m = Parse(EncodeComputeResponse(placed));
  EXPECT_EQ(m.output().region(), "r-7");
  EXPECT_EQ(m.output().region_offset(), 4096);
  EXPECT_EQ(m.output().storage_bytes(), 20);
  EXPECT_TRUE(m.output().data().empty());

  ComputeResult none(ComputeResult::Bytes::kBuffer);
  m = Parse(EncodeComputeResponse(none));
  EXPECT_FALSE(m.has_output());
}

}  // namespace
}  // namespace tc::server
