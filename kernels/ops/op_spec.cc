// Checks that several ops' specs share.
#include "kernels/ops/op_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tc {

absl::Status CheckWholeNumber(const Attrs& attrs, DType result, const char* name) {
  if (!IsIntegral(result)) return absl::OkStatus();
  const double v = attrs.Float(name);
  if (std::trunc(v) != v || std::fabs(v) > 9007199254740992.0) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name,
                                                   "' must be a whole number for ",
                                                   DTypeName(result), " inputs, got ", v));
  }
  return absl::OkStatus();
}

}  // namespace tc
