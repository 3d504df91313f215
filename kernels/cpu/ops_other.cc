// CPU kernels of the other ops.
#include "kernels/cpu/launch.h"

namespace tc {
TC_OTHER_OPS(TC_CPU_INSTANTIATE)
}  // namespace tc
