// KServe v2's shared-memory RPCs: system shared memory (the caller's POSIX objects) and CUDA
// shared memory (GPU memory opened by IPC handle, held as a region of the one region store),
// and the lookup a request's tensors name them through.
#include <limits>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/calls/unary_call.h"
#include "server/kserve/inference_service.h"

namespace tc::server {

namespace {

// A caller on this host: over loopback or a unix socket (gRPC's peer strings).
bool IsLocalPeer(absl::string_view peer) {
  return absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "ipv4:127.") ||
         absl::StartsWith(peer, "ipv6:[::1]") || absl::StartsWith(peer, "ipv6:%5B::1%5D");
}

}  // namespace

InferenceServiceImpl::InferenceServiceImpl(ServiceEnv env, MappedBytes* system_shm)
    : env_(std::move(env)) {
  if (system_shm != nullptr) {
    const int max = env_.regions != nullptr ? env_.regions->options().max_regions : 256;
    shm_ = std::make_unique<SystemShmStore>(max, system_shm);
  }
}

ShmLookup InferenceServiceImpl::LookupFor(const std::string& owner) const {
  if (shm_ == nullptr && env_.regions == nullptr) return nullptr;
  return [this, owner](const std::string& name) -> absl::StatusOr<SharedRegion> {
    if (shm_ != nullptr) {
      if (auto r = shm_->Find(owner, name); r.ok()) return SharedRegion{*std::move(r), nullptr};
    }
    std::vector<std::shared_ptr<Region>> cuda = CudaRegions(owner, name);
    if (!cuda.empty()) return SharedRegion{nullptr, cuda.front()};
    return absl::NotFoundError(absl::StrCat(
        "no shared-memory region named '", name,
        "' is registered (SystemSharedMemoryRegister, CudaSharedMemoryRegister)",
        shm_ == nullptr ? "; system shared memory is off on this server (--system_shared_memory)"
                        : ""));
  };
}

absl::StatusOr<std::string> InferenceServiceImpl::SystemShmCaller(
    const grpc::CallbackServerContext& ctx) const {
  auto id = env_.auth->Identify(ctx);
  if (id.ok() && shm_ == nullptr) {
    return absl::FailedPreconditionError(
        "system shared memory is off on this server (start it with --system_shared_memory); "
        "tensorcompute.v1 takes sealed memfd regions and CUDA IPC memory");
  }
  return id;
}

absl::StatusOr<std::vector<std::shared_ptr<Region>>> InferenceServiceImpl::NamedCudaRegions(
    const std::string& owner, const std::string& name) const {
  std::vector<std::shared_ptr<Region>> regions = CudaRegions(owner, name);
  if (!name.empty() && regions.empty()) {
    return absl::NotFoundError(absl::StrCat("no CUDA shared-memory region named '", name, "'"));
  }
  return regions;
}

std::vector<std::shared_ptr<Region>> InferenceServiceImpl::CudaRegions(
    const std::string& owner, const std::string& name) const {
  std::vector<std::shared_ptr<Region>> out;
  if (env_.regions == nullptr) return out;
  for (std::shared_ptr<Region>& r : env_.regions->List(owner)) {
    if (r->connection == RegionStore::kNoConnection && r->device != nullptr &&
        (name.empty() || r->name == name)) {
      out.push_back(std::move(r));
    }
  }
  return out;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryRegisterRequest* request,
    inf::SystemSharedMemoryRegisterResponse*) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "SystemSharedMemoryRegister", ""};
  if (!call.Admit()) return call.reactor;
  auto id = SystemShmCaller(*ctx);
  if (!id.ok()) {
    call.Finish(id.status());
  } else if (!IsLocalPeer(ctx->peer())) {
    call.Finish(absl::PermissionDeniedError(
        "system shared memory is registered from this host only (a loopback address or the "
        "server's unix socket)"));
  } else if (request->offset() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
             request->byte_size() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    call.Finish(absl::InvalidArgumentError("offset or byte_size out of range"));
  } else {
    absl::Status registered;
    {
      std::lock_guard<std::mutex> lock(names_mu_);
      if (!request->name().empty() && !CudaRegions(*id, request->name()).empty()) {
        registered = absl::AlreadyExistsError(absl::StrCat(
            "a shared-memory region named '", request->name(), "' is already registered"));
      } else {
        registered = shm_->Register(*id, request->name(), request->key(),
                                    static_cast<int64_t>(request->offset()),
                                    static_cast<int64_t>(request->byte_size()));
      }
    }
    call.Finish(registered);
  }
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* ctx, const inf::CudaSharedMemoryRegisterRequest* request,
    inf::CudaSharedMemoryRegisterResponse*) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "CudaSharedMemoryRegister", ""};
  if (!call.Admit()) return call.reactor;
  auto id = env_.auth->Identify(*ctx);
  if (!id.ok()) {
    call.Finish(id.status());
    return call.reactor;
  }
  const std::string& name = request->name();
  runtime::Device* device = nullptr;
  for (int i = 0; i < env_.devices->size(); ++i) {
    const runtime::DeviceInfo& info = env_.devices->at(i).info();
    if (info.kind == "cuda" && info.index == request->device_id()) device = &env_.devices->at(i);
  }
  absl::Status refused;
  if (env_.regions == nullptr) {
    refused = absl::FailedPreconditionError(
        "shared-memory regions are off on this server (--region_socket=off)");
  } else if (device == nullptr) {
    refused = absl::InvalidArgumentError(absl::StrCat(
        "this server has no GPU with device_id ", request->device_id(),
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
  call.Finish(AdoptCudaRegion(*id, name, *device, request->raw_handle(),
                              static_cast<int64_t>(request->byte_size())));
  return call.reactor;
}

absl::Status InferenceServiceImpl::AdoptCudaRegion(const std::string& owner,
                                                   const std::string& name,
                                                   runtime::Device& device,
                                                   const std::string& handle, int64_t bytes) {
  // The name is checked free of both kinds and registered under one lock, so that two
  // registrations of one name, one of each kind, cannot both pass.
  std::lock_guard<std::mutex> lock(names_mu_);
  if (!CudaRegions(owner, name).empty() || (shm_ != nullptr && shm_->Find(owner, name).ok())) {
    return absl::AlreadyExistsError(
        absl::StrCat("a shared-memory region named '", name, "' is already registered"));
  }
  auto opened = device.OpenIpc(handle);
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
  return env_.regions
      ->Adopt(owner, name,
              std::make_shared<Region>(opened->data, bytes, /*writable=*/true,
                                       RegionStore::kNoConnection, std::move(opened->closer),
                                       &device, *std::move(charge)))
      .status();
}

grpc::ServerUnaryReactor* InferenceServiceImpl::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* ctx, const inf::CudaSharedMemoryUnregisterRequest* request,
    inf::CudaSharedMemoryUnregisterResponse*) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "CudaSharedMemoryUnregister", ""};
  if (!call.Admit()) return call.reactor;
  auto id = env_.auth->Identify(*ctx);
  auto found = id.ok() ? NamedCudaRegions(*id, request->name())
                       : absl::StatusOr<std::vector<std::shared_ptr<Region>>>(id.status());
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
  UnaryCall call{&env_, ctx->DefaultReactor(), "CudaSharedMemoryStatus", ""};
  if (!call.Admit()) return call.reactor;
  auto id = env_.auth->Identify(*ctx);
  auto found = id.ok() ? NamedCudaRegions(*id, request->name())
                       : absl::StatusOr<std::vector<std::shared_ptr<Region>>>(id.status());
  if (!found.ok()) {
    call.Finish(found.status());
    return call.reactor;
  }
  const std::vector<std::shared_ptr<Region>>& regions = *found;
  for (const auto& r : regions) {
    auto& status = (*response->mutable_regions())[r->name];
    status.set_name(r->name);
    status.set_device_id(static_cast<uint64_t>(r->device->info().index));
    status.set_byte_size(static_cast<uint64_t>(r->bytes));
  }
  call.Finish(absl::OkStatus());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryUnregisterRequest* request,
    inf::SystemSharedMemoryUnregisterResponse*) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "SystemSharedMemoryUnregister", ""};
  if (!call.Admit()) return call.reactor;
  auto id = SystemShmCaller(*ctx);
  call.Finish(id.ok() ? shm_->Unregister(*id, request->name()) : id.status());
  return call.reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* ctx, const inf::SystemSharedMemoryStatusRequest* request,
    inf::SystemSharedMemoryStatusResponse* response) {
  UnaryCall call{&env_, ctx->DefaultReactor(), "SystemSharedMemoryStatus", ""};
  if (!call.Admit()) return call.reactor;
  auto id = SystemShmCaller(*ctx);
  if (!id.ok()) {
    call.Finish(id.status());
    return call.reactor;
  }
  auto regions = shm_->List(*id, request->name());
  if (!regions.ok()) {
    call.Finish(regions.status());
    return call.reactor;
  }
  for (const auto& r : *regions) {
    auto& status = (*response->mutable_regions())[r->name];
    status.set_name(r->name);
    status.set_key(r->key);
    status.set_offset(static_cast<uint64_t>(r->offset));
    status.set_byte_size(static_cast<uint64_t>(r->bytes));
  }
  call.Finish(absl::OkStatus());
  return call.reactor;
}

}  // namespace tc::server
