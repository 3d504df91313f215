// Fused expressions on the GPU: each case's expression as one generated kernel (the server's
// path: PrepareExpression, the NVRTC kernel cache, the launch) beside the same ops run one by
// one through the engine's own kernels (PrepareOp and cuda::LaunchOp, intermediates in device
// memory), a device-to-device copy moving as many bytes as the fused kernel does, and, with
// --torch naming torch_expressions.py, PyTorch eager and torch.compile on the same expression
// in the same invocation. Then what a new expression costs (first request: generation,
// NVRTC, loading) and what a cached one adds on the host.
//
//   tensorcompute-expr-bench [--torch=bench/torch_expressions.py] [--reps=50] [--markdown=FILE]
//
// Times: median over --reps of CUDA events around the work (after 10 warm-ups), as
// torch_expressions.py times PyTorch. The fused output is compared with the op-by-op one
// (equal bit for bit, as an expression computes exactly its ops) and with the CPU backend's.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/gpu_common.h"
#include "kernels/rtc/disk_cache.h"
#include "kernels/cuda/expr_kernels.h"
#include "kernels/cuda/expr_steps.h"
#include "kernels/cuda/launch_env.h"
#include "kernels/engine.h"
#include "kernels/expr/parser.h"
#include "kernels/expr/program.h"
#include "kernels/rtc/codegen.h"
#include "kernels/rtc/compile.h"
#include "kernels/scalar_types.h"
#include "tests/support/cpu_backend.h"

namespace tc {
namespace {

using bench::Alloc;
using bench::DevBuf;

// Values in [-2, 2) from a fixed seed, as `dtype`.
DevBuf Random(DType dtype, int64_t n, uint64_t seed) {
  std::vector<char> host(static_cast<size_t>(n * ItemSize(dtype)));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const float f = static_cast<float>(x >> 40) / static_cast<float>(1 << 22) - 2.0f;
    VisitDType(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T v = Convert<T>(f);
      std::memcpy(host.data() + i * sizeof(T), &v, sizeof(T));
    });
  }
  DevBuf b = Alloc(static_cast<int64_t>(host.size()));
  TC_CHECK_CUDA(cudaMemcpy(b.p, host.data(), host.size(), cudaMemcpyHostToDevice));
  return b;
}

TensorView View(const DevBuf& b, DType dtype, DimVector shape) {
  DimVector strides = ContiguousStrides(shape);
  return TensorView{dtype, std::move(shape), std::move(strides), 0, b.p, b.bytes};
}

int64_t Numel(const DimVector& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

struct Case {
  std::string name;
  std::string text;  // the expression, over a, b, c, d
  std::vector<DType> dtypes;
  std::vector<DimVector> shapes;
  DType out;
  // The first input is read with the strides of these two dims swapped (of equal sizes), as
  // x.transpose(i, j): {0, 1} is a square one's x.t(); equal dims read it as it is.
  std::pair<int, int> swapped = {0, 0};
};

}  // namespace
}  // namespace tc

ABSL_FLAG(std::string, torch, "", "torch_expressions.py: torch.compile's side (none if empty).");
ABSL_FLAG(int, reps, 50, "Timed repetitions of each case.");
ABSL_FLAG(std::string, markdown, "", "Write the table here too.");
ABSL_FLAG(bool, sweep, false, "Also each expression at other pack widths and packs a thread.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Fused expressions beside their ops one by one, a copy and torch.compile.");
  absl::ParseCommandLine(argc, argv);
  using namespace tc;
  const std::string torch_script = absl::GetFlag(FLAGS_torch);
  const std::string md_path = absl::GetFlag(FLAGS_markdown);
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  const bool sweep = absl::GetFlag(FLAGS_sweep);
  cudaDeviceProp prop{};
  if (!bench::FirstDevice(&prop)) return 1;
  const int arch = prop.major * 10 + prop.minor;
  const cuda::LaunchEnv env = bench::MakeLaunchEnv(prop);
  cudaStream_t stream = env.stream;
  // Stream-ordered allocations (an expression's steps' temporaries) stay in the device's pool
  // between runs, as the server's pool keeps them up to its budget.
  {
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    TC_CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, 0));
    TC_CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  bench::Timer timer(stream, reps, int64_t{1} << 32);
  auto median_ms = [&](const std::function<void()>& fn) { return timer.MedianMs(fn); };
  auto copy_ms = [&](int64_t bytes) { return timer.CopyMs(bytes); };

  const int64_t N = int64_t{1} << 26, M = 8192;
  const DType F32 = DType::kFloat32, F16 = DType::kFloat16;
  const std::vector<Case> cases = {
      {"chain_f32", "sigmoid(a * b + c) * d", {F32, F32, F32, F32}, {{N}, {N}, {N}, {N}}, F32},
      {"chain_f16_in_f32_out",
       "sigmoid(a * b + c) * d",
       {F16, F16, F16, F16},
       {{N}, {N}, {N}, {N}},
       F32},
      {"chain_f32_bcast_rows",
       "sigmoid(a * b + c) * d",
       {F32, F32, F32, F32},
       {{M, M}, {M}, {M}, {M, M}},
       F32},
      {"affine_norm_f32", "(a - 0.5) * 1.7 * b + c", {F32, F32, F32}, {{M, M}, {M}, {M}}, F32},
      {"where_f32", "where(a > 0, a * 0.1, b)", {F32, F32}, {{N}, {N}}, F32},
      {"transposed_f32",
       "sigmoid(a) * b + c",
       {F32, F32, F32},
       {{M, M}, {M, M}, {M, M}},
       F32,
       {0, 1}},
      // Four dims that neither coalesce nor tile: the general walk.
      {"permuted_rank4_f32",
       "a * b + c",
       {F32, F32, F32},
       {{64, 64, 64, 64}, {64, 64, 64, 64}, {64, 64, 64, 64}},
       F32,
       {1, 2}},
  };

  struct Row {
    std::string name;
    double fused = 0, opbyop = 0, steps = 0, copy = 0;
    int64_t bytes = 0;
    double torch_eager = 0, torch_compiled = 0;
    std::string check;
  };
  std::vector<Row> rows;
  cuda::ExprKernelCache& cache = cuda::ExprKernelCache::Shared();
  for (const Case& k : cases) {
    std::vector<DevBuf> in_bufs;
    std::vector<TensorView> in;
    for (size_t i = 0; i < k.dtypes.size(); ++i) {
      in_bufs.push_back(Random(k.dtypes[i], Numel(k.shapes[i]), 11 + i));
      in.push_back(View(in_bufs.back(), k.dtypes[i], k.shapes[i]));
    }
    std::swap(in[0].strides[k.swapped.first], in[0].strides[k.swapped.second]);
    OutputOptions output;
    output.dtype = k.out;
    auto prepared = expr::PrepareExpression(k.text, {}, in, output);
    if (!prepared.ok()) {
      std::fprintf(stderr, "%s: %s\n", k.name.c_str(), prepared.status().ToString().c_str());
      return 1;
    }
    const expr::Program& program = *prepared->expression;
    const DevBuf out = Alloc(prepared->plan.out_storage_bytes);
    char* base[kMaxIterOperands];
    base[0] = reinterpret_cast<char*>(out.p) + program.space.offsets[0];
    for (size_t i = 0; i < in.size(); ++i) {
      base[i + 1] = reinterpret_cast<char*>(in_bufs[i].p) + program.space.offsets[i + 1];
    }
    const cuda::ExprLaunch launch =
        cuda::PrepareExprLaunch(program, base, env.multiprocessors, arch);
    std::promise<std::shared_ptr<const cuda::ExprKernel>> got;
    cache.Get(launch.source, arch, [&](absl::StatusOr<std::shared_ptr<const cuda::ExprKernel>> r) {
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", k.name.c_str(), r.status().ToString().c_str());
        std::exit(1);
      }
      got.set_value(*r);
    });
    const std::shared_ptr<const cuda::ExprKernel> kernel = got.get_future().get();
    Row row;
    row.name = k.name;
    row.fused = median_ms([&] {
      if (auto st = cuda::LaunchExpr(launch, *kernel, program, env); !st.ok()) {
        std::fprintf(stderr, "%s: %s\n", k.name.c_str(), st.ToString().c_str());
        std::exit(1);
      }
    });
    row.bytes = prepared->plan.out_storage_bytes;
    for (const TensorView& v : in) row.bytes += Numel(v.shape) * ItemSize(v.dtype);
    row.copy = copy_ms(row.bytes);
    // --sweep: the same expression with other pack widths and packs per thread than the
    // planner's walk (PlanExpression), for choosing that rule.
    const ExprWalk& chosen = program.walk;
    const int chosen_vector = expr::VectorFor(program, base);
    // A walk of the sweep, compiled and timed: its median ms; `compile_ms` the compile's.
    auto time_walk = [&](int vector, int unroll, double* compile_ms) {
      expr::Program variant = program;
      variant.walk.unroll = unroll;
      cuda::ExprLaunch l;
      l.source = rtc::GenerateSource(variant, vector);
      l.arch = arch;
      l.parts = rtc::Walk(variant, vector, base, env.multiprocessors);
      const auto t0 = std::chrono::steady_clock::now();
      std::promise<std::shared_ptr<const cuda::ExprKernel>> kp;
      cache.Get(l.source, arch, [&](absl::StatusOr<std::shared_ptr<const cuda::ExprKernel>> r) {
        if (!r.ok()) std::exit(1);
        kp.set_value(*r);
      });
      const auto kern = kp.get_future().get();
      *compile_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      return median_ms([&] { (void)cuda::LaunchExpr(l, *kern, variant, env); });
    };
    double compile_ms = 0;
    if (sweep && chosen.kernel == Kernel::kTiles) {
      for (int u : {4, 8}) {
        const double ms = time_walk(1, u, &compile_ms);
        std::printf("sweep %-22s tiles 32x%d %s: %.3f ms, %.1f%% of copy, compiled in %.0f ms\n",
                    k.name.c_str(), 8 * u, u == chosen.unroll ? "(chosen)" : "        ", ms,
                    100 * row.copy / ms, compile_ms);
      }
    }
    if (sweep && chosen.kernel == Kernel::kRows && chosen_vector > 1) {
      for (int v : {chosen_vector, 2 * chosen_vector}) {
        for (int u : {1, 2}) {
          const double ms = time_walk(v, u, &compile_ms);
          std::printf("sweep %-22s V=%d U=%d %s: %.3f ms, %.1f%% of copy, compiled in %.0f ms\n",
                      k.name.c_str(), v, u,
                      v == chosen_vector && u == chosen.unroll ? "(chosen)" : "        ", ms,
                      100 * row.copy / ms, compile_ms);
        }
      }
    }

    // The same ops one by one, as separate requests would run them on the device.
    auto tree = expr::Parse(k.text, expr::DefaultInputNames(static_cast<int>(in.size())));
    if (!tree.ok()) {
      std::fprintf(stderr, "%s: %s\n", k.name.c_str(), tree.status().ToString().c_str());
      return 1;
    }
    const expr::Expression& e = *tree;
    std::vector<TensorView> values(e.nodes.size());
    std::vector<DevBuf> owned;
    std::vector<PreparedOp> ops;
    std::vector<std::vector<TensorView>> op_args;
    std::vector<DevBuf> op_out;
    for (size_t i = 0; i < e.nodes.size(); ++i) {
      const expr::Node& n = e.nodes[i];
      if (n.kind == expr::NodeKind::kInput) {
        values[i] = in[static_cast<size_t>(n.input)];
        continue;
      }
      if (n.kind == expr::NodeKind::kLiteral) {
        // A zero-dim float64 or int64 tensor, as a Python scalar promotes.
        const bool fl = n.literal == expr::LiteralKind::kFloat;
        owned.push_back(Alloc(8));
        if (fl) {
          TC_CHECK_CUDA(cudaMemcpy(owned.back().p, &n.float_value, 8, cudaMemcpyHostToDevice));
        } else {
          TC_CHECK_CUDA(cudaMemcpy(owned.back().p, &n.int_value, 8, cudaMemcpyHostToDevice));
        }
        values[i] = View(owned.back(), fl ? DType::kFloat64 : DType::kInt64, {});
        continue;
      }
      std::vector<TensorView> args;
      for (int a : n.args) args.push_back(values[static_cast<size_t>(a)]);
      OutputOptions o;
      if (static_cast<int>(i) == e.root()) o.dtype = k.out;
      auto p = PrepareOp(n.op->spec.name, args, n.attrs, o);
      if (!p.ok()) {
        std::fprintf(stderr, "%s op by op: %s\n", k.name.c_str(), p.status().ToString().c_str());
        return 1;
      }
      owned.push_back(Alloc(p->plan.out_storage_bytes));
      values[i] = View(owned.back(), p->plan.out_dtype, p->plan.out_shape);
      ops.push_back(*p);
      op_args.push_back(args);
      op_out.push_back(owned.back());
    }
    auto run_ops = [&] {
      for (size_t j = 0; j < ops.size(); ++j) {
        char* b[kMaxOperands] = {};
        OperandBases(ops[j].plan, op_out[j].p, op_args[j], b);
        if (auto st = cuda::LaunchOp(ops[j], b, env); !st.ok()) {
          std::fprintf(stderr, "%s op %zu: %s\n", k.name.c_str(), j, st.ToString().c_str());
          std::exit(1);
        }
      }
    };
    row.opbyop = median_ms(run_ops);
    // The results side by side.
    std::vector<char> fused(static_cast<size_t>(out.bytes)), each(fused.size()),
        steps(fused.size());
    TC_CHECK_CUDA(cudaMemcpy(fused.data(), out.p, fused.size(), cudaMemcpyDeviceToHost));
    // As the engine runs the expression while its kernel compiles (kernels/cuda/expr_steps.h),
    // into the same output.
    const std::shared_ptr<const cuda::StepRun> step_run = cuda::PrepareSteps(program, base);
    if (step_run != nullptr) {
      row.steps = median_ms([&] {
        if (auto st = cuda::LaunchSteps(*step_run, env); !st.ok()) {
          std::fprintf(stderr, "%s steps: %s\n", k.name.c_str(), st.ToString().c_str());
          std::exit(1);
        }
      });
      TC_CHECK_CUDA(cudaMemcpy(steps.data(), out.p, steps.size(), cudaMemcpyDeviceToHost));
    }
    TC_CHECK_CUDA(cudaMemcpy(each.data(), values.back().data, each.size(), cudaMemcpyDeviceToHost));
    // And the CPU backend's evaluation of the same expression on the same values.
    std::vector<std::vector<char>> host(in.size());
    std::vector<TensorView> host_views = in;
    for (size_t i = 0; i < in.size(); ++i) {
      host[i].resize(static_cast<size_t>(in_bufs[i].bytes));
      TC_CHECK_CUDA(
          cudaMemcpy(host[i].data(), in_bufs[i].p, host[i].size(), cudaMemcpyDeviceToHost));
      host_views[i].data = reinterpret_cast<const std::byte*>(host[i].data());
    }
    std::vector<char> cpu_out(fused.size());
    {
      static CpuBackend cpu(0);
      auto hp = expr::PrepareExpression(k.text, {}, host_views, output);
      if (!hp.ok() ||
          !cpu.Run(*hp, host_views, reinterpret_cast<std::byte*>(cpu_out.data())).ok()) {
        std::fprintf(stderr, "%s: CPU run failed\n", k.name.c_str());
        return 1;
      }
    }
    // float32 outputs: how many differ, and by how much at most.
    auto compare = [&](const std::vector<char>& x, const std::vector<char>& y) {
      int64_t differ = 0;
      double worst = 0;
      for (size_t at = 0; at + 4 <= x.size(); at += 4) {
        float u, v;
        std::memcpy(&u, x.data() + at, 4);
        std::memcpy(&v, y.data() + at, 4);
        if (std::memcmp(&u, &v, 4) != 0) {
          ++differ;
          worst = std::max(worst, static_cast<double>(std::fabs(u - v)));
        }
      }
      return differ == 0 ? std::string("identical")
                         : absl::StrFormat("%d differ, by %.2g at most", differ, worst);
    };
    row.check = absl::StrCat("one by one: ", compare(fused, each),
                             "; steps: ", step_run != nullptr ? compare(fused, steps) : "not run",
                             "; CPU: ", compare(fused, cpu_out));
    rows.push_back(row);
  }

  // PyTorch on the same expressions, in this invocation.
  if (!torch_script.empty()) {
    std::istringstream lines(
        bench::Capture(absl::StrCat("python3 ", torch_script, " --reps=", reps)));
    std::string line;
    while (std::getline(lines, line)) {
      char name[128];
      double eager = 0, compiled = 0;
      if (std::sscanf(line.c_str(), "%127s %lf %lf", name, &eager, &compiled) == 3) {
        for (Row& r : rows) {
          if (r.name == name) {
            r.torch_eager = eager;
            r.torch_compiled = compiled;
          }
        }
      } else {
        std::fprintf(stderr, "torch: %s\n", line.c_str());
      }
    }
  }

  std::string md = absl::StrFormat(
      "| case | fused ms | GB/s | %% of copy | ops one by one ms | fused speedup | steps ms | "
      "torch eager ms | torch.compile ms | vs torch.compile | fused against |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    md += absl::StrFormat(
        "| %s | %.3f | %.0f | %.1f%% | %.3f | %.2fx | %.3f | %.3f | %.3f | %.2fx | %s |\n", r.name,
        r.fused, r.bytes / r.fused / 1e6, 100 * r.copy / r.fused, r.opbyop, r.opbyop / r.fused,
        r.steps, r.torch_eager, r.torch_compiled,
        r.torch_compiled > 0 ? r.torch_compiled / r.fused : 0.0, r.check);
  }

  // A new expression: generation, NVRTC and loading, as the first request for it waits; the
  // same after a restart, from the disk cache; the same with every disk entry damaged; and
  // what a cached one adds on the host (generation, lookup), averaged.
  {
    char tmpl[] = "/tmp/tc-bench-kernels-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    const std::string disk_dir = tmpl;
    auto open_disk = [&] {
      auto d = rtc::DiskCache::Open(disk_dir, int64_t{256} << 20);
      if (!d.ok()) {
        std::fprintf(stderr, "%s\n", d.status().ToString().c_str());
        std::exit(1);
      }
      return std::shared_ptr<rtc::DiskCache>(*std::move(d));
    };
    const DevBuf x = Random(F32, 1 << 20, 3), y = Random(F32, 1 << 20, 4), z = Alloc(4 << 20);
    const std::vector<TensorView> in = {View(x, F32, {1 << 20}), View(y, F32, {1 << 20})};
    const char* texts[] = {"sigmoid(a * b + 1) * a",
                           "tanh(a) * b - 2",
                           "exp(-a * a) + b",
                           "where(a > b, a, b * 0.5)",
                           "clamp(a * b, min=0, max=6)",
                           "log1p(abs(a)) / (b * b + 1)",
                           "gelu(a) + silu(b)",
                           "cast(a * 100, int32) // 7 + cast(b, int32)",
                           "a * 3 + b",
                           "sqrt(abs(a - b)) * 0.5",
                           "erf(a) - erf(b)",
                           "maximum(a, b) - minimum(a, b)"};
    // The same inputs as four dims that neither coalesce nor tile (a read as
    // a.transpose(1, 2)): the general walk.
    std::vector<TensorView> in_general = {View(x, F32, {16, 16, 16, 256}),
                                          View(y, F32, {16, 16, 16, 256})};
    std::swap(in_general[0].strides[1], in_general[0].strides[2]);
    // Each text's first request through `cache`, in ms.
    auto first_requests = [&](cuda::ExprKernelCache& cache, const std::vector<TensorView>& views) {
      std::vector<double> ms;
      for (const char* text : texts) {
        auto p = expr::PrepareExpression(text, {}, views);
        if (!p.ok()) {
          std::fprintf(stderr, "%s: %s\n", text, p.status().ToString().c_str());
          std::exit(1);
        }
        char* b[3] = {reinterpret_cast<char*>(z.p), reinterpret_cast<char*>(x.p),
                      reinterpret_cast<char*>(y.p)};
        const auto t0 = std::chrono::steady_clock::now();
        const cuda::ExprLaunch l =
            cuda::PrepareExprLaunch(*p->expression, b, env.multiprocessors, arch);
        std::promise<void> done;
        cache.Get(l.source, arch, [&](absl::StatusOr<std::shared_ptr<const cuda::ExprKernel>> r) {
          if (!r.ok()) std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
          done.set_value();
        });
        done.get_future().get();
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      std::sort(ms.begin(), ms.end());
      return ms;
    };
    auto row = [&](const char* what, const std::vector<double>& ms,
                   const cuda::ExprCacheStats& st) {
      md += absl::StrFormat("| %s | %.1f | %.1f | %.1f | %d | %d | %d |\n", what, ms[ms.size() / 2],
                            ms.front(), ms.back(), static_cast<int>(st.compiles),
                            static_cast<int>(st.disk_loads), static_cast<int>(st.disk.rejected));
    };
    md += absl::StrFormat(
        "\nFirst request for a new expression (generate, then compile with NVRTC and load, or "
        "load from the disk cache), %zu expressions, each cache fresh in memory (a new "
        "process's):\n\n| path | median ms | min | max | compiled | from disk | refused |\n"
        "|---|---|---|---|---|---|---|\n",
        std::size(texts));
    {
      cuda::ExprKernelCache cold(cuda::ExprKernelCache::Options{});
      cold.UseDisk(open_disk());
      const std::vector<double> ms = first_requests(cold, in);
      row("cold: compiled, then stored on disk", ms, cold.stats());
    }
    {
      cuda::ExprKernelCache restarted(cuda::ExprKernelCache::Options{});
      restarted.UseDisk(open_disk());
      const std::vector<double> ms = first_requests(restarted, in);
      row("after a restart: from disk", ms, restarted.stats());
    }
    {
      // One byte of each entry's kernel changed: every one refused and compiled again.
      for (const auto& e : std::filesystem::directory_iterator(disk_dir)) {
        std::FILE* f = std::fopen(e.path().c_str(), "r+b");
        if (f == nullptr) continue;
        std::fseek(f, -64, SEEK_END);
        const int c = std::fgetc(f);
        std::fseek(f, -64, SEEK_END);
        std::fputc(c ^ 0x40, f);
        std::fclose(f);
      }
      cuda::ExprKernelCache damaged(cuda::ExprKernelCache::Options{});
      damaged.UseDisk(open_disk());
      const std::vector<double> ms = first_requests(damaged, in);
      row("every disk entry damaged: refused, compiled again", ms, damaged.stats());
    }
    std::filesystem::remove_all(disk_dir);
    // Memory only (as with --kernel_cache_dir=); then kept for the cached case below.
    cuda::ExprKernelCache fresh(cuda::ExprKernelCache::Options{});
    const std::vector<double> memory_ms = first_requests(fresh, in);
    row("no disk cache: compiled", memory_ms, fresh.stats());
    {
      cuda::ExprKernelCache general(cuda::ExprKernelCache::Options{});
      const std::vector<double> ms = first_requests(general, in_general);
      row("no disk cache, the general walk ([16, 16, 16, 256], a transposed): compiled", ms,
          general.stats());
    }
    md += "\n";
    // The same first requests as the engine answers them by default: at once by their ops one
    // by one (the process's cache, which has none of these kernels), their compilations
    // started behind them. From the request planned to its result on the device.
    {
      cuda::ExprKernelCache& shared = cuda::ExprKernelCache::Shared();
      shared.SetStepMode(cuda::StepMode::kWhileCompiling);
      const cuda::ExprCacheStats before = shared.stats();
      std::vector<double> ms;
      for (const char* text : texts) {
        auto p = expr::PrepareExpression(text, {}, in);
        const std::byte* inputs[2] = {reinterpret_cast<const std::byte*>(x.p),
                                      reinterpret_cast<const std::byte*>(y.p)};
        const auto t0 = std::chrono::steady_clock::now();
        std::promise<absl::StatusOr<cuda::ReadyLaunch>> got;
        cuda::Prepare(*p, reinterpret_cast<std::byte*>(z.p), inputs, env.multiprocessors, arch,
                      [&](absl::StatusOr<cuda::ReadyLaunch> r) { got.set_value(std::move(r)); });
        absl::StatusOr<cuda::ReadyLaunch> ready = got.get_future().get();
        if (!ready.ok() || !ready->enqueue(env).ok()) {
          std::fprintf(stderr, "%s: not run\n", text);
          return 1;
        }
        TC_CHECK_CUDA(cudaStreamSynchronize(stream));
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      std::sort(ms.begin(), ms.end());
      const cuda::ExprCacheStats after = shared.stats();
      md += absl::StrFormat(
          "The same first requests as the engine answers them by default (their ops one by one "
          "at once, each kernel compiling behind them), from the planned request to its result "
          "on the device: median %.2f ms, min %.2f, max %.2f (%d answered by steps).\n",
          ms[ms.size() / 2], ms.front(), ms.back(),
          static_cast<int>(after.stepwise - before.stepwise));
      // Their compilations finish before anything else is timed.
      while (shared.stats().compiling > 0 ||
             shared.stats().compiles + shared.stats().compile_failures <
                 before.compiles + before.compile_failures + std::size(texts)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    // Cached: the chain over 2^26 elements, its launch prepared and found, 20000 times.
    auto p = expr::PrepareExpression("sigmoid(a * b + 1) * a", {}, in);
    char* b[3] = {reinterpret_cast<char*>(z.p), reinterpret_cast<char*>(x.p),
                  reinterpret_cast<char*>(y.p)};
    const int kHits = 20000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kHits; ++i) {
      const cuda::ExprLaunch l =
          cuda::PrepareExprLaunch(*p->expression, b, env.multiprocessors, arch);
      fresh.Get(l.source, arch, [](absl::StatusOr<std::shared_ptr<const cuda::ExprKernel>>) {});
    }
    const double hit_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        kHits;
    md += absl::StrFormat(
        "A cached expression's host work per request (generate the source, find "
        "the kernel, build its arguments): %.2f us.\n",
        hit_us);
  }
  std::printf("%s", md.c_str());
  if (!md_path.empty()) {
    if (FILE* f = std::fopen(md_path.c_str(), "w")) {
      std::fputs(md.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
