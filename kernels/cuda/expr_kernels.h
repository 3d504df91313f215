// Fused expressions on CUDA devices: each request's kernel source is generated
// (kernels/rtc/codegen.h), compiled once by NVRTC and kept in a bounded cache shared by every
// device of the process, keyed by the source itself (which holds the tree's ops and dtypes,
// the walk and the vector width, but no literal or attribute values: those are parameters).
// Compilation happens on the cache's own threads, a few at a time, never on the caller's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/launch_env.h"
#include "kernels/expr/program.h"
#include "kernels/rtc/codegen.h"
#include "kernels/rtc/disk_cache.h"

namespace tc::cuda {

// A compiled expression kernel, loaded (for every device: context-independent loading). Held
// by the cache and by every launch of it until that launch completes.
class ExprKernel {
 public:
  ExprKernel(cudaLibrary_t library, cudaKernel_t kernel) : library_(library), kernel_(kernel) {}
  ~ExprKernel();
  ExprKernel(const ExprKernel&) = delete;
  ExprKernel& operator=(const ExprKernel&) = delete;
  cudaKernel_t kernel() const { return kernel_; }

 private:
  cudaLibrary_t library_;
  cudaKernel_t kernel_;
};

// What one launch needs, made on the host from the program and its operands' addresses.
struct ExprLaunch {
  std::string source;
  int arch = 0;
  // Each launch's walk arguments, the kernel's second parameter (the evaluator, the first,
  // is made at launch: it points at the error flag of the stream it is launched on), and its
  // blocks and threads.
  std::vector<rtc::WalkPart> parts;
};

// `base`: operand k's element (0, ..., 0), operand 0 the output.
ExprLaunch PrepareExprLaunch(const expr::Program& program, char* const* base, int multiprocessors,
                             int arch);

// Enqueues the launch on env.stream; integer division by zero sets env.error.
absl::Status LaunchExpr(const ExprLaunch& launch, const ExprKernel& kernel,
                        const expr::Program& program, const LaunchEnv& env);

struct ExprCacheStats {
  uint64_t compiles = 0;
  uint64_t compile_failures = 0;
  double compile_seconds = 0;
  uint64_t hits = 0;
  // Requests that waited for a compilation (their own or another's of the same source).
  uint64_t misses = 0;
  uint64_t refused = 0;
  uint64_t evictions = 0;
  size_t entries = 0;
  int compiling = 0;
  // Kernels read from the disk cache instead of compiled (counted apart from `compiles`;
  // their time is in compile_seconds), and the disk cache's own counts.
  uint64_t disk_loads = 0;
  rtc::DiskCacheStats disk;
  // Requests answered by their ops one by one (kernels/cuda/expr_steps.h) instead of waiting
  // for their kernel.
  uint64_t stepwise = 0;
};

// How requests for an expression whose kernel is not compiled yet are answered.
enum class StepMode : uint8_t {
  // By its ops one by one while the kernel compiles (behind them); the kernel once it is
  // there. The default.
  kWhileCompiling,
  // Never: each waits for the kernel.
  kNever,
  // Always, every request (a kernel is compiled only for a space whose temporaries would not
  // fit: PrepareSteps): for tests and comparisons.
  kAlways,
};

class ExprKernelCache {
 public:
  struct Options {
    // Compiled kernels kept; the least recently used goes first.
    size_t max_entries = 1024;
    // NVRTC instances at once (each takes a few hundred MB of host memory while it runs)...
    int max_compiling = 2;
    // ...and distinct sources waiting for one; past it a new source is RESOURCE_EXHAUSTED.
    int max_waiting = 64;
  };
  using Ready = std::function<void(absl::StatusOr<std::shared_ptr<const ExprKernel>>)>;

  // The process's cache.
  static ExprKernelCache& Shared();
  explicit ExprKernelCache(Options options);
  ~ExprKernelCache();

  // Calls ready() with the kernel for `source`: at once, on this thread, when it is cached;
  // from a compiling thread once compiled otherwise (every request for a source being
  // compiled waits for that one compilation); at once with RESOURCE_EXHAUSTED when too many
  // sources wait.
  void Get(const std::string& source, int arch, Ready ready);

  // The kernel for `source` where it is compiled (a hit); null otherwise, after starting its
  // compilation unless it is under way or too many sources wait.
  std::shared_ptr<const ExprKernel> GetOrStart(const std::string& source, int arch);
  // Counts a request answered by its steps.
  void CountStepwise();

  void SetStepMode(StepMode mode);
  StepMode step_mode() const;

  // Keeps compiled kernels in `disk` too, and looks there before compiling: a restarted
  // server (or another GPU's worker) loads what was compiled before. Null: memory only.
  void UseDisk(std::shared_ptr<rtc::DiskCache> disk);
  // Has a compile thread load NVRTC and compile a kernel of no expression for `arch`, once,
  // so that the first request does not also pay for NVRTC's start.
  void Warm(int arch);

  ExprCacheStats stats() const;

 private:
  struct State;
  void Work();
  std::unique_ptr<State> state_;
};

}  // namespace tc::cuda
