// tensorcompute-service-bench: the service end to end over loopback gRPC, beside an echo
// service that moves the same bytes with the same stack (this binary with --serve_echo, in its
// own process) in the same run.
//
// - small: 4 KiB float32 add, requests/s and p50/p99 latency at each concurrency, spread over
//   --connections channels, through Compute and through KServe v2's ModelInfer; server-side
//   time per request from the server's own histogram.
// - large: float32 add of two --large_mib inputs: unary, one stream, (ours) KServe v2's
//   ModelInfer (one message each way, like unary), and the tensor
//   spread over --parallel_streams connections by hand (parallel upload of parts, compute on
//   the resident tensors, parallel download, protobuf messages, bytes counted not kept), the
//   C++ client library (ComputeStreamed on one stream; Compute, which spreads by itself; both
//   assemble the output), and through shared-memory regions (tensors already in regions; and
//   copied in from ordinary memory and out again); GB/s counts the bytes of 2 inputs and 1
//   output. Two rows time the client library's spread halves alone (the two inputs uploaded,
//   one output-sized tensor downloaded): GB/s of those bytes.
// - expressions: sigmoid(a * b + c) * d as one expression request against the four op
//   requests it replaces, inputs and outputs inline or resident (--expression_elements).
#include <civetweb.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tensorcompute/v1/tensor_service.grpc.pb.h"
#include "tests/support/server_process.h"
#include "util/name_values.h"

ABSL_FLAG(bool, serve_echo, false, "Run as the echo server (used by the benchmark itself).");
ABSL_FLAG(std::string, address, "127.0.0.1", "Echo server: address.");
ABSL_FLAG(int, port, 0, "Echo server: port.");
ABSL_FLAG(std::string, port_file, "", "Echo server: where to write the port.");
ABSL_FLAG(int, metrics_port, -1, "Ignored (accepted like the server's).");
ABSL_FLAG(std::string, server_binary, "", "tensorcompute-server to measure.");
ABSL_FLAG(std::string, backend, "cpu", "Its --backend.");
ABSL_FLAG(std::string, server_flags, "", "More server flags, comma-separated.");
ABSL_FLAG(int, connections, 8, "Channels (connections) the small requests spread over.");
ABSL_FLAG(std::string, concurrency, "1,16,64", "Concurrencies of the small-request runs.");
ABSL_FLAG(double, small_seconds, 3, "Duration of each small-request run.");
ABSL_FLAG(std::string, large_mib, "64,256", "Input sizes of the large runs, MiB.");
ABSL_FLAG(int, large_reps, 3, "Repetitions of each large run (the median is reported).");
ABSL_FLAG(std::string, large_modes, "",
          "Only the large runs whose mode contains one of these ';'-separated strings "
          "(\"unary\", \"client library, 8\", ...); empty: all.");
ABSL_FLAG(int, parallel_streams, 8, "Connections a large tensor is spread over.");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{1} << 20, "Chunk size of streamed requests.");
ABSL_FLAG(int, rss_gib, 0,
          "If set: a streamed add of two inputs of this many GiB each on a fresh server, "
          "reporting the server's peak resident memory above idle.");
ABSL_FLAG(std::string, json, "", "Write the results here as JSON.");
ABSL_FLAG(std::string, expression_elements, "1024,16777216",
          "Sizes (float32 elements per tensor) of the expression runs: sigmoid(a * b + c) * d "
          "as one expression request against four op requests; empty: none.");
ABSL_FLAG(int, expression_reps, 0, "Repetitions of each expression run; 0: by size.");
ABSL_FLAG(std::string, label, "", "Machine description for the results.");
ABSL_FLAG(int64_t, client_slice_bytes, -1,
          "The client library's ClientOptions::slice_bytes (-1: its default; 0: no slices).");
ABSL_FLAG(int64_t, client_slice_part_bytes, -1, "ClientOptions::slice_part_bytes (-1: default).");
ABSL_FLAG(int, client_slices_per_connection, -1,
          "ClientOptions::slices_per_connection (-1: default).");
ABSL_FLAG(std::string, client_grpc_args, "",
          "More gRPC channel arguments for the benchmark's own connections and its client "
          "library's, NAME=INTEGER,... (the server's: --server_flags=--grpc_args=...).");

namespace {

namespace v1 = ::tensorcompute::v1;
constexpr int kMaxMessage = 1 << 30;

// ---------------------------------------------------------------- the echo service

class EchoService final : public v1::TensorService::CallbackService {
  grpc::ServerUnaryReactor* Compute(grpc::CallbackServerContext* ctx,
                                    const v1::ComputeRequest* request,
                                    v1::ComputeResponse* response) override {
    // As many bytes back as an add returns: the first input.
    if (request->inputs_size() > 0) *response->mutable_output() = request->inputs(0);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  // Echoes the chunks of input 0 and drops the others, like a streamed add's traffic.
  class StreamEcho final
      : public grpc::ServerBidiReactor<v1::ComputeStreamRequest, v1::TensorStreamMessage> {
   public:
    StreamEcho() { StartRead(&in_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      if (in_.has_header()) {
        *out_.mutable_header() = v1::Tensor();
        StartWrite(&out_);
      } else if (in_.chunk().tensor() == 0) {
        out_.mutable_chunk()->Swap(in_.mutable_chunk());
        StartWrite(&out_);
      } else {
        StartRead(&in_);
      }
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::CANCELLED);
        return;
      }
      StartRead(&in_);
    }
    void OnDone() override { delete this; }

   private:
    v1::ComputeStreamRequest in_;
    v1::TensorStreamMessage out_;
  };

  grpc::ServerBidiReactor<v1::ComputeStreamRequest, v1::TensorStreamMessage>* ComputeStream(
      grpc::CallbackServerContext*) override {
    return new StreamEcho();
  }
};

int ServeEcho() {
  EchoService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(
      absl::StrCat(absl::GetFlag(FLAGS_address), ":", absl::GetFlag(FLAGS_port)),
      grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(kMaxMessage);
  builder.SetMaxSendMessageSize(kMaxMessage);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (server == nullptr) return 1;
  if (const std::string f = absl::GetFlag(FLAGS_port_file); !f.empty()) {
    std::ofstream(f + ".tmp") << port << "\n";
    std::rename((f + ".tmp").c_str(), f.c_str());
  }
  server->Wait();
  return 0;
}

// ---------------------------------------------------------------- helpers

// Every call gets a deadline, so that a stuck server shows up as errors, not as a hang.
void Deadline(grpc::ClientContext& ctx, int seconds = 120) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// --client_grpc_args, parsed (a malformed pair ends the benchmark).
std::vector<std::pair<std::string, int>> ClientGrpcArgs() {
  auto args = tc::util::ParseNameIntegers(absl::GetFlag(FLAGS_client_grpc_args));
  if (!args.ok()) {
    std::fprintf(stderr, "--client_grpc_args: %s\n", std::string(args.status().message()).c_str());
    std::exit(2);
  }
  return *args;
}

std::shared_ptr<grpc::Channel> Channel(const std::string& target, int id) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessage);
  args.SetMaxSendMessageSize(kMaxMessage);
  args.SetInt("tc.bench.channel", id);  // Distinct arguments: a connection of its own.
  for (const auto& [name, value] : ClientGrpcArgs()) args.SetInt(name, value);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

v1::Tensor Floats(int64_t n, uint64_t seed) {
  std::vector<float> v(n);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (float& x : v) x = static_cast<float>(rng() % 1000) * 0.5f;
  v1::Tensor t;
  t.set_dtype(v1::float32);
  t.add_shape(n);
  t.set_data(std::string(reinterpret_cast<const char*>(v.data()), n * 4));
  return t;
}

v1::ComputeRequest AddRequest(int64_t n) {
  v1::ComputeRequest req;
  req.set_op("add");
  *req.add_inputs() = Floats(n, 1);
  *req.add_inputs() = Floats(n, 2);
  return req;
}

// (sum, count) of the server's Compute/add latency histogram, from its /metrics endpoint.
std::pair<double, double> ServerAddLatency(int metrics_port) {
  char err[256] = {};
  mg_connection* c = mg_download("127.0.0.1", metrics_port, 0, err, sizeof(err),
                                 "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (c == nullptr) return {0, 0};
  std::string body;
  char buf[16384];
  for (int n; (n = mg_read(c, buf, sizeof(buf))) > 0;) body.append(buf, n);
  mg_close_connection(c);
  double sum = 0, count = 0;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    const absl::string_view labels = "{method=\"Compute\",op=\"add\"} ";
    for (auto [name, out] : {std::pair{"tensorcompute_request_duration_seconds_sum", &sum},
                             std::pair{"tensorcompute_request_duration_seconds_count", &count}}) {
      const std::string prefix = absl::StrCat(name, labels);
      if (absl::StartsWith(line, prefix)) {
        (void)absl::SimpleAtod(line.substr(prefix.size()), out);
      }
    }
  }
  return {sum, count};
}

struct SmallResult {
  int concurrency;
  double rps, p50_us, p99_us;
  int64_t errors;
};

// `concurrency` threads calling `call(thread)` (true: it succeeded) back to back for `seconds`
// after a warm-up.
SmallResult RunSmall(int concurrency, double seconds, const std::function<bool(int)>& call) {
  std::atomic<bool> measuring{false}, stop{false};
  std::vector<std::vector<double>> lat(concurrency);
  std::atomic<int64_t> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      lat[t].reserve(1 << 16);
      while (!stop.load(std::memory_order_relaxed)) {
        const auto t0 = std::chrono::steady_clock::now();
        const bool ok = call(t);
        const double us = Seconds(std::chrono::steady_clock::now() - t0) * 1e6;
        if (!measuring.load(std::memory_order_relaxed)) continue;
        if (!ok) ++errors;
        lat[t].push_back(us);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // Warm up.
  measuring = true;
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  measuring = false;
  const double elapsed = Seconds(std::chrono::steady_clock::now() - start);
  stop = true;
  for (auto& th : threads) th.join();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all.empty() ? 0.0 : all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))];
  };
  return {concurrency, all.size() / elapsed, pct(0.5), pct(0.99), errors.load()};
}

// The same add as a KServe v2 ModelInfer: model "add", inputs INPUT0 and INPUT1.
inference::ModelInferRequest InferRequest(const v1::ComputeRequest& add) {
  inference::ModelInferRequest req;
  req.set_model_name(add.op());
  for (int i = 0; i < add.inputs_size(); ++i) {
    const v1::Tensor& t = add.inputs(i);
    auto* in = req.add_inputs();
    in->set_name(absl::StrCat("INPUT", i));
    in->set_datatype("FP32");
    *in->mutable_shape() = t.shape();
    req.add_raw_input_contents(t.data());
  }
  return req;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One ComputeStream: both inputs in chunks, the output back in chunks. Returns seconds.
double OneStream(v1::TensorService::Stub& stub, const v1::ComputeRequest& req, int64_t chunk,
                 int64_t expect_bytes, bool* ok) {
  const auto t0 = std::chrono::steady_clock::now();
  grpc::ClientContext ctx;
  Deadline(ctx);
  auto stream = stub.ComputeStream(&ctx);
  std::thread writer([&] {
    v1::ComputeStreamRequest h;
    *h.mutable_header() = req;
    for (v1::Tensor& t : *h.mutable_header()->mutable_inputs()) {
      t.set_storage_bytes(static_cast<int64_t>(t.data().size()));
      t.clear_data();
    }
    bool good = stream->Write(h);
    for (int i = 0; good && i < req.inputs_size(); ++i) {
      const std::string& d = req.inputs(i).data();
      for (size_t at = 0; good && at < d.size(); at += chunk) {
        v1::ComputeStreamRequest m;
        m.mutable_chunk()->set_tensor(i);
        m.mutable_chunk()->set_offset(static_cast<int64_t>(at));
        m.mutable_chunk()->set_data(d.substr(at, chunk));
        good = stream->Write(m);
      }
    }
    stream->WritesDone();
  });
  v1::TensorStreamMessage m;
  int64_t got = 0;
  while (stream->Read(&m)) {
    if (m.has_chunk()) got += static_cast<int64_t>(m.chunk().data().size());
  }
  writer.join();
  *ok = stream->Finish().ok() && got == expect_bytes;
  return Seconds(std::chrono::steady_clock::now() - t0);
}

// The add's expected output element i, as bytes.
std::string ExpectedAt(const v1::ComputeRequest& req, int64_t i) {
  float a, b;
  std::memcpy(&a, req.inputs(0).data().data() + i * 4, 4);
  std::memcpy(&b, req.inputs(1).data().data() + i * 4, 4);
  const float c = a + b;
  return std::string(reinterpret_cast<const char*>(&c), 4);
}

// False, with the reason on stderr, for a failed step.
bool Check(const grpc::Status& s, const char* step) {
  if (!s.ok()) std::fprintf(stderr, "%s: %s\n", step, s.error_message().c_str());
  return s.ok();
}

// Frees resident tensors; false, with the reason on stderr, if that failed.
bool Release(v1::TensorService::Stub& stub, const std::vector<std::string>& handles) {
  grpc::ClientContext ctx;
  Deadline(ctx);
  v1::ReleaseRequest rel;
  for (const std::string& h : handles) rel.add_handles(h);
  v1::ReleaseResponse rr;
  return Check(stub.Release(&ctx, rel, &rr), "release");
}

// The tensor spread over several connections: parts uploaded in parallel into reserved
// resident tensors, one Compute on the handles (output kept resident), parts downloaded in
// parallel, then released.
double SpreadOverConnections(const std::vector<std::unique_ptr<v1::TensorService::Stub>>& stubs,
                             const v1::ComputeRequest& req, int64_t chunk, bool* ok) {
  const auto t0 = std::chrono::steady_clock::now();
  const int p = static_cast<int>(stubs.size());
  std::atomic<bool> good{true};
  std::vector<std::string> handles;
  for (const v1::Tensor& t : req.inputs()) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::UploadResponse r;
    auto w = stubs[0]->Upload(&ctx, &r);
    v1::UploadRequest h;
    v1::Tensor* meta = h.mutable_header()->mutable_tensor();
    meta->set_dtype(t.dtype());
    *meta->mutable_shape() = t.shape();
    meta->set_storage_bytes(static_cast<int64_t>(t.data().size()));
    w->Write(h);
    w->WritesDone();
    if (!Check(w->Finish(), "reserve")) good = false;
    handles.push_back(r.tensor().handle());
  }
  auto parallel = [&](auto fn) {
    std::vector<std::thread> threads;
    for (int k = 0; k < p; ++k) threads.emplace_back([&, k] { fn(k); });
    for (auto& th : threads) th.join();
  };
  parallel([&](int k) {
    for (int i = 0; i < req.inputs_size(); ++i) {
      const std::string& d = req.inputs(i).data();
      const int64_t part = (static_cast<int64_t>(d.size()) + p - 1) / p;
      const int64_t begin = std::min<int64_t>(k * part, d.size());
      const int64_t end = std::min<int64_t>(begin + part, d.size());
      grpc::ClientContext ctx;
      Deadline(ctx);
      v1::UploadResponse r;
      auto w = stubs[k]->Upload(&ctx, &r);
      v1::UploadRequest h;
      h.mutable_header()->set_handle(handles[i]);
      h.mutable_header()->set_offset(begin);
      bool g = w->Write(h);
      for (int64_t at = begin; g && at < end; at += chunk) {
        v1::UploadRequest m;
        m.mutable_chunk()->set_offset(at);
        m.mutable_chunk()->set_data(d.substr(at, std::min(chunk, end - at)));
        g = w->Write(m);
      }
      w->WritesDone();
      if (!Check(w->Finish(), "reserve")) good = false;
    }
  });
  v1::ComputeRequest creq;
  creq.set_op(req.op());
  for (const std::string& h : handles) creq.add_inputs()->set_handle(h);
  creq.set_keep_output_resident(true);
  v1::ComputeResponse cresp;
  {
    grpc::ClientContext ctx;
    Deadline(ctx);
    if (!Check(stubs[0]->Compute(&ctx, creq, &cresp), "compute")) good = false;
  }
  const int64_t out_bytes = cresp.output().storage_bytes();
  std::atomic<int64_t> got{0};
  parallel([&](int k) {
    const int64_t part = (out_bytes + p - 1) / p;
    const int64_t begin = std::min<int64_t>(k * part, out_bytes);
    const int64_t len = std::min<int64_t>(part, out_bytes - begin);
    if (len == 0) return;
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::DownloadRequest d;
    d.set_handle(cresp.output().handle());
    d.set_offset(begin);
    d.set_length(len);
    d.set_chunk_bytes(chunk);
    auto r = stubs[k]->Download(&ctx, d);
    v1::TensorStreamMessage m;
    while (r->Read(&m)) {
      if (m.has_chunk()) got += static_cast<int64_t>(m.chunk().data().size());
    }
    if (!Check(r->Finish(), "download")) good = false;
  });
  handles.push_back(cresp.output().handle());
  if (!Release(*stubs[0], handles)) good = false;
  if (got != out_bytes) {
    std::fprintf(stderr, "download: %lld of %lld bytes\n", static_cast<long long>(got.load()),
                 static_cast<long long>(out_bytes));
  }
  *ok = good && got == out_bytes;
  return Seconds(std::chrono::steady_clock::now() - t0);
}

// ------------------------------------------------------- one expression against four ops

struct ExprResult {
  int64_t elements = 0;
  std::string mode;
  double four_ms = 0, one_ms = 0;
  bool ok = false;
};

// n float32 in [-2, 2).
v1::Tensor SmallFloats(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 1000) - 500) / 250.0f;
  v1::Tensor t;
  t.set_dtype(v1::float32);
  t.add_shape(n);
  t.set_data(std::string(reinterpret_cast<const char*>(v.data()), static_cast<size_t>(n) * 4));
  return t;
}

// A new resident tensor holding t's bytes; "" on failure.
std::string UploadResident(v1::TensorService::Stub& stub, const v1::Tensor& t, int64_t chunk) {
  grpc::ClientContext ctx;
  Deadline(ctx);
  v1::UploadResponse r;
  auto w = stub.Upload(&ctx, &r);
  v1::UploadRequest h;
  v1::Tensor* meta = h.mutable_header()->mutable_tensor();
  meta->set_dtype(t.dtype());
  *meta->mutable_shape() = t.shape();
  meta->set_storage_bytes(static_cast<int64_t>(t.data().size()));
  bool good = w->Write(h);
  for (size_t at = 0; good && at < t.data().size(); at += static_cast<size_t>(chunk)) {
    v1::UploadRequest m;
    m.mutable_chunk()->set_offset(static_cast<int64_t>(at));
    m.mutable_chunk()->set_data(t.data().substr(at, static_cast<size_t>(chunk)));
    good = w->Write(m);
  }
  w->WritesDone();
  return Check(w->Finish(), "upload") ? r.tensor().handle() : std::string();
}

// sigmoid(a * b + c) * d over n float32 elements per tensor, as a client sends it: one
// request carrying the expression, or four requests (mul, add, sigmoid, mul), each reply
// an input of the next. Inline: every input and output crosses the connection; resident:
// the four inputs are uploaded before timing and every output is kept on the server (the
// handles released after each timed repetition, untimed). Medians of `reps`, the two
// alternating; the two final outputs are compared byte for byte (inline) each repetition.
std::vector<ExprResult> ExpressionAgainstFourOps(v1::TensorService::Stub& stub, int64_t n, int reps,
                                                 int64_t chunk) {
  std::vector<v1::Tensor> in;
  for (uint64_t k = 0; k < 4; ++k) in.push_back(SmallFloats(n, 40 + k));
  auto compute = [&](v1::ComputeRequest& req, v1::ComputeResponse* resp) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    return Check(stub.Compute(&ctx, req, resp), "compute");
  };
  std::vector<ExprResult> out;
  for (const bool resident : {false, true}) {
    ExprResult r;
    r.elements = n;
    r.mode = resident ? "resident inputs and outputs" : "inline inputs and outputs";
    r.ok = true;
    std::vector<v1::Tensor> args = in;
    std::vector<std::string> inputs;
    if (resident) {
      for (const v1::Tensor& t : in) {
        inputs.push_back(UploadResident(stub, t, chunk));
        r.ok = r.ok && !inputs.back().empty();
      }
      for (size_t k = 0; k < 4; ++k) {
        args[k] = v1::Tensor();
        args[k].set_handle(inputs[k]);
      }
    }
    std::vector<double> four, one;
    for (int rep = 0; rep < reps && r.ok; ++rep) {
      std::vector<std::string> made;
      std::string four_bytes, one_bytes;
      // Four requests.
      auto t0 = std::chrono::steady_clock::now();
      v1::Tensor value;
      const char* ops[] = {"mul", "add", "sigmoid", "mul"};
      for (int step = 0; step < 4 && r.ok; ++step) {
        v1::ComputeRequest req;
        req.set_op(ops[step]);
        *req.add_inputs() = step == 0 ? args[0] : value;
        if (step == 0) *req.add_inputs() = args[1];
        if (step == 1) *req.add_inputs() = args[2];
        if (step == 3) *req.add_inputs() = args[3];
        req.set_keep_output_resident(resident);
        v1::ComputeResponse resp;
        r.ok = compute(req, &resp);
        value = v1::Tensor();
        if (resident) {
          value.set_handle(resp.output().handle());
          made.push_back(resp.output().handle());
        } else {
          value = std::move(*resp.mutable_output());
        }
      }
      four.push_back(Seconds(std::chrono::steady_clock::now() - t0) * 1e3);
      four_bytes = value.data();
      // One expression.
      t0 = std::chrono::steady_clock::now();
      v1::ComputeRequest req;
      req.set_expression("sigmoid(a * b + c) * d");
      for (const v1::Tensor& t : args) *req.add_inputs() = t;
      req.set_keep_output_resident(resident);
      v1::ComputeResponse resp;
      r.ok = r.ok && compute(req, &resp);
      one.push_back(Seconds(std::chrono::steady_clock::now() - t0) * 1e3);
      if (resident) {
        made.push_back(resp.output().handle());
        (void)Release(stub, made);
      } else {
        one_bytes = resp.output().data();
        if (one_bytes.size() != static_cast<size_t>(n) * 4 || one_bytes != four_bytes) {
          std::fprintf(stderr, "expression %lld: the two outputs differ\n",
                       static_cast<long long>(n));
          r.ok = false;
        }
      }
    }
    if (resident) (void)Release(stub, inputs);
    if (!four.empty()) {
      r.four_ms = Median(four);
      r.one_ms = Median(one);
    }
    std::fprintf(stderr,
                 "expression %lld elements, %s: four requests %.3f ms, one %.3f ms (%.2fx)%s\n",
                 static_cast<long long>(n), r.mode.c_str(), r.four_ms, r.one_ms,
                 r.one_ms > 0 ? r.four_ms / r.one_ms : 0.0, r.ok ? "" : " (ERRORS)");
    out.push_back(r);
  }
  return out;
}

struct RssResult {
  double gib = 0, seconds = 0, gbps = 0;
  int64_t idle_kb = 0, peak_kb = 0;
  bool ok = false;
};

// A streamed add of two `gib` GiB float32 inputs (1.0 and 2.0 everywhere, made chunk by
// chunk) through one ComputeStream on a fresh server; every output element checked to be 3.
RssResult StreamedAddRss(const std::string& binary, const std::vector<std::string>& flags, int gib,
                         int64_t chunk) {
  RssResult res;
  res.gib = gib;
  tc::testing::ServerProcess server(binary, flags);
  if (server.port() == 0) return res;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  res.idle_kb = tc::testing::ProcStatusKb(server.pid(), "VmRSS");
  const int64_t n = static_cast<int64_t>(gib) << 28;
  auto stub = v1::TensorService::NewStub(Channel(server.target(), 0));
  const auto t0 = std::chrono::steady_clock::now();
  grpc::ClientContext ctx;
  Deadline(ctx);
  auto stream = stub->ComputeStream(&ctx);
  std::thread writer([&] {
    v1::ComputeStreamRequest h;
    h.mutable_header()->set_op("add");
    for (int i = 0; i < 2; ++i) {
      v1::Tensor* t = h.mutable_header()->add_inputs();
      t->set_dtype(v1::float32);
      t->add_shape(n);
      t->set_storage_bytes(n * 4);
    }
    bool good = stream->Write(h);
    std::vector<float> values(chunk / 4);
    for (int i = 0; good && i < 2; ++i) {
      std::fill(values.begin(), values.end(), i == 0 ? 1.0f : 2.0f);
      for (int64_t at = 0; good && at < n * 4; at += chunk) {
        v1::ComputeStreamRequest m;
        m.mutable_chunk()->set_tensor(i);
        m.mutable_chunk()->set_offset(at);
        m.mutable_chunk()->set_data(reinterpret_cast<const char*>(values.data()),
                                    std::min(chunk, n * 4 - at));
        good = stream->Write(m);
      }
    }
    stream->WritesDone();
  });
  v1::TensorStreamMessage m;
  int64_t got = 0, wrong = 0;
  while (stream->Read(&m)) {
    if (!m.has_chunk()) continue;
    const std::string& d = m.chunk().data();
    for (size_t k = 0; k + 4 <= d.size(); k += 4) {
      float f;
      std::memcpy(&f, d.data() + k, 4);
      wrong += f != 3.0f;
    }
    got += static_cast<int64_t>(d.size());
  }
  writer.join();
  res.ok = stream->Finish().ok() && got == n * 4 && wrong == 0;
  res.seconds = Seconds(std::chrono::steady_clock::now() - t0);
  res.gbps = 3.0 * n * 4 / res.seconds / 1e9;
  res.peak_kb = tc::testing::ProcStatusKb(server.pid(), "VmHWM");
  return res;
}

// The add through shared-memory regions (ours only): inputs placed in regions, the output
// written into one. With `copy`, the inputs are first copied from ordinary memory into the
// regions and the output copied out again (what a client with plain arrays pays); without,
// the caller's tensors live in the regions already. Checks a sample of the output.
double SharedMemoryAdd(tc::client::Client& client, const v1::ComputeRequest& req, bool copy,
                       std::vector<std::unique_ptr<tc::client::SharedRegion>>& regions, bool* ok) {
  const int64_t bytes = static_cast<int64_t>(req.inputs(0).data().size());
  *ok = false;
  if (regions.empty()) {
    for (int k = 0; k < 3; ++k) {
      auto r = client.CreateRegion(bytes, absl::StrCat("bench-", k));
      if (!r.ok()) {
        std::fprintf(stderr, "shared memory: %s\n", r.status().ToString().c_str());
        return 0;
      }
      regions.push_back(*std::move(r));
    }
    for (int k = 0; k < 2; ++k) {
      std::memcpy(regions[k]->data(), req.inputs(k).data().data(), static_cast<size_t>(bytes));
    }
  }
  std::vector<char> result(copy ? static_cast<size_t>(bytes) : 0);
  const auto t0 = std::chrono::steady_clock::now();
  if (copy) {
    for (int k = 0; k < 2; ++k) {
      std::memcpy(regions[k]->data(), req.inputs(k).data().data(), static_cast<size_t>(bytes));
    }
  }
  v1::ComputeRequest r;
  r.set_op("add");
  for (int k = 0; k < 2; ++k) {
    *r.add_inputs() = regions[k]->Input(v1::float32, {bytes / 4});
  }
  r.set_output_region(regions[2]->id());
  auto out = client.Compute(r);
  if (copy && out.ok()) std::memcpy(result.data(), regions[2]->data(), result.size());
  const double s = Seconds(std::chrono::steady_clock::now() - t0);
  if (!out.ok()) {
    std::fprintf(stderr, "shared memory: %s\n", out.status().ToString().c_str());
    return s;
  }
  const auto* a = reinterpret_cast<const float*>(req.inputs(0).data().data());
  const auto* b = reinterpret_cast<const float*>(req.inputs(1).data().data());
  const auto* c = copy ? reinterpret_cast<const float*>(result.data())
                       : reinterpret_cast<const float*>(regions[2]->data());
  *ok = out->storage_bytes() == bytes;
  for (int64_t i = 0; i < bytes / 4; i += 4093) *ok = *ok && c[i] == a[i] + b[i];
  std::memset(regions[2]->data(), 0, static_cast<size_t>(bytes));  // The next run must write it.
  return s;
}

struct LargeResult {
  std::string service, mode;
  int64_t mib;
  double seconds, gbps;
  bool ok;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_serve_echo)) return ServeEcho();
  const std::string binary = absl::GetFlag(FLAGS_server_binary);
  if (binary.empty()) {
    std::fprintf(stderr, "--server_binary is required\n");
    return 2;
  }
  std::vector<std::string> flags = {"--backend=" + absl::GetFlag(FLAGS_backend),
                                    absl::StrCat("--max_message_bytes=", kMaxMessage)};
  for (const std::string& f : tc::testing::SplitFlags(absl::GetFlag(FLAGS_server_flags))) {
    flags.push_back(f);
  }
  tc::testing::ServerProcess ours(binary, flags);
  tc::testing::ServerProcess echo("/proc/self/exe", {"--serve_echo"});
  if (ours.port() == 0 || echo.port() == 0) {
    std::fprintf(stderr, "servers did not start\n");
    return 1;
  }
  int metrics_port = -1;
  std::string device = absl::GetFlag(FLAGS_backend);
  {
    auto stub = v1::TensorService::NewStub(Channel(ours.target(), -1));
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::ServerInfoResponse info;
    if (stub->ServerInfo(&ctx, v1::ServerInfoRequest(), &info).ok()) {
      metrics_port = info.metrics_port();
      if (info.devices_size() > 0) device = info.devices(0).name();
    }
  }
  struct Target {
    const char* name;
    std::string address;
  };
  const Target targets[] = {{"tensorcompute", ours.target()}, {"echo", echo.target()}};

  // Per concurrency: ours through Compute, the echo, ours through KServe v2's ModelInfer.
  std::vector<std::pair<std::string, SmallResult>> small;
  double server_us = 0;
  const v1::ComputeRequest small_req = AddRequest(1024);
  const inference::ModelInferRequest small_infer = InferRequest(small_req);
  for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_concurrency), ',')) {
    int conc = 1;
    if (!absl::SimpleAtoi(c, &conc)) continue;
    for (const Target& t : targets) {
      std::vector<std::unique_ptr<v1::TensorService::Stub>> stubs;
      for (int i = 0; i < absl::GetFlag(FLAGS_connections); ++i) {
        stubs.push_back(v1::TensorService::NewStub(Channel(t.address, i)));
      }
      const bool measure_server = conc == 1 && std::string(t.name) == "tensorcompute";
      const auto before = measure_server ? ServerAddLatency(metrics_port) : std::pair{0.0, 0.0};
      SmallResult r = RunSmall(conc, absl::GetFlag(FLAGS_small_seconds), [&](int thread) {
        grpc::ClientContext ctx;
        Deadline(ctx);
        v1::ComputeResponse resp;
        return stubs[thread % stubs.size()]->Compute(&ctx, small_req, &resp).ok();
      });
      if (measure_server) {
        const auto after = ServerAddLatency(metrics_port);
        if (after.second > before.second) {
          server_us = (after.first - before.first) / (after.second - before.second) * 1e6;
        }
      }
      std::fprintf(stderr, "small %s c=%d: %.0f req/s p50 %.0f us p99 %.0f us, %lld errors\n",
                   t.name, conc, r.rps, r.p50_us, r.p99_us, static_cast<long long>(r.errors));
      small.emplace_back(t.name, r);
    }
    std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> v2;
    for (int i = 0; i < absl::GetFlag(FLAGS_connections); ++i) {
      v2.push_back(inference::GRPCInferenceService::NewStub(Channel(ours.target(), 50 + i)));
    }
    SmallResult r = RunSmall(conc, absl::GetFlag(FLAGS_small_seconds), [&](int thread) {
      grpc::ClientContext ctx;
      Deadline(ctx);
      inference::ModelInferResponse resp;
      return v2[thread % v2.size()]->ModelInfer(&ctx, small_infer, &resp).ok() &&
             resp.raw_output_contents_size() == 1 && resp.raw_output_contents(0).size() == 4096;
    });
    std::fprintf(stderr, "small ModelInfer c=%d: %.0f req/s p50 %.0f us p99 %.0f us, %lld errors\n",
                 conc, r.rps, r.p50_us, r.p99_us, static_cast<long long>(r.errors));
    small.emplace_back("ModelInfer", r);
  }

  std::vector<LargeResult> large;
  const int64_t chunk = absl::GetFlag(FLAGS_chunk_bytes);
  const int reps = std::max(1, absl::GetFlag(FLAGS_large_reps));
  for (absl::string_view m : absl::StrSplit(absl::GetFlag(FLAGS_large_mib), ',')) {
    int64_t mib = 0;
    if (!absl::SimpleAtoi(m, &mib)) continue;
    const int64_t n = mib << 18;
    const v1::ComputeRequest req = AddRequest(n);
    const inference::ModelInferRequest infer_req = InferRequest(req);
    const double bytes = 3.0 * static_cast<double>(n) * 4;  // Two inputs in, one output out.
    for (const Target& t : targets) {
      auto stub = v1::TensorService::NewStub(Channel(t.address, 100));
      auto v2 = inference::GRPCInferenceService::NewStub(Channel(t.address, 101));
      std::vector<std::unique_ptr<v1::TensorService::Stub>> spread;
      for (int i = 0; i < absl::GetFlag(FLAGS_parallel_streams); ++i) {
        spread.push_back(v1::TensorService::NewStub(Channel(t.address, 200 + i)));
      }
      const bool is_echo = std::string(t.name) == "echo";
      std::vector<std::string> modes = {"unary", "1 stream"};
      if (!is_echo) {
        modes.push_back("KServe v2 ModelInfer");
        modes.push_back(absl::StrCat(spread.size(), " connections"));
        modes.push_back("client library, 1 stream");
        // One message each way, the inputs' bytes beside it, the output read out of the
        // received slices into the caller's memory.
        modes.push_back("client library, 1 connection, ComputeFrom into new memory");
        modes.push_back(absl::StrCat("client library, ", spread.size(), " connections"));
        modes.push_back(absl::StrCat("client library, ", spread.size(),
                                     " connections, ComputeFrom into new memory"));
        // The spread call's two halves alone: where its time goes.
        modes.push_back(absl::StrCat("client library, ", spread.size(),
                                     " connections, the two inputs' upload alone"));
        modes.push_back(absl::StrCat("client library, ", spread.size(),
                                     " connections, the output's download alone"));
        modes.push_back("shared memory");
        modes.push_back("shared memory, copy in and out");
      }
      if (const std::string only = absl::GetFlag(FLAGS_large_modes); !only.empty()) {
        std::vector<std::string> kept;
        for (const std::string& mode : modes) {
          for (absl::string_view word : absl::StrSplit(only, ';', absl::SkipEmpty())) {
            if (absl::StrContains(mode, word)) {
              kept.push_back(mode);
              break;
            }
          }
        }
        modes = kept;
      }
      tc::client::ClientOptions copts;
      copts.max_message_bytes = kMaxMessage;
      copts.connections = static_cast<int>(spread.size());
      copts.grpc_args = ClientGrpcArgs();
      if (int64_t v = absl::GetFlag(FLAGS_client_slice_bytes); v >= 0) copts.slice_bytes = v;
      if (int64_t v = absl::GetFlag(FLAGS_client_slice_part_bytes); v > 0) {
        copts.slice_part_bytes = v;
      }
      if (int v = absl::GetFlag(FLAGS_client_slices_per_connection); v > 0) {
        copts.slices_per_connection = v;
      }
      tc::client::Client client(t.address, copts);
      copts.connections = 1;
      tc::client::Client single(t.address, copts);
      std::vector<std::unique_ptr<tc::client::SharedRegion>> regions;
      for (const std::string& mode : modes) {
        std::vector<double> times;
        bool all_ok = true;
        double mode_bytes = bytes;
        if (absl::EndsWith(mode, "upload alone")) mode_bytes = 2.0 * static_cast<double>(n) * 4;
        if (absl::EndsWith(mode, "download alone")) mode_bytes = static_cast<double>(n) * 4;
        for (int r = 0; r < reps; ++r) {
          bool ok = false;
          double s = 0;
          if (absl::EndsWith(mode, "upload alone")) {
            // Both inputs made resident over every connection, as the spread call uploads
            // them (released after the clock stops).
            const auto t0 = std::chrono::steady_clock::now();
            std::vector<std::string> made;
            ok = true;
            for (const v1::Tensor& in : req.inputs()) {
              v1::Tensor meta;
              meta.set_dtype(in.dtype());
              *meta.mutable_shape() = in.shape();
              auto up = client.UploadFrom(
                  meta, {in.data().data(), static_cast<int64_t>(in.data().size())}, 0);
              ok = ok && up.ok() && up->bytes_received() == n * 4;
              if (up.ok()) made.push_back(up->tensor().handle());
            }
            s = Seconds(std::chrono::steady_clock::now() - t0);
            ok = client.Release(made).ok() && ok;
          } else if (absl::EndsWith(mode, "download alone")) {
            // A resident tensor of the output's size read back over every connection into
            // memory written before (made resident before the clock starts).
            v1::Tensor meta;
            meta.set_dtype(req.inputs(0).dtype());
            *meta.mutable_shape() = req.inputs(0).shape();
            const std::string& d = req.inputs(0).data();
            auto up = client.UploadFrom(meta, {d.data(), static_cast<int64_t>(d.size())}, 0);
            std::string dst(d.size(), '\0');
            const auto t0 = std::chrono::steady_clock::now();
            ok = up.ok() && client
                                .DownloadInto(up->tensor().handle(), n * 4,
                                              reinterpret_cast<std::byte*>(dst.data()))
                                .ok();
            s = Seconds(std::chrono::steady_clock::now() - t0);
            ok = ok && dst == d;
            if (up.ok()) ok = client.Release({up->tensor().handle()}).ok() && ok;
          } else if (mode == "unary") {
            const auto t0 = std::chrono::steady_clock::now();
            grpc::ClientContext ctx;
            Deadline(ctx);
            v1::ComputeResponse resp;
            ok = stub->Compute(&ctx, req, &resp).ok() &&
                 static_cast<int64_t>(resp.output().data().size()) == n * 4;
            s = Seconds(std::chrono::steady_clock::now() - t0);
          } else if (mode == "KServe v2 ModelInfer") {
            // Built before, as the unary Compute's request is.
            const auto t0 = std::chrono::steady_clock::now();
            grpc::ClientContext ctx;
            Deadline(ctx);
            inference::ModelInferResponse resp;
            ok = v2->ModelInfer(&ctx, infer_req, &resp).ok() &&
                 resp.raw_output_contents_size() == 1 &&
                 static_cast<int64_t>(resp.raw_output_contents(0).size()) == n * 4;
            s = Seconds(std::chrono::steady_clock::now() - t0);
          } else if (mode == "1 stream") {
            s = OneStream(*stub, req, chunk, n * 4, &ok);
          } else if (absl::EndsWith(mode, "ComputeFrom into new memory")) {
            // The inputs read where they lie, the output written into memory the caller
            // allocates (untouched before, as a fresh NumPy array's would be).
            const auto t0 = std::chrono::steady_clock::now();
            v1::ComputeRequest header;
            header.set_op(req.op());
            std::vector<tc::client::Client::ExternalBytes> bytes;
            for (const v1::Tensor& in : req.inputs()) {
              v1::Tensor* t = header.add_inputs();
              t->set_dtype(in.dtype());
              *t->mutable_shape() = in.shape();
              bytes.push_back({in.data().data(), static_cast<int64_t>(in.data().size())});
            }
            std::unique_ptr<std::byte[]> dst;
            tc::client::Client& c = absl::StrContains(mode, " 1 connection") ? single : client;
            auto out = c.ComputeFrom(header, bytes, [&dst](int64_t n) {
              dst.reset(new std::byte[static_cast<size_t>(n)]);
              return dst.get();
            });
            ok = out.ok() && out->storage_bytes() == n * 4 &&
                 std::memcmp(dst.get() + (n / 2) * 4, ExpectedAt(req, n / 2).data(), 4) == 0;
            s = Seconds(std::chrono::steady_clock::now() - t0);
          } else if (absl::StartsWith(mode, "client library")) {
            const auto t0 = std::chrono::steady_clock::now();
            auto out = mode == "client library, 1 stream" ? client.ComputeStreamed(req)
                                                          : client.Compute(req);
            ok = out.ok() && static_cast<int64_t>(out->data().size()) == n * 4;
            s = Seconds(std::chrono::steady_clock::now() - t0);
          } else if (absl::StartsWith(mode, "shared memory")) {
            s = SharedMemoryAdd(client, req, mode != "shared memory", regions, &ok);
          } else {
            s = SpreadOverConnections(spread, req, chunk, &ok);
          }
          all_ok = all_ok && ok;
          times.push_back(s);
        }
        const double med = Median(times);
        large.push_back({t.name, mode, mib, med, mode_bytes / med / 1e9, all_ok});
        std::fprintf(stderr, "large %s %lld MiB %s: %.3f s, %.2f GB/s%s\n", t.name,
                     static_cast<long long>(mib), mode.c_str(), med, mode_bytes / med / 1e9,
                     all_ok ? "" : " (ERRORS)");
      }
    }
  }

  std::vector<ExprResult> expressions;
  for (absl::string_view e : absl::StrSplit(absl::GetFlag(FLAGS_expression_elements), ',')) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(e, &n) || n <= 0) continue;
    int reps = absl::GetFlag(FLAGS_expression_reps);
    if (reps <= 0) reps = n <= (1 << 16) ? 300 : 7;
    auto stub = v1::TensorService::NewStub(Channel(ours.target(), 300));
    for (ExprResult& r : ExpressionAgainstFourOps(*stub, n, reps, chunk)) expressions.push_back(r);
  }

  RssResult rss;
  if (const int gib = absl::GetFlag(FLAGS_rss_gib); gib > 0) {
    rss = StreamedAddRss(binary, flags, gib, chunk);
    std::fprintf(stderr,
                 "streamed add of two %d GiB inputs: %.1f s, %.2f GB/s, server RSS idle %lld MiB, "
                 "peak %lld MiB%s\n",
                 gib, rss.seconds, rss.gbps, static_cast<long long>(rss.idle_kb >> 10),
                 static_cast<long long>(rss.peak_kb >> 10), rss.ok ? "" : " (ERRORS)");
  }

  // Markdown.
  std::printf("Service benchmark: backend %s (%s), %s\n\n", absl::GetFlag(FLAGS_backend).c_str(),
              device.c_str(), absl::GetFlag(FLAGS_label).c_str());
  std::printf("Small requests (4 KiB float32 add, %d connections):\n\n",
              absl::GetFlag(FLAGS_connections));
  std::printf(
      "| concurrency | tensorcompute req/s | p50 us | p99 us | echo req/s | p50 us | p99 us | "
      "ratio | KServe v2 ModelInfer req/s | p50 us | p99 us | ModelInfer / Compute |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i + 2 < small.size(); i += 3) {
    const SmallResult& a = small[i].second;
    const SmallResult& b = small[i + 1].second;
    const SmallResult& v = small[i + 2].second;
    std::printf(
        "| %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f%% | %.0f | %.0f | %.0f | %.0f%% |\n",
        a.concurrency, a.rps, a.p50_us, a.p99_us, b.rps, b.p50_us, b.p99_us, 100 * a.rps / b.rps,
        v.rps, v.p50_us, v.p99_us, 100 * v.rps / a.rps);
  }
  std::printf(
      "\nServer-side time per small request (its own latency histogram, concurrency 1): %.1f "
      "us\n\n",
      server_us);
  std::printf(
      "Large requests (float32 add of two inputs; GB/s counts 2 inputs in + 1 output out; the rows "
      "of a half alone, its own bytes):\n\n");
  std::printf("| MiB per input | service | mode | seconds | GB/s |\n|---|---|---|---|---|\n");
  for (const LargeResult& r : large) {
    std::printf("| %lld | %s | %s | %.3f | %.2f%s |\n", static_cast<long long>(r.mib),
                r.service.c_str(), r.mode.c_str(), r.seconds, r.gbps, r.ok ? "" : " (errors)");
  }

  if (!expressions.empty()) {
    std::printf(
        "\nsigmoid(a * b + c) * d over float32 tensors: one expression request against "
        "the four op requests (mul, add, sigmoid, mul) a client sends without it; median "
        "ms per evaluation, one client, unary Compute:\n\n");
    std::printf(
        "| elements | mode | four requests ms | one expression ms | speedup "
        "|\n|---|---|---|---|---|\n");
    for (const ExprResult& r : expressions) {
      std::printf("| %lld | %s | %.3f | %.3f | %.2fx%s |\n", static_cast<long long>(r.elements),
                  r.mode.c_str(), r.four_ms, r.one_ms, r.one_ms > 0 ? r.four_ms / r.one_ms : 0.0,
                  r.ok ? "" : " (errors)");
    }
  }

  if (rss.gib > 0) {
    std::printf(
        "\nStreamed add of two %.0f GiB float32 inputs through one ComputeStream on a fresh "
        "server: %.1f s (%.2f GB/s); server resident memory %lld MiB idle, peak %lld MiB, "
        "%lld MiB above idle%s\n",
        rss.gib, rss.seconds, rss.gbps, static_cast<long long>(rss.idle_kb >> 10),
        static_cast<long long>(rss.peak_kb >> 10),
        static_cast<long long>((rss.peak_kb - rss.idle_kb) >> 10), rss.ok ? "" : " (ERRORS)");
  }

  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << "{\n  \"backend\": \"" << absl::GetFlag(FLAGS_backend) << "\",\n  \"device\": \""
        << device << "\",\n  \"label\": \"" << absl::GetFlag(FLAGS_label)
        << "\",\n  \"server_us_per_small_request\": " << server_us << ",\n  \"small\": [\n";
    for (size_t i = 0; i < small.size(); ++i) {
      const auto& [name, r] = small[i];
      out << absl::StrFormat(
          "    {\"service\": \"%s\", \"concurrency\": %d, \"rps\": %.1f, \"p50_us\": %.1f, "
          "\"p99_us\": %.1f, \"errors\": %d}%s\n",
          name, r.concurrency, r.rps, r.p50_us, r.p99_us, r.errors,
          i + 1 < small.size() ? "," : "");
    }
    out << "  ],\n  \"large\": [\n";
    for (size_t i = 0; i < large.size(); ++i) {
      const LargeResult& r = large[i];
      out << absl::StrFormat(
          "    {\"service\": \"%s\", \"mode\": \"%s\", \"mib\": %d, \"seconds\": %.4f, "
          "\"gbps\": %.3f, \"ok\": %s}%s\n",
          r.service, r.mode, r.mib, r.seconds, r.gbps, r.ok ? "true" : "false",
          i + 1 < large.size() ? "," : "");
    }
    out << "  ],\n";
    out << absl::StrFormat(
        "  \"streamed_rss\": {\"gib_per_input\": %.0f, \"seconds\": %.3f, \"gbps\": %.3f, "
        "\"idle_kib\": %d, \"peak_kib\": %d, \"ok\": %s}\n}\n",
        rss.gib, rss.seconds, rss.gbps, rss.idle_kb, rss.peak_kb, rss.ok ? "true" : "false");
  }
  return 0;
}
