// CPU kernels of the unary ops.
#include "kernels/cpu/launch.h"

namespace tc {
TC_UNARY_OPS(TC_CPU_INSTANTIATE)
}  // namespace tc
