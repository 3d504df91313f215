#include "kernels/catalog.h"

#include <utility>

#include "kernels/ops/op_list.h"

namespace tc {

const std::vector<CatalogEntry>& Catalog() {
  static const auto* catalog = [] {
    auto* c = new std::vector<CatalogEntry>;
// The arity is the functor's own (F::kArity), stated nowhere else.
#define TC_ADD_ENTRY(F)                                                            \
  {                                                                                \
    OpSpec spec = F::Spec();                                                       \
    spec.arity = F::kArity;                                                        \
    c->push_back({static_cast<OpIndex>(c->size()), std::move(spec), F::kComputeTypes}); \
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

}  // namespace tc
