// CPU backend benchmark: the case matrix of bench/cpu_reference.py (2^24 elements), timed on
// tensorcompute's CPU backend and, in the same invocation, on NumPy and PyTorch.
//
//   tensorcompute-cpu-bench [--threads=N] [--reps=R] [--reference=PATH|none] [--markdown=FILE]
//                           [--only=CASE] [--rounds=K] [--isa=baseline|avx2|avx512]
//                           [--compare_isas]
//
// The whole matrix runs --rounds times (3) and each column shows the median over rounds.
// Each figure is a median of timed calls after 3 warm-ups (ours: the mean of the medians of two
// halves of R calls, taken before and after NumPy's and PyTorch's R calls of the same case, in
// one Python process kept for the whole run);
// a call is PrepareOp (checks and planning) plus the backend run into a preallocated output,
// as NumPy's and PyTorch's out=. The expression cases (expr_*) are one PrepareExpression
// (parse, type, plan) and one fused run, against NumPy's and PyTorch's ops one by one (with
// out= temporaries) and numexpr's evaluate() of the same expression.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/store_path.h"
#include "kernels/engine.h"
#include "kernels/expr/program.h"
#include "tests/support/cpu_backend.h"
#include "util/thread_pool.h"

namespace tc {
namespace {

struct Buffer {
  std::vector<char> bytes;
  TensorView View(DType t, DimVector shape, DimVector strides = {}, int64_t offset = 0) const {
    if (strides.empty()) strides = ContiguousStrides(shape);
    return TensorView{t,
                      std::move(shape),
                      std::move(strides),
                      offset,
                      reinterpret_cast<const std::byte*>(bytes.data()),
                      static_cast<int64_t>(bytes.size())};
  }
};

template <typename T, typename Gen>
Buffer Make(int64_t n, Gen gen) {
  Buffer b;
  b.bytes.resize(n * sizeof(T));
  T* p = reinterpret_cast<T*>(b.bytes.data());
  for (int64_t i = 0; i < n; ++i) p[i] = gen(i);
  return b;
}

double MedianMs(const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ts;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ts.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// The memory-bound anchor: a float32 add as plain as it gets, compiled for the widest vectors
// the CPU has (GCC's target_clones), split over the same number of threads. Where our time
// matches it, what a reference does faster is not in the loop.
constexpr int64_t kGrainForPlainAdd = 32768;
__attribute__((target_clones("avx512f", "avx2", "default"))) void PlainAdd(
    const float* __restrict a, const float* __restrict b, float* __restrict out, int64_t begin,
    int64_t end) {
  for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
}

struct Case {
  std::string name;
  std::string op;
  std::vector<TensorView> inputs;
  OutputOptions output;
  // Instead of `op`: an expression over the inputs.
  std::string expr;
};

// A child process with a pipe to its stdin and one from its stdout.
struct ReferenceProcess {
  pid_t pid = -1;
  FILE* to = nullptr;
  FILE* from = nullptr;
  static std::unique_ptr<ReferenceProcess> Start(const std::vector<std::string>& argv) {
    int in[2], out[2];
    if (pipe(in) != 0) return nullptr;
    if (pipe(out) != 0) {
      close(in[0]);
      close(in[1]);
      return nullptr;
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[0]);
      close(in[1]);
      close(out[0]);
      close(out[1]);
      execv(args[0], args.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    auto p = std::make_unique<ReferenceProcess>();
    p->pid = pid;
    p->to = fdopen(in[1], "w");
    p->from = fdopen(out[0], "r");
    return p;
  }
  ~ReferenceProcess() {
    if (to != nullptr) std::fclose(to);  // end of stdin: the script exits
    if (from != nullptr) std::fclose(from);
    if (pid > 0) waitpid(pid, nullptr, 0);
  }
};

// What the figures ran on: the CPU's model (with its family and model numbers, which tell
// microarchitectures apart where the name does not), its vector features and cache sizes.
std::string MachineLine() {
  std::string name = "unknown CPU", family, model;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name") name = value;
    if (key == "cpu family") family = value;
    if (key == "model") model = value;
    if (key.empty()) break;  // the first processor's block ends
  }
  std::string features;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const std::pair<const char*, bool> flags[] = {{"sse4.2", __builtin_cpu_supports("sse4.2")},
                                                {"avx", __builtin_cpu_supports("avx")},
                                                {"avx2", __builtin_cpu_supports("avx2")},
                                                {"fma", __builtin_cpu_supports("fma")},
                                                {"avx512f", __builtin_cpu_supports("avx512f")},
                                                {"avx512dq", __builtin_cpu_supports("avx512dq")},
                                                {"avx512bw", __builtin_cpu_supports("avx512bw")},
                                                {"avx512vl", __builtin_cpu_supports("avx512vl")}};
  for (const auto& [flag, has] : flags) {
    if (has) features += std::string(features.empty() ? "" : " ") + flag;
  }
#endif
  // As glibc reads them from the CPU (cpuid), which virtual machines pass through where they
  // hide the kernel's cache topology.
  std::string caches;
  const std::pair<const char*, int> levels[] = {{"L1d", _SC_LEVEL1_DCACHE_SIZE},
                                                {"L2", _SC_LEVEL2_CACHE_SIZE},
                                                {"L3", _SC_LEVEL3_CACHE_SIZE}};
  for (const auto& [level, which] : levels) {
    const long bytes = sysconf(which);
    if (bytes > 0) caches += " " + std::string(level) + " " + std::to_string(bytes >> 10) + " KiB";
  }
  const cpu::StorePath& stores = cpu::LargeOutputStores();
  const std::string store_line = std::string("; large outputs: ") +
                                 (stores.streaming ? "streaming" : "plain") + " stores (by " +
                                 stores.decided_by + ")";
  return name + " (family " + family + " model " + model + "), " +
         std::to_string(std::thread::hardware_concurrency()) + " hardware threads; " +
         (features.empty() ? "no vector extensions past SSE2" : features) + ";" + caches +
         store_line;
}

}  // namespace
}  // namespace tc

ABSL_FLAG(int, threads, 0, "Threads of the CPU backend (0: every hardware thread).");
ABSL_FLAG(int, reps, 15, "Timed repetitions of each case.");
ABSL_FLAG(std::string, reference, "bench/cpu_reference.py",
          "PyTorch's side (a script run with python3), or 'none'.");
ABSL_FLAG(std::string, markdown, "", "Write the table here too.");
ABSL_FLAG(std::string, only, "", "Only the cases whose name contains this.");
ABSL_FLAG(int, rounds, 3, "Rounds of the whole table (each column the median over them).");
ABSL_FLAG(std::string, isa, "", "The vector extension level: baseline, avx2 or avx512.");
ABSL_FLAG(bool, compare_isas, false,
          "A second table: our time under each vector extension level the machine has "
          "(kernels/cpu/isa.h), the levels interleaved per case.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The CPU backend on the case table, beside PyTorch on the same views.");
  absl::ParseCommandLine(argc, argv);
  using namespace tc;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (absl::GetFlag(FLAGS_threads) > 0) threads = absl::GetFlag(FLAGS_threads);
  const int reps = absl::GetFlag(FLAGS_reps);
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  const std::string reference = absl::GetFlag(FLAGS_reference);
  const std::string markdown = absl::GetFlag(FLAGS_markdown);
  const std::string only = absl::GetFlag(FLAGS_only);
  const std::string isa = absl::GetFlag(FLAGS_isa);
  const bool compare_isas = absl::GetFlag(FLAGS_compare_isas);

  const int64_t N = int64_t{1} << 24, M = 4096;
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  const Buffer a = Make<float>(N, [&](int64_t) { return uni(rng); });
  const Buffer b = Make<float>(N, [&](int64_t) { return uni(rng); });
  const Buffer h1 = Make<Half>(
      N, [&](int64_t i) { return Half(reinterpret_cast<const float*>(a.bytes.data())[i]); });
  const Buffer h2 = Make<Half>(
      N, [&](int64_t i) { return Half(reinterpret_cast<const float*>(b.bytes.data())[i]); });
  const Buffer row = Make<float>(M, [&](int64_t) { return uni(rng); });
  const Buffer col = Make<float>(M, [&](int64_t) { return uni(rng); });
  const Buffer i1 = Make<int32_t>(N, [&](int64_t i) {
    return static_cast<int32_t>(reinterpret_cast<const float*>(a.bytes.data())[i] * 1000);
  });
  const Buffer i2 = Make<int32_t>(N, [&](int64_t i) {
    return static_cast<int32_t>(reinterpret_cast<const float*>(b.bytes.data())[i] * 1000) + 1;
  });
  const Buffer c = Make<float>(N, [&](int64_t) { return uni(rng); });
  const Buffer d = Make<float>(N, [&](int64_t) { return uni(rng); });
  const Buffer sa = Make<float>(4096, [&](int64_t) { return uni(rng); });
  const Buffer sb = Make<float>(4096, [&](int64_t) { return uni(rng); });

  const DType F32 = DType::kFloat32, F16 = DType::kFloat16, I32 = DType::kInt32;
  std::vector<Case> cases = {
      {"add_f32_contig", "add", {a.View(F32, {N}), b.View(F32, {N})}, {}, ""},
      {"div_f32_contig", "div", {a.View(F32, {N}), b.View(F32, {N})}, {}, ""},
      {"pow_f32_contig", "pow", {a.View(F32, {N}), b.View(F32, {N})}, {}, ""},
      {"mul_f16_contig", "mul", {h1.View(F16, {N}), h2.View(F16, {N})}, {}, ""},
      {"add_f16_f32_mixed", "add", {h1.View(F16, {N}), b.View(F32, {N})}, {}, ""},
      {"gt_f32_to_bool", "gt", {a.View(F32, {N}), b.View(F32, {N})}, {}, ""},
      {"add_f32_bcast_row", "add", {a.View(F32, {M, M}), row.View(F32, {M})}, {}, ""},
      {"add_f32_bcast_col", "add", {a.View(F32, {M, M}), col.View(F32, {M, 1})}, {}, ""},
      {"add_f32_transposed_in", "add", {a.View(F32, {M, M}), b.View(F32, {M, M}, {1, M})}, {}, ""},
      {"add_i32_contig", "add", {i1.View(I32, {N}), i2.View(I32, {N})}, {}, ""},
      {"add_f32_small_4k", "add", {sa.View(F32, {4096}), sb.View(F32, {4096})}, {}, ""},
      {"expr_sigmoid_chain_f32",
       "",
       {a.View(F32, {N}), b.View(F32, {N}), c.View(F32, {N}), d.View(F32, {N})},
       {},
       "sigmoid(a * b + c) * d"},
      {"expr_affine_bcast_row_f32",
       "",
       {a.View(F32, {M, M}), row.View(F32, {M}), col.View(F32, {M})},
       {},
       "tanh(a * b + c)"},
  };

  if (!only.empty()) {
    cases.erase(
        std::remove_if(cases.begin(), cases.end(), [&](const Case& c) { return c.name != only; }),
        cases.end());
  }
  CpuBackend backend(threads);
  int isa_index = static_cast<int>(cpu::ProcessIsa());
  if (!isa.empty()) {
    isa_index = -1;
    for (int i = 0; i < cpu::kNumIsas; ++i) {
      if (isa == cpu::IsaName(static_cast<cpu::Isa>(i))) isa_index = i;
    }
    if (isa_index < 0 || !cpu::IsaAvailable(static_cast<cpu::Isa>(isa_index))) {
      std::fprintf(stderr, "--isa=%s: not a level this machine and build have\n", isa.c_str());
      return 2;
    }
  }
  backend.set_isa(isa_index);
  std::vector<char> out(static_cast<size_t>(N) * 4);
  auto time_ours = [&](const Case& c, int n, absl::Status& status) {
    return MedianMs(
        [&] {
          auto op = c.expr.empty() ? PrepareOp(c.op, c.inputs, {}, c.output, TileRule::kAnyPermuted)
                                   : expr::PrepareExpression(c.expr, {}, c.inputs, c.output);
          status = op.ok() ? backend.Run(*op, c.inputs, reinterpret_cast<std::byte*>(out.data()))
                           : op.status();
        },
        n);
  };
  // NumPy and PyTorch run between two halves of our repetitions of the same case, so that a
  // machine getting faster or slower over the run does not favour either side.
  // One pass over every case first: the first timed case should not pay for first touches of
  // pages and for the thread pool's start.
  for (const Case& c : cases) {
    absl::Status status;
    time_ours(c, 1, status);
  }
  // NumPy and PyTorch in one Python process for the whole run (cpu_reference.py --serve),
  // asked for one case at a time: a process starting or exiting between our timings and
  // theirs disturbed ours (on the 2-core AMD VM the calls after the script's exit, which frees
  // a gigabyte, ran 15-60% slower).
  std::unique_ptr<ReferenceProcess> python;
  std::string versions = "reference not run";
  if (reference != "none") {
    python = ReferenceProcess::Start(
        {"/usr/bin/python3", reference, std::to_string(threads), std::to_string(reps), "--serve"});
    char line[512];
    if (!python || std::fgets(line, sizeof line, python->from) == nullptr || line[0] != '#') {
      std::fprintf(stderr, "reference script did not start: %s\n", reference.c_str());
      python.reset();
    } else {
      versions = std::string(line + 2);
      versions.erase(versions.find_last_not_of("\n") + 1);
    }
  }
  // Per case, one figure per round; the table shows each column's median over the rounds.
  std::map<std::string, std::vector<double>> ours_runs, np_runs, th_runs, ne_runs;
  for (int round = 0; round < rounds; ++round)
    for (const Case& c : cases) {
      std::map<std::string, std::pair<double, double>> refs;
      std::map<std::string, double> numexpr;
      absl::Status status;
      const double first = time_ours(c, (reps + 1) / 2, status);
      if (!status.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name.c_str(), status.ToString().c_str());
        return 1;
      }
      if (python) {
        std::fprintf(python->to, "%s\n", c.name.c_str());
        std::fflush(python->to);
        char line[512];
        if (std::fgets(line, sizeof line, python->from) != nullptr) {
          std::istringstream in(line);
          std::string name;
          double np_ms, th_ms, ne_ms;
          if (in >> name >> np_ms >> th_ms) refs[name] = {np_ms, th_ms};
          if (in >> ne_ms) numexpr[name] = ne_ms;
        }
        if (refs.empty())
          std::fprintf(stderr, "reference script gave nothing for %s\n", c.name.c_str());
      }
      const double second = time_ours(c, (reps + 1) / 2, status);
      ours_runs[c.name].push_back((first + second) / 2);
      if (auto it = refs.find(c.name); it != refs.end()) {
        np_runs[c.name].push_back(it->second.first);
        th_runs[c.name].push_back(it->second.second);
      }
      if (auto it = numexpr.find(c.name); it != numexpr.end())
        ne_runs[c.name].push_back(it->second);
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::map<std::string, double> ours;
  std::map<std::string, std::pair<double, double>> refs;
  for (auto& [name, v] : ours_runs) ours[name] = median(v);
  for (auto& [name, v] : np_runs) refs[name] = {median(v), median(th_runs[name])};
  std::map<std::string, double> numexpr;
  for (auto& [name, v] : ne_runs) numexpr[name] = median(v);

  std::ostringstream table;
  table << "| case | tensorcompute ms | numpy ms | torch ms | numexpr ms | vs numpy | vs torch "
           "| vs numexpr |\n"
        << "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  char buf[320];
  for (const Case& c : cases) {
    const double us = ours[c.name];
    auto it = refs.find(c.name);
    auto ne = numexpr.find(c.name);
    char ne_ms[32] = "-", ne_ratio[32] = "-";
    if (ne != numexpr.end()) {
      std::snprintf(ne_ms, sizeof ne_ms, "%.3f", ne->second);
      std::snprintf(ne_ratio, sizeof ne_ratio, "%.2fx", ne->second / us);
    }
    // Microsecond cases keep their digits: 0.001 ms says nothing.
    const char* f = us < 0.1 ? "%.4f" : "%.3f";
    char us_ms[32], np_s[32], th_s[32];
    std::snprintf(us_ms, sizeof us_ms, f, us);
    if (it == refs.end()) {
      std::snprintf(buf, sizeof buf, "| %s | %s | - | - | - | - | - | - |\n", c.name.c_str(),
                    us_ms);
    } else {
      const auto [np_ms, th_ms] = it->second;
      std::snprintf(np_s, sizeof np_s, f, np_ms);
      std::snprintf(th_s, sizeof th_s, f, th_ms);
      std::snprintf(buf, sizeof buf, "| %s | %s | %s | %s | %s | %.2fx | %.2fx | %s |\n",
                    c.name.c_str(), us_ms, np_s, th_s, ne_ms, np_ms / us, th_ms / us, ne_ratio);
    }
    table << buf;
  }
  // Ours against PlainAdd over the same buffers, interleaved.
  std::string anchor;
  if (only.empty() || only == "add_f32_contig") {
    const Case& c = cases.front();
    ThreadPool loop_pool(ThreadPool::WorkersFor(threads));
    const float* fa = reinterpret_cast<const float*>(a.bytes.data());
    const float* fb = reinterpret_cast<const float*>(b.bytes.data());
    float* fo = reinterpret_cast<float*>(out.data());
    std::vector<double> mine, plain;
    for (int round = 0; round < rounds; ++round) {
      absl::Status status;
      mine.push_back(time_ours(c, reps, status));
      plain.push_back(MedianMs(
          [&] {
            loop_pool.ParallelFor(N, kGrainForPlainAdd,
                                  [&](int64_t s0, int64_t e0) { PlainAdd(fa, fb, fo, s0, e0); });
          },
          reps));
    }
    char line[256];
    std::snprintf(line, sizeof line,
                  "add_f32_contig against a plain loop over the same buffers (widest vectors, %d "
                  "threads), interleaved: ours %.3f ms, plain loop %.3f ms",
                  threads, median(mine), median(plain));
    anchor = line;
  }
  std::ostringstream isa_table;
  if (compare_isas) {
    std::vector<int> levels;
    for (int i = 0; i < cpu::kNumIsas; ++i) {
      if (cpu::IsaAvailable(static_cast<cpu::Isa>(i))) levels.push_back(i);
    }
    isa_table << "\n| case |";
    for (int i : levels) isa_table << " " << cpu::IsaName(static_cast<cpu::Isa>(i)) << " ms |";
    isa_table << " fastest |\n|---|";
    for (size_t i = 0; i < levels.size(); ++i) isa_table << "---:|";
    isa_table << "---|\n";
    for (const Case& c : cases) {
      std::map<int, std::vector<double>> runs;
      for (int round = 0; round < rounds; ++round) {
        for (int i : levels) {
          absl::Status status;
          backend.set_isa(i);
          runs[i].push_back(time_ours(c, reps, status));
        }
      }
      isa_table << "| " << c.name << " |";
      int best = levels.front();
      for (int i : levels) {
        std::snprintf(buf, sizeof buf, median(runs[i]) < 0.1 ? " %.4f |" : " %.3f |",
                      median(runs[i]));
        isa_table << buf;
        if (median(runs[i]) < median(runs[best])) best = i;
      }
      isa_table << " " << cpu::IsaName(static_cast<cpu::Isa>(best)) << " |\n";
    }
    backend.set_isa(isa_index);
  }
  const std::string machine = MachineLine();
  const std::string loops = std::string("CPU loops: ") +
                            cpu::IsaName(static_cast<cpu::Isa>(isa_index)) +
                            (isa.empty() ? " (the highest level available)" : " (--isa)");
  std::printf("cpu: %s\n%s\nthreads=%d reps=%d rounds=%d (%s)\n%s%s%s%s", machine.c_str(),
              loops.c_str(), threads, reps, rounds, versions.c_str(), table.str().c_str(),
              anchor.empty() ? "" : "\n", anchor.empty() ? "" : (anchor + "\n").c_str(),
              isa_table.str().c_str());
  if (!markdown.empty()) {
    std::ofstream md(markdown);
    md << "CPU: " << machine << ".\n"
       << loops << ".\n\nCPU backend, " << threads << " threads; per case the median over "
       << rounds << " rounds of the median of " << reps << " calls; " << versions
       << ". Ratios above 1 mean tensorcompute is faster.\n\n"
       << table.str();
    if (!anchor.empty()) md << "\n" << anchor << ".\n";
    if (compare_isas) {
      md << "\nThe CPU backend under each vector extension level (--compare_isas), per case the "
            "median "
            "over "
         << rounds << " rounds of the median of " << reps << " calls, levels interleaved:\n"
         << isa_table.str();
    }
  }
  return 0;
}
