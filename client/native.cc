// libtensorcompute_native: the C++ client behind a C interface, for languages that load
// shared libraries (the Python client does, through ctypes). Large tensors then move from
// the caller's memory over several connections on the library's own threads, outside the
// caller's interpreter.
//
// Every function is safe to call from several threads at once on one client. Errors: a call
// returns null (or a negative number) and writes the gRPC status code and a message into
// `code` / `error` (error_len bytes, NUL-terminated).
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"

namespace {

namespace v1 = ::tensorcompute::v1;

void SetError(const absl::Status& s, int* code, char* error, size_t error_len) {
  if (code != nullptr) *code = static_cast<int>(s.code());
  if (error != nullptr && error_len > 0) {
    const std::string m(s.message());
    const size_t n = std::min(m.size(), error_len - 1);
    std::memcpy(error, m.data(), n);
    error[n] = '\0';
  }
}

}  // namespace

struct tcn_client {
  std::unique_ptr<tc::client::Client> client;
};

struct tcn_result {
  v1::Tensor tensor;  // Without data: the metadata the caller reads.
  std::string meta;   // `tensor` serialized.
  // The output's bytes: mapped here, untouched until the transfer threads write them (no
  // zeroing pass first), in huge pages where the system offers them.
  std::byte* data = nullptr;
  size_t bytes = 0;
  size_t mapped = 0;
  ~tcn_result() {
    if (mapped > 0) munmap(data, mapped);
  }
  bool Map(int64_t n) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t size = (static_cast<size_t>(n) + kHuge - 1) & ~(kHuge - 1);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    (void)madvise(p, size, MADV_HUGEPAGE);
    data = static_cast<std::byte*>(p);
    bytes = static_cast<size_t>(n);
    mapped = size;
    return true;
  }
};

extern "C" {

// A client of `target`. Strings may be null or empty; numbers <= 0 keep the defaults. The TLS
// ones are PEM files' paths or the PEM text itself (ClientOptions).
// `session`: the session id to send (so that a client using this and another transport is one
// session to the server); empty: a random one. `home`: where `target` names several replicas,
// the one stateful calls go to (ClientOptions::home); empty: one at random.
// `retry_attempts`: ClientOptions::retry_attempts (1: a caller that retries itself, on
// another replica, takes each failure at once).
tcn_client* tcn_connect(const char* target, const char* token, const char* tls_ca_file,
                        const char* tls_cert_file, const char* tls_key_file,
                        const char* tls_server_name, double timeout_seconds,
                        int64_t max_message_bytes, int connections, int64_t spread_bytes,
                        int64_t chunk_bytes, const char* session, const char* home,
                        int retry_attempts) {
  tc::client::ClientOptions o;
  if (retry_attempts > 0) o.retry_attempts = retry_attempts;
  auto str = [](const char* s) { return s == nullptr ? std::string() : std::string(s); };
  o.home = str(home);
  o.token = str(token);
  o.session = str(session);
  o.tls_ca_file = str(tls_ca_file);
  o.tls_cert_file = str(tls_cert_file);
  o.tls_key_file = str(tls_key_file);
  o.tls_server_name = str(tls_server_name);
  if (timeout_seconds > 0) o.timeout = absl::Seconds(timeout_seconds);
  if (max_message_bytes > 0) {
    o.max_message_bytes = static_cast<int>(std::min<int64_t>(max_message_bytes, INT32_MAX));
  }
  if (connections > 0) o.connections = connections;
  if (spread_bytes > 0) o.spread_bytes = spread_bytes;
  if (chunk_bytes > 0) o.chunk_bytes = chunk_bytes;
  auto* c = new tcn_client;
  c->client = std::make_unique<tc::client::Client>(str(target), o);
  return c;
}

// tcn_connect without a home replica (one at random where the target names several).
tcn_client* tcn_open(const char* target, const char* token, const char* tls_ca_file,
                     const char* tls_cert_file, const char* tls_key_file,
                     const char* tls_server_name, double timeout_seconds, int64_t max_message_bytes,
                     int connections, int64_t spread_bytes, int64_t chunk_bytes,
                     const char* session) {
  return tcn_connect(target, token, tls_ca_file, tls_cert_file, tls_key_file, tls_server_name,
                     timeout_seconds, max_message_bytes, connections, spread_bytes, chunk_bytes,
                     session, nullptr, 0);
}

void tcn_close(tcn_client* c) { delete c; }

// Runs a serialized ComputeRequest whose inline inputs carry no data: input i's bytes are
// [data[i], data[i] + sizes[i]) (ignored for handles and regions), unchanged until this
// returns. The result (free it with tcn_result_free) holds the output.
tcn_result* tcn_compute_within(tcn_client* c, const void* request, size_t request_len,
                               const void* const* data, const int64_t* sizes, int n,
                               double timeout_seconds, int* code, char* error, size_t error_len);

tcn_result* tcn_compute(tcn_client* c, const void* request, size_t request_len,
                        const void* const* data, const int64_t* sizes, int n, int* code,
                        char* error, size_t error_len) {
  return tcn_compute_within(c, request, request_len, data, sizes, n, 0, code, error, error_len);
}

// tcn_compute within `timeout_seconds` (the whole call, every connection it uses; <= 0: the
// client's timeout).
tcn_result* tcn_compute_within(tcn_client* c, const void* request, size_t request_len,
                               const void* const* data, const int64_t* sizes, int n,
                               double timeout_seconds, int* code, char* error, size_t error_len) {
  std::optional<tc::client::Client::Within> within;
  if (timeout_seconds > 0) within.emplace(absl::Now() + absl::Seconds(timeout_seconds));
  v1::ComputeRequest req;
  if (!req.ParseFromArray(request, static_cast<int>(request_len))) {
    SetError(absl::InvalidArgumentError("the request does not parse as a ComputeRequest"), code,
             error, error_len);
    return nullptr;
  }
  std::vector<tc::client::Client::ExternalBytes> bytes(static_cast<size_t>(std::max(0, n)));
  for (int i = 0; i < n; ++i) bytes[i] = {data[i], sizes[i]};
  auto r = std::make_unique<tcn_result>();
  auto out = c->client->ComputeFrom(req, bytes, [&r](int64_t n) -> std::byte* {
    if (n <= 0) return reinterpret_cast<std::byte*>(&r->bytes);  // Nothing to write.
    return r->Map(n) ? r->data : nullptr;
  });
  if (!out.ok()) {
    SetError(out.status(), code, error, error_len);
    return nullptr;
  }
  r->tensor = std::move(*out);
  r->meta = r->tensor.SerializeAsString();
  return r.release();
}

// Stores a tensor on the server: `tensor` is a serialized Tensor (its data ignored) whose
// storage is [data, data + size), unchanged until this returns. The result's metadata is the
// serialized UploadResponse (the handle in its tensor); it has no data.
tcn_result* tcn_upload(tcn_client* c, const void* tensor, size_t tensor_len, const void* data,
                       int64_t size, int64_t ttl_seconds, int* code, char* error,
                       size_t error_len) {
  v1::Tensor meta;
  if (!meta.ParseFromArray(tensor, static_cast<int>(tensor_len))) {
    SetError(absl::InvalidArgumentError("the tensor does not parse as a Tensor"), code, error,
             error_len);
    return nullptr;
  }
  auto resp = c->client->UploadFrom(meta, {data, size}, ttl_seconds);
  if (!resp.ok()) {
    SetError(resp.status(), code, error, error_len);
    return nullptr;
  }
  auto* r = new tcn_result;
  r->meta = resp->SerializeAsString();
  return r;
}

// A resident tensor's first `storage_bytes` bytes (its whole storage, as its metadata says).
tcn_result* tcn_download(tcn_client* c, const char* handle, int64_t storage_bytes, int* code,
                         char* error, size_t error_len) {
  auto r = std::make_unique<tcn_result>();
  if (storage_bytes > 0) {
    if (!r->Map(storage_bytes)) {
      SetError(absl::ResourceExhaustedError("no memory for the tensor"), code, error, error_len);
      return nullptr;
    }
    if (auto s = c->client->DownloadInto(handle, storage_bytes, r->data); !s.ok()) {
      SetError(s, code, error, error_len);
      return nullptr;
    }
  }
  return r.release();
}

// The output Tensor without its data, serialized; its length.
size_t tcn_result_meta(const tcn_result* r, const char** meta) {
  *meta = r->meta.data();
  return r->meta.size();
}

// The output's storage bytes (as the Tensor's strides and offset describe them); its length.
size_t tcn_result_data(tcn_result* r, char** data) {
  *data = reinterpret_cast<char*>(r->data);
  return r->bytes;
}

void tcn_result_free(tcn_result* r) { delete r; }

}  // extern "C"
