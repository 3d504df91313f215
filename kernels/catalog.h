// The op catalog: every op of op_list.h with its spec, found by name.
#pragma once

#include "absl/strings/string_view.h"
#include <vector>

#include "kernels/ops/op_spec.h"

namespace tc {

// Position of an op in TC_FOR_EACH_OP; backends index their launch tables with it.
using OpIndex = int;

struct CatalogEntry {
  OpIndex index;
  OpSpec spec;
};

const std::vector<CatalogEntry>& Catalog();

// nullptr when there is no such op.
const CatalogEntry* FindOp(absl::string_view name);

}  // namespace tc
