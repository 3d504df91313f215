// Element-wise expressions over a request's inputs: the checked tree a client's string parses
// to (kernels/expr/parser.h). Every call names a catalog op and carries its attributes, so
// that later stages (typing, code generation, block evaluation) see only what the catalog
// knows; no text of the client's survives past the parser except as literal values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/catalog.h"
#include "kernels/ops/attributes.h"

namespace tc::expr {

enum class NodeKind : uint8_t {
  kInput,    // the request's input number `input`
  kLiteral,  // a number or True/False, or a folded constant (FoldConstants)
  kCall,     // catalog op `op` over `args`
};

// A literal's kind follows Python's: PyTorch promotes tensors with Python scalars by these
// categories (a bool, an int or a float), not by a dtype of their own.
enum class LiteralKind : uint8_t { kBool, kInt, kFloat };

struct Node {
  NodeKind kind = NodeKind::kLiteral;
  // Byte offset in the expression where this node starts, for messages.
  int position = 0;
  int input = -1;
  LiteralKind literal = LiteralKind::kFloat;
  double float_value = 0;  // kFloat
  int64_t int_value = 0;   // kInt, kBool (0 or 1)
  // A literal that is a zero-dimensional tensor of this dtype rather than a Python number: a
  // cast of literals, folded (cast(0.1, float16) is torch.tensor(0.1, dtype=torch.float16)).
  // Its value is exact in the dtype.
  std::optional<DType> zero_dim;
  const CatalogEntry* op = nullptr;
  AttrMap attrs;
  std::vector<int> args;  // node indices
};

// Nodes in post-order: every node's arguments come before it, the root last.
struct Expression {
  std::vector<Node> nodes;
  int root() const { return static_cast<int>(nodes.size()) - 1; }
  const Node& at(int i) const { return nodes[static_cast<size_t>(i)]; }
};

// The tree written back out in one canonical form: calls by catalog name, inputs as $0, $1...,
// literals in their shortest exact form, attributes sorted by name. Equal strings mean equal
// trees (the compiled-kernel cache's key).
std::string Canonical(const Expression& e);

}  // namespace tc::expr
