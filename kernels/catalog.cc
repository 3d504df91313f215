#include "kernels/catalog.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "kernels/ops/op_list.h"

namespace tc {

const std::vector<CatalogEntry>& Catalog() {
  static const auto* catalog = [] {
    auto* c = new std::vector<CatalogEntry>;
// The arity is the functor's own (F::kArity), stated nowhere else; so are the compute types
// whose tiles convert (kConvertingTiles).
#define TC_ADD_ENTRY(F)                                                               \
  {                                                                                   \
    OpSpec spec = F::Spec();                                                          \
    spec.arity = F::kArity;                                                           \
    spec.converting_tiles = kConvertingTiles<F>;                                      \
    c->push_back({static_cast<OpIndex>(c->size()), std::move(spec), F::kComputeTypes, \
                  kHasHostFloatRow<F> || kLongMath<F>});                              \
  }
    TC_FOR_EACH_OP(TC_ADD_ENTRY)
#undef TC_ADD_ENTRY
    return c;
  }();
  return *catalog;
}

const CatalogEntry* FindOp(absl::string_view name) {
  for (const CatalogEntry& e : Catalog()) {
    if (e.spec.name == name) return &e;
  }
  return nullptr;
}

const CatalogEntry* FindOp(absl::string_view name, int arity) {
  for (const CatalogEntry& e : Catalog()) {
    if (e.spec.name == name && e.spec.arity == arity) return &e;
  }
  return nullptr;
}

std::string AritiesOf(absl::string_view name) {
  std::vector<std::string> counts;
  int last = 0;
  for (const CatalogEntry& e : Catalog()) {
    if (e.spec.name != name) continue;
    counts.push_back(std::to_string(e.spec.arity));
    last = e.spec.arity;
  }
  return absl::StrCat(absl::StrJoin(counts, " or "), last == 1 ? " input" : " inputs");
}

}  // namespace tc
