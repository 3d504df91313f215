// tensorcompute-cli: health, server info, ops, compute (text or .npy tensors, resident
// handles), and upload/download/release of resident tensors.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/npy.h"
#include "client/tensor_text.h"

namespace {

constexpr char kUsage[] = R"(usage: tensorcompute-cli [--target=HOST:PORT] [--timeout=SECONDS]
       [--tls_ca=CA.pem [--tls_cert=CERT.pem --tls_key=KEY.pem] [--tls_server_name=NAME]]
       [--token=TOKEN] COMMAND

commands:
  health [SERVICE]        print the serving status; exit 0 only when SERVING
  info                    devices, memory, limits and version of the server
  ops                     list the ops the server supports, and the expression language
  compute OP --input=TENSOR... [--attr=NAME=VALUE...] [--output_dtype=DTYPE]
          [--output_layout=contiguous|like_first_input] [--output=FILE.npy]
          [--stream] [--keep]
                          run OP; print the result, or write it to FILE.npy; --stream sends
                          the inputs in chunks (ComputeStream); --keep keeps the result on
                          the server and prints its handle
  compute --expr=EXPRESSION --input=TENSOR... [--input_names=NAME,...] [options as above]
                          evaluate an element-wise expression over the inputs in one pass
                          (named a, b, c... in order unless --input_names says otherwise)
  upload FILE.npy [--ttl=SECONDS]
                          store a tensor on the server; prints its handle
  download HANDLE --output=FILE.npy
                          fetch a resident tensor
  release HANDLE...       free resident tensors

TENSOR is DTYPE[d0,d1,...]=v0,v1,... in C order (float32[2,3]=1,2,3,4,5,6; float32[]=5 is a
scalar), a FILE.npy, or @HANDLE for a resident tensor. Transfers of 16 MiB or more show their
progress on stderr. The target defaults to $TENSORCOMPUTE_TARGET or 127.0.0.1:50051, the
bearer token to $TENSORCOMPUTE_TOKEN (prefer it to --token, which other users can see), the
TLS options to $TENSORCOMPUTE_TLS_CA, _CERT, _KEY and _SERVER_NAME.

examples:
  tensorcompute-cli compute add --input='float32[2,3]=1,2,3,4,5,6' --input='float32[3]=10,20,30'
  tensorcompute-cli compute mul --input=a.npy --input=b.npy --output=c.npy
  tensorcompute-cli compute --expr='clamp(x * 2 + y, min=0)' --input_names=x,y \
      --input='float32[3]=-1,0,1' --input='float32[]=0.5'
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
  if (!ops->expression_grammar().empty()) {
    std::printf("\nexpressions (compute --expr=...):\n%s\n", ops->expression_grammar().c_str());
  }
  return 0;
}

// A progress bar on stderr for transfers of 16 MiB or more.
tc::client::Client::Progress Bar(const char* what) {
  return [what](int64_t done, int64_t total) {
    if (total < (int64_t{16} << 20)) return;
    const int width = 30;
    const int filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
    std::fprintf(stderr, "\r%s [%s%s] %lld / %lld MiB", what, std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), static_cast<long long>(done >> 20),
                 static_cast<long long>(total >> 20));
    if (done >= total) std::fputc('\n', stderr);
  };
}

absl::StatusOr<tensorcompute::v1::Tensor> InputTensor(const std::string& spec) {
  if (!spec.empty() && spec[0] == '@') {
    tensorcompute::v1::Tensor t;
    t.set_handle(spec.substr(1));
    return t;
  }
  if (spec.size() > 4 && spec.compare(spec.size() - 4, 4, ".npy") == 0) {
    return tc::client::ReadNpy(spec);
  }
  return tc::client::ParseTensor(spec);
}

int PrintOrWrite(const tensorcompute::v1::Tensor& t, const std::string& output) {
  if (!output.empty()) {
    if (auto s = tc::client::WriteNpy(output, t); !s.ok()) return Fail(s);
    std::printf("wrote %s\n", output.c_str());
    return 0;
  }
  auto text = tc::client::FormatTensor(t);
  if (!text.ok()) return Fail(text.status());
  std::printf("%s\n", text->c_str());
  return 0;
}

void PrintResident(const tensorcompute::v1::Tensor& t) {
  std::vector<std::string> dims;
  for (int64_t d : t.shape()) dims.push_back(std::to_string(d));
  std::printf("%s %s[%s] %lld bytes\n", t.handle().c_str(),
              tensorcompute::v1::DType_Name(t.dtype()).c_str(), absl::StrJoin(dims, ",").c_str(),
              static_cast<long long>(t.storage_bytes()));
}

int Info(tc::client::Client& client) {
  auto info = client.ServerInfo();
  if (!info.ok()) return Fail(info.status());
  std::printf("tensorcompute %s (%s), backend %s, metrics port %d\n", info->version().c_str(),
              info->build().c_str(), info->backend().c_str(), info->metrics_port());
  for (const auto& d : info->devices()) {
    std::printf(
        "device %d: %s %s, %d multiprocessors, %d streams, memory %lld MiB total, "
        "%lld MiB budget, %lld MiB in use, %d requests in flight, %lld served",
        d.index(), d.kind().c_str(), d.name().c_str(), d.multiprocessors(), d.streams(),
        static_cast<long long>(d.memory_total_bytes() >> 20),
        static_cast<long long>(d.memory_budget_bytes() >> 20),
        static_cast<long long>(d.memory_in_use_bytes() >> 20), d.requests_in_flight(),
        static_cast<long long>(d.requests_total()));
    if (d.peer_devices_size() > 0) {
      std::printf(", peer access to device(s) %s", absl::StrJoin(d.peer_devices(), ",").c_str());
    }
    if (!d.failure().empty()) std::printf(", FAILED: %s", d.failure().c_str());
    std::printf("\n");
  }
  const auto& l = info->limits();
  std::printf(
      "limits: message %lld B, request %lld B, %lld elements, rank %d, %d concurrent "
      "per device, resident quota %lld B / %d tensors, ttl %lld s (max %lld s)\n",
      static_cast<long long>(l.max_message_bytes()), static_cast<long long>(l.max_request_bytes()),
      static_cast<long long>(l.max_elements()), l.max_rank(), l.max_concurrent_per_device(),
      static_cast<long long>(l.resident_quota_bytes()), l.resident_max_tensors(),
      static_cast<long long>(l.resident_default_ttl_seconds()),
      static_cast<long long>(l.resident_max_ttl_seconds()));
  std::printf("resident: %lld tensors, %lld bytes\n",
              static_cast<long long>(info->resident_tensors()),
              static_cast<long long>(info->resident_bytes()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const char* env_target = std::getenv("TENSORCOMPUTE_TARGET");
  std::string target = env_target ? env_target : "127.0.0.1:50051";
  std::string timeout = "60";
  tc::client::ClientOptions options;
  if (const char* token = std::getenv("TENSORCOMPUTE_TOKEN")) options.token = token;
  // The TLS files can come from the environment too, so that a container's HEALTHCHECK (a
  // fixed command line) works against a server started with TLS.
  if (const char* f = std::getenv("TENSORCOMPUTE_TLS_CA")) options.tls_ca_file = f;
  if (const char* f = std::getenv("TENSORCOMPUTE_TLS_CERT")) options.tls_cert_file = f;
  if (const char* f = std::getenv("TENSORCOMPUTE_TLS_KEY")) options.tls_key_file = f;
  if (const char* f = std::getenv("TENSORCOMPUTE_TLS_SERVER_NAME")) options.tls_server_name = f;
  std::string output_dtype, output_layout, output, ttl = "0", expression, input_names;
  bool stream = false, keep = false;
  std::vector<std::string> positional, inputs, attrs;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    if (TakeFlag(args, i, "target", &v)) {
      target = v;
    } else if (TakeFlag(args, i, "timeout", &v)) {
      timeout = v;
    } else if (TakeFlag(args, i, "tls_ca", &v)) {
      options.tls_ca_file = v;
    } else if (TakeFlag(args, i, "tls_cert", &v)) {
      options.tls_cert_file = v;
    } else if (TakeFlag(args, i, "tls_key", &v)) {
      options.tls_key_file = v;
    } else if (TakeFlag(args, i, "tls_server_name", &v)) {
      options.tls_server_name = v;
    } else if (TakeFlag(args, i, "token", &v)) {
      options.token = v;
    } else if (TakeFlag(args, i, "input", &v)) {
      inputs.push_back(v);
    } else if (TakeFlag(args, i, "attr", &v)) {
      attrs.push_back(v);
    } else if (TakeFlag(args, i, "output_dtype", &v)) {
      output_dtype = v;
    } else if (TakeFlag(args, i, "output_layout", &v)) {
      output_layout = v;
    } else if (TakeFlag(args, i, "output", &v)) {
      output = v;
    } else if (TakeFlag(args, i, "expr", &v)) {
      expression = v;
    } else if (TakeFlag(args, i, "input_names", &v)) {
      input_names = v;
    } else if (TakeFlag(args, i, "ttl", &v)) {
      ttl = v;
    } else if (args[i] == "--stream") {
      stream = true;
    } else if (args[i] == "--keep") {
      keep = true;
    } else if (args[i] == "-h" || args[i] == "--help") {
      return Usage("");
    } else if (args[i].rfind("--", 0) == 0) {
      return Usage(absl::StrCat("unknown flag ", args[i]));
    } else {
      positional.push_back(args[i]);
    }
  }
  if (positional.empty()) return Usage("no command");

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
  if (cmd == "info") return Info(client);
  if (cmd == "upload") {
    if (positional.size() != 2) return Usage("upload takes one FILE.npy");
    auto t = InputTensor(positional[1]);
    if (!t.ok()) return Fail(t.status());
    int64_t ttl_seconds = 0;
    if (!absl::SimpleAtoi(ttl, &ttl_seconds) || ttl_seconds < 0) return Usage("bad --ttl");
    auto r = client.Upload(*t, ttl_seconds, int64_t{1} << 20, Bar("upload"));
    if (!r.ok()) return Fail(r.status());
    PrintResident(r->tensor());
    return 0;
  }
  if (cmd == "download") {
    if (positional.size() != 2 || output.empty()) {
      return Usage("download takes one HANDLE and --output=FILE.npy");
    }
    auto t = client.Download(positional[1], Bar("download"));
    if (!t.ok()) return Fail(t.status());
    return PrintOrWrite(*t, output);
  }
  if (cmd == "release") {
    if (positional.size() < 2) return Usage("release takes one or more HANDLEs");
    auto n = client.Release({positional.begin() + 1, positional.end()});
    if (!n.ok()) return Fail(n.status());
    std::printf("released %lld bytes\n", static_cast<long long>(*n));
    return 0;
  }
  if (cmd == "compute") {
    if (positional.size() != (expression.empty() ? 2u : 1u)) {
      return Usage("compute takes one OP, or --expr=EXPRESSION and no OP");
    }
    if (expression.empty() && !input_names.empty()) {
      return Usage("--input_names names the inputs of an --expr");
    }
    std::vector<tensorcompute::v1::Tensor> tensors;
    for (const std::string& spec : inputs) {
      auto t = InputTensor(spec);
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
    if (expression.empty()) {
      request.set_op(positional[1]);
    } else {
      request.set_expression(expression);
      if (!input_names.empty()) {
        for (absl::string_view name : absl::StrSplit(input_names, ',')) {
          request.add_input_names(std::string(name));
        }
      }
    }
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
    request.set_keep_output_resident(keep);
    auto result = stream ? client.ComputeStreamed(request) : client.Compute(request);
    if (!result.ok()) return Fail(result.status());
    if (keep) {
      PrintResident(*result);
      return 0;
    }
    return PrintOrWrite(*result, output);
  }
  return Usage(absl::StrCat("unknown command '", cmd, "'"));
}
