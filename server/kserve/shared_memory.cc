// KServe v2's shared-memory RPCs: system shared memory (the caller's POSIX objects) and CUDA
// shared memory (GPU memory opened by IPC handle, held as a region of the one region store),
// and the lookup a request's tensors name them through.
#include <limits>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/calls/call.h"
#include "server/kserve/inference_service.h"

namespace tc::server {

namespace {

// A caller on this host: over loopback or a unix socket (gRPC's peer strings).
bool IsLocalPeer(absl::string_view peer) {
  return absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "ipv4:127.") ||
         absl::StartsWith(peer, "ipv6:[::1]") || absl::StartsWith(peer, "ipv6:%5B::1%5D");
}

}  // namespace

InferenceServiceImpl::InferenceServiceImpl(ServiceEnv env, bool system_shm)
    : env_(std::move(env)), system_shm_(system_shm && env_.regions != nullptr) {}

ShmLookup InferenceServiceImpl::LookupFor(const std::string& owner) const {
  if (env_.regions == nullptr) return nullptr;
  return [this, owner](const std::string& name) -> absl::StatusOr<std::shared_ptr<Region>> {
    auto r = env_.regions->FindNamed(owner, name);
    if (!r.ok()) {
      return absl::NotFoundError(absl::StrCat(
          r.status().message(), " (SystemSharedMemoryRegister, CudaSharedMemoryRegister)",
          system_shm_ ? ""
                      : "; system shared memory is off on this server "
                        "(--system_shared_memory)"));
    }
    return r;
  };
}

absl::StatusOr<std::string> InferenceServiceImpl::SystemShmCaller(
    const grpc::CallbackServerContext& ctx) const {
  auto id = env_.auth->Identify(ctx);
  if (id.ok() && !system_shm_) {
    return absl::FailedPreconditionError(
        "system shared memory is off on this server (start it with --system_shared_memory); "
        "tensorcompute.v1 takes sealed memfd regions and CUDA IPC memory");
  }
  return id;
}

absl::StatusOr<std::vector<std::shared_ptr<Region>>> InferenceServiceImpl::Named(
    const std::string& owner, const std::string& name, bool system) const {
  std::vector<std::shared_ptr<Region>> out;
  if (env_.regions != nullptr) {
    for (std::shared_ptr<Region>& r : env_.regions->ListNamed(owner, name)) {
      if ((r->file() != nullptr) == system) out.push_back(std::move(r));
    }
  }
  if (!name.empty() && out.empty()) {
    return absl::NotFoundError(absl::StrCat("no ", system ? "system" : "CUDA",
                                            " shared-memory region named '", Echo(name), "'"));
  }
  return out;
}

absl::Status InferenceServiceImpl::Adopt(const std::string& owner, const std::string& name,
                                         std::shared_ptr<Region> region) {
  return env_.regions->Adopt(owner, name, std::move(region)).status();
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryRegisterRequest* request,
    inf::SystemSharedMemoryRegisterResponse*) {
  Call call{&env_, ctx->DefaultReactor(), "SystemSharedMemoryRegister", ""};
  auto id = call.AdmitCaller([&] { return SystemShmCaller(*ctx); });
  if (!id) return call.reactor;
  if (!IsLocalPeer(ctx->peer())) {
    call.Finish(absl::PermissionDeniedError(
        "system shared memory is registered from this host only (a loopback address or the "
        "server's unix socket)"));
  } else if (request->offset() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
             request->byte_size() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    call.Finish(absl::InvalidArgumentError("offset or byte_size out of range"));
  } else if (env_.regions->FindNamed(*id, request->name()).ok()) {
    // Refused before the object is opened; Adopt holds the rule where two race.
    call.Finish(absl::AlreadyExistsError(absl::StrCat(
        "a shared-memory region named '", Echo(request->name()), "' is already registered")));
  } else {
    const auto bytes = static_cast<int64_t>(request->byte_size());
    auto file = OpenSystemShm(request->name(), request->key(),
                              static_cast<int64_t>(request->offset()), bytes);
    auto charge =
        file.ok() ? env_.regions->mapped()->Charge(
                        bytes, absl::StrCat("shared-memory region '", Echo(request->name()), "'"))
                  : absl::StatusOr<std::shared_ptr<void>>(file.status());
    // Decided (and every reference but the store's let go) before the reply.
    const absl::Status adopted =
        charge.ok() ? Adopt(*id, request->name(),
                            std::make_shared<Region>(*std::move(file), *std::move(charge)))
                    : charge.status();
    call.Finish(adopted);
  }
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* ctx, const inf::CudaSharedMemoryRegisterRequest* request,
    inf::CudaSharedMemoryRegisterResponse*) {
  Call call{&env_, ctx->DefaultReactor(), "CudaSharedMemoryRegister", ""};
  auto id = call.AdmitCaller(*ctx);
  if (!id) return call.reactor;
  const std::string& name = request->name();
  runtime::Device* device = nullptr;
  for (int i = 0; i < env_.devices->size(); ++i) {
    const runtime::DeviceInfo& info = env_.devices->at(i).info();
    if (info.kind == "cuda" && info.index == request->device_id()) device = &env_.devices->at(i);
  }
  absl::Status refused;
  if (env_.regions == nullptr) {
    refused = absl::FailedPreconditionError("shared memory is off on this server");
  } else if (device == nullptr) {
    refused = absl::InvalidArgumentError(
        absl::StrCat("this server has no GPU with device_id ", request->device_id(),
                     " (ServerInfo of tensorcompute.v1 lists its devices)"));
  } else if (name.empty()) {
    refused = absl::InvalidArgumentError("a shared-memory region needs a name");
  } else if (request->byte_size() == 0 ||
             request->byte_size() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    refused = absl::InvalidArgumentError("byte_size must be positive");
  } else if (device->failed()) {
    refused = device->health();
  }
  if (!refused.ok()) {
    call.Finish(refused);
    return call.reactor;
  }
  if (env_.regions->FindNamed(*id, name).ok()) {
    // Refused before the handle is opened; Adopt holds the rule where two race.
    call.Finish(absl::AlreadyExistsError(
        absl::StrCat("a shared-memory region named '", Echo(name), "' is already registered")));
    return call.reactor;
  }
  absl::Status adopted;
  {
    auto region =
        OpenCudaRegion(*device, request->raw_handle(), static_cast<int64_t>(request->byte_size()));
    adopted = region.ok() ? Adopt(*id, name, *std::move(region)) : region.status();
  }
  call.Finish(adopted);
  return call.reactor;
}

absl::StatusOr<std::shared_ptr<Region>> InferenceServiceImpl::OpenCudaRegion(
    runtime::Device& device, const std::string& handle, int64_t bytes) {
  runtime::IpcMemory* ipc = device.ipc();
  auto opened = ipc != nullptr
                    ? ipc->OpenIpc(handle)
                    : absl::UnimplementedError("this device does not open CUDA IPC handles");
  if (!opened.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA IPC handle cannot be opened: ", opened.status().message()));
  }
  if (bytes > opened->bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "byte_size ", bytes, " is past the end of the allocation (", opened->bytes, " bytes)"));
  }
  // The whole allocation is open, so the whole of it counts.
  auto charge = env_.regions->mapped()->Charge(opened->bytes, "the CUDA shared memory");
  if (!charge.ok()) return charge.status();
  return std::make_shared<Region>(DeviceMemory{opened->data, &device, std::move(opened->closer)},
                                  bytes, /*writable=*/true, kNoConnection, *std::move(charge));
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* ctx, const inf::CudaSharedMemoryUnregisterRequest* request,
    inf::CudaSharedMemoryUnregisterResponse*) {
  Call call{&env_, ctx->DefaultReactor(), "CudaSharedMemoryUnregister", ""};
  auto id = call.AdmitCaller(*ctx);
  if (!id) return call.reactor;
  auto found = Named(*id, request->name(), /*system=*/false);
  if (!found.ok()) {
    call.Finish(found.status());
    return call.reactor;
  }
  const std::vector<std::shared_ptr<Region>>& regions = *found;
  // Requests using a region keep its memory open until they finish.
  for (const auto& r : regions) (void)env_.regions->Unregister(*id, r->id);
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryStatus(
    grpc::CallbackServerContext* ctx, const inf::CudaSharedMemoryStatusRequest* request,
    inf::CudaSharedMemoryStatusResponse* response) {
  Call call{&env_, ctx->DefaultReactor(), "CudaSharedMemoryStatus", ""};
  auto id = call.AdmitCaller(*ctx);
  if (!id) return call.reactor;
  auto found = Named(*id, request->name(), /*system=*/false);
  if (!found.ok()) {
    call.Finish(found.status());
    return call.reactor;
  }
  const std::vector<std::shared_ptr<Region>>& regions = *found;
  for (const auto& r : regions) {
    auto& status = (*response->mutable_regions())[r->name];
    status.set_name(r->name);
    status.set_device_id(static_cast<uint64_t>(r->device()->info().index));
    status.set_byte_size(static_cast<uint64_t>(r->bytes));
  }
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryUnregisterRequest* request,
    inf::SystemSharedMemoryUnregisterResponse*) {
  Call call{&env_, ctx->DefaultReactor(), "SystemSharedMemoryUnregister", ""};
  auto id = call.AdmitCaller([&] { return SystemShmCaller(*ctx); });
  if (!id) return call.reactor;
  auto found = Named(*id, request->name(), /*system=*/true);
  if (found.ok()) {
    for (const auto& r : *found) (void)env_.regions->Unregister(*id, r->id);
  }
  call.Finish(found.status());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryStatusRequest* request,
    inf::SystemSharedMemoryStatusResponse* response) {
  Call call{&env_, ctx->DefaultReactor(), "SystemSharedMemoryStatus", ""};
  auto id = call.AdmitCaller([&] { return SystemShmCaller(*ctx); });
  if (!id) return call.reactor;
  auto regions = Named(*id, request->name(), /*system=*/true);
  if (!regions.ok()) {
    call.Finish(regions.status());
    return call.reactor;
  }
  for (const auto& r : *regions) {
    auto& status = (*response->mutable_regions())[r->name];
    status.set_name(r->name);
    status.set_key(r->file()->key);
    status.set_offset(static_cast<uint64_t>(r->file()->offset));
    status.set_byte_size(static_cast<uint64_t>(r->file()->bytes));
  }
  call.Finish(absl::OkStatus());
  return call.reactor;
}

}  // namespace tc::server
