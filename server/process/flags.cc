#include "server/process/flags.h"

#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, address, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 50051, "Port to listen on; 0 picks a free one (see --port_file).");
ABSL_FLAG(std::string, port_file, "",
          "If set, the port actually bound is written to this file once the server serves.");
ABSL_FLAG(std::string, backend, "auto",
          "auto: CUDA when a GPU is visible, else CPU; cpu; or cuda (fails without a GPU).");
ABSL_FLAG(std::string, devices, "all",
          "CUDA devices to use with the cuda backend: 'all' or a list such as '0,2'.");
ABSL_FLAG(int, streams_per_device, 4, "CUDA streams per device; requests share them.");
ABSL_FLAG(int64_t, memory_budget, 0,
          "Bytes of memory each device hands out; 0: 90% of a GPU's free memory, half of RAM "
          "on the CPU backend.");
ABSL_FLAG(int, memory_wait_ms, 200,
          "How long a request waits for memory over the budget before RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, staging_bytes, int64_t{4} << 20, "Pinned staging buffer size (two per stream).");
ABSL_FLAG(int, copy_threads, 0,
          "GPU: host threads per device that copy large inputs into and results out of the "
          "staging buffers together; 0: half the hardware threads, at most 8.");
ABSL_FLAG(int64_t, test_inject_device_fault_at_run, 0,
          "Test only: a device fails at its N-th run (a trapping kernel on a GPU), to check "
          "that its requests then fail cleanly and health says so. 0: never.");
ABSL_FLAG(std::string, test_inject_device_fault_devices, "all",
          "Test only: the devices --test_inject_device_fault_at_run fails: 'all' or a list of "
          "indices such as '1'.");
ABSL_FLAG(bool, test_shared_gpu, false,
          "Test only: a GPU may be listed twice in --devices, as two devices that share it "
          "(their copies between each other are device-to-device copies), so that several "
          "devices can be tested on one GPU. A fault on one fails both.");
ABSL_FLAG(int, test_cpu_devices, 1,
          "Test only: split the CPU backend into this many devices (threads and budget "
          "divided), so that several devices can be tested without GPUs.");
ABSL_FLAG(bool, device_workers, false,
          "Each device computes in a worker process of its own behind this one, which keeps "
          "the port, tensors, regions and admission: a GPU fault (which ends every CUDA "
          "context of its process) then fails only that device's requests and tensors, and a "
          "new worker takes its place after a backoff. Unless given on the command line: "
          "on with two or more GPUs, off with one GPU or the CPU.");
ABSL_FLAG(int, worker_fd, -1, "Internal: run as the worker of one device on this descriptor.");
ABSL_FLAG(int, worker_device, 0, "Internal: the device a worker computes for.");
ABSL_FLAG(int64_t, worker_generation, 0, "Internal: how many workers of the device came before.");
ABSL_FLAG(int, worker_parent, 0, "Internal: the server process a worker belongs to.");
ABSL_FLAG(int, cpu_threads, 0, "Threads of the CPU backend; 0: one per hardware thread.");
ABSL_FLAG(int, request_threads, 8,
          "Threads that decode, copy and plan requests (kernels run on the devices).");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{256} << 20,
          "Largest request and response message, in bytes (at most 2 GiB - 1).");
ABSL_FLAG(std::string, grpc_args, "",
          "More gRPC channel arguments for the server's connections, NAME=INTEGER,... (e.g. "
          "grpc.http2.lookahead_bytes=8388608), set after the server's own.");
ABSL_FLAG(int64_t, max_request_bytes, int64_t{64} << 30,
          "Largest sum of one request's input storage (streamed and resident included).");
ABSL_FLAG(int64_t, max_elements, int64_t{1} << 36, "Most elements in one input or output.");
ABSL_FLAG(int, max_rank, 8, "Highest rank accepted (at most 8).");
ABSL_FLAG(int, max_concurrent_per_device, 256,
          "Requests admitted per device at once; more get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{1} << 20, "Chunk size of streamed replies.");
ABSL_FLAG(int64_t, malloc_cushion_bytes, int64_t{256} << 20,
          "Free memory the allocator may keep while calls are in flight (reused by the next "
          "chunks instead of faulting fresh pages in); all of it goes back once none is.");
ABSL_FLAG(int64_t, host_buffer_bytes, int64_t{1} << 30,
          "Idle host buffers kept for the inputs and outputs of large unary calls (pinned for "
          "the GPUs, so that their copies skip staging), reused from call to call; 0: none.");
ABSL_FLAG(int64_t, resident_quota_bytes, int64_t{16} << 30,
          "Bytes of resident tensors one client may keep.");
ABSL_FLAG(int, resident_max_tensors, 4096, "Resident tensors one client may keep.");
ABSL_FLAG(int64_t, resident_ttl_seconds, 600, "Default lifetime of a resident tensor.");
ABSL_FLAG(int64_t, resident_max_ttl_seconds, 86400, "Longest lifetime a client may ask for.");
ABSL_FLAG(std::string, unix_socket, "",
          "Also serve gRPC on this Unix socket path (clients: unix:///PATH): same-host callers "
          "skip the TCP stack. Empty: TCP only.");
ABSL_FLAG(std::string, region_socket, "auto",
          "Unix socket where same-host clients register shared-memory regions: a path, "
          "'@name' (abstract namespace), 'auto' ('@tensorcompute-PORT', or -PORT-PID when "
          "that is taken), or 'off'.");
ABSL_FLAG(int64_t, shared_memory_limit_bytes, 0,
          "Bytes of shared memory (regions, CUDA IPC memory, KServe v2 system shared memory) "
          "all callers together may have registered; 0: a quarter of the machine's memory "
          "(or of the container's memory limit).");
ABSL_FLAG(int64_t, region_quota_bytes, 0,
          "Bytes of shared-memory regions one client may have registered; 0: "
          "--shared_memory_limit_bytes.");
ABSL_FLAG(int, region_max_count, 256, "Shared-memory regions one client may have registered.");
ABSL_FLAG(int, region_max_connections, 256, "Connections the region socket keeps open at once.");
ABSL_FLAG(int, region_connections_per_process, 16,
          "Region socket connections one process may hold.");
ABSL_FLAG(int, region_connections_per_user, 128,
          "Region socket connections the processes of one user (uid) may hold.");
ABSL_FLAG(int64_t, region_idle_seconds, 30,
          "A region socket connection holding no region and no ticket is closed after this "
          "long without a message.");
ABSL_FLAG(bool, region_pin, true,
          "Pin regions for the GPU (cudaHostRegister) when they are registered, so copies to "
          "and from them run at full PCIe speed; false: copy through the staging buffers.");
ABSL_FLAG(bool, system_shared_memory, false,
          "Serve KServe v2 system shared memory: callers name POSIX shared-memory objects of "
          "this host (shm_open), which the server opens with its own permissions; only for "
          "servers whose callers may read and write every such object the server can.");
ABSL_FLAG(int, metrics_port, 9450,
          "Port of the Prometheus /metrics endpoint (HTTP); 0 picks a free one, -1 turns it off.");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve TLS (with --tls_key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require client certificates signed by it (mutual TLS).");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "File of bearer tokens, one 'name:token' per line; calls must then carry "
          "'authorization: Bearer <token>'. Also $TENSORCOMPUTE_AUTH_TOKENS, comma-separated.");
ABSL_FLAG(int, shutdown_grace_seconds, 10,
          "On SIGTERM/SIGINT, how long in-flight requests get to finish.");
ABSL_FLAG(std::string, kernel_cache_dir, "auto",
          "Directory where compiled expression kernels (GPU) are kept across restarts, only "
          "this server's user able to write it; 'auto': $XDG_CACHE_HOME/tensorcompute/kernels "
          "or ~/.cache/tensorcompute/kernels; empty: kept in memory only.");
ABSL_FLAG(int64_t, kernel_cache_mib, 1024, "Most MiB of kernels kept in --kernel_cache_dir.");
ABSL_FLAG(std::string, expression_steps, "while_compiling",
          "GPU: how a new expression is answered before its kernel is compiled: "
          "'while_compiling' by its ops one by one, the kernel compiling behind them; 'never': "
          "it waits for the kernel; 'always': by its ops every time (only a space too large for "
          "their temporaries takes the kernel).");

namespace tc::server {

void ApplyEnvironment() {
  for (const char* name : {"address",
                           "port",
                           "port_file",
                           "backend",
                           "devices",
                           "streams_per_device",
                           "memory_budget",
                           "memory_wait_ms",
                           "staging_bytes",
                           "copy_threads",
                           "cpu_threads",
                           "request_threads",
                           "max_message_bytes",
                           "grpc_args",
                           "max_request_bytes",
                           "max_elements",
                           "max_rank",
                           "max_concurrent_per_device",
                           "chunk_bytes",
                           "resident_quota_bytes",
                           "resident_max_tensors",
                           "resident_ttl_seconds",
                           "resident_max_ttl_seconds",
                           "unix_socket",
                           "region_socket",
                           "shared_memory_limit_bytes",
                           "region_quota_bytes",
                           "region_max_count",
                           "region_max_connections",
                           "region_connections_per_process",
                           "region_connections_per_user",
                           "region_idle_seconds",
                           "region_pin",
                           "metrics_port",
                           "tls_cert",
                           "tls_key",
                           "tls_client_ca",
                           "auth_tokens_file",
                           "shutdown_grace_seconds",
                           "kernel_cache_dir",
                           "kernel_cache_mib",
                           "expression_steps"}) {
    const std::string var = absl::StrCat("TENSORCOMPUTE_", absl::AsciiStrToUpper(name));
    const char* value = std::getenv(var.c_str());
    if (value == nullptr) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string error;
    if (flag == nullptr || !flag->ParseFrom(value, &error)) {
      std::fprintf(stderr, "tensorcompute: bad %s=%s: %s\n", var.c_str(), value, error.c_str());
      std::exit(2);
    }
  }
}

}  // namespace tc::server
