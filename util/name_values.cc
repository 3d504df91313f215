#include "util/name_values.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"

namespace tc::util {

absl::StatusOr<std::vector<std::pair<std::string, int>>> ParseNameIntegers(absl::string_view list) {
  std::vector<std::pair<std::string, int>> out;
  for (absl::string_view entry : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    std::pair<std::string, std::string> kv = absl::StrSplit(entry, absl::MaxSplits('=', 1));
    int value = 0;
    if (kv.first.empty() || !absl::SimpleAtoi(kv.second, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("\"", entry, "\" is not NAME=INTEGER"));
    }
    out.emplace_back(std::move(kv.first), value);
  }
  return out;
}

}  // namespace tc::util
