#include "client/client.h"

#include <chrono>

namespace tc::client {

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

Client::Client(const std::string& target, ClientOptions options) : options_(options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  stub_ = v1::TensorService::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
}

void Client::SetDeadline(grpc::ClientContext& ctx) const {
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options_.timeout));
}

absl::StatusOr<std::string> Client::Health(const std::string& service) {
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  if (grpc::Status s = health_->Check(&ctx, req, &resp); !s.ok()) return FromGrpc(s);
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

absl::StatusOr<v1::ListOpsResponse> Client::ListOps() {
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::ListOpsResponse resp;
  if (grpc::Status s = stub_->ListOps(&ctx, v1::ListOpsRequest(), &resp); !s.ok()) {
    return FromGrpc(s);
  }
  return resp;
}

absl::StatusOr<v1::Tensor> Client::Compute(const v1::ComputeRequest& request) {
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

}  // namespace tc::client
