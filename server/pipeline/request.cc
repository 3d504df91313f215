#include "server/pipeline/request.h"

namespace tc::server {

bool ComputeSpec::needs_identity() const {
  if (keep_output_resident || !output_region.empty()) return true;
  for (const InputSpec& in : inputs) {
    if (in.source == InputSource::kResident || in.source == InputSource::kRegion) return true;
  }
  return false;
}

int64_t ComputeSpec::inline_bytes() const {
  int64_t n = 0;
  for (const InputSpec& in : inputs) {
    if (in.source == InputSource::kInline) n += static_cast<int64_t>(in.bytes.size());
  }
  return n;
}

bool ComputeSpec::inline_only() const {
  if (keep_output_resident || !output_region.empty()) return false;
  for (const InputSpec& in : inputs) {
    if (in.source != InputSource::kInline) return false;
  }
  return true;
}

}  // namespace tc::server
