#include "kernels/cpu/isa.h"

#include <cstdlib>
#include <cstring>

namespace tc::cpu {
namespace {

bool Supported(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return true;
#if TC_CPU_ISA_VARIANTS
    // __builtin_cpu_supports checks the operating system's saving of the vector state too.
    case Isa::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
             __builtin_cpu_supports("popcnt");
    case Isa::kAvx512:
      __builtin_cpu_init();
      return Supported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq");
#else
    default:
      return false;
#endif
  }
  return false;
}

Isa Decide() {
  Isa best = Isa::kBaseline;
  for (int i = kNumIsas - 1; i > 0; --i) {
    if (Supported(static_cast<Isa>(i))) {
      best = static_cast<Isa>(i);
      break;
    }
  }
  if (const char* env = std::getenv("TC_CPU_ISA")) {
    for (int i = 0; i < kNumIsas; ++i) {
      const Isa asked = static_cast<Isa>(i);
      if (std::strcmp(env, IsaName(asked)) == 0 && i <= static_cast<int>(best)) return asked;
    }
  }
  return best;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return "baseline";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool IsaAvailable(Isa isa) {
  static const bool available[kNumIsas] = {Supported(Isa::kBaseline), Supported(Isa::kAvx2),
                                           Supported(Isa::kAvx512)};
  const int i = static_cast<int>(isa);
  return i >= 0 && i < kNumIsas && available[i];
}

Isa ProcessIsa() {
  static const Isa isa = Decide();
  return isa;
}

}  // namespace tc::cpu
