// CPU kernels of the comparison ops.
#include "kernels/cpu/launch.h"

namespace tc {
TC_COMPARISON_OPS(TC_CPU_INSTANTIATE)
}  // namespace tc
