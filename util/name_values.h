// "NAME=INTEGER,..." lists, as flags give gRPC channel arguments.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tc::util {

// The pairs of `list` in order; empty entries are skipped, entries trimmed. An entry without a name
// or whose value is not an integer of 32 bits is an error that quotes it.
absl::StatusOr<std::vector<std::pair<std::string, int>>> ParseNameIntegers(absl::string_view list);

}  // namespace tc::util
