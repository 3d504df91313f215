// The devices the server computes on, made from the flags: every GPU listed (a GPU that cannot
// start left out where all were asked for), else the CPU (optionally split in parts for tests).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device.h"

namespace tc::server {

// The devices for --backend `choice` (auto, cpu or cuda), and the backend's name; exits with a
// message where the flags are wrong or a backend asked for cannot start.
// With --device_workers each device is a worker process started with `server_args` (the
// server's own arguments) and the worker's.
std::pair<std::vector<std::unique_ptr<runtime::Device>>, std::string> MakeDevices(
    const std::string& choice, const std::vector<std::string>& server_args);

// In a worker process (--worker_fd): the one device it computes for.
std::unique_ptr<runtime::Device> MakeWorkerDevice();

}  // namespace tc::server
