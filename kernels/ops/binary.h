// Binary element-wise functors. Each is a small value type built once per request from its
// attributes (Make) and called per element on either backend.
#pragma once

#include "kernels/ops/attributes.h"
#include "kernels/ops/host_device.h"
#include "kernels/ops/op_spec.h"

namespace tc {

// out = a + alpha * b
struct AddOp {
  static constexpr int kArity = 2;
  static OpSpec Spec();
  static AddOp Make(const Attrs& attrs) { return AddOp{attrs.Float("alpha")}; }

  double alpha;

  template <typename T>
  TC_HOST_DEVICE T operator()(T a, T b) const {
    return a + static_cast<T>(alpha) * b;
  }
};

}  // namespace tc
