// The gauges /metrics reads at scrape time: per device (memory, queue, failure), the heap,
// resident tensors, expression kernels and shared memory.
#pragma once

#include "runtime/device.h"
#include "server/data/regions.h"
#include "server/data/resident.h"
#include "server/env/metrics.h"

namespace tc::server {

// `regions` may be null (regions off).
void AddGauges(Metrics& metrics, const runtime::DeviceSet& devices, const ResidentStore& resident,
               const RegionStore* regions);

}  // namespace tc::server
