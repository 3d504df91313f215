// The catalog of bad inputs: every kind of malformed request a client can send, each asserted
// to get its status code and a message that says what is wrong, with a health check after each
// one. Run against the real server binary ($TC_SERVER_BINARY, $TC_TEST_BACKEND as elsewhere).
#include <climits>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/chunked_call.h"
#include "client/client.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/support/raw_call.h"
#include "tests/support/server_binary.h"
#include "tests/support/server_process.h"
#include "tests/support/wire_tensors.h"

namespace tc {
namespace {

namespace v1 = ::tensorcompute::v1;
using client::Client;
using testing::Floats;

using testing::BackendFlag;
using testing::ServerBinary;

v1::Tensor Ints(std::vector<int64_t> shape, std::vector<int32_t> v) {
  v1::Tensor t;
  t.set_dtype(v1::int32);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
  return t;
}

struct Case {
  std::string name;
  std::function<absl::Status()> send;
  absl::StatusCode code;
  std::string fragment;
};

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<testing::ServerProcess>(
        ServerBinary(), std::vector<std::string>{BackendFlag(), "--max_message_bytes=4194304",
                                                 "--max_rank=6", "--max_elements=4000000"});
    ASSERT_GT(server_->port(), 0);
    client_ = std::make_unique<Client>(server_->target());
    channel_ = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
    stub_ = v1::TensorService::NewStub(channel_);
  }

  // A valid broadcast add, changed by `mutate`, sent with unary Compute.
  Case Unary(std::string name, absl::StatusCode code, std::string fragment,
             std::function<void(v1::ComputeRequest&)> mutate) {
    return {std::move(name),
            [this, mutate] {
              v1::ComputeRequest r;
              r.set_op("add");
              *r.add_inputs() = Floats({2, 3}, {1, 2, 3, 4, 5, 6});
              *r.add_inputs() = Floats({3}, {1, 2, 3});
              mutate(r);
              grpc::ClientContext ctx;
              v1::ComputeResponse resp;
              grpc::Status s = stub_->Compute(&ctx, r, &resp);
              return client::FromGrpc(s);
            },
            code, std::move(fragment)};
  }

  // A ComputeStream of `messages`.
  Case Stream(std::string name, std::string fragment,
              std::vector<v1::ComputeStreamRequest> messages) {
    return {std::move(name),
            [this, messages] {
              grpc::ClientContext ctx;
              auto s = stub_->ComputeStream(&ctx);
              for (const auto& m : messages) s->Write(m);
              s->WritesDone();
              v1::TensorStreamMessage out;
              while (s->Read(&out)) {
              }
              return client::FromGrpc(s->Finish());
            },
            absl::StatusCode::kInvalidArgument, std::move(fragment)};
  }

  // An Upload of `messages`.
  Case Upload(std::string name, absl::StatusCode code, std::string fragment,
              std::vector<v1::UploadRequest> messages) {
    return {std::move(name),
            [this, messages] {
              grpc::ClientContext ctx;
              v1::UploadResponse resp;
              auto w = stub_->Upload(&ctx, &resp);
              for (const auto& m : messages) w->Write(m);
              w->WritesDone();
              return client::FromGrpc(w->Finish());
            },
            code, std::move(fragment)};
  }

  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<Client> client_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
};

v1::ComputeStreamRequest Header(int64_t storage_bytes) {
  v1::ComputeStreamRequest m;
  m.mutable_header()->set_op("neg");
  v1::Tensor* t = m.mutable_header()->add_inputs();
  t->set_dtype(v1::float32);
  t->add_shape(storage_bytes / 4);
  t->set_storage_bytes(storage_bytes);
  return m;
}

v1::ComputeStreamRequest Chunk(int tensor, int64_t offset, int64_t len) {
  v1::ComputeStreamRequest m;
  m.mutable_chunk()->set_tensor(tensor);
  m.mutable_chunk()->set_offset(offset);
  m.mutable_chunk()->set_data(std::string(len, '\0'));
  return m;
}

v1::UploadRequest UploadHeader(int64_t bytes) {
  v1::UploadRequest m;
  v1::Tensor* t = m.mutable_header()->mutable_tensor();
  t->set_dtype(v1::float32);
  t->add_shape(bytes / 4);
  t->set_storage_bytes(bytes);
  return m;
}

v1::UploadRequest UploadChunk(int64_t offset, int64_t len) {
  v1::UploadRequest m;
  m.mutable_chunk()->set_offset(offset);
  m.mutable_chunk()->set_data(std::string(len, '\0'));
  return m;
}

TEST_F(BadInputTest, EveryBadInputGetsItsStatusAndTheServerStaysHealthy) {
  using C = absl::StatusCode;
  const C kInvalid = C::kInvalidArgument;
  std::vector<Case> cases;
  // Ops, arity, dtypes, attributes.
  cases.push_back(Unary("unknown op", kInvalid, "unknown op 'frobnicate'",
                        [](auto& r) { r.set_op("frobnicate"); }));
  cases.push_back(Unary("empty op", kInvalid, "unknown op ''", [](auto& r) { r.set_op(""); }));
  cases.push_back(Unary("too few inputs", kInvalid, "takes 2 inputs, got 1",
                        [](auto& r) { r.mutable_inputs()->RemoveLast(); }));
  cases.push_back(Unary("too many inputs", kInvalid, "takes 2 inputs, got 3",
                        [](auto& r) { *r.add_inputs() = Floats({1}, {1}); }));
  cases.push_back(Unary("unknown dtype", kInvalid, "unknown dtype enum value 77", [](auto& r) {
    r.mutable_inputs(0)->set_dtype(static_cast<v1::DType>(77));
  }));
  cases.push_back(Unary("missing dtype", kInvalid, "dtype is missing",
                        [](auto& r) { r.mutable_inputs(1)->set_dtype(v1::DTYPE_UNSPECIFIED); }));
  cases.push_back(Unary("dtype the op refuses", kInvalid, "does not accept dtype float32",
                        [](auto& r) { r.set_op("bitwise_and"); }));
  cases.push_back(Unary("unknown attribute", kInvalid, "no attribute 'beta'",
                        [](auto& r) { (*r.mutable_attributes())["beta"].set_float_value(1); }));
  cases.push_back(Unary("attribute of the wrong type", kInvalid, "must be of type float",
                        [](auto& r) { (*r.mutable_attributes())["alpha"].set_string_value("x"); }));
  cases.push_back(Unary("attribute without a value", kInvalid, "has no value",
                        [](auto& r) { (*r.mutable_attributes())["alpha"]; }));
  cases.push_back(Unary("missing required attribute", kInvalid, "dtype", [](auto& r) {
    r.set_op("cast");
    r.mutable_inputs()->RemoveLast();
  }));
  // Expressions: each refused at its position before anything runs.
  auto expression = [](std::string text) {
    return [text](v1::ComputeRequest& r) {
      r.clear_op();
      r.set_expression(text);
    };
  };
  cases.push_back(Unary("expression: unknown function", kInvalid, "at 4: unknown function 'frob'",
                        expression("a + frob(b)")));
  cases.push_back(Unary("expression: wrong arity", kInvalid, "at 0: add takes 2 inputs",
                        expression("add(a, b, a)")));
  cases.push_back(
      Unary("expression: unbalanced parentheses", kInvalid, "expected ')'", expression("(a + b")));
  cases.push_back(
      Unary("expression: 10,000 nested calls", kInvalid, "nested more than 128 deep", [](auto& r) {
        std::string text;
        for (int i = 0; i < 10000; ++i) text += "neg(";
        text += "a + b";
        for (int i = 0; i < 10000; ++i) text += ")";
        r.clear_op();
        r.set_expression(text);
      }));
  cases.push_back(Unary("expression: a 1 MB string", kInvalid,
                        "1048576 bytes, more than the limit of 65536", [](auto& r) {
                          r.clear_op();
                          r.set_expression("a + b" + std::string((1 << 20) - 5, ' '));
                        }));
  cases.push_back(Unary("expression: a name that is no input", kInvalid,
                        "at 4: 'c' names no input (inputs: a, b)", expression("a + c * b")));
  cases.push_back(Unary("expression: a dtype that does not exist", kInvalid,
                        "'float12' is not a dtype", expression("cast(a, float12) + b")));
  cases.push_back(Unary("expression: an input left unused", kInvalid, "input 1 ('b') is not used",
                        expression("a * 2")));
  cases.push_back(Unary("expression: beside an op", kInvalid, "both op and expression are set",
                        [](auto& r) { r.set_expression("a + b"); }));
  cases.push_back(Unary("expression: attributes beside it", kInvalid,
                        "attributes are written inside an expression", [](auto& r) {
                          r.clear_op();
                          r.set_expression("a + b");
                          (*r.mutable_attributes())["alpha"].set_float_value(2);
                        }));
  // Found while it runs, on either backend (a GPU's kernel is compiled for it first).
  cases.push_back(Unary("expression: integer division by zero inside", kInvalid,
                        "integer division by zero in 'floor_divide'", [](auto& r) {
                          r.clear_op();
                          r.set_expression("a // (b - b) + 1");
                          *r.mutable_inputs(0) = Ints({2, 3}, {1, 2, 3, 4, 5, 6});
                          *r.mutable_inputs(1) = Ints({3}, {1, 2, 3});
                        }));
  // Blobs and views.
  cases.push_back(Unary("truncated blob", kInvalid, "storage holds 0",
                        [](auto& r) { r.mutable_inputs(0)->clear_data(); }));
  cases.push_back(Unary("blob too short", kInvalid, "storage holds 5",
                        [](auto& r) { r.mutable_inputs(0)->mutable_data()->resize(20); }));
  cases.push_back(Unary("blob not whole elements", kInvalid, "not a whole number",
                        [](auto& r) { r.mutable_inputs(1)->mutable_data()->push_back('x'); }));
  cases.push_back(Unary("strides out of bounds", kInvalid, "reach elements", [](auto& r) {
    r.mutable_inputs(0)->add_strides(3);
    r.mutable_inputs(0)->add_strides(2);
  }));
  cases.push_back(Unary("negative stride below the storage", kInvalid, "reach elements -2",
                        [](auto& r) { r.mutable_inputs(1)->add_strides(-1); }));
  cases.push_back(Unary("offset past the end", kInvalid, "reach elements",
                        [](auto& r) { r.mutable_inputs(1)->set_offset(1); }));
  cases.push_back(Unary("negative offset", kInvalid, "offset -1 is negative",
                        [](auto& r) { r.mutable_inputs(1)->set_offset(-1); }));
  cases.push_back(Unary("stride count", kInvalid, "1 strides given for rank 2",
                        [](auto& r) { r.mutable_inputs(0)->add_strides(1); }));
  cases.push_back(
      Unary("strides overflowing 64 bits", kInvalid, "overflow 64-bit offsets", [](auto& r) {
        r.mutable_inputs(1)->add_strides(INT64_MAX / 2);
        r.mutable_inputs(1)->set_shape(0, 4);
      }));
  cases.push_back(Unary("offset near INT64_MAX", kInvalid, "overflow 64-bit offsets",
                        [](auto& r) { r.mutable_inputs(1)->set_offset(INT64_MAX - 1); }));
  cases.push_back(Unary("negative dim", kInvalid, "negative",
                        [](auto& r) { r.mutable_inputs(0)->set_shape(1, -3); }));
  cases.push_back(Unary("overflowing shape product", kInvalid, "more than 2^63", [](auto& r) {
    v1::Tensor* t = r.mutable_inputs(0);
    t->clear_shape();
    for (int i = 0; i < 3; ++i) t->add_shape(int64_t{1} << 30);
    for (int i = 0; i < 3; ++i) t->add_strides(0);
  }));
  cases.push_back(Unary("rank above every limit", kInvalid,
                        "rank 9 exceeds this server's limit of 6", [](auto& r) {
                          for (int i = 0; i < 8; ++i) r.mutable_inputs(1)->add_shape(1);
                        }));
  cases.push_back(Unary("rank above the server's limit", kInvalid, "limit of 6", [](auto& r) {
    for (int i = 0; i < 6; ++i) r.mutable_inputs(1)->add_shape(1);
  }));
  cases.push_back(
      Unary("shapes that do not broadcast", kInvalid, "cannot be broadcast", [](auto& r) {
        r.mutable_inputs(1)->set_shape(0, 2);
        r.mutable_inputs(1)->mutable_data()->resize(8);
      }));
  cases.push_back(
      Unary("too many elements", C::kResourceExhausted, "limit of 4000000", [](auto& r) {
        // A broadcast of two small inputs to 5M elements.
        *r.mutable_inputs(0) = Floats({5000, 1}, std::vector<float>(5000, 1));
        *r.mutable_inputs(1) = Floats({1, 1000}, std::vector<float>(1000, 1));
      }));
  cases.push_back(
      Unary("result over the message limit", C::kResourceExhausted, "ComputeStream", [](auto& r) {
        *r.mutable_inputs(0) = Floats({2000, 1}, std::vector<float>(2000, 1));
        *r.mutable_inputs(1) = Floats({1, 1000}, std::vector<float>(1000, 1));
      }));
  cases.push_back(
      Unary("bool byte other than 0 or 1", kInvalid, "bool elements must be 0 or 1", [](auto& r) {
        r.set_op("logical_not");
        r.mutable_inputs()->RemoveLast();
        v1::Tensor* t = r.mutable_inputs(0);
        t->set_dtype(v1::bool_);
        t->clear_shape();
        t->add_shape(3);
        t->set_data(std::string("\x01\x00\x02", 3));
      }));
  // Output options.
  cases.push_back(Unary("unsafe output cast", kInvalid, "unsafe cast",
                        [](auto& r) { r.set_output_dtype(v1::int32); }));
  cases.push_back(Unary("unknown output dtype", kInvalid, "unknown dtype enum value 99",
                        [](auto& r) { r.set_output_dtype(static_cast<v1::DType>(99)); }));
  cases.push_back(Unary("unknown output layout", kInvalid, "output_layout",
                        [](auto& r) { r.set_output_layout(static_cast<v1::OutputLayout>(7)); }));
  cases.push_back(Unary("overlapping output strides", kInvalid, "overlap", [](auto& r) {
    r.add_output_strides(1);
    r.add_output_strides(1);
  }));
  cases.push_back(Unary("negative output stride", kInvalid, "is negative", [](auto& r) {
    r.add_output_strides(-3);
    r.add_output_strides(1);
  }));
  cases.push_back(Unary("output stride count", kInvalid, "output strides given",
                        [](auto& r) { r.add_output_strides(1); }));
  // Arithmetic.
  cases.push_back(Unary("integer division by zero", kInvalid, "division by zero", [](auto& r) {
    r.set_op("floor_divide");
    *r.mutable_inputs(0) = Ints({2}, {7, -7});
    *r.mutable_inputs(1) = Ints({2}, {2, 0});
  }));
  cases.push_back(Unary("integer remainder by zero", kInvalid, "division by zero", [](auto& r) {
    r.set_op("remainder");
    *r.mutable_inputs(0) = Ints({1}, {7});
    *r.mutable_inputs(1) = Ints({}, {0});
  }));
  cases.push_back(Unary("INT_MIN / -1 has a defined result", C::kOk, "", [](auto& r) {
    r.set_op("floor_divide");
    *r.mutable_inputs(0) = Ints({1}, {INT_MIN});
    *r.mutable_inputs(1) = Ints({1}, {-1});
  }));
  cases.push_back(Unary("NaN cast to an integer has a defined result", C::kOk, "", [](auto& r) {
    r.set_op("cast");
    r.mutable_inputs()->RemoveLast();
    *r.mutable_inputs(0) = Floats({1}, {std::nanf("")});
    (*r.mutable_attributes())["dtype"].set_dtype_value(v1::int32);
  }));
  // Handles.
  cases.push_back(Unary("unknown handle", C::kNotFound, "no resident tensor", [](auto& r) {
    r.mutable_inputs(1)->clear_data();
    r.mutable_inputs(1)->set_handle("0123456789abcdef0123456789abcdef");
  }));
  cases.push_back(Unary("malformed handle", C::kNotFound, "no resident tensor", [](auto& r) {
    r.mutable_inputs(1)->clear_data();
    r.mutable_inputs(1)->set_handle("../../etc/passwd");
  }));
  cases.push_back(Unary("handle and data both", kInvalid, "both handle and data", [](auto& r) {
    r.mutable_inputs(1)->set_handle("0123456789abcdef0123456789abcdef");
  }));
  cases.push_back(Unary("streamed input in a unary call", kInvalid, "ComputeStream", [](auto& r) {
    r.mutable_inputs(1)->clear_data();
    r.mutable_inputs(1)->set_storage_bytes(12);
  }));
  // Messages.
  cases.push_back({"request over the message limit",
                   [this] {
                     v1::ComputeRequest r;
                     r.set_op("neg");
                     *r.add_inputs() = Floats({1 << 21}, std::vector<float>(1 << 21, 1));  // 8 MiB
                     grpc::ClientContext ctx;
                     v1::ComputeResponse resp;
                     return client::FromGrpc(stub_->Compute(&ctx, r, &resp));
                   },
                   C::kResourceExhausted, "message larger than max"});
  cases.push_back({"bytes that are not a protobuf message",
                   [this] {
                     const char garbage[] = "\xff\xff\xff\xff\x0f not a ComputeRequest";
                     return client::FromGrpc(
                         testing::RawUnaryCall(channel_, "/tensorcompute.v1.TensorService/Compute",
                                               std::string(garbage, sizeof(garbage))));
                   },
                   C::kInvalidArgument, "the request is not a ComputeRequest message"});
  // Text fields hold UTF-8: other bytes are named, not a parse failure without a word.
  cases.push_back(Unary("expression not UTF-8", kInvalid,
                        "field 'expression' is not UTF-8: byte 0xff at 4 (in the ComputeRequest)",
                        [](auto& r) {
                          r.set_op("");
                          r.set_expression("a + \xff");
                        }));
  cases.push_back(Unary("input name not UTF-8", kInvalid,
                        "field 'input_names[1]' is not UTF-8: byte 0xc3 at 1", [](auto& r) {
                          r.set_op("");
                          r.set_expression("a + b");
                          r.add_input_names("a");
                          r.add_input_names("b\xc3(");
                        }));
  {
    v1::ComputeStreamRequest h;
    h.mutable_header()->set_expression("a + b");
    h.mutable_header()->add_input_names("\xed\xa0\x80");  // a surrogate
    cases.push_back(Stream("stream header's input name not UTF-8",
                           "field 'header.input_names[0]' is not UTF-8: byte 0xed at 0", {h}));
  }
  // Upload and Download read raw messages: bytes that are not one get a clear status.
  for (const char* method : {"Upload", "Download"}) {
    cases.push_back({absl::StrCat("bytes that are not a protobuf message, to ", method),
                     [this, method] {
                       grpc::GenericStub generic(channel_);
                       grpc::ClientContext ctx;
                       bool sent = false;
                       return client::RunChunkedCall(
                           generic, ctx, absl::StrCat("/tensorcompute.v1.TensorService/", method),
                           [&sent](grpc::ByteBuffer* out) {
                             if (sent) return false;
                             sent = true;
                             const char garbage[] = "\xff\xff\xff\xff\x0f not a message";
                             grpc::Slice slice(garbage, sizeof(garbage));
                             *out = grpc::ByteBuffer(&slice, 1);
                             return true;
                           },
                           [](grpc::ByteBuffer&) { return absl::OkStatus(); });
                     },
                     C::kInvalidArgument, "the request is not a"});
  }
  // Streams.
  cases.push_back(Stream("stream without a header", "ended before its header", {}));
  cases.push_back(Stream("chunk before the header", "before the header", {Chunk(0, 0, 16)}));
  cases.push_back(
      Stream("chunks out of order", "in order", {Header(16), Chunk(0, 8, 8), Chunk(0, 0, 8)}));
  cases.push_back(Stream("chunk missing", "8 of its 16 bytes", {Header(16), Chunk(0, 0, 8)}));
  cases.push_back(Stream("chunk past the end", "overruns", {Header(16), Chunk(0, 0, 20)}));
  cases.push_back(
      Stream("chunk for no such input", "not a streamed input", {Header(16), Chunk(3, 0, 4)}));
  cases.push_back(Stream("chunk with a negative input index", "not a streamed input",
                         {Header(16), Chunk(-1, 0, 4)}));
  {
    v1::ComputeStreamRequest h;
    h.mutable_header()->set_op("logical_not");
    v1::Tensor* t = h.mutable_header()->add_inputs();
    t->set_dtype(v1::bool_);
    t->add_shape(4);
    t->set_storage_bytes(4);
    v1::ComputeStreamRequest c = Chunk(0, 0, 4);
    (*c.mutable_chunk()->mutable_data())[2] = 7;
    cases.push_back(Stream("streamed bool byte other than 0 or 1", "byte 2 is 7", {h, c}));
  }
  cases.push_back(Stream("two headers", "second header", {Header(16), Header(16)}));
  cases.push_back(Stream("empty stream message", "neither header nor chunk",
                         {Header(16), v1::ComputeStreamRequest()}));
  // Uploads, downloads, releases.
  cases.push_back(
      Upload("upload chunk before header", kInvalid, "before the header", {UploadChunk(0, 8)}));
  cases.push_back(Upload("upload chunks out of order", kInvalid, "in order",
                         {UploadHeader(16), UploadChunk(8, 8)}));
  cases.push_back(
      Upload("upload cut short", kInvalid, "8 of 16 bytes", {UploadHeader(16), UploadChunk(0, 8)}));
  cases.push_back(
      Upload("upload past the end", kInvalid, "overruns", {UploadHeader(16), UploadChunk(0, 24)}));
  {
    v1::UploadRequest part;
    part.mutable_header()->set_handle("0123456789abcdef0123456789abcdef");
    cases.push_back(
        Upload("upload into an unknown handle", C::kNotFound, "no resident tensor", {part}));
  }
  {
    v1::UploadRequest h = UploadHeader(16);
    h.mutable_header()->mutable_tensor()->add_strides(2);
    cases.push_back(
        Upload("upload of a view outside its storage", kInvalid, "reach elements", {h}));
  }
  cases.push_back(
      {"download of an unknown handle",
       [this] { return client_->Download("0123456789abcdef0123456789abcdef").status(); },
       C::kNotFound, "no resident tensor"});
  cases.push_back({"download of a range outside the tensor",
                   [this] {
                     auto up = client_->Upload(Floats({4}, {1, 2, 3, 4}));
                     if (!up.ok()) return up.status();
                     grpc::ClientContext ctx;
                     v1::DownloadRequest d;
                     d.set_handle(up->tensor().handle());
                     d.set_offset(8);
                     d.set_length(16);
                     auto reader = stub_->Download(&ctx, d);
                     v1::TensorStreamMessage m;
                     while (reader->Read(&m)) {
                     }
                     absl::Status s = client::FromGrpc(reader->Finish());
                     (void)client_->Release({up->tensor().handle()});
                     return s;
                   },
                   C::kOutOfRange, "outside the tensor"});
  cases.push_back({"view of a resident tensor as another dtype",
                   [this] {
                     auto up = client_->Upload(Floats({4}, {1, 2, 3, 4}));
                     if (!up.ok()) return up.status();
                     v1::Tensor view;
                     view.set_handle(up->tensor().handle());
                     view.set_dtype(v1::bool_);
                     view.add_shape(16);
                     absl::Status s = client_->Compute("logical_not", {view}).status();
                     (void)client_->Release({up->tensor().handle()});
                     return s;
                   },
                   kInvalid, "keeps its dtype"});
  cases.push_back(
      {"release of an unknown handle",
       [this] { return client_->Release({"0123456789abcdef0123456789abcdef"}).status(); },
       C::kNotFound, "no resident tensor"});

  EXPECT_GE(cases.size(), 40u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status s = c.send();
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_NE(s.message().find(c.fragment), absl::string_view::npos)
        << "'" << c.fragment << "' not in: " << s;
    auto h = client_->Health();
    ASSERT_TRUE(h.ok()) << "server unhealthy after '" << c.name << "': " << h.status();
    EXPECT_EQ(*h, "SERVING");
  }
  std::printf("%zu bad inputs, each answered, server healthy after every one\n", cases.size());
  // Nothing was left behind.
  auto info = client_->ServerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->resident_tensors(), 0);
  int64_t in_use = 0;
  for (const auto& d : info->devices()) in_use += d.memory_in_use_bytes();
  EXPECT_EQ(in_use, 0);
}

}  // namespace
}  // namespace tc
