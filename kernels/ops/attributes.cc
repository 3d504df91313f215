#include "kernels/ops/attributes.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tc {

absl::string_view AttrTypeName(AttrType t) {
  switch (t) {
    case AttrType::kFloat:
      return "float";
    case AttrType::kInt:
      return "int";
    case AttrType::kBool:
      return "bool";
    case AttrType::kDType:
      return "dtype";
    case AttrType::kString:
      return "string";
  }
  return "unknown";
}

std::string AttrValueToString(const AttrValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return "";
  if (auto* f = std::get_if<double>(&v)) return absl::StrCat(*f);
  if (auto* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i);
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* t = std::get_if<DType>(&v)) return std::string(DTypeName(*t));
  return std::get<std::string>(v);
}

namespace {

// Matches `v` to type `t`, converting an int or a bool to a float where a float is declared
// (as PyTorch takes add(x, y, alpha=2) or alpha=True).
bool Coerce(AttrType t, AttrValue& v) {
  switch (t) {
    case AttrType::kFloat:
      if (auto* i = std::get_if<int64_t>(&v)) v = static_cast<double>(*i);
      if (auto* b = std::get_if<bool>(&v)) v = *b ? 1.0 : 0.0;
      return std::holds_alternative<double>(v);
    case AttrType::kInt:
      return std::holds_alternative<int64_t>(v);
    case AttrType::kBool:
      return std::holds_alternative<bool>(v);
    case AttrType::kDType:
      return std::holds_alternative<DType>(v);
    case AttrType::kString:
      return std::holds_alternative<std::string>(v);
  }
  return false;
}

}  // namespace

absl::StatusOr<Attrs> Attrs::Resolve(absl::string_view op, const std::vector<AttrSpec>& specs,
                                     const AttrMap& given) {
  Attrs out;
  for (const auto& [name, value] : given) {
    const AttrSpec* spec = nullptr;
    for (const AttrSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) {
      std::vector<std::string> known;
      for (const AttrSpec& s : specs) known.push_back(s.name);
      return absl::InvalidArgumentError(
          absl::StrCat("op '", op, "' has no attribute '", name,
                       "' (it takes: ", known.empty() ? "none" : absl::StrJoin(known, ", "), ")"));
    }
    AttrValue v = value;
    if (!Coerce(spec->type, v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attribute '", name, "' of op '", op, "' must be of type ", AttrTypeName(spec->type)));
    }
    out.values_[name] = std::move(v);
  }
  for (const AttrSpec& s : specs) {
    if (out.values_.contains(s.name)) continue;
    if (s.required) {
      return absl::InvalidArgumentError(absl::StrCat("op '", op, "' needs attribute '", s.name,
                                                     "' (", AttrTypeName(s.type), ")"));
    }
    out.values_[s.name] = s.default_value;
  }
  return out;
}

const AttrValue& Attrs::Get(absl::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) std::abort();  // A catalog bug: the op reads what it never declared.
  return it->second;
}

bool Attrs::Has(absl::string_view name) const {
  return !std::holds_alternative<std::monostate>(Get(name));
}

double Attrs::Float(absl::string_view name) const { return std::get<double>(Get(name)); }
int64_t Attrs::Int(absl::string_view name) const { return std::get<int64_t>(Get(name)); }
bool Attrs::Bool(absl::string_view name) const { return std::get<bool>(Get(name)); }
DType Attrs::Type(absl::string_view name) const { return std::get<DType>(Get(name)); }
const std::string& Attrs::String(absl::string_view name) const {
  return std::get<std::string>(Get(name));
}

}  // namespace tc
