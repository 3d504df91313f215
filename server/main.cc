// tensorcompute-server: the gRPC process.
#include <signal.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/service.h"
#if TC_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

ABSL_FLAG(std::string, address, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 50051, "Port to listen on; 0 picks a free one (see --port_file).");
ABSL_FLAG(std::string, port_file, "",
          "If set, the port actually bound is written to this file once the server serves.");
ABSL_FLAG(std::string, backend, "auto",
          "auto: CUDA when a GPU is visible, else CPU; cpu; or cuda (fails without a GPU).");
ABSL_FLAG(int, device, 0, "CUDA device to use with the cuda backend.");
ABSL_FLAG(int, cpu_threads, 0, "Threads of the CPU backend; 0: one per hardware thread.");
ABSL_FLAG(int, request_threads, 4, "Requests computed at once.");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{256} << 20,
          "Largest request and response message, in bytes (at most 2 GiB - 1).");
ABSL_FLAG(int, shutdown_grace_seconds, 10,
          "On SIGTERM/SIGINT, how long in-flight requests get to finish.");

namespace {

// Every flag can also come from the environment as TENSORCOMPUTE_<NAME>, for containers; the
// command line wins.
void ApplyEnvironment() {
  for (const char* name : {"address", "port", "port_file", "backend", "device", "cpu_threads",
                           "request_threads", "max_message_bytes", "shutdown_grace_seconds"}) {
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

void Log(const std::string& line) {
  std::fprintf(stderr, "%s tensorcompute: %s\n",
               absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()).c_str(),
               line.c_str());
}

std::unique_ptr<tc::Backend> MakeBackend(const std::string& choice) {
  if (choice != "auto" && choice != "cpu" && choice != "cuda") {
    Log(absl::StrCat("--backend must be auto, cpu or cuda, not '", choice, "'"));
    std::exit(2);
  }
#if TC_WITH_CUDA
  if (choice == "cuda" || (choice == "auto" && tc::CudaBackend::DeviceCount() > 0)) {
    auto cuda = tc::CudaBackend::Create(absl::GetFlag(FLAGS_device));
    if (cuda.ok()) {
      Log(absl::StrCat("backend: cuda (device ", (*cuda)->device(), ", ",
                       (*cuda)->multiprocessors(), " multiprocessors)"));
      return *std::move(cuda);
    }
    if (choice == "cuda") {
      Log(absl::StrCat("--backend=cuda: ", cuda.status().message()));
      std::exit(1);
    }
    Log(absl::StrCat("no usable GPU (", cuda.status().message(), ")"));
  }
#else
  if (choice == "cuda") {
    Log("--backend=cuda: this build has no CUDA backend (built with WITH_CUDA=OFF)");
    std::exit(1);
  }
#endif
  auto cpu = std::make_unique<tc::CpuBackend>(absl::GetFlag(FLAGS_cpu_threads));
  Log(absl::StrCat("backend: cpu (", std::thread::hardware_concurrency(), " hardware threads)"));
  return cpu;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tensorcompute gRPC server. Flags also read TENSORCOMPUTE_<FLAG>.");
  ApplyEnvironment();
  absl::ParseCommandLine(argc, argv);

  // Signals are taken synchronously by this thread (sigwait), so block them before any other
  // thread starts: every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const int64_t max_message = absl::GetFlag(FLAGS_max_message_bytes);
  if (max_message <= 0 || max_message > INT32_MAX) {
    Log("--max_message_bytes must be between 1 and 2147483647");
    return 2;
  }

  if (absl::GetFlag(FLAGS_request_threads) < 1) {
    Log("--request_threads must be at least 1");
    return 2;
  }
  std::unique_ptr<tc::Backend> backend = MakeBackend(absl::GetFlag(FLAGS_backend));
  auto request_pool = std::make_unique<tc::ThreadPool>(absl::GetFlag(FLAGS_request_threads));
  tc::server::ServiceOptions options;
  options.max_response_bytes = max_message;
  tc::server::TensorServiceImpl service(backend.get(), request_pool.get(), options);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_address), ":", absl::GetFlag(FLAGS_port));
  int bound_port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &bound_port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message));
  builder.SetMaxSendMessageSize(static_cast<int>(max_message));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    Log(absl::StrCat("cannot listen on ", address));
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(tensorcompute::v1::TensorService::service_full_name(), true);
  health->SetServingStatus(true);
  Log(absl::StrCat("serving tensorcompute.v1.TensorService on ", absl::GetFlag(FLAGS_address),
                   ":", bound_port));
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    // Written whole under a temporary name, then renamed, so a reader never sees half of it.
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << bound_port << "\n";
    std::rename(tmp.c_str(), path.c_str());
  }

  int sig = 0;
  sigwait(&stop_signals, &sig);
  const int grace = absl::GetFlag(FLAGS_shutdown_grace_seconds);
  Log(absl::StrCat("signal ", sig, ": draining for up to ", grace, " s"));
  // Health first, so balancers stop sending; then new calls are refused and in-flight ones
  // get the grace period before they are cancelled.
  health->SetServingStatus(false);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(grace));
  request_pool.reset();
  Log("stopped");
  return 0;
}
