// Parses an element-wise expression such as "sigmoid(a * b + c) * 0.5" into a checked tree.
//
// Grammar (Python's operators and precedence, lowest first):
//   expr    := or
//   or      := and ("or" and)*                            logical_or
//   and     := not ("and" not)*                           logical_and
//   not     := "not" not | compare                        logical_not
//   compare := bitor (("=="|"!="|"<"|"<="|">"|">=") bitor)?   eq ne lt le gt ge (no chains)
//   bitor   := bitxor ("|" bitxor)*                       bitwise_or
//   bitxor  := bitand ("^" bitand)*                       bitwise_xor
//   bitand  := shift ("&" shift)*                         bitwise_and
//   shift   := sum (("<<"|">>") sum)*                     left_shift right_shift
//   sum     := term (("+"|"-") term)*                     add sub
//   term    := unary (("*"|"/"|"//"|"%") unary)*          mul div floor_divide remainder
//   unary   := ("-"|"+"|"~") unary | power                neg, bitwise_not
//   power   := primary ("**" unary)?                      pow (right-associative)
//   primary := number | "True" | "False" | input | call | "(" expr ")"
//   call    := op "(" [arg ("," arg)*] ")"   arg := expr | attribute "=" value
//   value   := ["-"] number | "True" | "False" | dtype name | "quoted string"
// A call's positional arguments are the op's inputs, in the catalog's order; its keyword
// arguments are the op's attributes. cast also takes its dtype second: cast(x, float16).
// Inputs are named by the caller (a, b, c... by default); an op name is never an input name.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/expr/ast.h"

namespace tc::expr {

struct Limits {
  int max_bytes = 64 << 10;
  // Nesting of parentheses, calls and unary operators together.
  int max_depth = 128;
  int max_nodes = 1024;
};

// The default input names: a, b, c, ... for `count` inputs (at most 26).
std::vector<std::string> DefaultInputNames(int count);

// INVALID_ARGUMENT, naming the position ("at 7: ...") and what was expected, for anything
// that is not a well-formed expression over `inputs` and the catalog's ops: unknown names,
// wrong arity, attributes the op does not have or of the wrong type, limits passed.
absl::StatusOr<Expression> Parse(absl::string_view text, const std::vector<std::string>& inputs,
                                 const Limits& limits = {});

}  // namespace tc::expr
