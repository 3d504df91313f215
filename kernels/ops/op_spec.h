// What the catalog says of an op: what ListOps shows and what requests are checked against.
#pragma once

#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/ops/attributes.h"

namespace tc {

struct OpSpec {
  std::string name;
  int arity = 0;
  std::vector<AttrSpec> attrs;
  // Input dtypes accepted.
  std::vector<DType> dtypes;
  std::string description;
};

}  // namespace tc
