// What the kernel benches share: CUDA errors end the run with a message, and a launch's
// time is the median of 30 event-timed calls after 3 warm-up ones.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace tc::cuda::bench {

inline void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <typename Launch>
float MedianMs(Launch&& launch) {
  cudaEvent_t e0, e1;
  Check(cudaEventCreate(&e0), "cudaEventCreate");
  Check(cudaEventCreate(&e1), "cudaEventCreate");
  std::vector<float> ms;
  for (int i = 0; i < 33; ++i) {
    Check(cudaEventRecord(e0), "cudaEventRecord");
    launch();
    Check(cudaEventRecord(e1), "cudaEventRecord");
    Check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float t = 0;
    Check(cudaEventElapsedTime(&t, e0, e1), "cudaEventElapsedTime");
    if (i >= 3) ms.push_back(t);
  }
  Check(cudaGetLastError(), "launch");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace tc::cuda::bench
