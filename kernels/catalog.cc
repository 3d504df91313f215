#include "kernels/catalog.h"

#include "kernels/ops/op_list.h"

namespace tc {

const std::vector<CatalogEntry>& Catalog() {
  static const auto* catalog = [] {
    auto* c = new std::vector<CatalogEntry>;
#define TC_ADD_ENTRY(F) \
  c->push_back({static_cast<OpIndex>(c->size()), F::Spec(), F::kArity, F::kComputeTypes});
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
