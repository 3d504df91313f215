// CPU kernels of the arithmetic ops.
#include "kernels/cpu/launch.h"

namespace tc {
TC_ARITHMETIC_OPS(TC_CPU_INSTANTIATE)
}  // namespace tc
