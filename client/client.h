// The thin C++ client: one channel, reused for every call, with a deadline on each.
#pragma once

#include <atomic>
#include <functional>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "tensorcompute/v1/tensor_service.grpc.pb.h"

namespace tc::client {

namespace v1 = ::tensorcompute::v1;

struct ClientOptions {
  absl::Duration timeout = absl::Seconds(60);
  // Largest message sent or received.
  int max_message_bytes = 256 << 20;
  // TLS: the CA bundle (PEM file) that signed the server's certificate turns it on; a client
  // certificate and key (PEM files) for servers that require them (mutual TLS). Each may also
  // be the PEM text itself instead of a path (it begins with "-----BEGIN").
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Name to check the server's certificate against, when it is not the target's host.
  std::string tls_server_name;
  // Bearer token sent with every call ("authorization: Bearer <token>").
  std::string token;
  // Sent with every call as metadata "tc-session" (the server keeps one session's resident
  // tensors on one device); empty: a random id of this client's own.
  std::string session;
  // Large tensors: a Compute whose inline inputs add up to at least `spread_bytes` travels
  // over `connections` connections at once (each uploads its part of every input into a
  // resident tensor, one Compute runs on them, each downloads its part of the output). 1 keeps
  // every request on one connection.
  int connections = 8;
  int64_t spread_bytes = int64_t{32} << 20;
  // Pipelined slices: a Compute whose inline inputs add up to at least `slice_bytes` and whose
  // output can be cut by its first dimension (each input either cut along it, or small and
  // sent whole with each slice) goes as slices of about `slice_part_bytes` of input, each a
  // Compute of its own, `slices_per_connection` in flight on each of `connections`
  // connections: one slice's inputs go up while another computes and a third's output comes
  // down. Requests that cannot be cut so take the spread or the single-message road. 0: never.
  int64_t slice_bytes = int64_t{16} << 20;
  int64_t slice_part_bytes = int64_t{4} << 20;
  int slices_per_connection = 3;
  // Chunk size of streamed data.
  int64_t chunk_bytes = int64_t{1} << 20;
  // Stateless Computes (inline inputs, the output returned, however they travel: one
  // message, a stream, or spread over connections) and ListOps are tried up to
  // `retry_attempts` times in all where their server fails as a gone one does (UNAVAILABLE: a
  // draining server, a refused or lost connection, a balancer's 502; CANCELLED; a stream a
  // balancer reset; no answer within the try's deadline). Several replicas (a target that
  // lists them or a DNS name with several addresses): such calls go to the replicas in turn
  // (`spread_replicas`; false: to the home replica while it answers), each retry to another.
  // Everything that keeps state on a server (uploads, resident tensors, regions, ServerInfo,
  // Health) goes to one replica, this client's home, picked at random; when home fails, the
  // next stateful call goes to another (Rehome).
  int retry_attempts = 4;
  bool spread_replicas = true;
  // The home replica, as replicas() writes it; empty: one at random.
  std::string home;
  // A frozen server (stopped, or a host gone without closing its connections): each
  // connection is pinged every `keepalive` (idle or not) and given up, failing its calls
  // UNAVAILABLE, when a ping is not answered within `keepalive_timeout`. Zero: no pings.
  absl::Duration keepalive = absl::Seconds(1);
  absl::Duration keepalive_timeout = absl::Seconds(2);
  // Each try of a stateless call ends by `try_timeout` plus the time its inline bytes take at
  // `try_bytes_per_second` (a balancer in front answers pings for a replica behind it that
  // froze); zero: each try may take the whole `timeout`.
  absl::Duration try_timeout = absl::Seconds(5);
  double try_bytes_per_second = 10e6;
  // More gRPC channel arguments for the client's connections (name, integer value), set
  // after the client's own: e.g. {"grpc.http2.lookahead_bytes", 8 << 20}.
  std::vector<std::pair<std::string, int>> grpc_args;
};

class Client;

// A shared-memory region registered with a server on this host (Client::CreateRegion): a
// memfd mapped here and in the server, so that tensors placed in it travel as metadata only.
// Unregistered and unmapped when destroyed; it must not outlive its client.
class SharedRegion {
 public:
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  std::byte* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  // The server's name for it (Tensor.region, ComputeRequest.output_region).
  const std::string& id() const { return id_; }
  // An input naming a C-contiguous tensor at byte `offset` of this region.
  v1::Tensor Input(v1::DType dtype, const std::vector<int64_t>& shape, int64_t offset = 0) const;

 private:
  friend class Client;
  SharedRegion(Client* client, std::byte* data, int64_t bytes)
      : client_(client), data_(data), bytes_(bytes) {}
  Client* client_;
  std::byte* data_;
  int64_t bytes_;
  std::string id_;
};

class Client {
 public:
  // Inline bytes that live in the caller's memory rather than in a Tensor's data field.
  struct ExternalBytes {
    const void* data = nullptr;
    int64_t size = 0;
  };
  // `target`: "host:port", or any gRPC target such as "dns:///name:port". A TLS file that
  // cannot be read leaves the client failing every call with its reason.
  explicit Client(const std::string& target, ClientOptions options = {});

  // Serving status of `service` ("" for the whole server): "SERVING", "NOT_SERVING", ...
  absl::StatusOr<std::string> Health(const std::string& service = "");
  absl::StatusOr<v1::ListOpsResponse> ListOps();
  // Runs one op. Large inline inputs are spread over several connections (see
  // ClientOptions::connections); a request larger than half the message limit otherwise goes
  // through ComputeStream in chunks. Either way, transparently.
  absl::StatusOr<v1::Tensor> Compute(const v1::ComputeRequest& request);
  // Where an output's bytes go: memory for `bytes` bytes (null: RESOURCE_EXHAUSTED).
  using OutputAllocator = std::function<std::byte*(int64_t bytes)>;
  // Compute for inputs whose bytes are not copied into the request: input i's storage is
  // bytes[i] (its data field left empty; entries for handles and regions are ignored). The
  // memory must stay unchanged until the call returns. Large ones are spread or streamed as
  // in Compute, straight from that memory. With `allocate`, the output's storage bytes are
  // written into the memory it returns (the returned Tensor then has no data); a large
  // output is written there by several threads at once, untouched before. `allocate` may be
  // called on one of gRPC's threads, as the reply arrives and before the call's status is
  // known, and again on a retry: it must not block or call this client.
  absl::StatusOr<v1::Tensor> ComputeFrom(const v1::ComputeRequest& request,
                                         const std::vector<ExternalBytes>& bytes,
                                         const OutputAllocator& allocate = nullptr);
  absl::StatusOr<v1::Tensor> Compute(absl::string_view op, std::vector<v1::Tensor> inputs,
                                     std::vector<std::pair<std::string, v1::Attribute>> attrs = {});
  // Compute for tensors of any size over one stream: every input with inline data goes in
  // chunks of `chunk_bytes` (0: the options') after the header, and the output comes back the
  // same way (assembled here), or as a handle when request.keep_output_resident() is set.
  absl::StatusOr<v1::Tensor> ComputeStreamed(const v1::ComputeRequest& request,
                                             int64_t chunk_bytes = 0);
  // The same result through `connections` connections at once: the inline inputs uploaded in
  // parts in parallel, one Compute on them, the output downloaded in parts in parallel.
  absl::StatusOr<v1::Tensor> ComputeSpread(const v1::ComputeRequest& request, int connections);
  // Called as bytes go or arrive: (bytes so far, total).
  using Progress = std::function<void(int64_t, int64_t)>;
  // Stores `tensor` (its data sent in chunks) on the server; the reply's tensor has the handle.
  absl::StatusOr<v1::UploadResponse> Upload(const v1::Tensor& tensor, int64_t ttl_seconds = 0,
                                            int64_t chunk_bytes = int64_t{1} << 20,
                                            const Progress& progress = nullptr);
  // Upload with the header's other fields (ttl_seconds, device) as `options` gives them; its
  // tensor is ignored.
  absl::StatusOr<v1::UploadResponse> UploadWith(const v1::UploadHeader& options,
                                                const v1::Tensor& tensor);
  // Upload of a tensor whose storage is `bytes` in the caller's memory (its data field
  // ignored), spread over the connections from ClientOptions::spread_bytes.
  absl::StatusOr<v1::UploadResponse> UploadFrom(const v1::Tensor& tensor, ExternalBytes bytes,
                                                int64_t ttl_seconds = 0);
  // A resident tensor's storage bytes [0, storage_bytes) into `dst`, spread over the
  // connections from ClientOptions::spread_bytes.
  absl::Status DownloadInto(const std::string& handle, int64_t storage_bytes, std::byte* dst);
  // A resident tensor's metadata and bytes.
  absl::StatusOr<v1::Tensor> Download(const std::string& handle,
                                      const Progress& progress = nullptr);
  // Frees resident tensors; returns the bytes released.
  absl::StatusOr<int64_t> Release(const std::vector<std::string>& handles);
  absl::StatusOr<v1::ServerInfoResponse> ServerInfo();

  // A shared-memory region of `bytes` registered with the server, which must run on this
  // host with regions on (FAILED_PRECONDITION otherwise). Inputs placed in it
  // (SharedRegion::Input) and outputs written to it (ComputeRequest.output_region) cross no
  // socket. Regions end with the client.
  absl::StatusOr<std::unique_ptr<SharedRegion>> CreateRegion(int64_t bytes,
                                                             const std::string& name = "");
  ~Client();
  // The replicas the target names (one channel target each) and the one stateful calls go to.
  const std::vector<std::string>& replicas() const { return replicas_; }
  const std::string& home() const;
  // Makes `replica` (one of replicas(); empty: the next one that has answered lately) the
  // home of stateful calls from now on, and returns it. Tensors kept on the old home stay
  // there; their handles answer NOT_FOUND elsewhere.
  absl::StatusOr<std::string> Rehome(const std::string& replica = "");

  // While one lives, every call this thread makes through any Client (and the transfer
  // threads such a call starts) ends by `deadline` at the latest.
  class Within {
   public:
    explicit Within(absl::Time deadline);
    ~Within();
    Within(const Within&) = delete;
    Within& operator=(const Within&) = delete;

   private:
    absl::Time previous_;
  };

 private:
  friend class SharedRegion;
  using Bytes = std::vector<ExternalBytes>;
  static Bytes DataOf(const v1::ComputeRequest& request);
  absl::StatusOr<v1::Tensor> Dispatch(const v1::ComputeRequest& request, const Bytes& bytes,
                                      const v1::ComputeRequest* unary,
                                      const OutputAllocator& allocate);
  // One try of Dispatch on this client's own server.
  absl::StatusOr<v1::Tensor> DispatchOnce(const v1::ComputeRequest& request, const Bytes& bytes,
                                          const v1::ComputeRequest* unary,
                                          const OutputAllocator& allocate);
  absl::StatusOr<v1::Tensor> StreamedImpl(const v1::ComputeRequest& request, const Bytes& bytes,
                                          int64_t chunk_bytes, const OutputAllocator& allocate);
  // One Compute message whose inline inputs' bytes go as slices of `bytes` (never copied) and
  // whose output's bytes are copied once, from the received slices to where they go.
  absl::StatusOr<v1::Tensor> BesideImpl(const v1::ComputeRequest& request, const Bytes& bytes,
                                        const OutputAllocator& allocate,
                                        grpc::GenericStub* stub = nullptr);
  // The request as pipelined slices (ClientOptions::slice_bytes); nullopt where it cannot be
  // cut by its output's first dimension.
  std::optional<absl::StatusOr<v1::Tensor>> SlicedImpl(const v1::ComputeRequest& request,
                                                       const Bytes& bytes,
                                                       const OutputAllocator& allocate);
  absl::StatusOr<v1::Tensor> SpreadImpl(const v1::ComputeRequest& request, const Bytes& bytes,
                                        int connections, const OutputAllocator& allocate);
  // Every lane uploads its part of each of bytes[j] into resident tensor handles[j].
  absl::Status UploadParts(const std::vector<std::string>& handles, const Bytes& bytes, int p);
  // Every lane downloads its part of a resident tensor's first `bytes` bytes into dst.
  absl::Status DownloadParts(const std::string& handle, int64_t bytes, std::byte* dst, int p);
  // The generic stubs of `n` connections of their own (made on first use).
  std::vector<grpc::GenericStub*> Lanes(int n);
  // Sends [begin, end) of `data` (a tensor's storage) after `header`, in chunks of
  // `chunk_bytes` (0: the options'), on `stub`.
  absl::Status SendUpload(grpc::GenericStub& stub, const v1::UploadRequest& header,
                          const std::byte* data, int64_t begin, int64_t end,
                          v1::UploadResponse* response, int64_t chunk_bytes = 0,
                          const Progress& progress = nullptr);
  // Sends a memfd over the server's region socket (connected on first use); the ticket.
  absl::StatusOr<std::string> SendRegionFd(int fd);
  int region_socket_ = -1;
  std::mutex region_mu_;

  // The deadline and the token.
  void SetDeadline(grpc::ClientContext& ctx) const;
  // Marks a call on one of the spread lanes (not the home channel) to wait for its connection.
  void LaneCall(const grpc::GenericStub& stub, grpc::ClientContext& ctx) const;
  absl::Status setup_error_;

  ClientOptions options_;
  // Random, sent with every call as metadata "tc-session".
  std::string session_;
  std::string target_;
  std::shared_ptr<grpc::ChannelCredentials> creds_;
  grpc::ChannelArguments args_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> generic_;
  std::mutex lanes_mu_;
  std::vector<std::unique_ptr<grpc::GenericStub>> lanes_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::vector<std::string> replicas_;
  // Several replicas: a client of each (made at construction, connecting on first use), the
  // index of the home one, and how each answered lately. Empty where the target names one.
  struct Peer {
    std::unique_ptr<Client> client;
    int failures = 0;
    absl::Time down_until = absl::InfinitePast();
  };
  std::vector<Peer> peers_;
  std::atomic<int> home_{0};
  std::atomic<uint64_t> turn_{0};
  std::mutex peers_mu_;
  Client& Home() const { return *peers_[home_.load()].client; }
  // The peer the next try goes to, avoiding those in `tried` while others are left.
  int Pick(const std::vector<int>& tried);
  void PeerFailed(int i);
  void PeerAnswered(int i);
  // `r`, the outcome of a stateful call on peer i; UNAVAILABLE moves the home on.
  static const absl::Status& StatusOf(const absl::Status& s) { return s; }
  template <class T>
  static const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
    return s.status();
  }
  template <class R>
  R Noted(int i, R r) {
    if (StatusOf(r).code() == absl::StatusCode::kUnavailable) PeerFailed(i);
    return r;
  }
  // fn(peer) on one replica after another until one answers (see retry_attempts).
  template <class T, class Fn>
  absl::StatusOr<T> OnReplicas(int64_t bytes, Fn fn);
  // fn(client) where `request`'s state is: stateless, OnReplicas; stateful, on home, once.
  template <class Fn>
  absl::StatusOr<v1::Tensor> Route(const v1::ComputeRequest& request, const Bytes& bytes, Fn fn);
};

// grpc::Status -> absl::Status (the codes are the same numbers).
absl::Status FromGrpc(const grpc::Status& s);

}  // namespace tc::client
