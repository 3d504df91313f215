// V elements of T moved in one access (two or more 16-byte accesses past 16 bytes): one
// definition for the ahead-of-time kernels and the generated expression kernels (embedded for
// NVRTC).
#pragma once

namespace tc::cuda {

template <typename T, int V>
struct alignas(sizeof(T) * V > 16 ? 16 : sizeof(T) * V) Pack {
  T v[V];
};

}  // namespace tc::cuda
