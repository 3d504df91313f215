// What the server offers and holds: ListOps and ServerInfo.
#include "absl/strings/str_cat.h"
#include "kernels/expr/program.h"
#include "server/calls/call.h"
#include "server/v1/codec.h"
#include "server/env/memory_release.h"
#include "server/v1/service.h"
#include "runtime/device.h"
#include "server/data/regions.h"
#include "server/data/resident.h"

#ifndef TC_VERSION
#define TC_VERSION "unknown"
#endif
#ifndef TC_BUILD
#define TC_BUILD "unknown"
#endif

namespace tc::server {

grpc::ServerUnaryReactor* TensorServiceImpl::ListOps(grpc::CallbackServerContext* ctx,
                                                     const v1::ListOpsRequest* /*request*/,
                                                     v1::ListOpsResponse* response) {
  Call call{&env_, ctx->DefaultReactor(), "ListOps", ""};
  if (!call.AdmitCaller(*ctx)) return call.reactor;
  response->set_expression_grammar(expr::GrammarDescription());
  for (const CatalogEntry& e : Catalog()) {
    v1::OpInfo* info = response->add_ops();
    info->set_name(e.spec.name);
    info->set_arity(e.spec.arity);
    info->set_description(e.spec.description);
    for (DType t : DTypesIn(e.spec.dtypes)) info->add_dtypes(DTypeToProto(t));
    for (const AttrSpec& a : e.spec.attrs) {
      v1::AttributeInfo* ai = info->add_attributes();
      ai->set_name(a.name);
      ai->set_type(std::string(AttrTypeName(a.type)));
      ai->set_required(a.required);
      ai->set_description(a.description);
      if (!a.required) ai->set_default_value(AttrValueToString(a.default_value));
    }
  }
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* TensorServiceImpl::ServerInfo(grpc::CallbackServerContext* ctx,
                                                        const v1::ServerInfoRequest* /*request*/,
                                                        v1::ServerInfoResponse* response) {
  Call call{&env_, ctx->DefaultReactor(), "ServerInfo", ""};
  if (!call.AdmitCaller(*ctx)) return call.reactor;
  const ServiceOptions& o = env_.options;
  response->set_version(TC_VERSION);
  response->set_build(TC_BUILD);
  response->set_backend(o.backend);
  response->set_metrics_port(o.metrics_port);
  response->set_instance(o.instance);
  for (int i = 0; i < env_.devices->size(); ++i) {
    const runtime::Device& d = env_.devices->at(i);
    v1::DeviceInfo* di = response->add_devices();
    di->set_index(d.info().index);
    di->set_kind(d.info().kind);
    di->set_name(d.info().name);
    di->set_memory_total_bytes(d.info().total_memory);
    di->set_memory_budget_bytes(d.memory_budget());
    di->set_memory_in_use_bytes(d.memory_in_use());
    di->set_multiprocessors(d.info().multiprocessors);
    di->set_streams(d.info().streams);
    di->set_requests_in_flight(d.in_flight());
    if (absl::Status h = d.health(); !h.ok()) di->set_failure(std::string(h.message()));
    di->set_uuid(d.info().uuid);
    for (int peer : d.info().peers) di->add_peer_devices(peer);
    di->set_requests_total(d.admitted());
    di->set_worker_pid(d.worker_pid());
    di->set_restarts(d.generation());
  }
  v1::Limits* l = response->mutable_limits();
  l->set_max_message_bytes(o.max_message_bytes);
  l->set_max_request_bytes(o.max_request_bytes);
  l->set_max_elements(o.max_elements);
  l->set_max_rank(o.max_rank);
  l->set_max_concurrent_per_device(o.max_concurrent_per_device);
  const ResidentOptions& r = env_.resident->options();
  l->set_resident_quota_bytes(r.quota_bytes);
  l->set_resident_max_tensors(r.max_tensors);
  l->set_resident_default_ttl_seconds(absl::ToInt64Seconds(r.default_ttl));
  l->set_resident_max_ttl_seconds(absl::ToInt64Seconds(r.max_ttl));
  l->set_chunk_bytes(o.chunk_bytes);
  response->set_resident_tensors(env_.resident->count());
  response->set_resident_bytes(env_.resident->bytes());
  if (const RegionStore* regions = env_.regions; regions != nullptr) {
    l->set_region_quota_bytes(regions->options().quota_bytes);
    l->set_region_max_count(regions->options().max_regions);
    response->set_region_socket(regions->address());
    response->set_regions(regions->count());
    response->set_region_bytes(regions->bytes());
    l->set_shared_memory_limit_bytes(regions->mapped()->limit());
    response->set_shared_memory_bytes(regions->mapped()->used());
  }
  const HeapStats heap = ReadHeapStats();
  response->set_heap_allocated_bytes(heap.allocated_bytes);
  response->set_heap_free_bytes(heap.free_bytes);
  call.Finish(absl::OkStatus());
  return call.reactor;
}

}  // namespace tc::server
