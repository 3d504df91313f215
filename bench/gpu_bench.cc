// CUDA backend benchmark: the case matrix of ../shared/bench/torch_elementwise.py (2^26
// elements, 8192 x 8192 matrices) on the GPU through the engine's own entry points (PrepareOp,
// then cuda::LaunchOp, as the server runs them), beside a device-to-device copy measured in the
// same run and, when --torch names that script, PyTorch's figures from running it in the same
// invocation.
//
//   tensorcompute-gpu-bench [--torch=torch_elementwise.py] [--reps=50] [--only=CASE]
//                           [--json=FILE] [--markdown=FILE]
//
// Every case's output is checked against the CPU backend (exact, floating point within two
// ulps); a difference makes the exit status 1.
// Per case: the median over --reps calls (after 10 warm-ups) of the time between two events
// around the call, as the script times PyTorch; bytes are those of the output and of each
// input view (numel x item size), as the script counts them. Beside it, the same timing of a
// device-to-device copy that moves as many bytes (half read, half written): the ceiling for
// a case of that size, launch latency and the last partial wave included, which the 1 GiB
// copy's bandwidth does not show for cases of a few hundred megabytes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "bench/gpu_common.h"
#include "kernels/cuda/launch_env.h"
#include "kernels/engine.h"
#include "kernels/scalar_types.h"

namespace tc {
namespace {

using bench::DevBuf;

template <typename T>
DevBuf Upload(const std::vector<T>& host) {
  return bench::Upload(host.data(), static_cast<int64_t>(host.size() * sizeof(T)));
}

// Uniform floats in [0, 1) from a fixed seed, quickly.
std::vector<float> Uniform(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = static_cast<float>(x >> 40) / static_cast<float>(1 << 24);
  }
  return v;
}

struct Case {
  std::string name;
  std::string op;
  std::vector<TensorView> inputs;
  const DevBuf* out;
  OutputOptions output;
  AttrMap attrs;
};

int64_t ViewBytes(const TensorView& v) {
  int64_t n = 1;
  for (int64_t d : v.shape) n *= d;
  return n * ItemSize(v.dtype);
}

struct TorchRow {
  double ms = 0, gbs = 0, pct = 0;
};

}  // namespace
}  // namespace tc

ABSL_FLAG(std::string, torch, "", "torch_elementwise.py: PyTorch's side (none if empty).");
ABSL_FLAG(int, reps, 50, "Timed repetitions of each case.");
ABSL_FLAG(std::string, only, "", "Only the cases whose name contains this.");
ABSL_FLAG(std::string, json, "", "Write the results here as JSON.");
ABSL_FLAG(std::string, markdown, "", "Write the table here too.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The CUDA kernels on the case matrix, beside a device-to-device copy and PyTorch.");
  absl::ParseCommandLine(argc, argv);
  using namespace tc;
  const std::string torch_script = absl::GetFlag(FLAGS_torch);
  const std::string only = absl::GetFlag(FLAGS_only);
  const std::string json_path = absl::GetFlag(FLAGS_json);
  const std::string md_path = absl::GetFlag(FLAGS_markdown);
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  cudaDeviceProp prop{};
  if (!bench::FirstDevice(&prop)) return 1;
  const cuda::LaunchEnv env = bench::MakeLaunchEnv(prop);
  cudaStream_t stream = env.stream;
  int* dev_error = env.error;

  bench::Timer timer(stream, reps, int64_t{2} << 30);
  auto median_ms = [&](const std::function<void()>& fn) { return timer.MedianMs(fn); };
  // A copy moving `bytes` (half read, half written); no case moves more than 2 GiB.
  auto copy_ms = [&](int64_t bytes) { return timer.CopyMs(bytes); };
  const int64_t copy_bytes = int64_t{1} << 30;
  const double copy_gbs = 2.0 * static_cast<double>(copy_bytes) / copy_ms(2 * copy_bytes) / 1e6;
  std::printf("copy 1GiB D2D: %.0f GB/s (read+write)\n", copy_gbs);

  const int64_t N = int64_t{1} << 26, M = 8192;
  const std::vector<float> ha = Uniform(N, 1), hb = Uniform(N, 2);
  const DevBuf a = Upload(ha), b = Upload(hb), c = Upload(Uniform(N, 3));
  const DevBuf o = bench::Alloc(N * 4);
  std::vector<Half> hh1(N), hh2(N);
  std::vector<BFloat16> hg1(N), hg2(N);
  std::vector<int32_t> hi1(N), hi2(N);
  std::vector<uint8_t> hx1(N), hx2(N);
  for (int64_t i = 0; i < N; ++i) {
    hh1[i] = Half(ha[i]);
    hh2[i] = Half(hb[i]);
    hg1[i] = BFloat16(ha[i]);
    hg2[i] = BFloat16(hb[i]);
    hi1[i] = static_cast<int32_t>(ha[i] * 1000);
    hi2[i] = static_cast<int32_t>(hb[i] * 1000) + 1;  // the script's i2 + 1
    hx1[i] = ha[i] > 0.5f;
    hx2[i] = hb[i] > 0.5f;
  }
  const DevBuf h1 = Upload(hh1), h2 = Upload(hh2), ho = bench::Alloc(N * 2);
  const DevBuf g1 = Upload(hg1), g2 = Upload(hg2), go = bench::Alloc(N * 2);
  const DevBuf i1 = Upload(hi1), i2 = Upload(hi2), io = bench::Alloc(N * 4);
  const DevBuf x1 = Upload(hx1), x2 = Upload(hx2), bo = bench::Alloc(N);
  const DevBuf s1 = Upload(Uniform(1, 4)), row = Upload(Uniform(M, 5)), col = Upload(Uniform(M, 6));
  const DevBuf big = Upload(Uniform(2 * N, 7)), bigb = Upload(Uniform(2 * N, 8));
  const DevBuf sa = Upload(Uniform(4096, 9)), sb = Upload(Uniform(4096, 10)),
               so = bench::Alloc(4096 * 4);

  const DType F32 = DType::kFloat32, F16 = DType::kFloat16, BF16 = DType::kBFloat16,
              I32 = DType::kInt32, B = DType::kBool;
  OutputOptions transposed_out;
  transposed_out.strides = {1, M};
  std::vector<Case> cases = {
      {"add_f32_contig", "add", {a.View(F32, {N}), b.View(F32, {N})}, &o, {}, {}},
      {"div_f32_contig", "div", {a.View(F32, {N}), b.View(F32, {N})}, &o, {}, {}},
      {"pow_f32_contig", "pow", {a.View(F32, {N}), b.View(F32, {N})}, &o, {}, {}},
      {"max_f32_contig", "maximum", {a.View(F32, {N}), b.View(F32, {N})}, &o, {}, {}},
      {"mul_f32_scalar_tensor", "mul", {a.View(F32, {N}), s1.View(F32, {1})}, &o, {}, {}},
      {"relu_f32", "relu", {a.View(F32, {N})}, &o, {}, {}},
      {"mul_f16_contig", "mul", {h1.View(F16, {N}), h2.View(F16, {N})}, &ho, {}, {}},
      {"add_bf16_contig", "add", {g1.View(BF16, {N}), g2.View(BF16, {N})}, &go, {}, {}},
      {"add_f16_f32_mixed", "add", {h1.View(F16, {N}), b.View(F32, {N})}, &o, {}, {}},
      {"cast_f32_to_f16", "cast", {a.View(F32, {N})}, &ho, {}, {{"dtype", F16}}},
      {"gt_f32_to_bool", "gt", {a.View(F32, {N}), b.View(F32, {N})}, &bo, {}, {}},
      {"logical_and_bool", "logical_and", {x1.View(B, {N}), x2.View(B, {N})}, &bo, {}, {}},
      {"add_i32_contig", "add", {i1.View(I32, {N}), i2.View(I32, {N})}, &io, {}, {}},
      {"mod_i32_contig", "remainder", {i1.View(I32, {N}), i2.View(I32, {N})}, &io, {}, {}},
      {"addcmul_f32_ternary",
       "addcmul",
       {c.View(F32, {N}), a.View(F32, {N}), b.View(F32, {N})},
       &o,
       {},
       {}},
      {"where_f32", "where", {bo.View(B, {N}), a.View(F32, {N}), b.View(F32, {N})}, &o, {}, {}},
      {"add_f32_bcast_row", "add", {a.View(F32, {M, M}), row.View(F32, {M})}, &o, {}, {}},
      {"add_f32_bcast_col", "add", {a.View(F32, {M, M}), col.View(F32, {M, 1})}, &o, {}, {}},
      {"add_f32_transposed_in",
       "add",
       {a.View(F32, {M, M}), b.View(F32, {M, M}, {1, M})},
       &o,
       {},
       {}},
      {"add_f32_transposed_out",
       "add",
       {a.View(F32, {M, M}), b.View(F32, {M, M})},
       &o,
       transposed_out,
       {}},
      {"add_f32_nchw_per_channel",
       "add",
       {a.View(F32, {32, 256, 64, 128}), row.View(F32, {1, 256, 1, 1})},
       &o,
       {},
       {}},
      {"add_f32_nhwc_per_channel",
       "add",
       {a.View(F32, {32, 64, 128, 256}), row.View(F32, {256})},
       &o,
       {},
       {}},
      {"add_f32_stride2_in",
       "add",
       {big.View(F32, {N}, {2}), bigb.View(F32, {N}, {2})},
       &o,
       {},
       {}},
      {"add_f32_outer_bcast", "add", {col.View(F32, {M, 1}), row.View(F32, {1, M})}, &o, {}, {}},
      {"add_f32_small_4k", "add", {sa.View(F32, {4096}), sb.View(F32, {4096})}, &so, {}, {}},
  };
  if (!only.empty()) {
    cases.erase(
        std::remove_if(cases.begin(), cases.end(), [&](const Case& k) { return k.name != only; }),
        cases.end());
  }

  struct Result {
    double ms = 0, gbs = 0, pct = 0;
    int64_t bytes = 0;
    double copy_ms = 0;   // a copy moving `bytes` (bytes / 2 each way)
    double pct_same = 0;  // copy_ms over ms, in percent
  };
  std::map<std::string, Result> ours;
  // Each case's output is also checked against the CPU backend on copies of the same inputs:
  // the timed kernels are the ones the numbers are about.
  CpuBackend cpu(0);
  int64_t bad_cases = 0;
  // Floating results may differ by an ulp or two (pow, division); everything else exactly.
  auto check = [&](const Case& k, const PreparedOp& op) {
    const std::string diff = bench::CheckAgainstCpu(cpu, op, k.inputs, k.out->p, 2);
    if (!diff.empty()) {
      std::fprintf(stderr, "%s: %s\n", k.name.c_str(), diff.c_str());
      ++bad_cases;
    }
  };
  for (const Case& k : cases) {
    absl::Status status;
    auto call = [&] {
      auto op = PrepareOp(k.op, k.inputs, k.attrs, k.output);
      if (!op.ok()) {
        status = op.status();
        return;
      }
      if (op->plan.out_storage_bytes > k.out->bytes) {
        status = absl::InternalError("output buffer too small");
        return;
      }
      char* base[kMaxOperands] = {};
      base[0] = reinterpret_cast<char*>(k.out->p) + op->plan.offsets[0];
      for (size_t i = 0; i < k.inputs.size(); ++i) {
        base[i + 1] = const_cast<char*>(reinterpret_cast<const char*>(k.inputs[i].data)) +
                      op->plan.offsets[i + 1];
      }
      status.Update(cuda::LaunchOp(*op, base, env));
    };
    Result r;
    r.ms = median_ms(call);
    if (!status.ok()) {
      std::fprintf(stderr, "%s: %s\n", k.name.c_str(), status.ToString().c_str());
      return 1;
    }
    auto op = PrepareOp(k.op, k.inputs, k.attrs, k.output);
    TC_CHECK_CUDA(cudaStreamSynchronize(stream));
    check(k, *op);
    int64_t out_numel = op->plan.numel;
    r.bytes = out_numel * ItemSize(op->plan.out_dtype);
    for (const TensorView& v : k.inputs) r.bytes += ViewBytes(v);
    r.gbs = static_cast<double>(r.bytes) / r.ms / 1e6;
    r.pct = 100.0 * r.gbs / copy_gbs;
    r.copy_ms = copy_ms(r.bytes);
    r.pct_same = 100.0 * r.copy_ms / r.ms;
    ours[k.name] = r;
  }
  TC_CHECK_CUDA(cudaStreamSynchronize(stream));
  int host_error = 0;
  TC_CHECK_CUDA(cudaMemcpy(&host_error, dev_error, sizeof(int), cudaMemcpyDeviceToHost));
  if (host_error != 0) std::fprintf(stderr, "note: a kernel raised its error flag\n");

  // PyTorch, same machine, same invocation.
  std::map<std::string, TorchRow> torch;
  double torch_copy_gbs = 0;
  std::string torch_version;
  if (!torch_script.empty()) {
    // Free our buffers first, so the script has the device's memory to itself.
    timer.Release();
    for (const DevBuf* d : {&a,  &b,  &c,  &o,  &h1, &h2,  &ho,  &g1,  &g2,   &go, &i1, &i2,
                            &io, &x1, &x2, &bo, &s1, &row, &col, &big, &bigb, &sa, &sb, &so}) {
      TC_CHECK_CUDA(cudaFree(d->p));
    }
    std::istringstream lines(bench::Capture("python3 " + torch_script + " 2>&1"));
    std::string line;
    while (std::getline(lines, line)) {
      double ms, gbs, pct;
      char name[128];
      if (std::sscanf(line.c_str(), "copy 1GiB D2D: %lf ms, %lf GB/s", &ms, &gbs) == 2) {
        torch_copy_gbs = gbs;
      } else if (std::sscanf(line.c_str(), "%127s %lf %lf %lf", name, &ms, &gbs, &pct) == 4) {
        torch[name] = TorchRow{ms, gbs, pct};
      }
    }
    torch_version =
        bench::Capture("python3 -c 'import torch; print(torch.__version__)' 2>/dev/null");
    if (torch.empty()) std::fprintf(stderr, "no figures from %s\n", torch_script.c_str());
  }

  const std::string driver = bench::Capture(
      "nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1");
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));

  std::ostringstream md;
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "%s, %s, driver %s, PyTorch %s. Copy (1 GiB D2D, read+write): ours %.0f GB/s, "
                "PyTorch's run %.0f GB/s. Median of %d calls per case; %% copy is each side "
                "against the copy of its own run; %% same-size copy: a copy moving the case's "
                "bytes, timed the same way, in ms over our ms; vs torch = torch ms / our ms.\n\n",
                date, prop.name, driver.empty() ? "?" : driver.c_str(),
                torch_version.empty() ? "not run" : torch_version.c_str(), copy_gbs, torch_copy_gbs,
                reps);
  md << buf;
  md << "| case | ms | GB/s | % copy | % same-size copy | torch ms | torch % copy | vs torch |\n"
     << "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Case& k : cases) {
    const Result& r = ours[k.name];
    auto t = torch.find(k.name);
    if (t == torch.end()) {
      std::snprintf(buf, sizeof buf, "| %s | %.4f | %.0f | %.1f | %.1f | - | - | - |\n",
                    k.name.c_str(), r.ms, r.gbs, r.pct, r.pct_same);
    } else {
      const double tpct = torch_copy_gbs > 0 ? 100.0 * t->second.gbs / torch_copy_gbs : 0;
      std::snprintf(buf, sizeof buf, "| %s | %.4f | %.0f | %.1f | %.1f | %.4f | %.1f | %.2fx |\n",
                    k.name.c_str(), r.ms, r.gbs, r.pct, r.pct_same, t->second.ms, tpct,
                    t->second.ms / r.ms);
    }
    md << buf;
  }
  std::printf("%s", md.str().c_str());
  if (!md_path.empty()) std::ofstream(md_path) << md.str();
  if (!json_path.empty()) {
    std::ofstream js(json_path);
    js << "{\n  \"date\": \"" << date << "\", \"device\": \"" << prop.name << "\", \"driver\": \""
       << driver << "\", \"torch\": \"" << torch_version << "\",\n";
    std::snprintf(buf, sizeof buf,
                  "  \"copy_gbs\": %.1f, \"torch_copy_gbs\": %.1f, \"reps\": %d,\n", copy_gbs,
                  torch_copy_gbs, reps);
    js << buf << "  \"cases\": {";
    bool first = true;
    for (const Case& k : cases) {
      const Result& r = ours[k.name];
      std::snprintf(buf, sizeof buf,
                    "%s\n    \"%s\": {\"ms\": %.5f, \"bytes\": %lld, \"gbs\": %.1f, "
                    "\"pct_copy\": %.2f, \"same_size_copy_ms\": %.5f, \"pct_same_size_copy\": %.2f",
                    first ? "" : ",", k.name.c_str(), r.ms, static_cast<long long>(r.bytes), r.gbs,
                    r.pct, r.copy_ms, r.pct_same);
      js << buf;
      if (auto t = torch.find(k.name); t != torch.end()) {
        const double tpct = torch_copy_gbs > 0 ? 100.0 * t->second.gbs / torch_copy_gbs : 0;
        std::snprintf(buf, sizeof buf,
                      ", \"torch_ms\": %.5f, \"torch_pct_copy\": %.2f, \"vs_torch\": %.3f",
                      t->second.ms, tpct, t->second.ms / r.ms);
        js << buf;
      }
      js << "}";
      first = false;
    }
    js << "\n  }\n}\n";
  }
  if (bad_cases > 0) {
    std::fprintf(stderr, "%lld cases gave results different from the CPU backend\n",
                 static_cast<long long>(bad_cases));
    return 1;
  }
  std::printf("every case matched the CPU backend\n");
  return 0;
}
