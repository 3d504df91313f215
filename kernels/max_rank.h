// The largest rank accepted anywhere in the engine: one definition for host code, the
// ahead-of-time kernels and the generated expression kernels (embedded for NVRTC).
#pragma once

namespace tc {

inline constexpr int kMaxRank = 8;

}  // namespace tc
