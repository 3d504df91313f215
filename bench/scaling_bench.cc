// tensorcompute-scaling-bench: what several devices in one server add, measured against the
// same server on one device in the same run (each configuration a fresh server process,
// started from --server_binary with --single_flags, then --multi_flags, --rounds times in
// turn).
//
// - resident: --clients clients (one session each), each with two float32 tensors of --mib
//   MiB kept on the server, computing add on them into a kept output (released right away) as
//   fast as they can for --seconds; aggregate GB/s counts the bytes of 2 inputs and 1 output.
//   Each client's first output is downloaded and checked at sampled positions.
// - small: 4 KiB float32 adds at --small_concurrency over 8 connections: requests/s.
// - cross (multi only, with at least two devices): one --mib add whose inputs are resident on
//   devices 0 and 1, against the same add with both on device 0; the difference is the peer
//   copy of one input (GB/s of that copy).
//
//   tensorcompute-scaling-bench --server_binary=build/server/tensorcompute-server
//       --backend=cuda [--clients=32 --mib=256 --seconds=10] [--json=FILE]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/client.h"
#include "tests/support/server_process.h"

ABSL_FLAG(std::string, server_binary, "", "tensorcompute-server to measure.");
ABSL_FLAG(std::string, backend, "cuda", "Its --backend.");
ABSL_FLAG(std::string, single_flags, "--devices=0",
          "Flags of the one-device server, comma-separated (--devices=0,1,--x=y).");
ABSL_FLAG(std::string, multi_flags, "--devices=all",
          "Flags of the several-device server, comma-separated.");
ABSL_FLAG(std::string, common_flags, "--resident_quota_bytes=1099511627776",
          "Flags of both servers, comma-separated (every client here is one identity, so its "
          "quota must hold all their tensors).");
ABSL_FLAG(int, clients, 32, "Clients of the resident run, one session each.");
ABSL_FLAG(int64_t, mib, 256, "MiB of each input tensor of the resident and cross runs.");
ABSL_FLAG(double, seconds, 10, "Duration of each resident run.");
ABSL_FLAG(int, small_concurrency, 64, "Calls in flight in the small run.");
ABSL_FLAG(double, small_seconds, 5, "Duration of each small run.");
ABSL_FLAG(int, rounds, 1, "Times each configuration runs, in turn (medians reported).");
ABSL_FLAG(std::string, json, "", "Write the results here as JSON.");
ABSL_FLAG(std::string, label, "", "Machine description for the results.");

namespace {

namespace v1 = ::tensorcompute::v1;
using tc::client::Client;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Element i of client c's first and second input: exact in float32, different per client.
float ValueA(int c, int64_t i) { return static_cast<float>((i * 7 + c) % 1021); }
float ValueB(int c, int64_t i) { return static_cast<float>((i * 13 + 3 * c) % 509) * 0.5f; }

v1::Tensor Meta(int64_t n) {
  v1::Tensor t;
  t.set_dtype(v1::float32);
  t.add_shape(n);
  return t;
}

std::unique_ptr<Client> NewClient(const std::string& target) {
  tc::client::ClientOptions o;
  o.timeout = absl::Seconds(300);
  return std::make_unique<Client>(target, o);
}

absl::StatusOr<std::string> Keep(Client& c, const std::vector<float>& x,
                                 std::optional<int> device = std::nullopt) {
  v1::Tensor meta = Meta(static_cast<int64_t>(x.size()));
  if (device.has_value()) {
    v1::UploadHeader h;
    h.set_device(*device);
    v1::Tensor t = meta;
    t.set_data(std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
    auto r = c.UploadWith(h, t);
    if (!r.ok()) return r.status();
    return r->tensor().handle();
  }
  auto r = c.UploadFrom(meta, {x.data(), static_cast<int64_t>(x.size()) * 4});
  if (!r.ok()) return r.status();
  return r->tensor().handle();
}

v1::ComputeRequest AddOf(const std::string& a, const std::string& b, bool keep) {
  v1::ComputeRequest req;
  req.set_op("add");
  req.add_inputs()->set_handle(a);
  req.add_inputs()->set_handle(b);
  req.set_keep_output_resident(keep);
  return req;
}

struct Figures {
  double resident_gbps = 0;
  int64_t resident_calls = 0;
  std::vector<int64_t> requests_per_device;
  double small_rps = 0;
  double cross_seconds = 0, same_seconds = 0;
  std::string peers;
  int devices = 0;
  int errors = 0;
};

void Fail(Figures& f, const absl::Status& s, const char* what) {
  if (f.errors++ < 5) std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
}

Figures Measure(const std::vector<std::string>& flags, int round) {
  Figures f;
  std::vector<std::string> all = {"--backend=" + absl::GetFlag(FLAGS_backend)};
  for (const std::string& c : tc::testing::SplitFlags(absl::GetFlag(FLAGS_common_flags))) {
    all.push_back(c);
  }
  all.insert(all.end(), flags.begin(), flags.end());
  tc::testing::ServerProcess server(absl::GetFlag(FLAGS_server_binary), all);
  if (server.port() == 0) {
    std::fprintf(stderr, "the server did not start\n");
    f.errors = 1;
    return f;
  }
  const std::string target = server.target();
  auto admin = NewClient(target);
  auto info = admin->ServerInfo();
  if (!info.ok()) {
    Fail(f, info.status(), "ServerInfo");
    return f;
  }
  f.devices = info->devices_size();
  for (const auto& d : info->devices()) {
    absl::StrAppend(&f.peers, f.peers.empty() ? "" : "; ", d.index(), "->[",
                    absl::StrJoin(d.peer_devices(), ","), "]");
  }
  const int64_t n = absl::GetFlag(FLAGS_mib) << 18;

  // Resident: every client uploads, then all compute together.
  const int clients = absl::GetFlag(FLAGS_clients);
  std::vector<std::unique_ptr<Client>> cs;
  std::vector<std::pair<std::string, std::string>> handles(clients);
  {
    std::vector<std::thread> up;
    std::atomic<int> failed{0};
    for (int c = 0; c < clients; ++c) cs.push_back(NewClient(target));
    for (int c = 0; c < clients; ++c) {
      up.emplace_back([&, c] {
        std::vector<float> a(n), b(n);
        for (int64_t i = 0; i < n; ++i) {
          a[i] = ValueA(c, i);
          b[i] = ValueB(c, i);
        }
        auto ha = Keep(*cs[c], a);
        auto hb = Keep(*cs[c], b);
        if (!ha.ok() || !hb.ok()) {
          std::fprintf(stderr, "upload %d: %s %s\n", c, ha.status().ToString().c_str(),
                       hb.status().ToString().c_str());
          failed++;
          return;
        }
        handles[c] = {*ha, *hb};
      });
    }
    for (auto& t : up) t.join();
    if (failed > 0) {
      f.errors += failed;
      return f;
    }
  }
  auto before = admin->ServerInfo();
  std::atomic<int64_t> calls{0};
  std::atomic<int> errors{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < clients; ++c) {
    workers.emplace_back([&, c] {
      bool checked = false;
      while (!stop.load()) {
        auto out = cs[c]->Compute(AddOf(handles[c].first, handles[c].second, true));
        if (!out.ok()) {
          if (errors++ < 5)
            std::fprintf(stderr, "compute %d: %s\n", c, out.status().ToString().c_str());
          continue;
        }
        if (!checked) {
          // Sampled positions of the first output.
          auto got = cs[c]->Download(out->handle());
          if (!got.ok() || static_cast<int64_t>(got->data().size()) != n * 4) {
            errors++;
          } else {
            const auto* v = reinterpret_cast<const float*>(got->data().data());
            for (int64_t i = 0; i < n; i += 4099) {
              if (v[i] != ValueA(c, i) + ValueB(c, i)) {
                if (errors++ < 5)
                  std::fprintf(stderr, "client %d: wrong element %lld\n", c,
                               static_cast<long long>(i));
                break;
              }
            }
          }
          checked = true;
        }
        (void)cs[c]->Release({out->handle()});
        calls++;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds)));
  stop = true;
  for (auto& t : workers) t.join();
  const double elapsed = Since(t0);
  f.resident_calls = calls.load();
  f.errors += errors.load();
  f.resident_gbps =
      static_cast<double>(f.resident_calls) * 3.0 * static_cast<double>(n) * 4 / elapsed / 1e9;
  if (auto after = admin->ServerInfo(); after.ok() && before.ok()) {
    for (int i = 0; i < after->devices_size(); ++i) {
      f.requests_per_device.push_back(after->devices(i).requests_total() -
                                      before->devices(i).requests_total());
    }
  }
  for (int c = 0; c < clients; ++c) {
    (void)cs[c]->Release({handles[c].first, handles[c].second});
  }
  cs.clear();

  // Small: 4 KiB adds from many threads over 8 clients (connections).
  {
    std::vector<std::unique_ptr<Client>> small;
    for (int i = 0; i < 8; ++i) small.push_back(NewClient(target));
    std::vector<float> x(1024), y(1024);
    for (int i = 0; i < 1024; ++i) {
      x[i] = static_cast<float>(i);
      y[i] = static_cast<float>(2 * i);
    }
    v1::Tensor tx = Meta(1024), ty = Meta(1024);
    tx.set_data(std::string(reinterpret_cast<const char*>(x.data()), 4096));
    ty.set_data(std::string(reinterpret_cast<const char*>(y.data()), 4096));
    std::atomic<int64_t> done{0};
    std::atomic<int> wrong{0};
    std::atomic<bool> halt{false};
    std::vector<std::thread> ts;
    const auto s0 = std::chrono::steady_clock::now();
    for (int t = 0; t < absl::GetFlag(FLAGS_small_concurrency); ++t) {
      ts.emplace_back([&, t] {
        while (!halt.load()) {
          auto r = small[t % small.size()]->Compute("add", {tx, ty});
          if (!r.ok() || r->data().size() != 4096 ||
              reinterpret_cast<const float*>(r->data().data())[1023] != 3 * 1023.0f) {
            wrong++;
            continue;
          }
          done++;
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(absl::GetFlag(FLAGS_small_seconds)));
    halt = true;
    for (auto& t : ts) t.join();
    f.small_rps = static_cast<double>(done.load()) / Since(s0);
    f.errors += wrong.load();
  }

  // Cross: inputs on devices 0 and 1 against both on device 0.
  if (f.devices >= 2) {
    auto c = NewClient(target);
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = ValueA(0, i);
      b[i] = ValueB(0, i);
    }
    const int d0 = info->devices(0).index(), d1 = info->devices(1).index();
    auto a0 = Keep(*c, a, d0), b0 = Keep(*c, b, d0), b1 = Keep(*c, b, d1);
    if (!a0.ok() || !b0.ok() || !b1.ok()) {
      Fail(f, !a0.ok() ? a0.status() : !b0.ok() ? b0.status() : b1.status(), "cross upload");
    } else {
      std::vector<double> same, cross;
      for (int rep = 0; rep < 7; ++rep) {
        for (bool across : {false, true}) {
          const auto t = std::chrono::steady_clock::now();
          auto out = c->Compute(AddOf(*a0, across ? *b1 : *b0, true));
          const double s = Since(t);
          if (!out.ok()) {
            Fail(f, out.status(), "cross compute");
            continue;
          }
          if (rep == 0 && across) {
            auto got = c->Download(out->handle());
            const auto* v = got.ok() ? reinterpret_cast<const float*>(got->data().data()) : nullptr;
            for (int64_t i = 0; v != nullptr && i < n; i += 4099) {
              if (v[i] != a[i] + b[i]) {
                Fail(f, absl::InternalError(absl::StrCat("element ", i)), "cross result");
                break;
              }
            }
          }
          (void)c->Release({out->handle()});
          (across ? cross : same).push_back(s);
        }
      }
      f.same_seconds = Median(same);
      f.cross_seconds = Median(cross);
    }
  }
  std::printf("  round %d, %s: %d device(s), resident %.1f GB/s (%lld calls), small %.0f req/s%s\n",
              round, absl::StrJoin(flags, " ").c_str(), f.devices, f.resident_gbps,
              static_cast<long long>(f.resident_calls), f.small_rps,
              f.devices >= 2 ? absl::StrFormat(", add %.2f ms same device, %.2f ms across",
                                               f.same_seconds * 1e3, f.cross_seconds * 1e3)
                                   .c_str()
                             : "");
  std::fflush(stdout);
  server.Terminate(30);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> single =
      tc::testing::SplitFlags(absl::GetFlag(FLAGS_single_flags));
  const std::vector<std::string> multi = tc::testing::SplitFlags(absl::GetFlag(FLAGS_multi_flags));
  const int64_t mib = absl::GetFlag(FLAGS_mib);
  std::printf("scaling: %d clients x 2 x %lld MiB resident, %.0f s; small adds at %d; %s\n",
              absl::GetFlag(FLAGS_clients), static_cast<long long>(mib),
              absl::GetFlag(FLAGS_seconds), absl::GetFlag(FLAGS_small_concurrency),
              absl::GetFlag(FLAGS_label).c_str());
  std::vector<Figures> one, many;
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    one.push_back(Measure(single, r + 1));
    many.push_back(Measure(multi, r + 1));
  }
  auto med = [](const std::vector<Figures>& v, auto field) {
    std::vector<double> x;
    for (const Figures& f : v) x.push_back(field(f));
    return Median(x);
  };
  const double g1 = med(one, [](const Figures& f) { return f.resident_gbps; });
  const double gn = med(many, [](const Figures& f) { return f.resident_gbps; });
  const double s1 = med(one, [](const Figures& f) { return f.small_rps; });
  const double sn = med(many, [](const Figures& f) { return f.small_rps; });
  const double same = med(many, [](const Figures& f) { return f.same_seconds; });
  const double cross = med(many, [](const Figures& f) { return f.cross_seconds; });
  int errors = 0;
  for (const auto* v : {&one, &many}) {
    for (const Figures& f : *v) errors += f.errors;
  }
  const double copy_gbps = cross > same ? static_cast<double>(mib << 20) / (cross - same) / 1e9 : 0;
  std::printf("\n| | %s | %s | ratio |\n|---|---:|---:|---:|\n",
              absl::GetFlag(FLAGS_single_flags).c_str(), absl::GetFlag(FLAGS_multi_flags).c_str());
  std::printf("| devices | %d | %d | |\n", one.back().devices, many.back().devices);
  std::printf("| resident add, GB/s (median of %d) | %.1f | %.1f | %.2fx |\n",
              absl::GetFlag(FLAGS_rounds), g1, gn, g1 > 0 ? gn / g1 : 0);
  std::printf("| small adds, req/s | %.0f | %.0f | %.2fx |\n", s1, sn, s1 > 0 ? sn / s1 : 0);
  if (many.back().devices >= 2) {
    std::printf("| %lld MiB add, inputs on one device / on two, ms | | %.2f / %.2f | |\n",
                static_cast<long long>(mib), same * 1e3, cross * 1e3);
    std::printf("| peer copy of one input (difference), GB/s | | %.1f | |\n", copy_gbps);
    std::printf("| peer access (device -> peers) | | %s | |\n", many.back().peers.c_str());
  }
  std::printf("| resident calls per device | %s | %s | |\n",
              absl::StrJoin(one.back().requests_per_device, " / ").c_str(),
              absl::StrJoin(many.back().requests_per_device, " / ").c_str());
  std::printf("\nerrors: %d\n", errors);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << absl::StrFormat(
        "{\"label\": \"%s\", \"clients\": %d, \"mib\": %d, \"seconds\": %.1f, \"rounds\": %d,\n"
        " \"single\": {\"flags\": \"%s\", \"devices\": %d, \"resident_gbps\": %.2f, "
        "\"small_rps\": %.1f},\n"
        " \"multi\": {\"flags\": \"%s\", \"devices\": %d, \"resident_gbps\": %.2f, "
        "\"small_rps\": %.1f, \"same_device_ms\": %.3f, \"across_devices_ms\": %.3f, "
        "\"peer_copy_gbps\": %.2f, \"peers\": \"%s\"},\n"
        " \"resident_ratio\": %.3f, \"small_ratio\": %.3f, \"errors\": %d}\n",
        absl::GetFlag(FLAGS_label), absl::GetFlag(FLAGS_clients), mib, absl::GetFlag(FLAGS_seconds),
        absl::GetFlag(FLAGS_rounds), absl::GetFlag(FLAGS_single_flags), one.back().devices, g1, s1,
        absl::GetFlag(FLAGS_multi_flags), many.back().devices, gn, sn, same * 1e3, cross * 1e3,
        copy_gbps, many.back().peers, g1 > 0 ? gn / g1 : 0, s1 > 0 ? sn / s1 : 0, errors);
  }
  return errors == 0 ? 0 : 1;
}
