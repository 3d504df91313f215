// Checks every runtime Device must pass (CPU here, CUDA on a GPU machine): the memory budget,
// host <-> storage copies across staging-buffer boundaries, copies between two devices, concurrent
// requests sharing lanes, and memory accounting back to zero.
#pragma once

#include <functional>
#include <memory>

#include "runtime/device.h"

namespace tc::testing {

using DeviceFactory =
    std::function<std::unique_ptr<runtime::Device>(const runtime::DeviceOptions&)>;

void CheckBudget(const DeviceFactory& make);
void CheckCopies(const DeviceFactory& make);
void CheckConcurrentRuns(const DeviceFactory& make);
// Storage of `from` -> storage of `to` (CopyFromDevice): sub-ranges of random bytes, at odd
// offsets on both sides, arrive intact and leave the bytes around them alone; out of range is
// refused.
void CheckCopiesBetween(runtime::Device& from, runtime::Device& to);

}  // namespace tc::testing
