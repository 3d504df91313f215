#include "server/service.h"

#include "absl/strings/str_cat.h"
#include "server/codec.h"
#include "server/grpc_status.h"

namespace tc::server {

grpc::ServerUnaryReactor* TensorServiceImpl::Compute(grpc::CallbackServerContext* ctx,
                                                     const v1::ComputeRequest* request,
                                                     v1::ComputeResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // `request` and `response` stay valid until Finish.
  request_pool_->Schedule([this, ctx, reactor, request, response] {
    if (ctx->IsCancelled()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled before it ran"));
      return;
    }
    reactor->Finish(ToGrpcStatus(RunCompute(*request, response)));
  });
  return reactor;
}

absl::Status TensorServiceImpl::RunCompute(const v1::ComputeRequest& request,
                                           v1::ComputeResponse* response) {
  // The op first: "unknown op" is the more useful message when the inputs are wrong too.
  if (auto op = LookupOp(request.op()); !op.ok()) return op.status();
  auto inputs = DecodeInputs(request.inputs());
  if (!inputs.ok()) return inputs.status();
  auto attrs = DecodeAttributes(request.attributes());
  if (!attrs.ok()) return attrs.status();
  auto output = DecodeOutputOptions(request);
  if (!output.ok()) return output.status();
  auto prepared = PrepareOp(request.op(), inputs->views, *attrs, *output);
  if (!prepared.ok()) return prepared.status();
  const Plan& plan = prepared->plan;
  if (plan.out_storage_bytes > options_.max_response_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the result of '", request.op(), "' would be ", ShapeToString(plan.out_shape), " ",
        DTypeName(plan.out_dtype), ", ", plan.out_storage_bytes,
        " bytes, over this server's limit of ", options_.max_response_bytes,
        " bytes for one response"));
  }
  std::byte* out = PrepareOutput(plan, response->mutable_output());
  return backend_->Run(*prepared, inputs->views, out);
}

grpc::ServerUnaryReactor* TensorServiceImpl::ListOps(grpc::CallbackServerContext* ctx,
                                                     const v1::ListOpsRequest* /*request*/,
                                                     v1::ListOpsResponse* response) {
  for (const CatalogEntry& e : Catalog()) {
    v1::OpInfo* info = response->add_ops();
    info->set_name(e.spec.name);
    info->set_arity(e.spec.arity);
    info->set_description(e.spec.description);
    for (DType t : e.spec.dtypes) info->add_dtypes(DTypeToProto(t));
    for (const AttrSpec& a : e.spec.attrs) {
      v1::AttributeInfo* ai = info->add_attributes();
      ai->set_name(a.name);
      ai->set_type(std::string(AttrTypeName(a.type)));
      ai->set_required(a.required);
      ai->set_description(a.description);
      if (!a.required) ai->set_default_value(AttrValueToString(a.default_value));
    }
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tc::server
