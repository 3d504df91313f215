// Catalog entries (name, attributes, dtypes, description) of the functors in op_list.h.
#include "kernels/ops/op_list.h"

namespace tc {

OpSpec AddOp::Spec() {
  return {"add",
          2,
          {{"alpha", AttrType::kFloat, false, 1.0, "multiplier of the second input"}},
          {DType::kFloat32},
          "a + alpha * b, with NumPy broadcasting"};
}

}  // namespace tc
