// Shared-memory regions: RegisterRegion (claiming a ticket from the region socket),
// UnregisterRegion and ListRegions. Each acts only on the caller's own regions.
#include "absl/strings/str_cat.h"
#include "server/calls/call.h"
#include "server/data/regions.h"
#include "server/v1/service.h"
#include "util/thread_pool.h"

namespace tc::server {

namespace {

void SetRegionInfo(const Region& r, v1::RegionInfo* info) {
  info->set_region(r.id);
  info->set_bytes(r.bytes);
  info->set_name(r.name);
  info->set_writable(r.writable);
}

absl::Status RegionsOff() {
  return absl::FailedPreconditionError(
      "shared-memory regions are off on this server (--region_socket=off)");
}

}  // namespace

grpc::ServerUnaryReactor* TensorServiceImpl::RegisterRegion(
    grpc::CallbackServerContext* ctx, const v1::RegisterRegionRequest* request,
    v1::RegionInfo* response) {
  auto call = std::make_shared<Call>(&env_, ctx->DefaultReactor(), "RegisterRegion", "");
  auto id = call->AdmitCaller(*ctx);
  if (!id) return call->reactor;
  if (env_.regions == nullptr || env_.regions->address().empty()) {
    call->Finish(RegionsOff());
    return call->reactor;
  }
  if (request->name().size() > 256) {
    call->Finish(absl::InvalidArgumentError("a region's name is at most 256 bytes"));
    return call->reactor;
  }
  // Pinning a large mapping for the GPU takes milliseconds: on the pool.
  env_.pool->Schedule([this, request, response, call, owner = *std::move(id)] {
    absl::Status status;
    {
      auto r = env_.regions->Claim(owner, request->ticket(), request->name());
      status = r.status();
      if (r.ok()) SetRegionInfo(**r, response);
    }
    // The region let go before the reply: an UnregisterRegion the caller sends as soon as it
    // has the reply then leaves no reference here that would keep its bytes counted.
    call->Finish(status);
  });
  return call->reactor;
}

grpc::ServerUnaryReactor* TensorServiceImpl::UnregisterRegion(
    grpc::CallbackServerContext* ctx, const v1::UnregisterRegionRequest* request,
    v1::UnregisterRegionResponse* /*response*/) {
  Call call{&env_, ctx->DefaultReactor(), "UnregisterRegion", ""};
  auto id = call.AdmitCaller(*ctx);
  if (!id) return call.reactor;
  if (env_.regions == nullptr) {
    call.Finish(RegionsOff());
  } else {
    call.Finish(env_.regions->Unregister(*id, request->region()));
  }
  return call.reactor;
}

grpc::ServerUnaryReactor* TensorServiceImpl::ListRegions(grpc::CallbackServerContext* ctx,
                                                         const v1::ListRegionsRequest* /*request*/,
                                                         v1::ListRegionsResponse* response) {
  Call call{&env_, ctx->DefaultReactor(), "ListRegions", ""};
  auto id = call.AdmitCaller(*ctx);
  if (!id) return call.reactor;
  if (env_.regions != nullptr) {
    for (const auto& r : env_.regions->List(*id)) SetRegionInfo(*r, response->add_regions());
  }
  call.Finish(absl::OkStatus());
  return call.reactor;
}

}  // namespace tc::server
