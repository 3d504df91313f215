#include "client/client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tc::client {

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Client::Client(const std::string& target, ClientOptions options) : options_(options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
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
  channel_ = grpc::CreateCustomChannel(target, creds, args);
  stub_ = v1::TensorService::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
}

void Client::SetDeadline(grpc::ClientContext& ctx) const {
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options_.timeout));
  if (!options_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.token);
}

absl::StatusOr<std::string> Client::Health(const std::string& service) {
  if (!setup_error_.ok()) return setup_error_;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  if (grpc::Status s = health_->Check(&ctx, req, &resp); !s.ok()) return FromGrpc(s);
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

absl::StatusOr<v1::ListOpsResponse> Client::ListOps() {
  if (!setup_error_.ok()) return setup_error_;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::ListOpsResponse resp;
  if (grpc::Status s = stub_->ListOps(&ctx, v1::ListOpsRequest(), &resp); !s.ok()) {
    return FromGrpc(s);
  }
  return resp;
}

absl::StatusOr<v1::Tensor> Client::Compute(const v1::ComputeRequest& request) {
  // Too large for one message: the same request in chunks.
  if (static_cast<int64_t>(request.ByteSizeLong()) > options_.max_message_bytes / 2) {
    return ComputeStreamed(request);
  }
  if (!setup_error_.ok()) return setup_error_;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::ComputeResponse resp;
  if (grpc::Status s = stub_->Compute(&ctx, request, &resp); !s.ok()) return FromGrpc(s);
  return std::move(*resp.mutable_output());
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

namespace {

// Reads a TensorStreamMessage stream into one tensor: the header, then its chunks in order.
template <class Reader>
absl::StatusOr<v1::Tensor> ReadTensorStream(Reader& reader,
                                            const Client::Progress& progress = nullptr) {
  v1::TensorStreamMessage msg;
  v1::Tensor out;
  bool have_header = false;
  int64_t begin = 0;
  while (reader.Read(&msg)) {
    if (msg.has_header()) {
      out = std::move(*msg.mutable_header());
      have_header = true;
      continue;
    }
    if (!have_header) return absl::InternalError("server sent a chunk before the header");
    std::string* data = out.mutable_data();
    if (data->empty()) {
      data->reserve(static_cast<size_t>(out.storage_bytes()));
      begin = msg.chunk().offset();
    }
    if (msg.chunk().offset() != begin + static_cast<int64_t>(data->size())) {
      return absl::InternalError("server sent chunks out of order");
    }
    data->append(msg.chunk().data());
    if (progress) progress(static_cast<int64_t>(data->size()), out.storage_bytes());
  }
  if (!have_header) return absl::InternalError("server sent no header");
  return out;
}

}  // namespace

absl::StatusOr<v1::Tensor> Client::ComputeStreamed(const v1::ComputeRequest& request,
                                                   int64_t chunk_bytes) {
  if (!setup_error_.ok()) return setup_error_;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  auto stream = stub_->ComputeStream(&ctx);
  v1::ComputeStreamRequest header;
  v1::ComputeRequest* h = header.mutable_header();
  *h = request;
  for (v1::Tensor& t : *h->mutable_inputs()) {
    if (t.handle().empty()) {
      t.set_storage_bytes(static_cast<int64_t>(t.data().size()));
      t.clear_data();
    }
  }
  bool ok = stream->Write(header);
  for (int i = 0; ok && i < request.inputs_size(); ++i) {
    const std::string& data = request.inputs(i).data();
    if (!request.inputs(i).handle().empty()) continue;
    for (size_t at = 0; ok && at < data.size(); at += static_cast<size_t>(chunk_bytes)) {
      v1::ComputeStreamRequest m;
      v1::DataChunk* c = m.mutable_chunk();
      c->set_tensor(i);
      c->set_offset(static_cast<int64_t>(at));
      c->set_data(data.substr(at, static_cast<size_t>(chunk_bytes)));
      ok = stream->Write(m);
    }
  }
  stream->WritesDone();
  auto out = ReadTensorStream(*stream);
  if (grpc::Status s = stream->Finish(); !s.ok()) return FromGrpc(s);
  return out;
}

absl::StatusOr<v1::UploadResponse> Client::Upload(const v1::Tensor& tensor, int64_t ttl_seconds,
                                                  int64_t chunk_bytes, const Progress& progress) {
  if (!setup_error_.ok()) return setup_error_;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::UploadResponse resp;
  auto stream = stub_->Upload(&ctx, &resp);
  v1::UploadRequest header;
  v1::Tensor* t = header.mutable_header()->mutable_tensor();
  *t = tensor;
  t->clear_data();
  t->set_storage_bytes(static_cast<int64_t>(tensor.data().size()));
  header.mutable_header()->set_ttl_seconds(ttl_seconds);
  bool ok = stream->Write(header);
  const std::string& data = tensor.data();
  for (size_t at = 0; ok && at < data.size(); at += static_cast<size_t>(chunk_bytes)) {
    v1::UploadRequest m;
    m.mutable_chunk()->set_offset(static_cast<int64_t>(at));
    m.mutable_chunk()->set_data(data.substr(at, static_cast<size_t>(chunk_bytes)));
    ok = stream->Write(m);
    if (progress) {
      progress(std::min<int64_t>(at + chunk_bytes, data.size()), static_cast<int64_t>(data.size()));
    }
  }
  stream->WritesDone();
  if (grpc::Status s = stream->Finish(); !s.ok()) return FromGrpc(s);
  return resp;
}

absl::StatusOr<v1::Tensor> Client::Download(const std::string& handle, const Progress& progress) {
  if (!setup_error_.ok()) return setup_error_;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::DownloadRequest req;
  req.set_handle(handle);
  auto reader = stub_->Download(&ctx, req);
  auto out = ReadTensorStream(*reader, progress);
  if (grpc::Status s = reader->Finish(); !s.ok()) return FromGrpc(s);
  return out;
}

absl::StatusOr<int64_t> Client::Release(const std::vector<std::string>& handles) {
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
  if (region_socket_ < 0) {
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
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot reach the server's region socket ", address, " (", why,
          "): is the server on this host?"));
    }
    region_socket_ = s;
  }
  char text[] = "register";
  iovec iov{text, sizeof(text) - 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(region_socket_, &msg, MSG_NOSIGNAL) < 0) {
    return absl::UnavailableError(absl::StrCat("region socket: ", std::strerror(errno)));
  }
  char reply[512];
  const ssize_t n = recv(region_socket_, reply, sizeof(reply), 0);
  if (n <= 0) return absl::UnavailableError("region socket closed by the server");
  const std::string r(reply, static_cast<size_t>(n));
  if (r.rfind("ticket ", 0) != 0) return absl::InvalidArgumentError(r);
  return r.substr(7, r.find(' ', 7) - 7);
}

absl::StatusOr<std::unique_ptr<SharedRegion>> Client::CreateRegion(int64_t bytes,
                                                                   const std::string& name) {
  if (bytes <= 0) return absl::InvalidArgumentError("a region needs at least one byte");
  const int fd = memfd_create(name.empty() ? "tensorcompute" : name.c_str(),
                              MFD_CLOEXEC | MFD_ALLOW_SEALING);
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
  std::unique_ptr<SharedRegion> region(
      new SharedRegion(this, static_cast<std::byte*>(p), bytes));
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
  static constexpr int kItem[] = {0, 1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  int64_t n = dtype > 0 && dtype < static_cast<int>(std::size(kItem)) ? kItem[dtype] : 0;
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
