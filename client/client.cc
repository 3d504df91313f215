#include "client/client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <cstring>
#include <iterator>
#include <optional>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "client/chunked_call.h"
#include "client/replicas.h"
#include "google/protobuf/field_mask.pb.h"
#include "google/protobuf/util/field_mask_util.h"
#include "proto/chunk_wire.h"
#include "util/fd_passing.h"

namespace tc::client {

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

namespace {

// `path`: a PEM file, or PEM text itself (what a caller holding certificates in memory passes).
absl::StatusOr<std::string> ReadPem(const std::string& path) {
  if (absl::StartsWith(path, "-----BEGIN")) return path;
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

namespace {

// The deadline every call of this thread ends by at the latest (Client::Within).
thread_local absl::Time t_deadline = absl::InfiniteFuture();

}  // namespace

Client::Within::Within(absl::Time deadline) : previous_(t_deadline) {
  t_deadline = std::min(t_deadline, deadline);
}

Client::Within::~Within() { t_deadline = previous_; }

Client::Client(const std::string& target, ClientOptions options) : options_(options) {
  std::random_device random;
  session_ = !options_.session.empty()
                 ? options_.session
                 : absl::StrCat(
                       absl::Hex(random(), absl::kZeroPad8), absl::Hex(random(), absl::kZeroPad8),
                       absl::Hex(random(), absl::kZeroPad8), absl::Hex(random(), absl::kZeroPad8));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  // A retried call's request is kept for its next try: as large as a unary Compute gets
  // (larger ones are spread or streamed, and not retried).
  args.SetInt(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE,
              static_cast<int>(std::min<int64_t>(options_.spread_bytes + (1 << 20),
                                                 options_.max_message_bytes)));
  // A server back on its address is connected again within a second; a connect that does not
  // complete in 3 s (a frozen server still accepts TCP connections) is given up.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 3000);
  if (options_.keepalive > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                static_cast<int>(
                    std::max<int64_t>(100, absl::ToInt64Milliseconds(options_.keepalive_timeout))));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  for (const auto& [name, value] : options_.grpc_args) args.SetInt(name, value);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options_.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    auto ca = ReadPem(options_.tls_ca_file);
    if (ca.ok()) ssl.pem_root_certs = *ca;
    setup_error_.Update(ca.status());
    if (!options_.tls_cert_file.empty()) {
      auto cert = ReadPem(options_.tls_cert_file);
      auto key = ReadPem(options_.tls_key_file);
      if (cert.ok() && key.ok()) {
        ssl.pem_cert_chain = *cert;
        ssl.pem_private_key = *key;
      }
      setup_error_.Update(cert.status());
      setup_error_.Update(key.status());
    }
    creds = grpc::SslCredentials(ssl);
    if (!options_.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options_.tls_server_name);
    }
  }
  creds_ = creds;
  args_ = args;
  target_ = target;
  if (auto replicas = ResolveReplicas(target); !replicas.ok()) {
    setup_error_.Update(replicas.status());
  } else {
    replicas_ = replicas->addresses;
    if (!replicas->balanced.empty()) {
      // Several replicas: a client of each, this one choosing where each call goes.
      int home =
          std::uniform_int_distribution<int>(0, static_cast<int>(replicas_.size()) - 1)(random);
      if (!options_.home.empty()) {
        auto at = std::find(replicas_.begin(), replicas_.end(), options_.home);
        if (at == replicas_.end()) {
          setup_error_.Update(absl::InvalidArgumentError(
              absl::StrCat("home ", options_.home, " is not one of the target's replicas")));
        } else {
          home = static_cast<int>(at - replicas_.begin());
        }
      }
      ClientOptions peer = options_;
      peer.session = session_;
      peer.retry_attempts = 1;  // Retries go to the next replica, from here.
      peer.home.clear();
      for (const std::string& a : replicas_) {
        peers_.push_back(Peer{std::make_unique<Client>(a, peer)});
      }
      home_.store(home);
      turn_.store(random());
      return;
    }
  }
  grpc::ChannelArguments home = args;
  // No retry policy of gRPC's: retries are OnReplicas', for the calls that are safe to send
  // again, on whichever replica (two layers of retries would multiply their tries).
  home.SetServiceConfigJSON(ServiceConfig(1, false));
  channel_ = grpc::CreateCustomChannel(target_, creds, home);
  stub_ = v1::TensorService::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
  generic_ = std::make_unique<grpc::GenericStub>(channel_);
}

const std::string& Client::home() const { return peers_.empty() ? target_ : Home().target_; }

absl::StatusOr<std::string> Client::Rehome(const std::string& replica) {
  if (peers_.empty()) return target_;
  if (replica.empty()) {
    home_.store(Pick({home_.load()}));
  } else {
    auto at = std::find(replicas_.begin(), replicas_.end(), replica);
    if (at == replicas_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(replica, " is not one of the replicas"));
    }
    home_.store(static_cast<int>(at - replicas_.begin()));
  }
  return home();
}

int Client::Pick(const std::vector<int>& tried) {
  const absl::Time now = absl::Now();
  const int n = static_cast<int>(peers_.size());
  std::vector<int> fresh, up;
  for (int i = 0; i < n; ++i) {
    if (std::find(tried.begin(), tried.end(), i) == tried.end()) fresh.push_back(i);
  }
  if (fresh.empty()) {
    for (int i = 0; i < n; ++i) fresh.push_back(i);
  }
  std::lock_guard<std::mutex> lock(peers_mu_);
  for (int i : fresh) {
    if (peers_[i].down_until <= now) up.push_back(i);
  }
  const int home = home_.load();
  if (!options_.spread_replicas && std::find(up.begin(), up.end(), home) != up.end()) {
    return home;
  }
  if (!up.empty()) return up[turn_.fetch_add(1) % up.size()];
  return *std::min_element(fresh.begin(), fresh.end(), [this](int a, int b) {
    return peers_[a].down_until < peers_[b].down_until;
  });
}

void Client::PeerFailed(int i) {
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    Peer& p = peers_[i];
    p.failures = std::min(p.failures + 1, 16);
    p.down_until =
        absl::Now() + std::min(absl::Seconds(2), absl::Milliseconds(250) * (1 << (p.failures - 1)));
  }
  int expected = i;
  if (peers_.size() > 1) home_.compare_exchange_strong(expected, Pick({i}));
}

void Client::PeerAnswered(int i) {
  std::lock_guard<std::mutex> lock(peers_mu_);
  peers_[i].failures = 0;
  peers_[i].down_until = absl::InfinitePast();
}

namespace {

// A try that failed as a gone or going server fails: sent again, to another replica where
// there is one. UNAVAILABLE (draining, a refused or lost connection, a balancer's 502),
// CANCELLED (a server in its last second; this client never cancels), and a stream a
// balancer reset when the replica behind it died mid-call (INTERNAL "Received RST_STREAM";
// a server's own INTERNAL carries its own message).
bool Retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kCancelled ||
         (s.code() == absl::StatusCode::kInternal && absl::StrContains(s.message(), "RST_STREAM"));
}

}  // namespace

template <class T, class Fn>
absl::StatusOr<T> Client::OnReplicas(int64_t bytes, Fn fn) {
  if (!setup_error_.ok()) return setup_error_;
  const absl::Time end = std::min(absl::Now() + options_.timeout, t_deadline);
  absl::Duration per_try = absl::InfiniteDuration();
  if (options_.try_timeout > absl::ZeroDuration()) {
    per_try = options_.try_timeout + absl::Seconds(static_cast<double>(bytes) /
                                                   std::max(1.0, options_.try_bytes_per_second));
  }
  std::vector<int> tried;
  absl::Status last;
  for (int n = 0; n < std::max(1, options_.retry_attempts); ++n) {
    const absl::Duration left = end - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    const int i = peers_.empty() ? -1 : Pick(tried);
    Client& c = i < 0 ? *this : *peers_[i].client;
    const absl::Duration budget = std::min(left, per_try);
    absl::StatusOr<T> out = [&] {
      Within within(absl::Now() + budget);
      return fn(c);
    }();
    if (out.ok()) {
      if (i >= 0) PeerAnswered(i);
      return out;
    }
    const bool expired = out.status().code() == absl::StatusCode::kDeadlineExceeded &&
                         budget < left - absl::Milliseconds(50);
    if (!expired && !Retryable(out.status())) return out;
    if (i >= 0) PeerFailed(i);
    last = expired ? absl::UnavailableError(
                         absl::StrCat(c.target_, " did not answer within the per-try deadline (",
                                      absl::FormatDuration(budget), "): ", out.status().message()))
                   : out.status();
    tried.push_back(i);
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(
        std::max(absl::ZeroDuration(), std::min({absl::Milliseconds(100) * (1 << std::min(n, 4)),
                                                 absl::Milliseconds(500), end - absl::Now()}))));
  }
  if (last.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat("no replica answered within ", absl::FormatDuration(options_.timeout)));
  }
  return last;
}

std::vector<grpc::GenericStub*> Client::Lanes(int n) {
  std::lock_guard<std::mutex> lock(lanes_mu_);
  while (static_cast<int>(lanes_.size()) < n) {
    grpc::ChannelArguments args = args_;
    // Distinct arguments: a connection of its own rather than a shared subchannel.
    args.SetInt("tensorcompute.client.lane", static_cast<int>(lanes_.size()));
    // A lane's calls wait for its connection (LaneCall), so a connect that did not take is
    // tried again soon rather than after gRPC's default second.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    lanes_.push_back(
        std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(target_, creds_, args)));
  }
  std::vector<grpc::GenericStub*> out;
  for (int i = 0; i < n; ++i) out.push_back(lanes_[i].get());
  return out;
}

void Client::LaneCall(const grpc::GenericStub& stub, grpc::ClientContext& ctx) const {
  // Lanes connect when first used, after the server has answered on the home channel. gRPC 1.51
  // can fail a good TCP connect with an unrelated errno (it reads errno after other calls; fixed
  // upstream since), which would fail a call that does not wait: a lane's call waits for its
  // connection instead, up to the call's deadline.
  if (&stub != generic_.get()) ctx.set_wait_for_ready(true);
}

void Client::SetDeadline(grpc::ClientContext& ctx) const {
  ctx.set_deadline(absl::ToChronoTime(std::min(absl::Now() + options_.timeout, t_deadline)));
  if (!options_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.token);
  // One session over all of this client's connections: the server keeps its resident tensors
  // on one device.
  ctx.AddMetadata("tc-session", session_);
}

absl::StatusOr<std::string> Client::Health(const std::string& service) {
  if (!peers_.empty()) {
    const int h = home_.load();
    return Noted(h, peers_[h].client->Health(service));
  }
  if (!setup_error_.ok()) return setup_error_;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  if (grpc::Status s = health_->Check(&ctx, req, &resp); !s.ok()) return FromGrpc(s);
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

namespace {

// Keeps nothing on a server and uses nothing kept there: any replica may run it, again.
bool Stateless(const v1::ComputeRequest& request) {
  if (request.keep_output_resident() || !request.output_region().empty()) return false;
  for (const v1::Tensor& t : request.inputs()) {
    if (!t.handle().empty() || !t.region().empty()) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<v1::ListOpsResponse> Client::ListOps() {
  return OnReplicas<v1::ListOpsResponse>(0, [](Client& c) -> absl::StatusOr<v1::ListOpsResponse> {
    if (!c.setup_error_.ok()) return c.setup_error_;
    grpc::ClientContext ctx;
    c.SetDeadline(ctx);
    v1::ListOpsResponse resp;
    if (grpc::Status s = c.stub_->ListOps(&ctx, v1::ListOpsRequest(), &resp); !s.ok()) {
      return FromGrpc(s);
    }
    return resp;
  });
}

absl::StatusOr<v1::Tensor> Client::Compute(const v1::ComputeRequest& request) {
  return Dispatch(request, DataOf(request), &request, nullptr);
}

// Each input's own data field, as the bytes to send.
std::vector<Client::ExternalBytes> Client::DataOf(const v1::ComputeRequest& request) {
  Bytes bytes;
  for (const v1::Tensor& t : request.inputs()) {
    bytes.push_back({t.data().data(), static_cast<int64_t>(t.data().size())});
  }
  return bytes;
}

namespace {

constexpr char kUploadMethod[] = "/tensorcompute.v1.TensorService/Upload";
constexpr char kDownloadMethod[] = "/tensorcompute.v1.TensorService/Download";
constexpr char kComputeStreamMethod[] = "/tensorcompute.v1.TensorService/ComputeStream";
constexpr char kComputeMethod[] = "/tensorcompute.v1.TensorService/Compute";
// Inline inputs of at least this many bytes together go beside the message (BesideImpl), not
// copied into it; the server reads inputs this large straight out of gRPC's slices too.
constexpr int64_t kBesideBytes = int64_t{1} << 20;

int64_t ItemBytes(int dtype) {
  static constexpr int kItem[] = {0, 1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  return dtype > 0 && dtype < static_cast<int>(std::size(kItem)) ? kItem[dtype] : 0;
}

// `from` with every field but those in `skip`, copied field by field (so that a large field
// that is left out is never copied).
template <class M>
void CopyAllBut(const M& from, std::initializer_list<absl::string_view> skip, M* to) {
  google::protobuf::FieldMask mask;
  const google::protobuf::Descriptor* d = M::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string& name = d->field(i)->name();
    if (std::find(skip.begin(), skip.end(), name) == skip.end()) mask.add_paths(name);
  }
  google::protobuf::util::FieldMaskUtil::MergeMessageTo(
      from, mask, google::protobuf::util::FieldMaskUtil::MergeOptions(), to);
}

bool IsInline(const v1::Tensor& t) { return t.handle().empty() && t.region().empty(); }

grpc::ByteBuffer Serialized(const google::protobuf::MessageLite& m) {
  const std::string bytes = m.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

template <class M>
absl::Status Parse(grpc::ByteBuffer& buffer, M* m) {
  grpc::Status s = grpc::SerializationTraits<M>::Deserialize(&buffer, m);
  if (!s.ok()) return absl::InternalError(absl::StrCat("unreadable reply: ", s.error_message()));
  return absl::OkStatus();
}

// A reply's output, its bytes moved to where `allocate` says (when it is given).
absl::StatusOr<v1::Tensor> OutputOf(v1::ComputeResponse& resp,
                                    const Client::OutputAllocator& allocate) {
  v1::Tensor* out = resp.mutable_output();
  if (allocate && !out->data().empty()) {
    std::byte* dst = allocate(static_cast<int64_t>(out->data().size()));
    if (dst == nullptr) return absl::ResourceExhaustedError("no memory for the output");
    std::memcpy(dst, out->data().data(), out->data().size());
    out->set_storage_bytes(static_cast<int64_t>(out->data().size()));
    out->clear_data();
  }
  return std::move(*out);
}

// A ComputeResponse received in `buffer`: its output's bytes copied once, from gRPC's slices
// to where `allocate` says (or into the tensor's data).
absl::StatusOr<v1::Tensor> ReadComputeResponse(grpc::ByteBuffer& buffer,
                                               const Client::OutputAllocator& allocate) {
  v1::ComputeResponse resp;
  wire::SplitMessage split;
  if (!wire::SplitComputeResponse(buffer, 1, &split)) {
    // Another valid encoding (or none): protobuf decides.
    if (auto s = Parse(buffer, &resp); !s.ok()) return s;
    return OutputOf(resp, allocate);
  }
  if (!resp.ParseFromString(split.rest())) return absl::InternalError("unreadable reply");
  v1::Tensor out = std::move(*resp.mutable_output());
  if (split.taken().empty()) return out;
  const wire::SplitMessage::Taken& t = split.taken()[0];
  std::byte* dst = nullptr;
  if (allocate) {
    dst = allocate(t.size);
    if (dst == nullptr) return absl::ResourceExhaustedError("no memory for the output");
    out.set_storage_bytes(t.size);
  } else {
    out.mutable_data()->resize(static_cast<size_t>(t.size));
    dst = reinterpret_cast<std::byte*>(out.mutable_data()->data());
  }
  split.CopyTo(t, dst);
  return out;
}

// The request without its inputs' inline bytes: their lengths become storage_bytes.
v1::ComputeRequest HeaderOf(const v1::ComputeRequest& request,
                            const std::vector<Client::ExternalBytes>& bytes) {
  v1::ComputeRequest h;
  CopyAllBut(request, {"inputs"}, &h);
  for (int i = 0; i < request.inputs_size(); ++i) {
    const v1::Tensor& t = request.inputs(i);
    v1::Tensor* m = h.add_inputs();
    CopyAllBut(t, {"data"}, m);
    if (IsInline(t)) m->set_storage_bytes(bytes[i].size);
  }
  return h;
}

// Takes a TensorStreamMessage stream: the header, then chunks of the storage's bytes
// [begin, begin + length), each copied straight from the received slices to where it belongs.
class TensorReceiver {
 public:
  // Into `dst` (length bytes, for storage byte `begin` onwards)...
  TensorReceiver(std::byte* dst, int64_t begin, int64_t length)
      : dst_(dst), begin_(begin), length_(length) {}
  // ...or into the header's own data, sized by it: a whole tensor, whose bytes follow unless
  // the header names a resident tensor (a ComputeStream output kept resident), or always
  // (`download`).
  TensorReceiver(bool download, const Client::Progress& progress,
                 const Client::OutputAllocator* allocate = nullptr)
      : download_(download), progress_(progress), allocate_(allocate) {}

  absl::Status operator()(grpc::ByteBuffer& buffer) {
    wire::ChunkRef chunk;
    if (wire::ParseChunk(buffer, &chunk)) {
      return Take(chunk.offset(), chunk.size(), [&chunk](std::byte* d) { chunk.CopyTo(d); });
    }
    v1::TensorStreamMessage m;
    if (auto s = Parse(buffer, &m); !s.ok()) return s;
    if (m.has_chunk()) {  // A chunk in another valid encoding.
      const std::string& data = m.chunk().data();
      return Take(m.chunk().offset(), static_cast<int64_t>(data.size()),
                  [&data](std::byte* d) { std::memcpy(d, data.data(), data.size()); });
    }
    if (!m.has_header() || have_header_) {
      return absl::InternalError("server sent an unexpected message in a tensor stream");
    }
    header_ = std::move(*m.mutable_header());
    have_header_ = true;
    if (dst_ == nullptr && (download_ || header_.handle().empty())) {
      // The whole storage follows.
      length_ = header_.storage_bytes();
      if (allocate_ != nullptr && *allocate_) {
        dst_ = (*allocate_)(length_);
        if (dst_ == nullptr) return absl::ResourceExhaustedError("no memory for the output");
      } else {
        header_.mutable_data()->resize(static_cast<size_t>(length_));
        dst_ = reinterpret_cast<std::byte*>(header_.mutable_data()->data());
      }
    }
    return absl::OkStatus();
  }

  // Every byte arrived.
  absl::Status Check() const {
    if (!have_header_) return absl::InternalError("server sent no header");
    if (got_ != length_) {
      return absl::InternalError(absl::StrCat("server sent ", got_, " of ", length_, " bytes"));
    }
    return absl::OkStatus();
  }
  v1::Tensor& header() { return header_; }

 private:
  template <class Copy>
  absl::Status Take(int64_t offset, int64_t n, Copy copy) {
    if (!have_header_ || dst_ == nullptr) {
      return absl::InternalError("server sent a chunk before the header");
    }
    if (offset < begin_ || n > length_ - (offset - begin_)) {
      return absl::InternalError(absl::StrCat("server sent a chunk for bytes [", offset, ", +", n,
                                              ") outside [", begin_, ", +", length_, ")"));
    }
    copy(dst_ + (offset - begin_));
    got_ += n;
    if (progress_) progress_(got_, length_);
    return absl::OkStatus();
  }

  std::byte* dst_ = nullptr;
  int64_t begin_ = 0;
  int64_t length_ = 0;
  int64_t got_ = 0;
  bool download_ = false;
  bool have_header_ = false;
  v1::Tensor header_;
  Client::Progress progress_;
  const Client::OutputAllocator* allocate_;
};

}  // namespace

absl::StatusOr<v1::Tensor> Client::ComputeFrom(const v1::ComputeRequest& request,
                                               const std::vector<ExternalBytes>& bytes,
                                               const OutputAllocator& allocate) {
  if (static_cast<int>(bytes.size()) != request.inputs_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes.size(), " byte ranges for ", request.inputs_size(), " inputs"));
  }
  for (int i = 0; i < request.inputs_size(); ++i) {
    if (!request.inputs(i).data().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", i, " has data; its bytes are to come from outside"));
    }
  }
  return Dispatch(request, bytes, nullptr, allocate);
}

absl::StatusOr<v1::Tensor> Client::Dispatch(const v1::ComputeRequest& request, const Bytes& bytes,
                                            const v1::ComputeRequest* unary,
                                            const OutputAllocator& allocate) {
  return Route(request, bytes,
               [&](Client& c) { return c.DispatchOnce(request, bytes, unary, allocate); });
}

template <class Fn>
absl::StatusOr<v1::Tensor> Client::Route(const v1::ComputeRequest& request, const Bytes& bytes,
                                         Fn fn) {
  // Stateless: tried on one replica after another (see ClientOptions::retry_attempts), each
  // try on whichever road its size takes there. Stateful: on the home replica, once.
  if (!Stateless(request)) {
    if (peers_.empty()) return fn(*this);
    const int h = home_.load();
    return Noted(h, fn(*peers_[h].client));
  }
  int64_t size = 0;
  for (const ExternalBytes& b : bytes) size += b.size;
  return OnReplicas<v1::Tensor>(size, fn);
}

absl::StatusOr<v1::Tensor> Client::DispatchOnce(const v1::ComputeRequest& request,
                                                const Bytes& bytes, const v1::ComputeRequest* unary,
                                                const OutputAllocator& allocate) {
  int64_t inline_bytes = 0;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const v1::Tensor& t = request.inputs(i);
    if (IsInline(t)) inline_bytes += bytes[i].size;
  }
  // Large and cut by rows: pipelined slices, over one connection or several.
  if (options_.slice_bytes > 0 && inline_bytes >= options_.slice_bytes && setup_error_.ok()) {
    if (auto sliced = SlicedImpl(request, bytes, allocate)) return std::move(*sliced);
  }
  // Large: over several connections at once (an output bound for a region needs no transfer).
  if (options_.connections > 1 && inline_bytes >= options_.spread_bytes &&
      request.output_region().empty()) {
    return SpreadImpl(request, bytes, options_.connections, allocate);
  }
  // Too large for one message: the same request in chunks.
  if (static_cast<int64_t>(request.ByteSizeLong()) + (unary == nullptr ? inline_bytes : 0) >
      options_.max_message_bytes / 2) {
    return StreamedImpl(request, bytes, 0, allocate);
  }
  if (!setup_error_.ok()) return setup_error_;
  if (inline_bytes >= kBesideBytes) return BesideImpl(request, bytes, allocate);
  v1::ComputeRequest assembled;
  if (unary == nullptr) {
    // Small: the bytes copied into one message.
    assembled = request;
    for (int i = 0; i < assembled.inputs_size(); ++i) {
      v1::Tensor* t = assembled.mutable_inputs(i);
      if (IsInline(*t) && bytes[i].size > 0) {
        t->set_data(bytes[i].data, static_cast<size_t>(bytes[i].size));
      }
    }
    unary = &assembled;
  }
  v1::ComputeResponse resp;
  {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    if (grpc::Status s = stub_->Compute(&ctx, *unary, &resp); !s.ok()) return FromGrpc(s);
  }
  return OutputOf(resp, allocate);
}

absl::StatusOr<v1::Tensor> Client::Compute(
    absl::string_view op, std::vector<v1::Tensor> inputs,
    std::vector<std::pair<std::string, v1::Attribute>> attrs) {
  v1::ComputeRequest req;
  req.set_op(std::string(op));
  for (v1::Tensor& t : inputs) *req.add_inputs() = std::move(t);
  for (auto& [name, value] : attrs) (*req.mutable_attributes())[name] = std::move(value);
  return Compute(req);
}

absl::StatusOr<v1::Tensor> Client::BesideImpl(const v1::ComputeRequest& request, const Bytes& bytes,
                                              const OutputAllocator& allocate,
                                              grpc::GenericStub* stub) {
  if (stub == nullptr) stub = generic_.get();
  std::string head;
  {
    v1::ComputeRequest h;
    CopyAllBut(request, {"inputs"}, &h);
    head = h.SerializeAsString();
  }
  // The inputs go as slices over the caller's memory: it is not given back before gRPC has
  // let go of them (after the call, also one that ended early).
  wire::LentBytes lent;
  std::vector<wire::TensorPart> parts(static_cast<size_t>(request.inputs_size()));
  for (int i = 0; i < request.inputs_size(); ++i) {
    const v1::Tensor& t = request.inputs(i);
    wire::TensorPart& part = parts[static_cast<size_t>(i)];
    if (!IsInline(t) || t.data().empty()) {
      part.meta = t.SerializeAsString();
    } else {
      v1::Tensor m;
      CopyAllBut(t, {"data"}, &m);
      part.meta = m.SerializeAsString();
    }
    if (IsInline(t) && bytes[i].size > 0) {
      part.data = lent.Lend(bytes[i].data, static_cast<size_t>(bytes[i].size));
    }
  }
  grpc::ByteBuffer message = wire::ComputeRequestMessage(head, std::move(parts));
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  LaneCall(*stub, ctx);
  bool sent = false;
  std::optional<absl::StatusOr<v1::Tensor>> out;
  auto next = [&](grpc::ByteBuffer* m) {
    if (sent) return false;
    sent = true;
    m->Swap(&message);
    return true;
  };
  auto s =
      RunChunkedCall(*stub, ctx, kComputeMethod, next, [&](grpc::ByteBuffer& b) -> absl::Status {
        if (out.has_value()) {
          return absl::InternalError("server sent a second reply");
        }
        out = ReadComputeResponse(b, allocate);
        return out->status();
      });
  if (!s.ok()) return s;
  if (!out.has_value()) return absl::InternalError("server sent no reply");
  return std::move(*out);
}

absl::StatusOr<v1::Tensor> Client::ComputeStreamed(const v1::ComputeRequest& request,
                                                   int64_t chunk_bytes) {
  const Bytes bytes = DataOf(request);
  return Route(request, bytes,
               [&](Client& c) { return c.StreamedImpl(request, bytes, chunk_bytes, nullptr); });
}

absl::StatusOr<v1::Tensor> Client::StreamedImpl(const v1::ComputeRequest& request,
                                                const Bytes& bytes, int64_t chunk_bytes,
                                                const OutputAllocator& allocate) {
  if (!setup_error_.ok()) return setup_error_;
  const int64_t chunk = chunk_bytes > 0 ? chunk_bytes : options_.chunk_bytes;
  wire::LentBytes lent;  // The chunks' bytes, until gRPC has let go of them.
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  const v1::ComputeStreamRequest header = [&] {
    v1::ComputeStreamRequest m;
    *m.mutable_header() = HeaderOf(request, bytes);
    return m;
  }();
  bool sent_header = false;
  int input = 0;
  int64_t at = 0;
  auto next = [&](grpc::ByteBuffer* out) {
    if (!sent_header) {
      sent_header = true;
      *out = Serialized(header);
      return true;
    }
    for (; input < request.inputs_size(); ++input, at = 0) {
      const v1::Tensor& t = request.inputs(input);
      const int64_t size = bytes[input].size;
      if (!IsInline(t) || at >= size) continue;
      const int64_t n = std::min(chunk, size - at);
      *out = wire::ChunkMessage(
          input, at,
          lent.Lend(static_cast<const char*>(bytes[input].data) + at, static_cast<size_t>(n)));
      at += n;
      return true;
    }
    return false;
  };
  TensorReceiver receiver(false, nullptr, &allocate);
  auto s = RunChunkedCall(*generic_, ctx, kComputeStreamMethod, next,
                          [&receiver](grpc::ByteBuffer& b) { return receiver(b); });
  if (!s.ok()) return s;
  if (auto c = receiver.Check(); !c.ok()) return c;
  return std::move(receiver.header());
}

absl::Status Client::SendUpload(grpc::GenericStub& stub, const v1::UploadRequest& header,
                                const std::byte* data, int64_t begin, int64_t end,
                                v1::UploadResponse* response, int64_t chunk_bytes,
                                const Progress& progress) {
  const int64_t chunk = chunk_bytes > 0 ? chunk_bytes : options_.chunk_bytes;
  wire::LentBytes lent;  // The chunks' bytes, until gRPC has let go of them.
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  LaneCall(stub, ctx);
  bool sent_header = false;
  int64_t at = begin;
  auto next = [&](grpc::ByteBuffer* out) {
    if (!sent_header) {
      sent_header = true;
      *out = Serialized(header);
      return true;
    }
    if (at >= end) return false;
    const int64_t n = std::min(chunk, end - at);
    *out = wire::ChunkMessage(0, at, lent.Lend(data + at, static_cast<size_t>(n)));
    at += n;
    if (progress) progress(at - begin, end - begin);
    return true;
  };
  return RunChunkedCall(stub, ctx, kUploadMethod, next,
                        [response](grpc::ByteBuffer& b) { return Parse(b, response); });
}

absl::StatusOr<v1::UploadResponse> Client::Upload(const v1::Tensor& tensor, int64_t ttl_seconds,
                                                  int64_t chunk_bytes, const Progress& progress) {
  if (!peers_.empty()) {
    const int h = home_.load();
    return Noted(h, peers_[h].client->Upload(tensor, ttl_seconds, chunk_bytes, progress));
  }
  if (!setup_error_.ok()) return setup_error_;
  v1::UploadRequest header;
  v1::Tensor* t = header.mutable_header()->mutable_tensor();
  CopyAllBut(tensor, {"data"}, t);
  t->set_storage_bytes(static_cast<int64_t>(tensor.data().size()));
  header.mutable_header()->set_ttl_seconds(ttl_seconds);
  v1::UploadResponse resp;
  auto s = SendUpload(*generic_, header, reinterpret_cast<const std::byte*>(tensor.data().data()),
                      0, static_cast<int64_t>(tensor.data().size()), &resp, chunk_bytes, progress);
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::UploadResponse> Client::UploadWith(const v1::UploadHeader& options,
                                                      const v1::Tensor& tensor) {
  if (!peers_.empty()) {
    const int h = home_.load();
    return Noted(h, peers_[h].client->UploadWith(options, tensor));
  }
  if (!setup_error_.ok()) return setup_error_;
  v1::UploadRequest header;
  *header.mutable_header() = options;
  v1::Tensor* t = header.mutable_header()->mutable_tensor();
  t->Clear();
  CopyAllBut(tensor, {"data"}, t);
  t->set_storage_bytes(static_cast<int64_t>(tensor.data().size()));
  v1::UploadResponse resp;
  auto s =
      SendUpload(*generic_, header, reinterpret_cast<const std::byte*>(tensor.data().data()), 0,
                 static_cast<int64_t>(tensor.data().size()), &resp, options_.chunk_bytes, nullptr);
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::Tensor> Client::Download(const std::string& handle, const Progress& progress) {
  if (!peers_.empty()) {
    const int h = home_.load();
    return Noted(h, peers_[h].client->Download(handle, progress));
  }
  if (!setup_error_.ok()) return setup_error_;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::DownloadRequest req;
  req.set_handle(handle);
  req.set_chunk_bytes(options_.chunk_bytes);
  bool sent = false;
  auto next = [&](grpc::ByteBuffer* out) {
    if (sent) return false;
    sent = true;
    *out = Serialized(req);
    return true;
  };
  TensorReceiver receiver(true, progress);
  auto s = RunChunkedCall(*generic_, ctx, kDownloadMethod, next,
                          [&receiver](grpc::ByteBuffer& b) { return receiver(b); });
  if (!s.ok()) return s;
  if (auto c = receiver.Check(); !c.ok()) return c;
  return std::move(receiver.header());
}

namespace {

// Runs fn(k) for k = 0..p-1 at once (k = 0 on this thread); the first error.
template <class Fn>
absl::Status OnEveryLane(int p, Fn fn) {
  std::vector<absl::Status> results(p);
  std::vector<std::thread> threads;
  // The lanes' calls end by the caller's deadline too.
  const absl::Time deadline = t_deadline;
  for (int k = 1; k < p; ++k) {
    threads.emplace_back([&, k, deadline] {
      Client::Within within(deadline);
      results[k] = fn(k);
    });
  }
  results[0] = fn(0);
  for (auto& th : threads) th.join();
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Lane k's byte range [begin, end) of `size` bytes split over p lanes.
std::pair<int64_t, int64_t> PartOf(int64_t size, int p, int k) {
  const int64_t each = (size + p - 1) / p;
  const int64_t begin = std::min(size, k * each);
  return {begin, std::min(size, begin + each)};
}

}  // namespace

namespace {

// Where slice [r0, r1) of a view reaches in its storage, in elements: [lo, hi]. The view is
// `shape` and `strides` from element `offset`, its first dimension cut to [r0, r1).
struct Span {
  absl::int128 lo, hi;
};
Span SpanOf(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t offset,
            int64_t r0, int64_t r1) {
  const absl::int128 base = absl::int128(offset) + absl::int128(r0) * strides[0];
  Span span{base, base};
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t n = d == 0 ? r1 - r0 : shape[d];
    const absl::int128 reach = absl::int128(strides[d]) * (n - 1);
    if (reach < 0) {
      span.lo += reach;
    } else {
      span.hi += reach;
    }
  }
  return span;
}

}  // namespace

std::optional<absl::StatusOr<v1::Tensor>> Client::SlicedImpl(const v1::ComputeRequest& request,
                                                             const Bytes& bytes,
                                                             const OutputAllocator& allocate) {
  // Every input inline, with a known item size and a sane view; the output C-ordered (its
  // rows are then runs of its bytes), neither kept nor placed, and computed.
  if (request.inputs_size() == 0 || !request.output_region().empty() ||
      request.keep_output_resident() || request.plan_only() ||
      request.output_layout() != v1::OUTPUT_LAYOUT_CONTIGUOUS ||
      request.output_strides_size() > 0) {
    return std::nullopt;
  }
  int rank = 0;
  for (const v1::Tensor& t : request.inputs()) {
    if (!IsInline(t) || ItemBytes(t.dtype()) == 0) return std::nullopt;
    if (t.strides_size() != 0 && t.strides_size() != t.shape_size()) return std::nullopt;
    rank = std::max(rank, t.shape_size());
  }
  if (rank == 0) return std::nullopt;
  // The output's shape, by NumPy's broadcasting (anything else is left to the server to refuse).
  std::vector<int64_t> out_shape(static_cast<size_t>(rank), 1);
  for (const v1::Tensor& t : request.inputs()) {
    for (int d = 0; d < t.shape_size(); ++d) {
      const int64_t n = t.shape(d);
      int64_t& o = out_shape[static_cast<size_t>(rank - t.shape_size() + d)];
      if (n <= 0) return std::nullopt;
      if (n == o || n == 1) continue;
      if (o != 1) return std::nullopt;
      o = n;
    }
  }
  const int64_t rows = out_shape[0];
  if (rows < 2) return std::nullopt;

  // Each input is cut along the output's first dimension (it spans it) or sent whole with
  // every slice (it broadcasts along it): those must be small beside the rest.
  struct Input {
    bool cut;
    int64_t item;
    std::vector<int64_t> shape, strides;
  };
  std::vector<Input> inputs;
  int64_t cut_bytes = 0, whole_bytes = 0;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const v1::Tensor& t = request.inputs(i);
    Input in{t.shape_size() == rank && t.shape(0) == rows,
             ItemBytes(t.dtype()),
             {t.shape().begin(), t.shape().end()},
             {}};
    if (t.strides_size() != 0) {
      in.strides.assign(t.strides().begin(), t.strides().end());
    } else {
      in.strides.assign(in.shape.size(), 1);
      for (int d = static_cast<int>(in.shape.size()) - 2; d >= 0; --d) {
        in.strides[static_cast<size_t>(d)] =
            in.strides[static_cast<size_t>(d) + 1] * in.shape[static_cast<size_t>(d) + 1];
      }
    }
    (in.cut ? cut_bytes : whole_bytes) += bytes[static_cast<size_t>(i)].size;
    inputs.push_back(std::move(in));
  }
  const int64_t part = std::max<int64_t>(1, options_.slice_part_bytes);
  const int64_t k = std::clamp<int64_t>((cut_bytes + part - 1) / part, 2, rows);
  if (cut_bytes == 0 || whole_bytes * k > (cut_bytes + whole_bytes) / 8) return std::nullopt;

  // The slices: rows [r0, r1), each cut input's bytes only the storage its rows reach (which
  // must lie inside what the caller gave; overlapping reaches, as a transposed input's, would
  // send its bytes many times: such a request is not cut).
  struct Slice {
    int64_t r0, r1;
    v1::ComputeRequest request;
    Bytes bytes;
  };
  std::vector<Slice> slices(static_cast<size_t>(k));
  std::vector<int64_t> sent(inputs.size(), 0);
  for (int64_t j = 0; j < k; ++j) {
    Slice& sl = slices[static_cast<size_t>(j)];
    sl.r0 = rows * j / k;
    sl.r1 = rows * (j + 1) / k;
    CopyAllBut(request, {"inputs"}, &sl.request);
    for (int i = 0; i < request.inputs_size(); ++i) {
      const v1::Tensor& t = request.inputs(i);
      const Input& in = inputs[static_cast<size_t>(i)];
      const ExternalBytes& b = bytes[static_cast<size_t>(i)];
      v1::Tensor* m = sl.request.add_inputs();
      CopyAllBut(t, {"data", "storage_bytes"}, m);
      if (!in.cut) {
        sl.bytes.push_back(b);
        continue;
      }
      const Span span = SpanOf(in.shape, in.strides, t.offset(), sl.r0, sl.r1);
      if (span.lo < 0 || (span.hi + 1) * in.item > b.size) return std::nullopt;
      const int64_t lo = static_cast<int64_t>(span.lo);
      const int64_t n = static_cast<int64_t>(span.hi) - lo + 1;
      sent[static_cast<size_t>(i)] += n * in.item;
      m->set_shape(0, sl.r1 - sl.r0);
      m->clear_strides();
      for (int64_t st : in.strides) m->add_strides(st);
      m->set_offset(t.offset() + sl.r0 * in.strides[0] - lo);
      sl.bytes.push_back({static_cast<const std::byte*>(b.data) + lo * in.item, n * in.item});
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].cut && sent[i] > bytes[i].size + bytes[i].size / 4) return std::nullopt;
  }

  // The output: C-contiguous, so slice [r0, r1) is its rows' bytes. Its size is known from
  // the first reply (bytes per row); the memory comes from `allocate` or is the tensor's own.
  std::mutex mu;
  int64_t row_bytes = -1;
  std::byte* base = nullptr;
  std::string assembled;
  std::optional<v1::Tensor> first;
  absl::Status failed;
  std::atomic<int64_t> next{0};
  std::atomic<bool> stop{false};
  const int connections = std::max(1, options_.connections);
  std::vector<grpc::GenericStub*> stubs =
      connections > 1 ? Lanes(connections) : std::vector<grpc::GenericStub*>{generic_.get()};
  const int per = std::max(1, options_.slices_per_connection);
  const int workers = static_cast<int>(std::min<int64_t>(k, int64_t{connections} * per));
  Client::Within within(std::min(absl::Now() + options_.timeout, t_deadline));
  // Slice j on `stub`; false once a slice has failed (the first failure is kept).
  auto run = [&](int64_t j, grpc::GenericStub* stub) {
    Slice& sl = slices[static_cast<size_t>(j)];
    auto place = [&](int64_t n) -> std::byte* {
      std::lock_guard<std::mutex> lock(mu);
      const int64_t slice_rows = sl.r1 - sl.r0;
      if (row_bytes < 0) {
        if (n % slice_rows != 0) return nullptr;
        row_bytes = n / slice_rows;
        if (allocate) {
          base = allocate(row_bytes * rows);
        } else {
          assembled.resize(static_cast<size_t>(row_bytes * rows));
          base = reinterpret_cast<std::byte*>(assembled.data());
        }
      }
      if (base == nullptr || n != row_bytes * slice_rows) return nullptr;
      return base + sl.r0 * row_bytes;
    };
    absl::StatusOr<v1::Tensor> got = BesideImpl(sl.request, sl.bytes, place, stub);
    std::lock_guard<std::mutex> lock(mu);
    if (!got.ok()) {
      stop = true;
      if (failed.ok()) failed = got.status();
      return false;
    }
    if (j == 0) first = std::move(*got);
    return true;
  };
  // Lanes wait for their connections (LaneCall): they are taken once this client's own
  // channel is connected, so that a replica that is down fails the first slice at once (and
  // the call moves to another) rather than every slice waiting out its deadline.
  if (connections > 1 && channel_->GetState(false) != GRPC_CHANNEL_READY) {
    next = 1;
    if (!run(0, generic_.get())) return absl::StatusOr<v1::Tensor>(failed);
  }
  auto status = OnEveryLane(workers, [&](int w) -> absl::Status {
    grpc::GenericStub* stub = stubs[static_cast<size_t>(w % connections)];
    for (int64_t j = next++; j < k && !stop; j = next++) {
      if (!run(j, stub)) break;
    }
    return absl::OkStatus();
  });
  if (!failed.ok()) return absl::StatusOr<v1::Tensor>(failed);
  if (!status.ok()) return absl::StatusOr<v1::Tensor>(status);
  if (!first.has_value() || first->shape_size() == 0 || row_bytes < 0) {
    return absl::StatusOr<v1::Tensor>(absl::InternalError("a sliced call's output is missing"));
  }
  v1::Tensor out = std::move(*first);
  out.set_shape(0, rows);
  if (allocate) {
    out.set_storage_bytes(row_bytes * rows);
  } else {
    out.clear_storage_bytes();
    *out.mutable_data() = std::move(assembled);
  }
  return absl::StatusOr<v1::Tensor>(std::move(out));
}

absl::Status Client::UploadParts(const std::vector<std::string>& handles, const Bytes& bytes,
                                 int p) {
  std::vector<grpc::GenericStub*> lanes = Lanes(p);
  return OnEveryLane(p, [&](int k) {
    for (size_t j = 0; j < handles.size(); ++j) {
      auto [begin, end] = PartOf(bytes[j].size, p, k);
      if (begin >= end) continue;
      v1::UploadRequest h;
      h.mutable_header()->set_handle(handles[j]);
      h.mutable_header()->set_offset(begin);
      v1::UploadResponse r;
      auto s =
          SendUpload(*lanes[k], h, static_cast<const std::byte*>(bytes[j].data), begin, end, &r);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  });
}

absl::Status Client::DownloadParts(const std::string& handle, int64_t bytes, std::byte* dst,
                                   int p) {
  std::vector<grpc::GenericStub*> lanes = Lanes(p);
  return OnEveryLane(p, [&](int k) {
    auto [begin, end] = PartOf(bytes, p, k);
    if (begin >= end) return absl::OkStatus();
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    LaneCall(*lanes[k], ctx);
    v1::DownloadRequest req;
    req.set_handle(handle);
    req.set_offset(begin);
    req.set_length(end - begin);
    req.set_chunk_bytes(options_.chunk_bytes);
    bool sent = false;
    auto next = [&](grpc::ByteBuffer* m) {
      if (sent) return false;
      sent = true;
      *m = Serialized(req);
      return true;
    };
    TensorReceiver receiver(dst + begin, begin, end - begin);
    auto s = RunChunkedCall(*lanes[k], ctx, kDownloadMethod, next,
                            [&receiver](grpc::ByteBuffer& b) { return receiver(b); });
    if (!s.ok()) return s;
    return receiver.Check();
  });
}

absl::StatusOr<v1::UploadResponse> Client::UploadFrom(const v1::Tensor& tensor, ExternalBytes bytes,
                                                      int64_t ttl_seconds) {
  if (!peers_.empty()) {
    const int h = home_.load();
    return Noted(h, peers_[h].client->UploadFrom(tensor, bytes, ttl_seconds));
  }
  if (!setup_error_.ok()) return setup_error_;
  v1::UploadRequest header;
  v1::Tensor* t = header.mutable_header()->mutable_tensor();
  CopyAllBut(tensor, {"data"}, t);
  t->set_storage_bytes(bytes.size);
  header.mutable_header()->set_ttl_seconds(ttl_seconds);
  const auto* data = static_cast<const std::byte*>(bytes.data);
  v1::UploadResponse resp;
  if (options_.connections <= 1 || bytes.size < options_.spread_bytes) {
    if (auto s = SendUpload(*generic_, header, data, 0, bytes.size, &resp); !s.ok()) return s;
    return resp;
  }
  // Reserved (the header alone), then its parts over every connection.
  if (auto s = SendUpload(*generic_, header, nullptr, 0, 0, &resp); !s.ok()) return s;
  if (auto s = UploadParts({resp.tensor().handle()}, {bytes}, options_.connections); !s.ok()) {
    (void)Release({resp.tensor().handle()});
    return s;
  }
  resp.set_bytes_received(bytes.size);
  return resp;
}

absl::Status Client::DownloadInto(const std::string& handle, int64_t storage_bytes,
                                  std::byte* dst) {
  if (!peers_.empty()) {
    const int h = home_.load();
    return Noted(h, peers_[h].client->DownloadInto(handle, storage_bytes, dst));
  }
  if (!setup_error_.ok()) return setup_error_;
  const int p =
      options_.connections > 1 && storage_bytes >= options_.spread_bytes ? options_.connections : 1;
  return DownloadParts(handle, storage_bytes, dst, p);
}

absl::StatusOr<v1::Tensor> Client::ComputeSpread(const v1::ComputeRequest& request,
                                                 int connections) {
  const Bytes bytes = DataOf(request);
  return Route(request, bytes,
               [&](Client& c) { return c.SpreadImpl(request, bytes, connections, nullptr); });
}

absl::StatusOr<v1::Tensor> Client::SpreadImpl(const v1::ComputeRequest& request, const Bytes& bytes,
                                              int connections, const OutputAllocator& allocate) {
  if (!setup_error_.ok()) return setup_error_;
  const int p = std::max(1, connections);
  // Whatever this call made resident goes when it ends, however it ends.
  std::vector<std::string> made;
  struct Cleanup {
    Client* c;
    std::vector<std::string>* handles;
    ~Cleanup() {
      if (handles->empty()) return;
      // With a deadline of its own: the call's may have passed (that may be why it ends).
      const absl::Time previous = t_deadline;
      t_deadline = absl::Now() + absl::Seconds(5);
      (void)c->Release(*handles);
      t_deadline = previous;
    }
  } cleanup{this, &made};
  const int64_t ttl = std::max<int64_t>(60, absl::ToInt64Seconds(options_.timeout) + 60);

  // 1. A resident tensor reserved for each inline input (a header, no bytes yet).
  v1::ComputeRequest compute = HeaderOf(request, bytes);
  std::vector<int> inline_inputs;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const v1::Tensor& t = request.inputs(i);
    if (!IsInline(t)) continue;
    const int64_t size = bytes[i].size;
    v1::UploadRequest reserve;
    v1::Tensor* flat = reserve.mutable_header()->mutable_tensor();
    flat->set_dtype(t.dtype());
    const int64_t item = ItemBytes(t.dtype());
    flat->add_shape(item > 0 ? size / item : size);
    flat->set_storage_bytes(size);
    reserve.mutable_header()->set_ttl_seconds(ttl);
    v1::UploadResponse r;
    if (auto s = SendUpload(*generic_, reserve, nullptr, 0, 0, &r); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("input ", i, ": ", s.message()));
    }
    made.push_back(r.tensor().handle());
    v1::Tensor* in = compute.mutable_inputs(i);
    in->set_handle(r.tensor().handle());
    in->clear_storage_bytes();
    inline_inputs.push_back(i);
  }

  // 2. Every lane uploads its part of every input.
  {
    Bytes parts;
    for (int i : inline_inputs) parts.push_back(bytes[i]);
    if (auto s = UploadParts(made, parts, p); !s.ok()) return s;
  }

  // 3. One Compute on the resident inputs, its output kept resident.
  const bool keep = request.keep_output_resident();
  compute.set_keep_output_resident(true);
  if (!keep && compute.resident_ttl_seconds() == 0) compute.set_resident_ttl_seconds(ttl);
  v1::ComputeResponse resp;
  {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    if (grpc::Status s = stub_->Compute(&ctx, compute, &resp); !s.ok()) return FromGrpc(s);
  }
  if (keep) return std::move(*resp.mutable_output());
  made.push_back(resp.output().handle());

  // 4. Every lane downloads its part of the output into place.
  v1::Tensor out;
  CopyAllBut(resp.output(), {"handle", "storage_bytes", "data"}, &out);
  const int64_t out_bytes = resp.output().storage_bytes();
  auto download_into = [&](std::byte* dst) {
    return DownloadParts(resp.output().handle(), out_bytes, dst, p);
  };
  absl::Status downloaded;
  if (allocate) {
    std::byte* dst = allocate(out_bytes);
    if (dst == nullptr) return absl::ResourceExhaustedError("no memory for the output");
    out.set_storage_bytes(out_bytes);
    downloaded = download_into(dst);
  } else {
#if defined(__cpp_lib_string_resize_and_overwrite)
    // The downloads write the string's bytes themselves, each its own part, in parallel:
    // no zeroing pass over the whole output first.
    out.mutable_data()->resize_and_overwrite(
        static_cast<size_t>(out_bytes), [&](char* p, size_t n) {
          downloaded = download_into(reinterpret_cast<std::byte*>(p));
          return downloaded.ok() ? n : 0;
        });
#else
    out.mutable_data()->resize(static_cast<size_t>(out_bytes));
    downloaded = download_into(reinterpret_cast<std::byte*>(out.mutable_data()->data()));
#endif
  }
  if (!downloaded.ok()) return downloaded;
  return out;
}

absl::StatusOr<int64_t> Client::Release(const std::vector<std::string>& handles) {
  if (!peers_.empty()) {
    const int h = home_.load();
    return Noted(h, peers_[h].client->Release(handles));
  }
  if (!setup_error_.ok()) return setup_error_;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::ReleaseRequest req;
  for (const std::string& h : handles) req.add_handles(h);
  v1::ReleaseResponse resp;
  if (grpc::Status s = stub_->Release(&ctx, req, &resp); !s.ok()) return FromGrpc(s);
  return resp.released_bytes();
}

Client::~Client() {
  if (region_socket_ >= 0) close(region_socket_);
}

absl::StatusOr<std::string> Client::SendRegionFd(int fd) {
  std::lock_guard<std::mutex> lock(region_mu_);
  auto connect_socket = [this]() -> absl::Status {
    auto info = ServerInfo();
    if (!info.ok()) return info.status();
    const std::string& address = info->region_socket();
    if (address.empty()) {
      return absl::FailedPreconditionError("the server has shared-memory regions off");
    }
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (address.size() >= sizeof(sa.sun_path)) {
      return absl::InternalError("the server's region socket name is too long");
    }
    std::memcpy(sa.sun_path, address.data(), address.size());
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
    if (address[0] == '@') {
      sa.sun_path[0] = '\0';
    } else {
      len += 1;
    }
    const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
      const std::string why = std::strerror(errno);
      if (s >= 0) close(s);
      return absl::FailedPreconditionError(absl::StrCat("cannot reach the server's region socket ",
                                                        address, " (", why,
                                                        "): is the server on this host?"));
    }
    // A server answers at once; one that does not within 10 s is frozen or gone.
    timeval within{10, 0};
    (void)setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &within, sizeof within);
    region_socket_ = s;
    return absl::OkStatus();
  };
  std::string r;
  // The server closes a connection that holds no region and no ticket once it has been idle a
  // while: a closed one is opened again, once.
  for (int attempt = 0; attempt < 2 && r.empty(); ++attempt) {
    if (region_socket_ >= 0 && attempt > 0) {
      close(region_socket_);
      region_socket_ = -1;
    }
    if (region_socket_ < 0) {
      if (absl::Status s = connect_socket(); !s.ok()) return s;
    }
    // A connection the server closed may still hold its one reply (a refusal) to read.
    static constexpr char kRegister[] = "register";
    if (SendWithFds(region_socket_, kRegister, sizeof(kRegister) - 1, &fd, 1) < 0 &&
        errno != EPIPE && errno != ECONNRESET) {
      return absl::UnavailableError(absl::StrCat("region socket: ", std::strerror(errno)));
    }
    char reply[512];
    const ssize_t n = recv(region_socket_, reply, sizeof(reply), 0);
    if (n > 0) r.assign(reply, static_cast<size_t>(n));
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      close(region_socket_);  // a late reply would answer the next request
      region_socket_ = -1;
      return absl::UnavailableError("region socket: the server did not answer within 10 s");
    }
  }
  if (r.empty()) return absl::UnavailableError("region socket closed by the server");
  if (r.rfind("ticket ", 0) != 0) return absl::InvalidArgumentError(r);
  return r.substr(7, r.find(' ', 7) - 7);
}

absl::StatusOr<std::unique_ptr<SharedRegion>> Client::CreateRegion(int64_t bytes,
                                                                   const std::string& name) {
  if (!peers_.empty()) {
    const int h = home_.load();
    return Noted(h, peers_[h].client->CreateRegion(bytes, name));
  }
  if (bytes <= 0) return absl::InvalidArgumentError("a region needs at least one byte");
  const int fd =
      memfd_create(name.empty() ? "tensorcompute" : name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  void* p = MAP_FAILED;
  if (ftruncate(fd, bytes) == 0) {
    p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("cannot map ", bytes, " bytes: ", why));
  }
  std::unique_ptr<SharedRegion> region(new SharedRegion(this, static_cast<std::byte*>(p), bytes));
  auto ticket = SendRegionFd(fd);
  close(fd);
  if (!ticket.ok()) return ticket.status();
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::RegisterRegionRequest req;
  req.set_ticket(*ticket);
  req.set_name(name);
  v1::RegionInfo info;
  if (grpc::Status s = stub_->RegisterRegion(&ctx, req, &info); !s.ok()) return FromGrpc(s);
  region->id_ = info.region();
  return region;
}

SharedRegion::~SharedRegion() {
  if (!id_.empty()) {
    grpc::ClientContext ctx;
    client_->SetDeadline(ctx);
    v1::UnregisterRegionRequest req;
    req.set_region(id_);
    v1::UnregisterRegionResponse resp;
    (void)client_->stub_->UnregisterRegion(&ctx, req, &resp);
  }
  munmap(data_, static_cast<size_t>(bytes_));
}

v1::Tensor SharedRegion::Input(v1::DType dtype, const std::vector<int64_t>& shape,
                               int64_t offset) const {
  int64_t n = ItemBytes(dtype);
  for (int64_t d : shape) n *= d;
  v1::Tensor t;
  t.set_dtype(dtype);
  t.mutable_shape()->Assign(shape.begin(), shape.end());
  t.set_region(id_);
  t.set_region_offset(offset);
  t.set_storage_bytes(n);
  return t;
}

absl::StatusOr<v1::ServerInfoResponse> Client::ServerInfo() {
  if (!peers_.empty()) {
    const int h = home_.load();
    return Noted(h, peers_[h].client->ServerInfo());
  }
  if (!setup_error_.ok()) return setup_error_;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::ServerInfoResponse resp;
  if (grpc::Status s = stub_->ServerInfo(&ctx, v1::ServerInfoRequest(), &resp); !s.ok()) {
    return FromGrpc(s);
  }
  return resp;
}

}  // namespace tc::client
