// Which x86 vector extensions the CPU kernels' loops are compiled for. The loops (loops.h,
// launch.h) are compiled once per level, each copy in its own namespace (isa_baseline,
// isa_avx2, isa_avx512), and a process runs the highest level its CPU has, unless
// TC_CPU_ISA=baseline|avx2|avx512 asks for a lower one. Every level computes the same bits:
// the same operations in the same order, only more lanes at once (no FMA contraction:
// -ffp-contract=off), which cpu_backend_test checks against the baseline.
//
// Only the loops' own code gets the wider target (isa_begin.inc): what they call from other
// headers (the functors, the standard library, Abseil) is compiled for the baseline and
// inlined into them, so no function with a non-unique name carries AVX instructions into the
// link, where the linker could pick it for a baseline caller (ctest isa_symbols_test).
#pragma once

#include <cstdint>

// TC_CPU_ISA_LEVEL: 0 baseline (x86-64, SSE2), 1 AVX2, 2 AVX-512 (F, VL, BW, DQ).
#ifndef TC_CPU_ISA_LEVEL
#define TC_CPU_ISA_LEVEL 0
#endif
#if TC_CPU_ISA_LEVEL == 0
#define TC_CPU_ISA_NS isa_baseline
#elif TC_CPU_ISA_LEVEL == 1
#define TC_CPU_ISA_NS isa_avx2
#elif TC_CPU_ISA_LEVEL == 2
#define TC_CPU_ISA_NS isa_avx512
#else
#error "TC_CPU_ISA_LEVEL is 0, 1 or 2"
#endif

namespace tc::cpu {

enum class Isa : int8_t { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };
inline constexpr int kNumIsas = 3;

const char* IsaName(Isa isa);
// Compiled into this build (the wider levels on x86-64 only) and supported by this CPU (and
// its operating system).
bool IsaAvailable(Isa isa);
// The level this process runs: TC_CPU_ISA if set and available, else the highest available.
Isa ProcessIsa();

}  // namespace tc::cpu
