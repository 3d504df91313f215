#include "tests/support/load_mix.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "tests/support/server_process.h"
#include "tests/support/wire_tensors.h"

namespace tc::testing {

namespace v1 = ::tensorcompute::v1;

namespace {

v1::Tensor FloatTensor(const std::vector<float>& values) {
  v1::Tensor t;
  t.set_dtype(v1::float32);
  t.add_shape(static_cast<int64_t>(values.size()));
  t.set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  return t;
}

// Multiples of 1/8 in [-1000, 1000]: sums and products are exact in float32 up to 2^24, and
// the rest round the same way everywhere.
std::vector<float> RandomFloats(std::mt19937_64& rng, int64_t n) {
  std::uniform_int_distribution<int> d(-8000, 8000);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(d(rng)) / 8.0f;
  return v;
}

// Index of the first element of `t` (float32, contiguous) that differs from `want` by more
// than `rel` of its magnitude, or -1.
int64_t FirstMismatch(const v1::Tensor& t, const std::vector<float>& want, float rel = 0) {
  if (t.dtype() != v1::float32 || t.data().size() != want.size() * 4) return 0;
  const char* p = t.data().data();
  for (size_t i = 0; i < want.size(); ++i) {
    float f;
    std::memcpy(&f, p + i * 4, 4);
    if (f != want[i] && !(std::fabs(f - want[i]) <= rel * std::fabs(want[i]))) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

// The step of a multi-call round trip that failed, for messages; the status keeps its code
// and (for a bare gRPC status) its message.
absl::Status Where(const absl::Status& s, const char* step) {
  absl::Status out(s.code(), s.message());
  out.SetPayload("step", absl::Cord(step));
  return out;
}

}  // namespace

const char* LoadKindName(LoadKind k) {
  switch (k) {
    case LoadKind::kSmall:
      return "small";
    case LoadKind::kStreamed:
      return "streamed";
    case LoadKind::kResident:
      return "resident";
    case LoadKind::kCancel:
      return "cancel";
    case LoadKind::kDeadline:
      return "deadline";
    case LoadKind::kCross:
      return "cross";
  }
  return "?";
}

int64_t LoadMixReport::total_ok() const {
  int64_t n = 0;
  for (int64_t v : ok) n += v;
  return n;
}

int64_t LoadMixReport::total() const {
  int64_t n = total_ok();
  for (int64_t v : failed) n += v;
  return n;
}

std::string LoadMixReport::Summary() const {
  std::string s;
  for (int k = 0; k < kLoadKinds; ++k) {
    if (ok[k] + failed[k] == 0) continue;
    absl::StrAppend(&s, LoadKindName(static_cast<LoadKind>(k)), " ", ok[k], " ok / ", failed[k],
                    " failed; ");
  }
  absl::StrAppend(&s, "codes:");
  for (const auto& [code, n] : codes) {
    absl::StrAppend(&s, " ", absl::StatusCodeToString(code), "=", n);
  }
  absl::StrAppend(&s, "; wrong results ", wrong, "; unexpected ", unexpected);
  if (shutdown_cancelled > 0) {
    absl::StrAppend(&s, "; cancelled by gRPC at shutdown ", shutdown_cancelled);
  }
  if (finished_in_drain > 0) {
    absl::StrAppend(&s, "; in flight at the signal and finished OK ", finished_in_drain);
  }
  for (const std::string& e : samples) absl::StrAppend(&s, "\n  ", e);
  return s;
}

LoadMix::LoadMix(LoadMixOptions options) : options_(std::move(options)) {}

LoadMix::~LoadMix() { Stop(); }

void LoadMix::Start() {
  stop_ = false;
  for (int i = 0; i < options_.clients; ++i) threads_.emplace_back([this, i] { Worker(i); });
}

void LoadMix::Stop() {
  stop_ = true;
  Wait();
}

void LoadMix::Wait() {
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

LoadMixReport LoadMix::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  return report_;
}

void LoadMix::Unexpected(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  ++report_.unexpected;
  if (report_.samples.size() < 8) report_.samples.push_back(what);
}

void LoadMix::Count(LoadKind kind, const absl::Status& status, bool allowed_extra,
                    absl::Time start) {
  const int k = static_cast<int>(kind);
  bool fine = status.ok() || allowed_extra || options_.allowed.count(status.code()) > 0;
  const bool shutdown_cancel = !fine && status.code() == absl::StatusCode::kCancelled &&
                               status.message() == "CANCELLED" &&
                               absl::ToUnixNanos(start) >= cancel_from_ns_.load();
  fine = fine || shutdown_cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_cancel) ++report_.shutdown_cancelled;
    if (status.ok() && absl::ToUnixNanos(start) < signal_ns_.load() &&
        absl::ToUnixNanos(absl::Now()) >= signal_ns_.load()) {
      ++report_.finished_in_drain;
    }
    ++report_.codes[status.code()];
    ++(status.ok() ? report_.ok[k] : report_.failed[k]);
  }
  if (!fine) Unexpected(absl::StrCat(LoadKindName(kind), ": ", status.ToString()));
}

void LoadMix::Worker(int index) {
  std::mt19937_64 rng(options_.seed * 1000003 + static_cast<uint64_t>(index));
  client::ClientOptions copts;
  copts.timeout = options_.deadline;
  client::Client client(options_.target, copts);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto stub = v1::TensorService::NewStub(
      grpc::CreateCustomChannel(options_.target, grpc::InsecureChannelCredentials(), args));

  int total_weight = 0;
  for (int w : options_.weights) total_weight += w;
  std::uniform_int_distribution<int> pick(0, std::max(total_weight, 1) - 1);
  std::uniform_int_distribution<int> jitter(0, 63);

  for (int64_t calls = 0;
       !stop_.load() && (options_.calls_per_client == 0 || calls < options_.calls_per_client);
       ++calls) {
    int r = pick(rng), k = 0;
    while (k < kLoadKinds - 1 && r >= options_.weights[k]) r -= options_.weights[k++];
    const auto kind = static_cast<LoadKind>(k);
    // When the last RPC of this call began (a resident round trip makes several).
    absl::Time start = absl::Now();
    switch (kind) {
      case LoadKind::kSmall: {
        const int64_t n = 1000 + jitter(rng);
        auto a = RandomFloats(rng, n), b = RandomFloats(rng, n);
        start = absl::Now();
        auto out = client.Compute("add", {FloatTensor(a), FloatTensor(b)});
        Count(kind, out.status(), false, start);
        if (out.ok()) {
          for (int64_t i = 0; i < n; ++i) a[i] += b[i];
          if (int64_t at = FirstMismatch(*out, a); at >= 0) {
            std::lock_guard<std::mutex> lock(mu_);
            ++report_.wrong;
          }
        }
        break;
      }
      case LoadKind::kStreamed: {
        const int64_t n = options_.streamed_elements + jitter(rng);
        auto a = RandomFloats(rng, n), b = RandomFloats(rng, n);
        v1::ComputeRequest req;
        req.set_op("mul");
        *req.add_inputs() = FloatTensor(a);
        *req.add_inputs() = FloatTensor(b);
        start = absl::Now();
        auto out = client.ComputeStreamed(req);
        Count(kind, out.status(), false, start);
        if (out.ok()) {
          for (int64_t i = 0; i < n; ++i) a[i] *= b[i];
          if (int64_t at = FirstMismatch(*out, a); at >= 0) {
            Unexpected(absl::StrCat("streamed: wrong value at ", at));
            std::lock_guard<std::mutex> lock(mu_);
            ++report_.wrong;
          }
        }
        break;
      }
      case LoadKind::kCross: {
        const int64_t n = options_.resident_elements + jitter(rng);
        auto x = RandomFloats(rng, n);
        auto y = RandomFloats(rng, n);
        std::vector<std::string> handles;
        auto cross = [&]() -> absl::Status {
          v1::UploadHeader on0, on1;
          on0.set_device(0);
          on1.set_device(1);
          start = absl::Now();
          auto a = client.UploadWith(on0, FloatTensor(x));
          if (!a.ok()) return Where(a.status(), "upload to device 0");
          handles.push_back(a->tensor().handle());
          start = absl::Now();
          auto b = client.UploadWith(on1, FloatTensor(y));
          // A server of one device has no device 1: both go to its one.
          if (!b.ok() && b.status().code() == absl::StatusCode::kInvalidArgument) {
            b = client.Upload(FloatTensor(y));
          }
          if (!b.ok()) return Where(b.status(), "upload to device 1");
          handles.push_back(b->tensor().handle());
          v1::ComputeRequest req;
          req.set_op("add");
          req.add_inputs()->set_handle(a->tensor().handle());
          req.add_inputs()->set_handle(b->tensor().handle());
          start = absl::Now();
          auto sum = client.Compute(req);
          if (!sum.ok()) return Where(sum.status(), "compute");
          for (int64_t i = 0; i < n; ++i) x[i] += y[i];
          if (int64_t at = FirstMismatch(*sum, x); at >= 0) {
            Unexpected(absl::StrCat("cross: wrong value at ", at));
            std::lock_guard<std::mutex> lock(mu_);
            ++report_.wrong;
          }
          return absl::OkStatus();
        };
        absl::Status st = cross();
        if (!handles.empty()) {
          start = absl::Now();
          auto released = client.Release(handles);
          if (!released.ok()) st.Update(Where(released.status(), "release"));
        }
        Count(kind, st, false, start);
        break;
      }
      case LoadKind::kResident: {
        const int64_t n = options_.resident_elements + jitter(rng);
        auto x = RandomFloats(rng, n);
        const float y = RandomFloats(rng, 1)[0];
        std::vector<std::string> handles;
        auto round_trip = [&]() -> absl::Status {
          start = absl::Now();
          auto up = client.Upload(FloatTensor(x));
          if (!up.ok()) return Where(up.status(), "upload");
          handles.push_back(up->tensor().handle());
          v1::ComputeRequest req;
          req.set_op("add");
          req.add_inputs()->set_handle(up->tensor().handle());
          v1::Tensor scalar;
          scalar.set_dtype(v1::float32);
          scalar.set_data(std::string(reinterpret_cast<const char*>(&y), 4));
          *req.add_inputs() = scalar;
          req.set_keep_output_resident(true);
          start = absl::Now();
          auto kept = client.Compute(req);
          if (!kept.ok()) return Where(kept.status(), "compute");
          handles.push_back(kept->handle());
          start = absl::Now();
          auto down = client.Download(kept->handle());
          if (!down.ok()) return Where(down.status(), "download");
          for (float& v : x) v += y;
          if (int64_t at = FirstMismatch(*down, x); at >= 0) {
            Unexpected(absl::StrCat("resident: wrong value at ", at));
            std::lock_guard<std::mutex> lock(mu_);
            ++report_.wrong;
          }
          return absl::OkStatus();
        };
        absl::Status st = round_trip();
        if (!handles.empty()) {
          // Whatever happened, nothing is left behind.
          start = absl::Now();
          auto released = client.Release(handles);
          if (!released.ok()) st.Update(Where(released.status(), "release"));
        }
        Count(kind, st, false, start);
        break;
      }
      case LoadKind::kCancel: {
        // Half of a streamed input, then the client gives up.
        const int64_t n = options_.streamed_elements;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoNanoseconds(options_.deadline));
        start = absl::Now();
        auto stream = stub->ComputeStream(&ctx);
        const v1::ComputeStreamRequest header = testing::StreamHeader("neg", v1::float32, n, 4);
        bool sent = stream->Write(header);
        const int64_t chunk = 1 << 20;
        const std::string data(static_cast<size_t>(chunk), '\x3f');
        for (int64_t at = 0; sent && at < n * 2; at += chunk) {
          v1::ComputeStreamRequest m;
          m.mutable_chunk()->set_offset(at);
          m.mutable_chunk()->set_data(
              data.substr(0, static_cast<size_t>(std::min(chunk, n * 2 - at))));
          sent = stream->Write(m);
        }
        ctx.TryCancel();
        const grpc::Status st = stream->Finish();
        Count(kind, client::FromGrpc(st), st.error_code() == grpc::StatusCode::CANCELLED, start);
        break;
      }
      case LoadKind::kDeadline: {
        // pow over a few MiB takes milliseconds; the deadline falls somewhere in the upload,
        // the compute or the reply.
        const int64_t n = options_.streamed_elements;
        auto a = RandomFloats(rng, n);
        v1::ComputeRequest req;
        req.set_op("pow");
        *req.add_inputs() = FloatTensor(a);
        v1::Tensor e;
        e.set_dtype(v1::float32);
        const float two = 2.0f;
        e.set_data(std::string(reinterpret_cast<const char*>(&two), 4));
        *req.add_inputs() = e;
        grpc::ClientContext ctx;
        std::uniform_int_distribution<int64_t> us(
            1000, std::max<int64_t>(1001, absl::ToInt64Microseconds(options_.short_deadline)));
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::microseconds(us(rng)));
        v1::ComputeResponse resp;
        start = absl::Now();
        const grpc::Status st = stub->Compute(&ctx, req, &resp);
        Count(kind, client::FromGrpc(st), st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED,
              start);
        if (st.ok()) {
          for (float& v : a) v = v * v;
          // pow need not round exactly like a product: a few ulp.
          if (int64_t at = FirstMismatch(resp.output(), a, 4e-7f); at >= 0) {
            Unexpected(absl::StrCat("deadline: wrong value at ", at));
            std::lock_guard<std::mutex> lock(mu_);
            ++report_.wrong;
          }
        }
        break;
      }
    }
  }
}

std::string ServerFootprint::ToString() const {
  return absl::StrCat("device memory ", device_bytes, " B, resident tensors ", resident_tensors,
                      ", RSS ", rss_kb >> 10, " MiB");
}

ServerFootprint Footprint(const std::string& target, int pid) {
  ServerFootprint f;
  client::ClientOptions o;
  o.timeout = absl::Seconds(10);
  client::Client c(target, o);
  if (auto info = c.ServerInfo(); info.ok()) {
    f.device_bytes = 0;
    for (const auto& d : info->devices()) f.device_bytes += d.memory_in_use_bytes();
    f.resident_tensors = info->resident_tensors();
    f.heap_allocated_bytes = info->heap_allocated_bytes();
    f.heap_free_bytes = info->heap_free_bytes();
  }
  f.rss_kb = ProcStatusKb(pid, "VmRSS");
  return f;
}

}  // namespace tc::testing
