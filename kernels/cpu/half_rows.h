// float16 <-> float32 conversion of whole rows, with the x86 F16C instructions where the CPU
// has them (checked once at run time) and the portable conversion elsewhere. Both round to
// nearest even; they differ only in which NaN payload a NaN keeps.
#pragma once

#include <cstdint>

namespace tc::cpu {

void HalfToFloatRow(const uint16_t* src, float* dst, int64_t n);
void FloatToHalfRow(const float* src, uint16_t* dst, int64_t n);

// Whether the F16C path is in use (for benchmarks and logs).
bool HalfRowsUseF16C();

}  // namespace tc::cpu
