// The worker process: computes for one device of the server that started it, so that a
// fault which ends every CUDA context of a process (one GPU trapping) ends only this one.
// Started by RemoteDevice (remote_device.h) as the server's own binary with --worker_fd; it
// serves the engine's interface (allocations, copies, runs) over the connections the front
// door opens, until its control connection closes.
#pragma once

#include <memory>

#include "runtime/device.h"

namespace tc::server::worker {

// Serves `device` over the control connection `control_fd`; returns the process's exit
// status once the front door has gone.
int WorkerMain(int control_fd, std::unique_ptr<runtime::Device> device);

}  // namespace tc::server::worker
