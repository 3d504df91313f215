// DataChunk messages written and read by proto/chunk_wire against protobuf's own encoding,
// with the received bytes split into slices at random places.
#include "proto/chunk_wire.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "google/protobuf/util/field_comparator.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.pb.h"
#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::wire {
namespace {

namespace v1 = ::tensorcompute::v1;

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
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

    grpc::ByteBuffer ours = ChunkMessage(tensor, offset, grpc::Slice(data));
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
    grpc::Slice slice(
        held->data(), held->size(), [](void* p) { delete static_cast<std::string*>(p); }, held);
    const std::string wire = Flatten(ComputeResponseMessage(meta, std::move(slice)));
    ASSERT_EQ(wire, expect.SerializeAsString()) << "trial " << trial;
    v1::ComputeResponse back;
    ASSERT_TRUE(back.ParseFromString(wire));
    EXPECT_EQ(back.output().data(), data);
  }
}

// Lent bytes are sent as they are, not copied, and Wait() returns only once every slice
// over them has been let go.
TEST(LentBytesTest, WaitsUntilEverySliceIsLetGo) {
  std::string data(100000, 'x');
  LentBytes lent;
  auto message =
      std::make_unique<grpc::ByteBuffer>(ChunkMessage(3, 9, lent.Lend(data.data(), data.size())));
  auto second = std::make_unique<grpc::ByteBuffer>(ChunkMessage(4, 0, lent.Lend(data.data(), 7)));
  EXPECT_EQ(lent.Lend(data.data(), 0).size(), 0u);  // Nothing lent, nothing to wait for.
  data[5] = 'y';  // Seen by the message: the slice is over the lender's memory.
  v1::UploadRequest m;
  ASSERT_TRUE(m.ParseFromString(Flatten(*message)));
  EXPECT_EQ(m.chunk().data(), data);
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    lent.Wait();
    returned = true;
  });
  message.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(returned);  // The second message still holds a slice.
  second.reset();
  waiter.join();
  EXPECT_TRUE(returned);
}

TEST(ChunkWireTest, NegativeTensorIndexRoundTrips) {
  grpc::ByteBuffer b = ChunkMessage(-5, 7, grpc::Slice("ab", 2));
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

// What SplitComputeRequest makes of `wire` agrees with protobuf: where it splits and the rest
// parses, putting the taken bytes back gives what protobuf parses from `wire` itself. Returns
// how many inputs' bytes were taken (-1: not split, left to protobuf).
int SplitAgrees(const std::string& wire, int64_t min_bytes, std::mt19937_64& rng) {
  SplitMessage split;
  if (!SplitComputeRequest(Sliced(wire, rng), min_bytes, &split)) return -1;
  v1::ComputeRequest whole, rebuilt;
  const bool parses = whole.ParseFromString(wire);
  const bool rest_parses = rebuilt.ParseFromString(split.rest());
  EXPECT_EQ(parses, rest_parses);
  if (!parses || !rest_parses) return -1;
  for (const SplitMessage::Taken& t : split.taken()) {
    EXPECT_GE(t.size, min_bytes);
    EXPECT_LT(t.input, rebuilt.inputs_size());
    if (t.input >= rebuilt.inputs_size()) return -1;
    EXPECT_TRUE(rebuilt.inputs(t.input).data().empty());
    std::string bytes(static_cast<size_t>(t.size), '\0');
    split.CopyTo(t, bytes.data());
    rebuilt.mutable_inputs(t.input)->set_data(bytes);
  }
  // Field by field, NaN equal to NaN (a damaged double attribute may hold one).
  google::protobuf::util::DefaultFieldComparator values;
  values.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differ;
  differ.set_field_comparator(&values);
  EXPECT_TRUE(differ.Compare(whole, rebuilt)) << whole.ShortDebugString() << "\n"
                                              << rebuilt.ShortDebugString();
  return static_cast<int>(split.taken().size());
}

v1::ComputeRequest RandomRequest(std::mt19937_64& rng, int64_t min_bytes) {
  v1::ComputeRequest r;
  if (rng() % 2) r.set_op("add");
  if (rng() % 3 == 0) r.set_expression("a * b + 1");
  const int n = static_cast<int>(rng() % 5);
  for (int i = 0; i < n; ++i) {
    v1::Tensor* t = r.add_inputs();
    t->set_dtype(static_cast<v1::DType>(rng() % 12));
    for (int d = 0; d < static_cast<int>(rng() % 4); ++d)
      t->add_shape(static_cast<int64_t>(rng() % 300));
    if (rng() % 2) t->add_strides(-static_cast<int64_t>(rng() % 5));
    if (rng() % 2) t->set_offset(static_cast<int64_t>(rng() % 1000));
    // Empty, short of the threshold, at it, or past it.
    const int64_t sizes[] = {0, min_bytes - 1, min_bytes,
                             min_bytes + static_cast<int64_t>(rng() % 200)};
    std::string data(static_cast<size_t>(std::max<int64_t>(0, sizes[rng() % 4])), '\0');
    for (char& c : data) c = static_cast<char>(rng());
    t->set_data(data);
    if (rng() % 5 == 0) t->set_handle("h");
    if (rng() % 5 == 0) t->set_region("r");
    if (rng() % 3 == 0) t->set_storage_bytes(static_cast<int64_t>(rng() % 99));
  }
  if (rng() % 2) (*r.mutable_attributes())["alpha"].set_float_value(0.5);
  if (rng() % 2) r.add_output_strides(3);
  if (rng() % 2) r.set_keep_output_resident(true);
  if (rng() % 2) r.set_output_region("out");
  if (rng() % 3 == 0) r.add_input_names("x");
  return r;
}

TEST(SplitComputeRequestTest, TakesLargeInputsOutAndKeepsEverythingElse) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t min_bytes = 16;
  int taken = 0;
  for (int k = 0; k < 2000; ++k) {
    const v1::ComputeRequest r = RandomRequest(rng, min_bytes);
    int large = 0;
    for (const v1::Tensor& t : r.inputs())
      large += static_cast<int64_t>(t.data().size()) >= min_bytes;
    const int got = SplitAgrees(r.SerializeAsString(), min_bytes, rng);
    ASSERT_EQ(got, large) << r.ShortDebugString();
    taken += got;
  }
  EXPECT_GT(taken, 0);
}

TEST(SplitComputeRequestTest, AgreesWithProtobufOnDamagedMessages) {
  std::mt19937_64 rng(std::random_device{}());
  // (Protobuf logs every string that is not UTF-8.)
  google::protobuf::LogSilencer quiet;
  for (int k = 0; k < 300; ++k) {
    const std::string good = RandomRequest(rng, 8).SerializeAsString();
    // Truncated anywhere.
    for (size_t n = 0; n < good.size(); n += 1 + rng() % 3) SplitAgrees(good.substr(0, n), 8, rng);
    // Bytes changed at random.
    for (int m = 0; m < 20 && !good.empty(); ++m) {
      std::string bad = good;
      for (int j = 0; j < 1 + static_cast<int>(rng() % 3); ++j)
        bad[rng() % bad.size()] = static_cast<char>(rng());
      SplitAgrees(bad, 8, rng);
    }
  }
}

TEST(SplitComputeRequestTest, LeavesOddEncodingsToProtobuf) {
  std::mt19937_64 rng(std::random_device{}());
  // One tensor whose data comes twice: protobuf keeps the second.
  const std::string twice(
      "\x12\x0c\x2a\x04"
      "abcd"
      "\x2a\x04"
      "wxyz",
      14);
  v1::ComputeRequest check;
  ASSERT_TRUE(check.ParseFromString(twice));
  EXPECT_EQ(check.inputs(0).data(), "wxyz");
  EXPECT_EQ(SplitAgrees(twice, 2, rng), -1);
  // A group (wire type 3) inside a tensor, and at the top.
  EXPECT_EQ(SplitAgrees(std::string("\x12\x02\x33\x34", 4), 2, rng), -1);
  EXPECT_EQ(SplitAgrees(std::string("\x1b\x1c", 2), 2, rng), -1);
  // A tensor's length past the message's end; a data length past the tensor's end.
  EXPECT_EQ(SplitAgrees(std::string("\x12\x09\x2a\x02"
                                    "ab",
                                    6),
                        2, rng),
            -1);
  EXPECT_EQ(SplitAgrees(std::string("\x12\x04\x2a\x05"
                                    "ab"
                                    "\x0a\x01"
                                    "x",
                                    9),
                        2, rng),
            -1);
  // A double attribute that is NaN (found by the fuzzer): the same message either way.
  const std::string nan_attribute(
      "\x0a\x05"
      "clamp"
      "\x12\x02\x08\x07\x1a\x10\x0a\x03"
      "max"
      "\x12\x09\x09\x00\x00\x3f\x10"
      "\xf3\xff\xff\xff",
      29);
  EXPECT_EQ(SplitAgrees(nan_attribute, 2, rng), 0);
  // A tag in six bytes (found by the fuzzer): protobuf reads tags in at most five.
  const std::string long_tag(
      "\x0a\x01"
      "a"
      "\x85\x8b\x8a\x8a\x8d\x00\x02\x00\x00\x00",
      13);
  v1::ComputeRequest refused;
  EXPECT_FALSE(refused.ParseFromString(long_tag));
  EXPECT_EQ(SplitAgrees(long_tag, 2, rng), -1);
  // Fields of the tensor after its data, and inputs split by other fields: still taken.
  v1::ComputeRequest r;
  r.set_op("add");
  r.add_inputs()->set_data(std::string(40, 'a'));
  r.add_inputs()->set_data("b");
  std::string wire = r.SerializeAsString() + std::string("\x12\x2c\x2a\x28", 4) +
                     std::string(40, 'c') + std::string("\x10\x05\x50\x03", 4);
  ASSERT_EQ(wire.size(), r.ByteSizeLong() + 48);
  EXPECT_EQ(SplitAgrees(wire, 32, rng), 2);
}

// KServe v2: what SplitInferRequest makes of `wire` agrees with protobuf: the taken entries
// are empty in the rest, and putting their bytes back gives what protobuf parses from `wire`.
// Returns how many entries were taken (-1: not split, left to protobuf).
int SplitInferAgrees(const std::string& wire, int64_t min_bytes, std::mt19937_64& rng) {
  SplitMessage split;
  if (!SplitInferRequest(Sliced(wire, rng), min_bytes, &split)) return -1;
  inference::ModelInferRequest whole, rebuilt;
  const bool parses = whole.ParseFromString(wire);
  const bool rest_parses = rebuilt.ParseFromString(split.rest());
  EXPECT_EQ(parses, rest_parses);
  if (!parses || !rest_parses) return -1;
  for (const SplitMessage::Taken& t : split.taken()) {
    EXPECT_GE(t.size, min_bytes);
    EXPECT_LT(t.input, rebuilt.raw_input_contents_size());
    if (t.input >= rebuilt.raw_input_contents_size()) return -1;
    EXPECT_TRUE(rebuilt.raw_input_contents(t.input).empty());
    std::string bytes(static_cast<size_t>(t.size), '\0');
    split.CopyTo(t, bytes.data());
    *rebuilt.mutable_raw_input_contents(t.input) = bytes;
  }
  google::protobuf::util::DefaultFieldComparator values;
  values.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differ;
  differ.set_field_comparator(&values);
  EXPECT_TRUE(differ.Compare(whole, rebuilt));
  return static_cast<int>(split.taken().size());
}

inference::ModelInferRequest RandomInferRequest(std::mt19937_64& rng, int64_t min_bytes,
                                                int* large) {
  inference::ModelInferRequest r;
  r.set_model_name(rng() % 2 ? "add" : "expression");
  if (rng() % 2) r.set_id("id-7");
  if (rng() % 2) (*r.mutable_parameters())["alpha"].set_double_param(0.5);
  const int n = static_cast<int>(rng() % 5);
  *large = 0;
  for (int i = 0; i < n; ++i) {
    auto* in = r.add_inputs();
    in->set_name("INPUT" + std::to_string(i));
    in->set_datatype("FP32");
    in->add_shape(static_cast<int64_t>(rng() % 300));
    const int64_t sizes[] = {0, min_bytes - 1, min_bytes,
                             min_bytes + static_cast<int64_t>(rng() % 200)};
    std::string data(static_cast<size_t>(std::max<int64_t>(0, sizes[rng() % 4])), '\0');
    for (char& c : data) c = static_cast<char>(rng());
    *large += static_cast<int64_t>(data.size()) >= min_bytes && !data.empty();
    r.add_raw_input_contents(data);
  }
  if (rng() % 2) r.add_outputs()->set_name("OUTPUT0");
  return r;
}

TEST(SplitInferRequestTest, TakesLargeRawInputsOutAndKeepsTheirPlaces) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t min_bytes = 16;
  int taken = 0;
  for (int k = 0; k < 2000; ++k) {
    int large = 0;
    const inference::ModelInferRequest r = RandomInferRequest(rng, min_bytes, &large);
    const int got = SplitInferAgrees(r.SerializeAsString(), min_bytes, rng);
    ASSERT_EQ(got, large) << r.ShortDebugString();
    taken += got;
  }
  EXPECT_GT(taken, 0);
}

TEST(SplitInferRequestTest, AgreesWithProtobufOnDamagedMessages) {
  std::mt19937_64 rng(std::random_device{}());
  google::protobuf::LogSilencer quiet;
  for (int k = 0; k < 300; ++k) {
    int large = 0;
    const std::string good = RandomInferRequest(rng, 8, &large).SerializeAsString();
    for (size_t n = 0; n < good.size(); n += 1 + rng() % 3) {
      SplitInferAgrees(good.substr(0, n), 8, rng);
    }
    for (int m = 0; m < 20 && !good.empty(); ++m) {
      std::string bad = good;
      for (int j = 0; j < 1 + static_cast<int>(rng() % 3); ++j)
        bad[rng() % bad.size()] = static_cast<char>(rng());
      SplitInferAgrees(bad, 8, rng);
    }
  }
}

TEST(ChunkWireTest, InferResponseIsWhatProtobufWrites) {
  std::mt19937_64 rng(std::random_device{}());
  for (const size_t n : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{70000}}) {
    inference::ModelInferResponse meta;
    meta.set_model_name("add");
    meta.set_id("x");
    auto* o = meta.add_outputs();
    o->set_name("OUTPUT0");
    o->set_datatype("FP32");
    o->add_shape(static_cast<int64_t>(n));
    std::string data(n, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    inference::ModelInferResponse whole = meta;
    whole.add_raw_output_contents(data);
    EXPECT_EQ(Flatten(InferResponseMessage(meta.SerializeAsString(),
                                           grpc::Slice(data.data(), data.size()))),
              whole.SerializeAsString())
        << n;
  }
}

// A request written with its inline inputs' bytes beside the metadata reads back, with
// protobuf and with the server's splitter, as the same message, for random requests (handles,
// regions, empty data, attributes, and sizes past 2^21 for 4-byte lengths).
TEST(ComputeRequestMessageTest, ReadsBackAsTheSameRequest) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 500; ++trial) {
    v1::ComputeRequest r = RandomRequest(rng, 16);
    if (trial % 100 == 7 && r.inputs_size() > 0) {
      std::string big((size_t{3} << 20) + 3, '\0');
      for (char& c : big) c = static_cast<char>(rng());
      r.mutable_inputs(0)->set_data(big);
    }
    v1::ComputeRequest head = r;
    head.clear_inputs();
    std::vector<TensorPart> parts;
    for (const v1::Tensor& t : r.inputs()) {
      v1::Tensor meta = t;
      meta.clear_data();
      parts.push_back({meta.SerializeAsString(),
                       grpc::Slice(t.data().data(), t.data().size(), grpc::Slice::STATIC_SLICE)});
    }
    const std::string wire =
        Flatten(ComputeRequestMessage(head.SerializeAsString(), std::move(parts)));
    v1::ComputeRequest back;
    ASSERT_TRUE(back.ParseFromString(wire)) << "trial " << trial;
    google::protobuf::util::MessageDifferencer differ;
    EXPECT_TRUE(differ.Compare(r, back)) << r.ShortDebugString() << "\n" << back.ShortDebugString();
    int large = 0;
    for (const v1::Tensor& t : r.inputs()) large += t.data().size() >= 16;
    EXPECT_EQ(SplitAgrees(wire, 16, rng), large) << "trial " << trial;
  }
}

// A Compute reply's output bytes taken out of the received slices: the same tensor as
// protobuf reads, for replies as the server writes them and as protobuf does.
TEST(SplitComputeResponseTest, TakesTheOutputOutAndKeepsEverythingElse) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 300; ++trial) {
    v1::ComputeResponse expect;
    v1::Tensor* t = expect.mutable_output();
    t->set_dtype(static_cast<v1::DType>(rng() % 4));
    for (int d = 0; d < static_cast<int>(rng() % 4); ++d) t->add_shape(rng() % 3000);
    if (trial % 3 == 0) t->set_handle("h");
    const size_t n = trial % 7 == 0 ? 0 : trial % 50 == 1 ? (size_t{3} << 20) + 5 : rng() % 5000;
    std::string data(n, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    const std::string meta = t->SerializeAsString();
    t->set_data(data);
    const std::string wire =
        trial % 2 ? expect.SerializeAsString()
                  : Flatten(ComputeResponseMessage(meta, grpc::Slice(data.data(), data.size())));
    SplitMessage split;
    ASSERT_TRUE(SplitComputeResponse(Sliced(wire, rng), 1, &split)) << "trial " << trial;
    v1::ComputeResponse back;
    ASSERT_TRUE(back.ParseFromString(split.rest()));
    ASSERT_EQ(split.taken().size(), n > 0 ? 1u : 0u);
    if (n > 0) {
      EXPECT_EQ(split.taken()[0].input, 0);
      ASSERT_EQ(split.taken()[0].size, static_cast<int64_t>(n));
      EXPECT_TRUE(back.output().data().empty());
      std::string bytes(n, '\0');
      split.CopyTo(split.taken()[0], bytes.data());
      back.mutable_output()->set_data(bytes);
    }
    google::protobuf::util::MessageDifferencer differ;
    EXPECT_TRUE(differ.Compare(expect, back)) << "trial " << trial;
  }
  // An output that comes twice is merged by protobuf: left to it.
  v1::ComputeResponse one, two;
  one.mutable_output()->set_data("abcd");
  two.mutable_output()->add_shape(4);
  SplitMessage split;
  EXPECT_FALSE(SplitComputeResponse(Sliced(one.SerializeAsString() + two.SerializeAsString(), rng),
                                    1, &split));
}

}  // namespace
}  // namespace tc::wire
