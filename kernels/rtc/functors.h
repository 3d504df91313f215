// The catalog's functors as a generated kernel names and receives them: each op's C++ type,
// and its functor object built on the host (Make, as the op's own kernels get it) as the
// bytes of a kernel parameter. Host and device agree on these layouts: plain members only.
#pragma once

#include <cstddef>

#include "kernels/catalog.h"
#include "kernels/ops/attributes.h"

namespace tc::rtc {

struct FunctorInfo {
  // "tc::AddOp"
  const char* type;
  size_t size;
  size_t align;
  // Whether it raises integer division by zero (through its `int* error`).
  bool raises;
  // Writes F::Make({attrs, result}) to `out` (size bytes, aligned), its error flag (integer
  // division by zero) pointed at `error`.
  void (*make)(const Attrs& attrs, DType result, int* error, void* out);
};

const FunctorInfo& Functor(OpIndex op);

}  // namespace tc::rtc
