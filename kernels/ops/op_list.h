// Every op the engine serves, once. The catalog and each backend expand this list, so an op
// is added by writing its functor and one line here.
#pragma once

#include "kernels/ops/binary.h"

// X(Functor)
#define TC_FOR_EACH_OP(X) \
  X(AddOp)
