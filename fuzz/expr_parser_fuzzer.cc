// The expression parser on arbitrary bytes: it either refuses them with INVALID_ARGUMENT or
// returns a tree whose nodes are in post-order, whose calls have their ops' arity, and that
// stays within the limits; never a crash, a deep stack or a hang.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "kernels/expr/parser.h"

namespace {

void Require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the number of inputs (a, b, ...) and small or default limits.
  const int num_inputs = data[0] % 5;
  tc::expr::Limits limits;
  if (data[0] & 0x80) limits = tc::expr::Limits{4096, 8, 64};
  const absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto e = tc::expr::Parse(text, tc::expr::DefaultInputNames(num_inputs), limits);
  if (!e.ok()) {
    Require(e.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  Require(!e->nodes.empty() && static_cast<int>(e->nodes.size()) <= limits.max_nodes);
  for (int i = 0; i < static_cast<int>(e->nodes.size()); ++i) {
    const tc::expr::Node& n = e->at(i);
    for (int a : n.args) Require(a >= 0 && a < i);
    if (n.kind == tc::expr::NodeKind::kCall) {
      Require(n.op != nullptr && static_cast<int>(n.args.size()) == n.op->spec.arity);
    } else {
      Require(n.args.empty());
    }
    if (n.kind == tc::expr::NodeKind::kInput) Require(n.input >= 0 && n.input < num_inputs);
  }
  Require(!tc::expr::Canonical(*e).empty());
  return 0;
}
