// What the GPU benchmarks share: a CUDA error check, device buffers, the timer (the median over
// `reps` calls of two CUDA events around one call, after 10 warm-ups, as the PyTorch scripts
// time theirs), a device-to-device copy timed the same way for the ceiling, and the check of
// a case's output against the CPU backend.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/launch_env.h"
#include "kernels/engine.h"
#include "tests/support/cpu_backend.h"

namespace tc::bench {

#define TC_CHECK_CUDA(expr)                                            \
  do {                                                                 \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess) {                  \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

// Device memory with its size.
struct DevBuf {
  std::byte* p = nullptr;
  int64_t bytes = 0;
  TensorView View(DType t, DimVector shape, DimVector strides = {}, int64_t offset = 0) const {
    if (strides.empty()) strides = ContiguousStrides(shape);
    return TensorView{t, std::move(shape), std::move(strides), offset, p, bytes};
  }
};

// Zeroed device memory.
inline DevBuf Alloc(int64_t bytes) {
  DevBuf b{nullptr, bytes};
  TC_CHECK_CUDA(cudaMalloc(&b.p, static_cast<size_t>(std::max<int64_t>(bytes, 1))));
  TC_CHECK_CUDA(cudaMemset(b.p, 0, static_cast<size_t>(bytes)));
  return b;
}

inline void Free(DevBuf& b) {
  if (b.p != nullptr) TC_CHECK_CUDA(cudaFree(b.p));
  b = {};
}

inline DevBuf Upload(const void* host, int64_t bytes) {
  DevBuf b = Alloc(bytes);
  TC_CHECK_CUDA(cudaMemcpy(b.p, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice));
  return b;
}

// Device 0's properties; false, said on stderr, where there is no CUDA device.
inline bool FirstDevice(cudaDeviceProp* prop) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return false;
  }
  TC_CHECK_CUDA(cudaGetDeviceProperties(prop, 0));
  return true;
}

// A launch environment of its own: a non-blocking stream and a zeroed device error flag.
inline cuda::LaunchEnv MakeLaunchEnv(const cudaDeviceProp& prop) {
  cudaStream_t stream;
  TC_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int* error = nullptr;
  TC_CHECK_CUDA(cudaMalloc(&error, sizeof(int)));
  TC_CHECK_CUDA(cudaMemset(error, 0, sizeof(int)));
  return cuda::LaunchEnv{prop.multiProcessorCount, stream, error, nullptr};
}

// What a shell command prints, trailing blanks and newlines removed ("" where it cannot run).
inline std::string Capture(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// Times work on one stream; copies of any size up to `max_copy_bytes` in total.
class Timer {
 public:
  Timer(cudaStream_t stream, int reps, int64_t max_copy_bytes)
      : stream_(stream), reps_(reps), copy_limit_(max_copy_bytes) {
    TC_CHECK_CUDA(cudaEventCreate(&start_));
    TC_CHECK_CUDA(cudaEventCreate(&stop_));
  }
  ~Timer() {
    Free(src_);
    Free(dst_);
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  double MedianMs(const std::function<void()>& fn) const {
    for (int i = 0; i < 10; ++i) fn();
    TC_CHECK_CUDA(cudaStreamSynchronize(stream_));
    std::vector<float> ts;
    for (int i = 0; i < reps_; ++i) {
      TC_CHECK_CUDA(cudaEventRecord(start_, stream_));
      fn();
      TC_CHECK_CUDA(cudaEventRecord(stop_, stream_));
      TC_CHECK_CUDA(cudaEventSynchronize(stop_));
      float ms = 0;
      TC_CHECK_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
      ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    return static_cast<double>(ts[ts.size() / 2]);
  }

  // A device-to-device copy moving `bytes` (half read, half written): the ceiling for a case
  // that moves as many, launch latency and the last partial wave included.
  double CopyMs(int64_t bytes) {
    const int64_t each = std::min(bytes / 2, copy_limit_ / 2);
    if (src_.p == nullptr) {
      src_ = Alloc(copy_limit_ / 2);
      dst_ = Alloc(copy_limit_ / 2);
    }
    return MedianMs([&] {
      TC_CHECK_CUDA(cudaMemcpyAsync(dst_.p, src_.p, static_cast<size_t>(each),
                                    cudaMemcpyDeviceToDevice, stream_));
    });
  }

  // Frees the copy's buffers (they come back at the next CopyMs).
  void Release() {
    Free(src_);
    Free(dst_);
  }

 private:
  cudaStream_t stream_;
  int reps_;
  int64_t copy_limit_;
  cudaEvent_t start_, stop_;
  DevBuf src_, dst_;
};

// Compares the output the GPU wrote at `out` (device) with the CPU backend's for the same op
// on copies of the inputs: integers and bool exactly, floating values within `ulps` units in
// the last place or `abs_tol` (for results that cancel: a multiply-add the device fuses, erf
// near -1). Returns a description of what differs, or "" when nothing does.
inline std::string CheckAgainstCpu(CpuBackend& cpu, const PreparedOp& op,
                                   const std::vector<TensorView>& inputs, const std::byte* out,
                                   int64_t ulps, double abs_tol = 0) {
  std::vector<std::vector<std::byte>> host(inputs.size());
  std::vector<TensorView> views = inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    host[i].resize(static_cast<size_t>(inputs[i].storage_bytes));
    TC_CHECK_CUDA(
        cudaMemcpy(host[i].data(), inputs[i].data, host[i].size(), cudaMemcpyDeviceToHost));
    views[i].data = host[i].data();
  }
  std::vector<std::byte> want(static_cast<size_t>(op.plan.out_storage_bytes));
  std::vector<std::byte> got(want.size());
  if (auto st = cpu.Run(op, views, want.data()); !st.ok()) return "CPU run: " + st.ToString();
  TC_CHECK_CUDA(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost));
  const DType t = op.plan.out_dtype;
  const auto item = static_cast<size_t>(ItemSize(t));
  int64_t mismatches = 0, worst = 0;
  for (size_t at = 0; at + item <= got.size(); at += item) {
    int64_t g = 0, w = 0;
    std::memcpy(&g, got.data() + at, item);
    std::memcpy(&w, want.data() + at, item);
    if (g == w) continue;
    const int64_t distance = g > w ? g - w : w - g;
    // Two NaNs of different payloads are the same answer.
    bool both_nan = false, close = false;
    if (IsFloating(t)) {
      VisitDType(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_integral_v<T>) {
          T gv, wv;
          std::memcpy(&gv, &g, sizeof(T));
          std::memcpy(&wv, &w, sizeof(T));
          const double gd = static_cast<double>(gv), wd = static_cast<double>(wv);
          both_nan = gd != gd && wd != wd;
          close = std::fabs(gd - wd) <= abs_tol;
        }
      });
    }
    if (both_nan || close) continue;
    if (!IsFloating(t) || distance > ulps) ++mismatches;
    worst = std::max(worst, distance);
  }
  if (mismatches == 0) return "";
  return std::to_string(mismatches) +
         " elements differ from the CPU backend (largest bit distance " + std::to_string(worst) +
         ")";
}

}  // namespace tc::bench
