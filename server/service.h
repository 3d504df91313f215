// TensorService on gRPC's callback API. Handlers only decode and queue: copies and planning run
// on the request pool, kernels on the devices' lanes, and completions finish the reactors, so
// no gRPC thread waits on compute or on the GPU.
#pragma once

#include <atomic>

#include <cstdint>
#include <string>

#include "kernels/cpu/thread_pool.h"
#include "kernels/engine.h"
#include "runtime/device.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/regions.h"
#include "server/resident.h"
#include "tensorcompute/v1/tensor_service.grpc.pb.h"

namespace tc::server {

namespace v1 = ::tensorcompute::v1;

struct UnaryCall;

struct ServiceOptions {
  // Largest message either way; a unary result larger than this gets RESOURCE_EXHAUSTED
  // before any memory is taken for it (ComputeStream has no such ceiling).
  int64_t max_message_bytes = int64_t{256} << 20;
  // Largest sum of one request's input storage, streamed and resident included.
  int64_t max_request_bytes = int64_t{64} << 30;
  // Most elements in any one input or output.
  int64_t max_elements = int64_t{1} << 36;
  int max_rank = 8;
  // Requests admitted per device at once; more get RESOURCE_EXHAUSTED.
  int max_concurrent_per_device = 256;
  // Chunk size of streamed replies unless the client asks for another (Download).
  int64_t chunk_bytes = int64_t{1} << 20;
  // For ServerInfo.
  std::string backend;
  int metrics_port = -1;
};

// The server's own drain: once draining, calls that arrive are refused UNAVAILABLE by the
// handlers, and the ones admitted before are counted until they finish, so that the process
// can wait for them before it shuts gRPC down (gRPC 1.51 answers calls that arrive during its
// Shutdown with CANCELLED, and closes connections as soon as the last call ends).
class Lifecycle {
 public:
  // False (nothing counted) once draining.
  bool Enter() {
    active_.fetch_add(1, std::memory_order_acq_rel);
    if (draining_.load(std::memory_order_acquire)) {
      Leave();
      return false;
    }
    return true;
  }
  void Leave() { active_.fetch_sub(1, std::memory_order_acq_rel); }
  void StartDraining() { draining_.store(true, std::memory_order_release); }
  int active() const { return active_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};
};

absl::Status ShuttingDown();

// Upload and Download take raw messages (their chunks skip protobuf's copies, see
// proto/chunk_wire.h); every other method takes protobuf messages.
using TensorServiceBase = v1::TensorService::WithRawCallbackMethod_Upload<
    v1::TensorService::WithRawCallbackMethod_Download<v1::TensorService::CallbackService>>;

class TensorServiceImpl final : public TensorServiceBase {
 public:
  // `regions` may be null: shared-memory regions are then off.
  TensorServiceImpl(runtime::DeviceSet* devices, ThreadPool* request_pool,
                    ResidentStore* resident, RegionStore* regions, Metrics* metrics,
                    const Auth* auth, ServiceOptions options, Lifecycle* life);

  grpc::ServerUnaryReactor* Compute(grpc::CallbackServerContext* ctx,
                                    const v1::ComputeRequest* request,
                                    v1::ComputeResponse* response) override;
  grpc::ServerBidiReactor<v1::ComputeStreamRequest, v1::TensorStreamMessage>* ComputeStream(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Upload(grpc::CallbackServerContext* ctx,
                                                    grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Download(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* ctx,
                                    const v1::ReleaseRequest* request,
                                    v1::ReleaseResponse* response) override;
  grpc::ServerUnaryReactor* ListOps(grpc::CallbackServerContext* ctx,
                                    const v1::ListOpsRequest* request,
                                    v1::ListOpsResponse* response) override;
  grpc::ServerUnaryReactor* ServerInfo(grpc::CallbackServerContext* ctx,
                                       const v1::ServerInfoRequest* request,
                                       v1::ServerInfoResponse* response) override;
  grpc::ServerUnaryReactor* RegisterRegion(grpc::CallbackServerContext* ctx,
                                           const v1::RegisterRegionRequest* request,
                                           v1::RegionInfo* response) override;
  grpc::ServerUnaryReactor* UnregisterRegion(grpc::CallbackServerContext* ctx,
                                             const v1::UnregisterRegionRequest* request,
                                             v1::UnregisterRegionResponse* response) override;
  grpc::ServerUnaryReactor* ListRegions(grpc::CallbackServerContext* ctx,
                                        const v1::ListRegionsRequest* request,
                                        v1::ListRegionsResponse* response) override;

  // What the reactors share.
  struct Env {
    runtime::DeviceSet* devices;
    ThreadPool* pool;
    ResidentStore* resident;
    RegionStore* regions;
    Metrics* metrics;
    const Auth* auth;
    ServiceOptions options;
    Lifecycle* life;
  };

 private:
  // The small-request fast path on a GPU: plans and hands the request to the device from the
  // gRPC thread. False (nothing finished) when it does not apply or the device is busy.
  bool TrySmallOnDevice(grpc::CallbackServerContext* ctx, const v1::ComputeRequest* request,
                        v1::ComputeResponse* response, std::shared_ptr<UnaryCall> call);

  Env env_;
};


}  // namespace tc::server
