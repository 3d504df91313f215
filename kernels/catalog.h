// The op catalog: every op of op_list.h with its spec, found by name (and, where one name has
// forms of different arities, like clamp with number or tensor bounds, by the inputs' count).
#pragma once

#include "absl/strings/string_view.h"
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops/op_spec.h"

namespace tc {

// Position of an op in TC_FOR_EACH_OP; backends index their launch tables with it.
using OpIndex = int;

struct CatalogEntry {
  OpIndex index;
  OpSpec spec;
  // The functor's compute types (F::kComputeTypes); tests/kernels/catalog_test.cc checks that
  // every dtype the spec accepts has a kernel. (spec.arity is the functor's F::kArity.)
  uint32_t compute_types;
  // Long math per element (transcendental functions, pow): what the planner weighs where a
  // fused kernel inlines a copy of the tree per vector element.
  bool long_math = false;
};

const std::vector<CatalogEntry>& Catalog();

// nullptr when there is no such op. Without an arity: the name's first form.
const CatalogEntry* FindOp(absl::string_view name);
// The form of `name` taking `arity` inputs; nullptr when it has none.
const CatalogEntry* FindOp(absl::string_view name, int arity);
// "1 input", "2 inputs", "1 or 3 inputs": what the forms of `name` take.
std::string AritiesOf(absl::string_view name);

}  // namespace tc
