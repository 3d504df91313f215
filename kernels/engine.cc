#include "kernels/engine.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tc {

absl::StatusOr<const CatalogEntry*> LookupOp(absl::string_view name) {
  if (const CatalogEntry* e = FindOp(name)) return e;
  std::vector<std::string> names;
  for (const CatalogEntry& e : Catalog()) names.push_back(e.spec.name);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown op '", name, "' (ops: ", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<PreparedOp> PrepareOp(absl::string_view name, absl::Span<const TensorView> inputs,
                                     const AttrMap& attrs) {
  PreparedOp p;
  auto entry = LookupOp(name);
  if (!entry.ok()) return entry.status();
  p.op = *entry;
  const OpSpec& spec = p.op->spec;
  if (static_cast<int>(inputs.size()) != spec.arity) {
    return absl::InvalidArgumentError(absl::StrCat("op '", spec.name, "' takes ", spec.arity,
                                                   " inputs, got ", inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (auto s = ValidateView(inputs[i], absl::StrCat("input ", i)); !s.ok()) return s;
    if (std::find(spec.dtypes.begin(), spec.dtypes.end(), inputs[i].dtype) == spec.dtypes.end()) {
      std::vector<absl::string_view> ok;
      for (DType t : spec.dtypes) ok.push_back(DTypeName(t));
      return absl::InvalidArgumentError(absl::StrCat(
          "op '", spec.name, "' does not accept dtype ", DTypeName(inputs[i].dtype),
          " (input ", i, "); it accepts: ", absl::StrJoin(ok, ", ")));
    }
    if (inputs[i].dtype != inputs[0].dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op '", spec.name, "' needs inputs of one dtype, got ", DTypeName(inputs[0].dtype),
          " and ", DTypeName(inputs[i].dtype)));
    }
  }
  auto resolved = Attrs::Resolve(spec.name, spec.attrs, attrs);
  if (!resolved.ok()) return resolved.status();
  p.attrs = *std::move(resolved);
  const DType t = inputs[0].dtype;
  auto plan = PlanElementwise(inputs, t, t);
  if (!plan.ok()) return plan.status();
  p.plan = *std::move(plan);
  return p;
}

}  // namespace tc
