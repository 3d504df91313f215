#include "kernels/expr/parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tc::expr {
namespace {

enum class Tok : uint8_t { kEnd, kNumber, kName, kString, kSymbol };

struct Token {
  Tok kind = Tok::kEnd;
  absl::string_view text;
  int position = 0;
};

class Parser {
 public:
  Parser(absl::string_view text, const std::vector<std::string>& inputs, const Limits& limits)
      : text_(text), inputs_(inputs), limits_(limits) {}

  absl::StatusOr<Expression> Run() {
    if (static_cast<int64_t>(text_.size()) > limits_.max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expression: ", text_.size(), " bytes, more than the limit of ", limits_.max_bytes));
    }
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (FindOp(inputs_[i]) != nullptr || inputs_[i] == "True" || inputs_[i] == "False" ||
          IsKeyword(inputs_[i]) || !IsIdentifier(inputs_[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("expression: input name '", inputs_[i],
                         "' is not usable (an op's name, a keyword or not an identifier)"));
      }
      for (size_t j = 0; j < i; ++j) {
        if (inputs_[i] == inputs_[j]) {
          return absl::InvalidArgumentError(
              absl::StrCat("expression: input name '", inputs_[i], "' given twice"));
        }
      }
    }
    if (!Next()) return error_;
    if (tok_.kind == Tok::kEnd) {
      Fail(0, "the expression is empty");
      return error_;
    }
    if (!Or()) return error_;
    if (tok_.kind != Tok::kEnd) {
      Fail(tok_.position, absl::StrCat("unexpected '", tok_.text, "' after a complete expression"));
      return error_;
    }
    return std::move(e_);
  }

 private:
  static bool IsKeyword(absl::string_view s) { return s == "and" || s == "or" || s == "not"; }
  static bool IsIdentifier(absl::string_view s) {
    if (s.empty() || !(absl::ascii_isalpha(s[0]) || s[0] == '_')) return false;
    return std::all_of(s.begin(), s.end(),
                       [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
  }

  // Records the first error; every rule then returns false up to Run.
  void Fail(int position, absl::string_view what) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(absl::StrCat("expression: at ", position, ": ", what));
    }
  }

  // Reads the next token into tok_; false (error_ set) on a character no token starts with.
  bool Next() {
    size_t i = pos_;
    while (i < text_.size() && absl::ascii_isspace(text_[i])) ++i;
    tok_.position = static_cast<int>(i);
    if (i == text_.size()) {
      tok_ = {Tok::kEnd, absl::string_view(), static_cast<int>(i)};
      pos_ = i;
      return true;
    }
    const char c = text_[i];
    size_t j = i + 1;
    if (absl::ascii_isdigit(c) ||
        (c == '.' && i + 1 < text_.size() && absl::ascii_isdigit(text_[i + 1]))) {
      // An exponent's sign belongs to a decimal number, not to 0x1e+5 (0x1e plus 5).
      const bool hex =
          c == '0' && i + 1 < text_.size() && (text_[i + 1] == 'x' || text_[i + 1] == 'X');
      while (j < text_.size() &&
             (absl::ascii_isalnum(text_[j]) || text_[j] == '.' || text_[j] == '_' ||
              (!hex && (text_[j] == '+' || text_[j] == '-') &&
               (text_[j - 1] == 'e' || text_[j - 1] == 'E')))) {
        ++j;
      }
      tok_.kind = Tok::kNumber;
    } else if (absl::ascii_isalpha(c) || c == '_') {
      while (j < text_.size() && (absl::ascii_isalnum(text_[j]) || text_[j] == '_')) ++j;
      tok_.kind = Tok::kName;
    } else if (c == '"' || c == '\'') {
      while (j < text_.size() && text_[j] != c) {
        if (!absl::ascii_isprint(text_[j])) {
          Fail(static_cast<int>(j), "a string may hold printable characters only");
          return false;
        }
        ++j;
      }
      if (j == text_.size()) {
        Fail(static_cast<int>(i), "the string is not closed");
        return false;
      }
      ++j;
      tok_.kind = Tok::kString;
    } else {
      static constexpr const char* kTwo[] = {"**", "//", "<<", ">>", "==", "!=", "<=", ">="};
      const absl::string_view rest = text_.substr(i);
      bool two = false;
      for (const char* t : kTwo) two = two || absl::StartsWith(rest, t);
      if (two) {
        j = i + 2;
      } else if (absl::string_view("+-*/%<>&|^~(),=").find(c) == absl::string_view::npos) {
        Fail(static_cast<int>(i),
             absl::ascii_isprint(c)
                 ? absl::StrCat("unexpected character '", std::string(1, c), "'")
                 : absl::StrFormat("unexpected byte 0x%02x", static_cast<uint8_t>(c)));
        return false;
      }
      tok_.kind = Tok::kSymbol;
    }
    tok_.text = text_.substr(i, j - i);
    pos_ = j;
    return true;
  }

  bool Is(absl::string_view symbol) const {
    return (tok_.kind == Tok::kSymbol || tok_.kind == Tok::kName) && tok_.text == symbol;
  }

  bool Expect(absl::string_view symbol, absl::string_view where) {
    if (!Is(symbol)) {
      Fail(tok_.position, absl::StrCat("expected '", symbol, "' ", where, ", found ", Describe()));
      return false;
    }
    return Next();
  }

  std::string Describe() const {
    return tok_.kind == Tok::kEnd ? "the end" : absl::StrCat("'", tok_.text, "'");
  }

  // Appends a node; false past the node limit.
  bool Add(Node n) {
    if (static_cast<int>(e_.nodes.size()) >= limits_.max_nodes) {
      Fail(n.position, absl::StrCat("more than ", limits_.max_nodes, " nodes"));
      return false;
    }
    e_.nodes.push_back(std::move(n));
    return true;
  }

  bool Call(const char* op_name, int position, std::vector<int> args) {
    Node n;
    n.kind = NodeKind::kCall;
    n.position = position;
    n.op = FindOp(op_name);
    n.args = std::move(args);
    return CheckCall(n) && Add(std::move(n));
  }

  // The op's form for the arguments' count (clamp(x, lo, hi) is clamp's tensor form), and its
  // attributes as the catalog resolves them for a request.
  bool CheckCall(Node& n) {
    const int count = static_cast<int>(n.args.size());
    if (count != n.op->spec.arity) {
      const CatalogEntry* form = FindOp(n.op->spec.name, count);
      if (form == nullptr) {
        Fail(n.position,
             absl::StrCat(n.op->spec.name, " takes ", AritiesOf(n.op->spec.name), ", not ", count));
        return false;
      }
      n.op = form;
    }
    const OpSpec& spec = n.op->spec;
    auto resolved = Attrs::Resolve(spec.name, spec.attrs, n.attrs);
    if (!resolved.ok()) {
      Fail(n.position, resolved.status().message());
      return false;
    }
    return true;
  }

  // Guards every rule that can nest: a deep expression is refused, never a deep stack.
  struct Depth {
    explicit Depth(Parser* p) : p(p) { ++p->depth_; }
    ~Depth() { --p->depth_; }
    Parser* p;
  };
  bool TooDeep() {
    if (depth_ <= limits_.max_depth) return false;
    Fail(tok_.position, absl::StrCat("nested more than ", limits_.max_depth, " deep"));
    return true;
  }

  int Last() const { return static_cast<int>(e_.nodes.size()) - 1; }

  bool IsInputName(absl::string_view name) const {
    return std::find(inputs_.begin(), inputs_.end(), name) != inputs_.end();
  }

  // Whether the current name token is followed by '(' (a call), spaces aside.
  bool CallFollows() const {
    size_t i = static_cast<size_t>(tok_.position) + tok_.text.size();
    while (i < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[i]))) ++i;
    return i < text_.size() && text_[i] == '(';
  }

  // A left-associative level: next(), then (op next())* for the symbols in `ops`.
  bool LeftAssoc(bool (Parser::*next)(),
                 std::initializer_list<std::pair<const char*, const char*>> ops) {
    const int position = tok_.position;
    if (!(this->*next)()) return false;
    for (;;) {
      const char* op = nullptr;
      for (const auto& [symbol, name] : ops) {
        if (Is(symbol)) op = name;
      }
      if (op == nullptr) return true;
      const int lhs = Last();
      if (!Next() || !(this->*next)()) return false;
      if (!Call(op, position, {lhs, Last()})) return false;
    }
  }

  bool Or() {
    Depth d(this);
    if (TooDeep()) return false;
    return LeftAssoc(&Parser::And, {{"or", "logical_or"}});
  }
  bool And() { return LeftAssoc(&Parser::Not, {{"and", "logical_and"}}); }
  bool Not() {
    if (!Is("not")) return Compare();
    Depth d(this);
    if (TooDeep()) return false;
    const int position = tok_.position;
    if (!Next() || !Not()) return false;
    return Call("logical_not", position, {Last()});
  }
  bool Compare() {
    const int position = tok_.position;
    if (!BitOr()) return false;
    static constexpr std::pair<const char*, const char*> kOps[] = {
        {"==", "eq"}, {"!=", "ne"}, {"<=", "le"}, {">=", "ge"}, {"<", "lt"}, {">", "gt"}};
    for (const auto& [symbol, name] : kOps) {
      if (!Is(symbol)) continue;
      const int lhs = Last();
      if (!Next() || !BitOr()) return false;
      if (!Call(name, position, {lhs, Last()})) return false;
      for (const auto& [s2, n2] : kOps) {
        (void)n2;
        if (Is(s2)) {
          Fail(tok_.position, "comparisons do not chain: write (a < b) and (b < c)");
          return false;
        }
      }
      return true;
    }
    return true;
  }
  bool BitOr() { return LeftAssoc(&Parser::BitXor, {{"|", "bitwise_or"}}); }
  bool BitXor() { return LeftAssoc(&Parser::BitAnd, {{"^", "bitwise_xor"}}); }
  bool BitAnd() { return LeftAssoc(&Parser::Shift, {{"&", "bitwise_and"}}); }
  bool Shift() { return LeftAssoc(&Parser::Sum, {{"<<", "left_shift"}, {">>", "right_shift"}}); }
  bool Sum() { return LeftAssoc(&Parser::Term, {{"+", "add"}, {"-", "sub"}}); }
  bool Term() {
    return LeftAssoc(&Parser::Unary,
                     {{"*", "mul"}, {"/", "div"}, {"//", "floor_divide"}, {"%", "remainder"}});
  }
  bool Unary() {
    if (!Is("-") && !Is("+") && !Is("~")) return Power();
    Depth d(this);
    if (TooDeep()) return false;
    const int position = tok_.position;
    const absl::string_view symbol = tok_.text;
    if (!Next() || !Unary()) return false;
    if (symbol == "+") return true;
    Node& operand = e_.nodes.back();
    if (symbol == "-" && operand.kind == NodeKind::kLiteral &&
        operand.literal != LiteralKind::kBool) {
      // A negative literal stays a literal, as Python folds it.
      if (operand.literal == LiteralKind::kFloat) {
        operand.float_value = -operand.float_value;
      } else if (operand.int_value == INT64_MIN) {
        Fail(position, "the integer literal does not fit 64 bits");
        return false;
      } else {
        operand.int_value = -operand.int_value;
      }
      operand.position = position;
      return true;
    }
    return Call(symbol == "-" ? "neg" : "bitwise_not", position, {Last()});
  }
  bool Power() {
    const int position = tok_.position;
    if (!Primary()) return false;
    if (!Is("**")) return true;
    const int base = Last();
    if (!Next() || !Unary()) return false;
    return Call("pow", position, {base, Last()});
  }

  // A number as Python writes it: decimal, 0x/0o/0b integers, floats with a point or an
  // exponent, underscores between digits; a decimal integer with a leading zero (Python's
  // SyntaxError) and complex numbers are refused.
  bool Number(Node& n) {
    const std::string written(tok_.text);
    n.kind = NodeKind::kLiteral;
    n.position = tok_.position;
    auto fail = [&](absl::string_view why) {
      Fail(n.position, absl::StrCat("'", written, "' ", why));
      return false;
    };
    const bool prefixed = written.size() > 1 && written[0] == '0' &&
                          absl::string_view("xXoObB").find(written[1]) != absl::string_view::npos;
    const int base = !prefixed                                  ? 10
                     : (written[1] == 'x' || written[1] == 'X') ? 16
                     : (written[1] == 'o' || written[1] == 'O') ? 8
                                                                : 2;
    auto digit = [&](char c) {
      if (base == 16) return absl::ascii_isxdigit(c);
      return absl::ascii_isdigit(c) && c - '0' < base;
    };
    // Underscores only between two digits (after the prefix, between it and a digit).
    std::string s;
    for (size_t i = prefixed ? 2 : 0; i < written.size(); ++i) {
      if (written[i] != '_') {
        s.push_back(written[i]);
        continue;
      }
      const bool after = i > 0 && (digit(written[i - 1]) || (prefixed && i == 2));
      if (!after || i + 1 == written.size() || !digit(written[i + 1])) {
        return fail("is not a number: '_' goes between digits");
      }
    }
    if (!s.empty() && (s.back() == 'j' || s.back() == 'J')) {
      return fail("is a complex number; there are none here");
    }
    char* end = nullptr;
    errno = 0;
    if (prefixed) {
      if (s.empty()) return fail("is not a number");
      for (char c : s) {
        if (!digit(c)) return fail("is not a number");
      }
      const unsigned long long v = std::strtoull(s.c_str(), &end, base);
      if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
        return fail("does not fit 64 bits");
      }
      n.literal = LiteralKind::kInt;
      n.int_value = static_cast<int64_t>(v);
      return Next();
    }
    const bool is_float = s.find_first_of(".eE") != std::string::npos;
    if (is_float) {
      n.literal = LiteralKind::kFloat;
      n.float_value = std::strtod(s.c_str(), &end);
      if (errno == ERANGE && std::isinf(n.float_value)) return fail("overflows float64");
    } else {
      if (s.size() > 1 && s[0] == '0' && s.find_first_not_of('0') != std::string::npos) {
        return fail(
            "has a leading zero, which Python does not allow in a decimal integer "
            "(write 0o... for octal)");
      }
      n.literal = LiteralKind::kInt;
      n.int_value = std::strtoll(s.c_str(), &end, 10);
      if (errno == ERANGE) return fail("does not fit 64 bits");
    }
    if (end != s.c_str() + s.size() || s.find_first_of("xXoObB") != std::string::npos) {
      return fail("is not a number");
    }
    return Next();
  }

  bool Primary() {
    const int position = tok_.position;
    if (tok_.kind == Tok::kNumber) {
      Node n;
      return Number(n) && Add(std::move(n));
    }
    if (Is("(")) {
      if (!Next() || !Or()) return false;
      return Expect(")", "to close the '(' at " + std::to_string(position));
    }
    if (tok_.kind != Tok::kName || IsKeyword(tok_.text)) {
      Fail(position,
           absl::StrCat("expected a number, an input, a call or '(', found ", Describe()));
      return false;
    }
    const std::string name(tok_.text);
    if (!Next()) return false;
    if (name == "True" || name == "False") {
      Node n;
      n.kind = NodeKind::kLiteral;
      n.literal = LiteralKind::kBool;
      n.int_value = name == "True";
      n.position = position;
      return Add(std::move(n));
    }
    if (Is("(")) return CallArgs(name, position);
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (inputs_[i] == name) {
        Node n;
        n.kind = NodeKind::kInput;
        n.input = static_cast<int>(i);
        n.position = position;
        return Add(std::move(n));
      }
    }
    if (FindOp(name) != nullptr) {
      Fail(position, absl::StrCat("'", name, "' is an op: call it, as ", name, "(...)"));
    } else {
      Fail(position, absl::StrCat("'", name, "' names no input (inputs: ",
                                  inputs_.empty() ? "none" : absl::StrJoin(inputs_, ", "), ")"));
    }
    return false;
  }

  // An attribute's value: a number (maybe negative), True/False, a dtype name or a string.
  bool AttrValueAt(const AttrSpec& spec, AttrValue* out) {
    const int position = tok_.position;
    bool negative = false;
    if (Is("-")) {
      negative = true;
      if (!Next()) return false;
    }
    if (tok_.kind == Tok::kNumber) {
      Node n;
      if (!Number(n)) return false;
      if (n.literal == LiteralKind::kFloat) {
        *out = negative ? -n.float_value : n.float_value;
      } else {
        *out = negative ? -n.int_value : n.int_value;
      }
      return true;
    }
    if (!negative && tok_.kind == Tok::kName && (tok_.text == "True" || tok_.text == "False")) {
      *out = tok_.text == "True";
      return Next();
    }
    if (!negative && tok_.kind == Tok::kName && spec.type == AttrType::kDType) {
      const auto t = DTypeFromName(tok_.text);
      if (!t.has_value()) {
        Fail(position, absl::StrCat("'", tok_.text, "' is not a dtype"));
        return false;
      }
      *out = *t;
      return Next();
    }
    if (!negative && tok_.kind == Tok::kString) {
      *out = std::string(tok_.text.substr(1, tok_.text.size() - 2));
      return Next();
    }
    Fail(position, absl::StrCat("expected a value for attribute '", spec.name, "' (",
                                AttrTypeName(spec.type), "), found ", Describe()));
    return false;
  }

  bool CallArgs(const std::string& name, int position) {
    Depth d(this);
    if (TooDeep()) return false;
    Node n;
    n.kind = NodeKind::kCall;
    n.position = position;
    n.op = FindOp(name);
    if (n.op == nullptr) {
      Fail(position, absl::StrCat("unknown function '", name, "' (ListOps lists the ops)"));
      return false;
    }
    const OpSpec& spec = n.op->spec;
    if (!Next()) return false;  // "("
    bool first = true;
    while (!Is(")")) {
      if (!first) {
        if (!Expect(",", absl::StrCat("between the arguments of ", name))) return false;
        if (Is(")")) break;  // a trailing comma, as Python allows
      }
      first = false;
      // A keyword argument: name "=" value.
      if (tok_.kind == Tok::kName && pos_ < text_.size()) {
        size_t k = pos_;
        while (k < text_.size() && absl::ascii_isspace(text_[k])) ++k;
        const bool keyword =
            k < text_.size() && text_[k] == '=' && (k + 1 == text_.size() || text_[k + 1] != '=');
        if (keyword) {
          const std::string attr(tok_.text);
          const int at = tok_.position;
          const auto it = std::find_if(spec.attrs.begin(), spec.attrs.end(),
                                       [&](const AttrSpec& a) { return a.name == attr; });
          if (it == spec.attrs.end()) {
            std::vector<std::string> names;
            for (const AttrSpec& a : spec.attrs) names.push_back(a.name);
            Fail(at,
                 absl::StrCat(name, " has no attribute '", attr, "'",
                              names.empty()
                                  ? std::string(" (it has none)")
                                  : absl::StrCat(" (it has: ", absl::StrJoin(names, ", "), ")")));
            return false;
          }
          if (n.attrs.count(attr)) {
            Fail(at, absl::StrCat("attribute '", attr, "' given twice"));
            return false;
          }
          if (!Next() || !Next()) return false;  // name, "="
          AttrValue v;
          if (!AttrValueAt(*it, &v)) return false;
          n.attrs[attr] = std::move(v);
          continue;
        }
      }
      // cast's dtype may come second, unnamed: cast(x, float16). A name there that is neither
      // an input nor a call is taken for a dtype, and said not to be one if it is not.
      if (spec.name == "cast" && n.args.size() == 1 && tok_.kind == Tok::kName &&
          !n.attrs.count("dtype") && !IsInputName(tok_.text) && !CallFollows()) {
        const auto dtype = DTypeFromName(tok_.text);
        if (!dtype) {
          Fail(tok_.position, absl::StrCat("'", tok_.text, "' is not a dtype"));
          return false;
        }
        n.attrs["dtype"] = *dtype;
        if (!Next()) return false;
        continue;
      }
      if (!n.attrs.empty()) {
        Fail(tok_.position, "an input after an attribute: inputs come first");
        return false;
      }
      if (!Or()) return false;
      n.args.push_back(Last());
    }
    if (!Next()) return false;  // ")"
    return CheckCall(n) && Add(std::move(n));
  }

  absl::string_view text_;
  const std::vector<std::string>& inputs_;
  Limits limits_;
  size_t pos_ = 0;
  Token tok_;
  int depth_ = 0;
  Expression e_;
  absl::Status error_;
};

void Write(const Expression& e, int i, std::string* out) {
  const Node& n = e.at(i);
  switch (n.kind) {
    case NodeKind::kInput:
      absl::StrAppend(out, "$", n.input);
      return;
    case NodeKind::kLiteral:
      if (n.zero_dim) {
        // A folded cast: written as the cast it was, so that it reads back the same.
        Node number = n;
        number.zero_dim.reset();
        number.literal = IsFloating(*n.zero_dim)       ? LiteralKind::kFloat
                         : *n.zero_dim == DType::kBool ? LiteralKind::kBool
                                                       : LiteralKind::kInt;
        Expression one;
        one.nodes.push_back(number);
        absl::StrAppend(out, "cast(");
        Write(one, 0, out);
        absl::StrAppend(out, ",dtype=", DTypeName(*n.zero_dim), ")");
        return;
      }
      if (n.literal == LiteralKind::kBool) {
        absl::StrAppend(out, n.int_value ? "True" : "False");
      } else if (n.literal == LiteralKind::kInt) {
        absl::StrAppend(out, n.int_value);
      } else {
        // Shortest form that reads back exactly, always with a point or exponent.
        std::string s = absl::StrFormat("%.17g", n.float_value);
        for (int p = 1; p <= 17; ++p) {
          std::string t = absl::StrFormat("%.*g", p, n.float_value);
          if (std::strtod(t.c_str(), nullptr) == n.float_value || std::isnan(n.float_value)) {
            s = t;
            break;
          }
        }
        if (s.find_first_of(".eEni") == std::string::npos) s += ".0";
        absl::StrAppend(out, s);
      }
      return;
    case NodeKind::kCall: {
      absl::StrAppend(out, n.op->spec.name, "(");
      for (size_t k = 0; k < n.args.size(); ++k) {
        if (k > 0) out->push_back(',');
        Write(e, n.args[k], out);
      }
      std::map<std::string, std::string> attrs;
      for (const auto& [name, v] : n.attrs) attrs[name] = AttrValueToString(v);
      for (const auto& [name, v] : attrs) absl::StrAppend(out, ",", name, "=", v);
      out->push_back(')');
      return;
    }
  }
}

}  // namespace

std::vector<std::string> DefaultInputNames(int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count && i < 26; ++i)
    names.push_back(std::string(1, static_cast<char>('a' + i)));
  return names;
}

absl::StatusOr<Expression> Parse(absl::string_view text, const std::vector<std::string>& inputs,
                                 const Limits& limits) {
  return Parser(text, inputs, limits).Run();
}

std::string Canonical(const Expression& e) {
  std::string out;
  if (!e.nodes.empty()) Write(e, e.root(), &out);
  return out;
}

}  // namespace tc::expr
