#include "server/v1/service.h"

namespace tc::server {

TensorServiceImpl::TensorServiceImpl(runtime::DeviceSet* devices, ThreadPool* request_pool,
                                     ResidentStore* resident, RegionStore* regions,
                                     Metrics* metrics, const Auth* auth, ServiceOptions options,
                                     Lifecycle* life, HostBuffers* host_buffers)
    : env_{devices, request_pool,       resident, regions,     metrics,
           auth,    std::move(options), life,     host_buffers} {}

}  // namespace tc::server
