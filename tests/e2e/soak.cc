// Soak: many concurrent clients with a mix of small, large streamed and resident requests for
// a fixed time against one server, every result checked. Samples the server's RSS, device
// memory and resident tensors every second, and fails (exit 1) on any error or wrong result,
// when, after the load, device memory and resident tensors are not back at the baseline or
// RSS is not back within a quarter (plus --rss_slack_mib) of it, or on memory running away
// under load: the second half's median of the memory in use above the first half's by more
// than a quarter plus the slack. Memory in use is RSS less the bytes the server's heap holds
// free (ServerInfo): while calls come the allocator keeps up to a cushion of freed memory, so
// RSS keeps the high-water mark of a burst of large requests until the server is idle, while
// what is in use follows the requests in flight. What a leak cannot do is give its memory
// back afterwards, which the check after the load (on RSS) sees.
//
// Each sample also records the CPU time the server, the soak's own clients and the whole host
// spent in it, the time a hypervisor gave the host's cores to other guests, and the calls of
// each kind; the end prints the rate by minute beside them: when the rate moves, whether the
// server needed more CPU per call, the clients ran out of CPU, the host was busy with
// something else or its neighbours took its cores, and which kind of call slowed, shows there.
//
//   tensorcompute-soak --server_binary=build/server/tensorcompute-server --clients=64
//       --seconds=60 [--backend=cuda] [--json=soak.json]
//   tensorcompute-soak --target=HOST:PORT --server_pid=PID ...   (a server already running)
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/support/load_mix.h"
#include "tests/support/server_process.h"

ABSL_FLAG(std::string, server_binary, "", "Server to start on 127.0.0.1 for the soak.");
ABSL_FLAG(std::string, backend, "cpu", "--backend of the started server.");
ABSL_FLAG(std::string, server_flags, "",
          "More flags for the started server, comma-separated (--devices=0,1,--x=y).");
ABSL_FLAG(std::string, target, "", "Soak a server that is already running instead.");
ABSL_FLAG(int, server_pid, 0, "Its process id, for its RSS (with --target).");
ABSL_FLAG(int, clients, 64, "Concurrent clients, one channel each.");
ABSL_FLAG(int, seconds, 60, "How long the load runs.");
ABSL_FLAG(int, print_seconds, 5, "Seconds between printed samples (one is taken each second).");
ABSL_FLAG(std::string, weights, "16,2,2",
          "Relative shares of small adds, streamed multiplies and resident round trips.");
ABSL_FLAG(int64_t, streamed_mib, 4, "MiB per input of a streamed request.");
ABSL_FLAG(int64_t, resident_kib, 1024, "KiB of a resident tensor.");
ABSL_FLAG(int64_t, rss_slack_mib, 32, "RSS growth allowed beyond the quarter (see above).");
ABSL_FLAG(std::string, json, "", "Write the figures here as JSON.");

namespace {

using tc::testing::LoadKind;
using tc::testing::LoadMix;
using tc::testing::LoadMixOptions;
using tc::testing::LoadMixReport;
using tc::testing::ServerFootprint;

struct Sample {
  double t = 0;
  // The interval the sample covers (about a second: the footprint call adds its time).
  double dt = 0;
  double calls_per_s = 0;
  ServerFootprint f;
  // Cores busy over the second before the sample: the server process, this process (the
  // clients), and the host as a whole (every process).
  double server_cores = 0;
  double soak_cores = 0;
  double host_cores = 0;
  // Cores the hypervisor gave to other guests while this one wanted them (steal time): a
  // virtual machine's neighbours, which no process here can see otherwise.
  double steal_cores = 0;
  // Calls finished over that second, by kind (small, streamed, resident).
  double kind_per_s[3] = {};
};

// CPU seconds the process has used so far (user + system); -1 when it cannot be read.
double ProcessCpuSeconds(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return -1;
  // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<std::string> f = absl::StrSplit(line.substr(close + 2), ' ');
  if (f.size() < 13) return -1;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return (std::stod(f[11]) + std::stod(f[12])) / ticks;
}

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

// CPU seconds of the whole host so far (all cores): busy (user, nice, system, irq, softirq),
// and stolen (the hypervisor ran another guest while this one was runnable).
struct HostCpu {
  double busy = -1;
  double steal = -1;
};
HostCpu HostCpuSeconds() {
  std::ifstream in("/proc/stat");
  std::string label;
  in >> label;
  if (label != "cpu") return {};
  // user nice system idle iowait irq softirq steal
  double v[8] = {};
  for (int i = 0; i < 8 && in >> v[i]; ++i) {
  }
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return HostCpu{(v[0] + v[1] + v[2] + v[5] + v[6]) / ticks, v[7] / ticks};
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::unique_ptr<tc::testing::ServerProcess> server;
  std::string target = absl::GetFlag(FLAGS_target);
  int pid = absl::GetFlag(FLAGS_server_pid);
  if (target.empty()) {
    std::vector<std::string> flags = {"--backend=" + absl::GetFlag(FLAGS_backend)};
    for (const std::string& f : tc::testing::SplitFlags(absl::GetFlag(FLAGS_server_flags))) {
      flags.push_back(f);
    }
    server =
        std::make_unique<tc::testing::ServerProcess>(absl::GetFlag(FLAGS_server_binary), flags);
    if (server->port() == 0) {
      std::fprintf(stderr, "soak: the server did not start\n");
      return 1;
    }
    target = server->target();
    pid = server->pid();
  }

  LoadMixOptions m;
  m.target = target;
  m.clients = absl::GetFlag(FLAGS_clients);
  int k = 0;
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_weights), ',')) {
    if (k < tc::testing::kLoadKinds) m.weights[k++] = std::stoi(std::string(w));
  }
  m.streamed_elements = absl::GetFlag(FLAGS_streamed_mib) << 18;
  m.resident_elements = absl::GetFlag(FLAGS_resident_kib) << 8;
  m.deadline = absl::Seconds(120);

  // Warm-up: a few calls per client, so arenas and caches have grown before the baseline.
  {
    LoadMixOptions w = m;
    w.calls_per_client = 5;
    LoadMix warm(w);
    warm.Start();
    warm.Wait();
    if (warm.report().unexpected > 0) {
      std::fprintf(stderr, "soak: errors during the warm-up:\n%s\n",
                   warm.report().Summary().c_str());
      return 1;
    }
  }
  const ServerFootprint base = tc::testing::Footprint(target, pid);
  std::printf("soak: %d clients for %d s against %s; baseline %s\n", m.clients,
              absl::GetFlag(FLAGS_seconds), target.c_str(), base.ToString().c_str());

  std::vector<Sample> samples;
  LoadMix load(m);
  const auto t0 = std::chrono::steady_clock::now();
  load.Start();
  const auto end = t0 + std::chrono::seconds(absl::GetFlag(FLAGS_seconds));
  int64_t last_calls = 0;
  auto last_t = t0;
  const HostCpu host0 = HostCpuSeconds();
  double last_server = ProcessCpuSeconds(pid), last_self = SelfCpuSeconds(), last_host = host0.busy,
         last_steal = host0.steal;
  LoadMixReport last_report;
  while (std::chrono::steady_clock::now() < end) {
    const auto next = std::min(end, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    std::this_thread::sleep_until(next);
    const auto now = std::chrono::steady_clock::now();
    const LoadMixReport r = load.report();
    Sample s;
    const double dt = std::chrono::duration<double>(now - last_t).count();
    s.t = std::chrono::duration<double>(now - t0).count();
    s.dt = dt;
    s.calls_per_s = static_cast<double>(r.total() - last_calls) / dt;
    s.f = tc::testing::Footprint(target, pid);
    const HostCpu host = HostCpuSeconds();
    const double server_cpu = ProcessCpuSeconds(pid), self_cpu = SelfCpuSeconds();
    s.server_cores = (server_cpu - last_server) / dt;
    s.soak_cores = (self_cpu - last_self) / dt;
    s.host_cores = (host.busy - last_host) / dt;
    s.steal_cores = (host.steal - last_steal) / dt;
    for (int k = 0; k < 3; ++k) {
      s.kind_per_s[k] =
          static_cast<double>(r.ok[k] + r.failed[k] - last_report.ok[k] - last_report.failed[k]) /
          dt;
    }
    last_report = r;
    last_server = server_cpu;
    last_self = self_cpu;
    last_host = host.busy;
    last_steal = host.steal;
    last_calls = r.total();
    last_t = now;
    samples.push_back(s);
    const int every = std::max(absl::GetFlag(FLAGS_print_seconds), 1);
    if (samples.size() % every != 0 && now < end) continue;
    std::printf(
        "  t=%5.0f s  %8.0f calls/s  RSS %5lld MiB  in use %5lld MiB  device %7.1f MiB  "
        "resident %lld  cores server %.1f soak %.1f host %.1f stolen %.1f  errors %lld\n",
        s.t, s.calls_per_s, static_cast<long long>(s.f.rss_kb >> 10),
        static_cast<long long>(s.f.in_use_kb() >> 10),
        static_cast<double>(s.f.device_bytes) / (1 << 20),
        static_cast<long long>(s.f.resident_tensors), s.server_cores, s.soak_cores, s.host_cores,
        s.steal_cores, static_cast<long long>(r.unexpected + r.wrong));
    std::fflush(stdout);
  }
  load.Stop();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const LoadMixReport r = load.report();

  // Afterwards: device memory and resident tensors back at the baseline (allow a few seconds
  // for the last completions and the sweeper).
  ServerFootprint after;
  for (int i = 0; i < 100; ++i) {
    after = tc::testing::Footprint(target, pid);
    if (after.device_bytes == base.device_bytes &&
        after.resident_tensors == base.resident_tensors && i >= 20) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Memory in use swings with the large requests in flight at each sample: compare medians of
  // the two halves, loosely; the check after the load is the strict one.
  std::vector<int64_t> first, second, rss_first, rss_second;
  int64_t peak = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const bool in_first = 2 * i < samples.size();
    (in_first ? first : second).push_back(samples[i].f.in_use_kb());
    (in_first ? rss_first : rss_second).push_back(samples[i].f.rss_kb);
    peak = std::max(peak, samples[i].f.rss_kb);
  }
  auto median = [](std::vector<int64_t> v) -> int64_t {
    if (v.empty()) return 0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const int64_t first_median = median(first), second_median = median(second);
  const int64_t rss_first_median = median(rss_first), rss_second_median = median(rss_second);
  const int64_t slack = absl::GetFlag(FLAGS_rss_slack_mib) << 10;
  const int64_t allowed = first_median + first_median / 4 + slack;
  const bool flat = second.empty() || second_median <= allowed;
  const int64_t allowed_after = base.rss_kb + base.rss_kb / 4 + slack;
  const bool back = after.device_bytes == base.device_bytes &&
                    after.resident_tensors == base.resident_tensors &&
                    after.rss_kb <= allowed_after;
  const bool clean = r.unexpected == 0 && r.wrong == 0;

  std::printf("soak: %.0f s, %lld calls (%.0f/s): %s\n", elapsed, static_cast<long long>(r.total()),
              static_cast<double>(r.total()) / elapsed, r.Summary().c_str());
  std::printf(
      "soak: memory in use, median first half %lld MiB, second half %lld MiB (allowed "
      "%lld): %s; RSS median %lld and %lld MiB, peak %lld MiB\n",
      static_cast<long long>(first_median >> 10), static_cast<long long>(second_median >> 10),
      static_cast<long long>(allowed >> 10), flat ? "flat" : "GROWING",
      static_cast<long long>(rss_first_median >> 10),
      static_cast<long long>(rss_second_median >> 10), static_cast<long long>(peak >> 10));
  std::printf("soak: after: %s (baseline %s, RSS allowed %lld MiB): %s\n", after.ToString().c_str(),
              base.ToString().c_str(), static_cast<long long>(allowed_after >> 10),
              back ? "back at the baseline" : "NOT BACK");

  // By minute (the last one may be shorter): the rate, by kind too, and the CPU each party
  // spent per call.
  std::printf(
      "soak: by minute: calls/s (small streamed resident) | server CPU ms per call | "
      "soak CPU ms per call | host cores busy, stolen\n");
  // A sample belongs to the minute of its interval's middle; a minute is full when the run
  // went past its end. Sums are weighted by each sample's interval.
  double lo = 0, hi = 0;
  const double run_t = samples.empty() ? 0 : samples.back().t;
  for (size_t begin = 0; begin < samples.size();) {
    auto minute_of = [](const Sample& x) { return static_cast<int>((x.t - x.dt / 2) / 60); };
    const int minute = minute_of(samples[begin]);
    size_t end = begin;
    double span = 0, calls = 0, server = 0, soak = 0, host = 0, steal = 0, kinds[3] = {};
    for (; end < samples.size() && minute_of(samples[end]) == minute; ++end) {
      const Sample& x = samples[end];
      span += x.dt;
      calls += x.calls_per_s * x.dt;
      server += x.server_cores * x.dt;
      soak += x.soak_cores * x.dt;
      host += x.host_cores * x.dt;
      steal += x.steal_cores * x.dt;
      for (int k = 0; k < 3; ++k) kinds[k] += x.kind_per_s[k] * x.dt;
    }
    begin = end;
    if (span <= 0) continue;
    const double rate = calls / span;
    if (run_t >= 60.0 * (minute + 1)) {
      lo = lo == 0 ? rate : std::min(lo, rate);
      hi = std::max(hi, rate);
    }
    std::printf("  minute %2d  %8.0f (%6.0f %5.0f %5.0f)  %6.3f  %6.3f  %5.1f %4.1f\n", minute + 1,
                rate, kinds[0] / span, kinds[1] / span, kinds[2] / span,
                calls > 0 ? 1e3 * server / calls : 0.0, calls > 0 ? 1e3 * soak / calls : 0.0,
                host / span, steal / span);
  }
  if (lo > 0) std::printf("soak: full minutes, highest rate over lowest: %.3f\n", hi / lo);

  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << absl::StrFormat(
        "{\n  \"clients\": %d, \"seconds\": %.1f, \"calls\": %d, \"calls_per_second\": %.1f,\n",
        m.clients, elapsed, r.total(), static_cast<double>(r.total()) / elapsed);
    out << "  \"ok\": {";
    for (int i = 0; i < tc::testing::kLoadKinds; ++i) {
      out << (i ? ", " : "") << "\"" << tc::testing::LoadKindName(static_cast<LoadKind>(i))
          << "\": " << r.ok[i];
    }
    out << absl::StrFormat(
        "},\n  \"unexpected_errors\": %d, \"wrong_results\": %d,\n"
        "  \"baseline\": {\"rss_kb\": %d, \"device_bytes\": %d, \"resident_tensors\": %d},\n"
        "  \"after\": {\"rss_kb\": %d, \"device_bytes\": %d, \"resident_tensors\": %d},\n"
        "  \"rss_median_kb\": {\"first_half\": %d, \"second_half\": %d}, \"rss_peak_kb\": %d,\n"
        "  \"in_use_median_kb\": {\"first_half\": %d, \"second_half\": %d},\n"
        "  \"samples\": [",
        r.unexpected, r.wrong, base.rss_kb, base.device_bytes, base.resident_tensors, after.rss_kb,
        after.device_bytes, after.resident_tensors, rss_first_median, rss_second_median, peak,
        first_median, second_median);
    for (size_t i = 0; i < samples.size(); ++i) {
      out << absl::StrFormat(
          "%s\n    {\"t\": %.2f, \"dt\": %.3f, \"calls_per_second\": %.1f, \"rss_kb\": %d, "
          "\"heap_allocated_bytes\": %d, \"heap_free_bytes\": %d, "
          "\"device_bytes\": %d, \"resident_tensors\": %d, \"server_cores\": %.2f, "
          "\"soak_cores\": %.2f, \"host_cores\": %.2f, \"steal_cores\": %.2f, "
          "\"small_per_second\": %.1f, \"streamed_per_second\": %.1f, "
          "\"resident_per_second\": %.1f}",
          i ? "," : "", samples[i].t, samples[i].dt, samples[i].calls_per_s, samples[i].f.rss_kb,
          samples[i].f.heap_allocated_bytes, samples[i].f.heap_free_bytes,
          samples[i].f.device_bytes, samples[i].f.resident_tensors, samples[i].server_cores,
          samples[i].soak_cores, samples[i].host_cores, samples[i].steal_cores,
          samples[i].kind_per_s[0], samples[i].kind_per_s[1], samples[i].kind_per_s[2]);
    }
    out << "\n  ],\n  \"passed\": " << (clean && flat && back ? "true" : "false") << "\n}\n";
  }
  return clean && flat && back ? 0 : 1;
}
