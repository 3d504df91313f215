// tensorcompute-cli: health, ops and compute from the command line.
#include <cstdio>
#include <cstdlib>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/client.h"
#include "client/tensor_text.h"

namespace {

constexpr char kUsage[] = R"(usage: tensorcompute-cli [--target=HOST:PORT] [--timeout=SECONDS] COMMAND

commands:
  health [SERVICE]        print the serving status; exit 0 only when SERVING
  ops                     list the ops the server supports
  compute OP --input=TENSOR... [--attr=NAME=VALUE...] [--output_dtype=DTYPE]
          [--output_layout=contiguous|like_first_input]
                          run OP and print the result

TENSOR is DTYPE[d0,d1,...]=v0,v1,... in C order, e.g. float32[2,3]=1,2,3,4,5,6;
float32[]=5 is a scalar. The target defaults to $TENSORCOMPUTE_TARGET or 127.0.0.1:50051.

example:
  tensorcompute-cli compute add --input='float32[2,3]=1,2,3,4,5,6' --input='float32[3]=10,20,30'
)";

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "error: %s: %s\n", absl::StatusCodeToString(s.code()).c_str(),
               std::string(s.message()).c_str());
  return 1;
}

int Usage(const std::string& why) {
  if (!why.empty()) std::fprintf(stderr, "error: %s\n\n", why.c_str());
  std::fputs(kUsage, stderr);
  return 2;
}

// "--name=value" or "--name value"; advances i past what it consumed.
bool TakeFlag(const std::vector<std::string>& args, size_t& i, absl::string_view name,
              std::string* value) {
  const std::string& a = args[i];
  const std::string prefix = absl::StrCat("--", name);
  if (a == prefix && i + 1 < args.size()) {
    *value = args[++i];
    return true;
  }
  if (a.rfind(prefix + "=", 0) == 0) {
    *value = a.substr(prefix.size() + 1);
    return true;
  }
  return false;
}

int Ops(tc::client::Client& client) {
  auto ops = client.ListOps();
  if (!ops.ok()) return Fail(ops.status());
  for (const auto& op : ops->ops()) {
    std::vector<std::string> dtypes, attrs;
    for (int t : op.dtypes()) {
      dtypes.push_back(tensorcompute::v1::DType_Name(static_cast<tensorcompute::v1::DType>(t)));
    }
    for (const auto& a : op.attributes()) {
      attrs.push_back(a.required() ? absl::StrCat(a.name(), ":", a.type())
                                   : absl::StrCat(a.name(), ":", a.type(), "=", a.default_value()));
    }
    std::printf("%-16s arity %d  dtypes %s  attrs %s\n    %s\n", op.name().c_str(), op.arity(),
                absl::StrJoin(dtypes, ",").c_str(),
                attrs.empty() ? "-" : absl::StrJoin(attrs, " ").c_str(), op.description().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const char* env_target = std::getenv("TENSORCOMPUTE_TARGET");
  std::string target = env_target ? env_target : "127.0.0.1:50051";
  std::string timeout = "60";
  std::string output_dtype, output_layout;
  std::vector<std::string> positional, inputs, attrs;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    if (TakeFlag(args, i, "target", &v)) {
      target = v;
    } else if (TakeFlag(args, i, "timeout", &v)) {
      timeout = v;
    } else if (TakeFlag(args, i, "input", &v)) {
      inputs.push_back(v);
    } else if (TakeFlag(args, i, "attr", &v)) {
      attrs.push_back(v);
    } else if (TakeFlag(args, i, "output_dtype", &v)) {
      output_dtype = v;
    } else if (TakeFlag(args, i, "output_layout", &v)) {
      output_layout = v;
    } else if (args[i] == "-h" || args[i] == "--help") {
      return Usage("");
    } else if (args[i].rfind("--", 0) == 0) {
      return Usage(absl::StrCat("unknown flag ", args[i]));
    } else {
      positional.push_back(args[i]);
    }
  }
  if (positional.empty()) return Usage("no command");

  tc::client::ClientOptions options;
  double seconds;
  if (!absl::SimpleAtod(timeout, &seconds) || seconds <= 0) return Usage("bad --timeout");
  options.timeout = absl::Seconds(seconds);
  tc::client::Client client(target, options);

  const std::string& cmd = positional[0];
  if (cmd == "health") {
    auto status = client.Health(positional.size() > 1 ? positional[1] : "");
    if (!status.ok()) return Fail(status.status());
    std::printf("%s\n", status->c_str());
    return *status == "SERVING" ? 0 : 1;
  }
  if (cmd == "ops") return Ops(client);
  if (cmd == "compute") {
    if (positional.size() != 2) return Usage("compute takes one OP");
    std::vector<tensorcompute::v1::Tensor> tensors;
    for (const std::string& spec : inputs) {
      auto t = tc::client::ParseTensor(spec);
      if (!t.ok()) return Fail(t.status());
      tensors.push_back(*std::move(t));
    }
    std::vector<std::pair<std::string, tensorcompute::v1::Attribute>> attributes;
    for (const std::string& spec : attrs) {
      auto a = tc::client::ParseAttribute(spec);
      if (!a.ok()) return Fail(a.status());
      attributes.push_back(*std::move(a));
    }
    tensorcompute::v1::ComputeRequest request;
    request.set_op(positional[1]);
    for (auto& t : tensors) *request.add_inputs() = std::move(t);
    for (auto& [name, value] : attributes) (*request.mutable_attributes())[name] = std::move(value);
    if (!output_dtype.empty()) {
      tensorcompute::v1::DType t;
      if (!tensorcompute::v1::DType_Parse(output_dtype, &t)) return Usage("bad --output_dtype");
      request.set_output_dtype(t);
    }
    if (output_layout == "like_first_input") {
      request.set_output_layout(tensorcompute::v1::OUTPUT_LAYOUT_LIKE_FIRST_INPUT);
    } else if (!output_layout.empty() && output_layout != "contiguous") {
      return Usage("bad --output_layout");
    }
    auto result = client.Compute(request);
    if (!result.ok()) return Fail(result.status());
    auto text = tc::client::FormatTensor(*result);
    if (!text.ok()) return Fail(text.status());
    std::printf("%s\n", text->c_str());
    return 0;
  }
  return Usage(absl::StrCat("unknown command '", cmd, "'"));
}
