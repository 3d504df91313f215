// Op attributes (alpha, min, max, a target dtype, ...): their declared form in the catalog and
// the values a request carries.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/dtype.h"

namespace tc {

enum class AttrType : uint8_t { kFloat, kInt, kBool, kDType, kString };

absl::string_view AttrTypeName(AttrType t);

// monostate: absent (an optional attribute without a default).
using AttrValue = std::variant<std::monostate, double, int64_t, bool, DType, std::string>;
using AttrMap = absl::flat_hash_map<std::string, AttrValue>;

// "1.5", "2", "true", "float32", or the string itself.
std::string AttrValueToString(const AttrValue& v);

struct AttrSpec {
  std::string name;
  AttrType type;
  bool required = false;
  // Used when the request leaves the attribute out (monostate: it stays absent); ignored
  // when required.
  AttrValue default_value;
  std::string description;
};

// Attribute values of one request, checked against the op's specs: every name known, every
// value of the declared type (an int is accepted where a float is declared), every required
// one present. Absent optional attributes read as their defaults.
class Attrs {
 public:
  static absl::StatusOr<Attrs> Resolve(absl::string_view op, const std::vector<AttrSpec>& specs,
                                       const AttrMap& given);
  bool Has(absl::string_view name) const;
  double Float(absl::string_view name) const;
  int64_t Int(absl::string_view name) const;
  bool Bool(absl::string_view name) const;
  DType Type(absl::string_view name) const;
  const std::string& String(absl::string_view name) const;
  // Every value, defaults included (absent optional ones as monostate).
  const AttrMap& values() const { return values_; }

 private:
  const AttrValue& Get(absl::string_view name) const;
  AttrMap values_;
};

}  // namespace tc
