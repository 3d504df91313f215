// The server's command-line flags (defined in flags.cc), each also read from the environment
// as TENSORCOMPUTE_<NAME>.
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, address);
ABSL_DECLARE_FLAG(int, port);
ABSL_DECLARE_FLAG(std::string, port_file);
ABSL_DECLARE_FLAG(std::string, backend);
ABSL_DECLARE_FLAG(std::string, devices);
ABSL_DECLARE_FLAG(int, streams_per_device);
ABSL_DECLARE_FLAG(int64_t, memory_budget);
ABSL_DECLARE_FLAG(int, memory_wait_ms);
ABSL_DECLARE_FLAG(int64_t, staging_bytes);
ABSL_DECLARE_FLAG(int, copy_threads);
ABSL_DECLARE_FLAG(int64_t, test_inject_device_fault_at_run);
ABSL_DECLARE_FLAG(std::string, test_inject_device_fault_devices);
ABSL_DECLARE_FLAG(bool, test_shared_gpu);
ABSL_DECLARE_FLAG(int, test_cpu_devices);
ABSL_DECLARE_FLAG(bool, device_workers);
ABSL_DECLARE_FLAG(int, worker_fd);
ABSL_DECLARE_FLAG(int, worker_device);
ABSL_DECLARE_FLAG(int64_t, worker_generation);
ABSL_DECLARE_FLAG(int, worker_parent);
ABSL_DECLARE_FLAG(int, cpu_threads);
ABSL_DECLARE_FLAG(int, request_threads);
ABSL_DECLARE_FLAG(int64_t, max_message_bytes);
ABSL_DECLARE_FLAG(std::string, grpc_args);
ABSL_DECLARE_FLAG(int64_t, max_request_bytes);
ABSL_DECLARE_FLAG(int64_t, max_elements);
ABSL_DECLARE_FLAG(int, max_rank);
ABSL_DECLARE_FLAG(int, max_concurrent_per_device);
ABSL_DECLARE_FLAG(int64_t, chunk_bytes);
ABSL_DECLARE_FLAG(int64_t, malloc_cushion_bytes);
ABSL_DECLARE_FLAG(int64_t, host_buffer_bytes);
ABSL_DECLARE_FLAG(int64_t, resident_quota_bytes);
ABSL_DECLARE_FLAG(int, resident_max_tensors);
ABSL_DECLARE_FLAG(int64_t, resident_ttl_seconds);
ABSL_DECLARE_FLAG(int64_t, resident_max_ttl_seconds);
ABSL_DECLARE_FLAG(std::string, unix_socket);
ABSL_DECLARE_FLAG(std::string, region_socket);
ABSL_DECLARE_FLAG(int64_t, shared_memory_limit_bytes);
ABSL_DECLARE_FLAG(int64_t, region_quota_bytes);
ABSL_DECLARE_FLAG(int, region_max_count);
ABSL_DECLARE_FLAG(int, region_max_connections);
ABSL_DECLARE_FLAG(int, region_connections_per_process);
ABSL_DECLARE_FLAG(int, region_connections_per_user);
ABSL_DECLARE_FLAG(int64_t, region_idle_seconds);
ABSL_DECLARE_FLAG(bool, region_pin);
ABSL_DECLARE_FLAG(bool, system_shared_memory);
ABSL_DECLARE_FLAG(int, metrics_port);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_client_ca);
ABSL_DECLARE_FLAG(std::string, auth_tokens_file);
ABSL_DECLARE_FLAG(int, shutdown_grace_seconds);
ABSL_DECLARE_FLAG(std::string, kernel_cache_dir);
ABSL_DECLARE_FLAG(std::string, expression_steps);
ABSL_DECLARE_FLAG(int64_t, kernel_cache_mib);

namespace tc::server {

// Sets every flag named in the environment as TENSORCOMPUTE_<NAME>, before the command line
// is parsed (so that it wins); exits with a message on a bad value.
void ApplyEnvironment();

}  // namespace tc::server
