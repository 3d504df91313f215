// DataChunk messages written and read by proto/chunk_wire against protobuf's own encoding,
// with the received bytes split into slices at random places.
#include "proto/chunk_wire.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::wire {
namespace {

namespace v1 = ::tensorcompute::v1;

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// `bytes` as a ByteBuffer of slices cut at random places (empty slices included).
grpc::ByteBuffer Sliced(const std::string& bytes, std::mt19937_64& rng) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = std::min<size_t>(bytes.size() - at, rng() % 9 == 0 ? 0 : 1 + rng() % 40);
    slices.emplace_back(bytes.data() + at, n);
    at += n;
  }
  if (slices.empty()) slices.emplace_back();
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(ChunkWireTest, WritesWhatProtobufWritesAndReadsItBack) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t tensor = trial % 3 == 0 ? 0 : static_cast<int32_t>(rng() % 100000);
    const int64_t offset = trial % 5 == 0 ? 0 : static_cast<int64_t>(rng() >> (rng() % 60));
    std::string data(trial % 7 == 0 ? 0 : rng() % 5000, '\0');
    for (char& c : data) c = static_cast<char>(rng());

    grpc::ByteBuffer ours = ChunkMessage(tensor, offset, data.data(), data.size());
    v1::UploadRequest expect;
    expect.mutable_chunk()->set_tensor(tensor);
    expect.mutable_chunk()->set_offset(offset);
    expect.mutable_chunk()->set_data(data);
    const std::string wire = Flatten(ours);
    ASSERT_EQ(wire, expect.SerializeAsString()) << "trial " << trial;
    // Every message with a chunk in field 2 reads it.
    v1::TensorStreamMessage as_stream;
    ASSERT_TRUE(as_stream.ParseFromString(wire));
    EXPECT_EQ(as_stream.chunk().data(), data);

    ChunkRef ref;
    ASSERT_TRUE(ParseChunk(Sliced(wire, rng), &ref)) << "trial " << trial;
    EXPECT_EQ(ref.tensor(), tensor);
    EXPECT_EQ(ref.offset(), offset);
    ASSERT_EQ(ref.size(), static_cast<int64_t>(data.size()));
    std::string back(data.size(), '\0');
    ref.CopyTo(back.data());
    EXPECT_EQ(back, data);
  }
}

// A Compute reply with its data beside the metadata: the bytes protobuf writes for the whole
// message, for outputs of random metadata and sizes (none, and past 2^21 for 4-byte lengths).
TEST(ChunkWireTest, ComputeResponseIsWhatProtobufWrites) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    v1::ComputeResponse expect;
    v1::Tensor* t = expect.mutable_output();
    t->set_dtype(static_cast<v1::DType>(rng() % 4));
    const int rank = static_cast<int>(rng() % 5);
    for (int d = 0; d < rank; ++d) {
      t->add_shape(static_cast<int64_t>(rng() % 3000));
      t->add_strides(static_cast<int64_t>(rng() % 100000) - 50000);
    }
    if (trial % 3 == 0) t->set_offset(static_cast<int64_t>(rng() % 1000));
    const size_t n = trial % 7 == 0 ? 0 : trial % 50 == 1 ? (size_t{3} << 20) + 5 : rng() % 5000;
    std::string data(n, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    const std::string meta = t->SerializeAsString();
    t->set_data(data);
    std::string* held = new std::string(data);
    grpc::Slice slice(held->data(), held->size(),
                      [](void* p) { delete static_cast<std::string*>(p); }, held);
    const std::string wire = Flatten(ComputeResponseMessage(meta, std::move(slice)));
    ASSERT_EQ(wire, expect.SerializeAsString()) << "trial " << trial;
    v1::ComputeResponse back;
    ASSERT_TRUE(back.ParseFromString(wire));
    EXPECT_EQ(back.output().data(), data);
  }
}

TEST(ChunkWireTest, NegativeTensorIndexRoundTrips) {
  grpc::ByteBuffer b = ChunkMessage(-5, 7, "ab", 2);
  v1::ComputeStreamRequest m;
  ASSERT_TRUE(m.ParseFromString(Flatten(b)));
  EXPECT_EQ(m.chunk().tensor(), -5);
  ChunkRef ref;
  ASSERT_TRUE(ParseChunk(b, &ref));
  EXPECT_EQ(ref.tensor(), -5);
}

TEST(ChunkWireTest, LeavesEverythingElseToProtobuf) {
  std::mt19937_64 rng(std::random_device{}());
  auto parses = [&](const std::string& wire) {
    ChunkRef ref;
    return ParseChunk(Sliced(wire, rng), &ref);
  };
  v1::UploadRequest header;
  header.mutable_header()->set_handle("abc");
  EXPECT_FALSE(parses(header.SerializeAsString()));
  EXPECT_FALSE(parses(""));

  v1::UploadRequest chunk;
  chunk.mutable_chunk()->set_offset(300);
  chunk.mutable_chunk()->set_data("hello");
  const std::string good = chunk.SerializeAsString();
  EXPECT_TRUE(parses(good));
  // Truncated anywhere, or with bytes after it.
  for (size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(parses(good.substr(0, n))) << n;
  EXPECT_FALSE(parses(good + "x"));
  // Valid protobuf, but not as protobuf writes it: fields out of order, repeated, unknown.
  const std::string data_then_offset = std::string("\x12\x09\x1a\x05hello\x10\x2c", 11);
  v1::UploadRequest check;
  ASSERT_TRUE(check.ParseFromString(data_then_offset));
  EXPECT_EQ(check.chunk().offset(), 44);
  EXPECT_FALSE(parses(data_then_offset));
  EXPECT_FALSE(parses(std::string("\x12\x04\x10\x01\x10\x02", 6)));
  EXPECT_FALSE(parses(std::string("\x12\x02\x20\x01", 4)));
  // A data length that runs past the end.
  EXPECT_FALSE(parses(std::string("\x12\x03\x1a\x09x", 5)));
}

}  // namespace
}  // namespace tc::wire
