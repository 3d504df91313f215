#include "tests/support/device_checks.h"

#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/random_tensors.h"

namespace tc::testing {

using runtime::Device;
using runtime::DeviceOptions;
using runtime::StoragePtr;

void CheckBudget(const DeviceFactory& make) {
  DeviceOptions options;
  options.memory_budget = 1 << 20;
  options.memory_wait = absl::Milliseconds(300);
  std::unique_ptr<Device> d = make(options);
  EXPECT_EQ(d->memory_budget(), 1 << 20);

  auto a = d->Allocate(600 << 10, true, absl::InfiniteFuture());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(d->memory_in_use(), 600 << 10);

  // Over the budget: waits the memory wait, then RESOURCE_EXHAUSTED naming the sizes.
  const absl::Time start = absl::Now();
  auto b = d->Allocate(600 << 10, false, absl::InfiniteFuture());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  EXPECT_NE(b.status().message().find("budget"), absl::string_view::npos) << b.status();

  // A request's own deadline cuts the wait short.
  const absl::Time start2 = absl::Now();
  auto c = d->Allocate(600 << 10, false, absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_LT(absl::Now() - start2, absl::Milliseconds(250));

  // Larger than the whole budget: refused at once.
  auto huge = d->Allocate(int64_t{1} << 40, false, absl::InfiniteFuture());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);

  // Memory freed while a request waits goes to it.
  std::thread freer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    a->reset();
  });
  auto e = d->Allocate(900 << 10, false, absl::InfiniteFuture());
  freer.join();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(d->memory_in_use(), 900 << 10);
  e->reset();
  EXPECT_EQ(d->memory_in_use(), 0);
  EXPECT_EQ(d->memory_peak(), 900 << 10);
}

namespace {

void CheckCopiesWith(const DeviceFactory& make, const DeviceOptions& options,
                     const std::vector<int64_t>& sizes) {
  std::unique_ptr<Device> d = make(options);
  std::mt19937_64 rng(TestSeed() + static_cast<uint64_t>(options.staging_bytes));
  for (int64_t n : sizes) {
    std::vector<unsigned char> src(n), back(n);
    for (auto& b : src) b = static_cast<unsigned char>(rng());
    const int64_t pad = 13;
    auto s = d->Allocate(n + 2 * pad, true, absl::InfiniteFuture());
    ASSERT_TRUE(s.ok()) << s.status();
    auto lane = d->AcquireLane();
    ASSERT_TRUE(d->Write(*lane, **s, pad, src.data(), n).ok());
    ASSERT_TRUE(d->Read(*lane, **s, pad, back.data(), n).ok());
    EXPECT_EQ(std::memcmp(src.data(), back.data(), n), 0) << n << " bytes";
    // Zeroed around what was written.
    unsigned char edge[13];
    ASSERT_TRUE(d->Read(*lane, **s, 0, edge, pad).ok());
    for (unsigned char b : edge) EXPECT_EQ(b, 0);
    ASSERT_TRUE(d->Read(*lane, **s, pad + n, edge, pad).ok());
    for (unsigned char b : edge) EXPECT_EQ(b, 0);
    // Out of range either way.
    EXPECT_EQ(d->Write(*lane, **s, pad + 1, src.data(), n + pad).code(),
              absl::StatusCode::kOutOfRange);
    EXPECT_EQ(d->Read(*lane, **s, -1, back.data(), 1).code(), absl::StatusCode::kOutOfRange);
    // Every copy is checked by the one range check: pieces that together run past the end
    // (or a negative one), pinned writes and reads.
    const std::vector<Device::HostPiece> over = {{src.data(), n}, {src.data(), pad + 1}};
    EXPECT_EQ(d->WritePieces(*lane, **s, pad, over).code(), absl::StatusCode::kOutOfRange);
    const std::vector<Device::HostPiece> negative = {{src.data(), -1}};
    EXPECT_EQ(d->WritePieces(*lane, **s, 0, negative).code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(d->WritePinned(*lane, **s, pad + 1, src.data(), n + pad).code(),
              absl::StatusCode::kOutOfRange);
    EXPECT_EQ(d->ReadPinned(*lane, **s, n + 2 * pad, back.data(), 1).code(),
              absl::StatusCode::kOutOfRange);
  }
  EXPECT_EQ(d->memory_in_use(), 0);
}

}  // namespace

void CheckCopies(const DeviceFactory& make) {
  DeviceOptions options;
  options.staging_bytes = 64 << 10;  // So that copies span many staging chunks.
  CheckCopiesWith(make, options, {1, 7, 65535, 65536, 65537, int64_t{3} * 65536 + 11, 1000003});
  // Staging chunks large enough that the host side of each is split among copy threads (an
  // odd count, so the pieces are uneven), and copies that end inside a chunk.
  options.staging_bytes = int64_t{4} << 20;
  options.copy_threads = 3;
  CheckCopiesWith(make, options,
                  {(int64_t{1} << 20) + 3, (int64_t{4} << 20) - 1, (int64_t{9} << 20) + 5});
}

void CheckCopiesBetween(Device& from, Device& to) {
  std::mt19937_64 rng(TestSeed() ^ 0x9E3779B9ull);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{65537}, int64_t{1000003}, int64_t{64} << 20}) {
    std::vector<unsigned char> src(n), back(n + 26);
    for (auto& b : src) b = static_cast<unsigned char>(rng());
    auto a = from.Allocate(n + 5, true, absl::InfiniteFuture());
    auto b = to.Allocate(n + 26, true, absl::InfiniteFuture());
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
    auto la = from.AcquireLane();
    auto lb = to.AcquireLane();
    ASSERT_TRUE(from.Write(*la, **a, 5, src.data(), n).ok());
    ASSERT_TRUE(from.Sync(*la).ok());
    ASSERT_TRUE(to.CopyFromDevice(*lb, **b, 13, from, (*a)->data() + 5, n).ok()) << n;
    ASSERT_TRUE(to.Read(*lb, **b, 0, back.data(), n + 26).ok());
    EXPECT_EQ(std::memcmp(src.data(), back.data() + 13, n), 0) << n << " bytes";
    for (int i = 0; i < 13; ++i) {
      EXPECT_EQ(back[i], 0) << "byte " << i << " before the copy";
      EXPECT_EQ(back[n + 13 + i], 0) << "byte " << i << " after the copy";
    }
    EXPECT_EQ(to.CopyFromDevice(*lb, **b, 14, from, (*a)->data(), n + 13).code(),
              absl::StatusCode::kOutOfRange);
  }
  EXPECT_EQ(from.memory_in_use(), 0);
  EXPECT_EQ(to.memory_in_use(), 0);
}

void CheckConcurrentRuns(const DeviceFactory& make) {
  DeviceOptions options;
  options.streams = 3;  // Fewer lanes than threads, so requests share them.
  options.staging_bytes = 64 << 10;
  std::unique_ptr<Device> d = make(options);
  constexpr int kThreads = 12, kRequests = 24;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      for (int r = 0; r < kRequests; ++r) {
        const int64_t n = 1 + static_cast<int64_t>(rng() % 200000);
        std::vector<int32_t> a(n), b(n);
        for (int64_t i = 0; i < n; ++i) {
          a[i] = static_cast<int32_t>(rng() % 2001) - 1000;
          b[i] = static_cast<int32_t>(rng() % 99) + 1;
        }
        // Every third request divides by zero somewhere; only that one may fail.
        const bool zero = r % 3 == 0;
        if (zero) b[rng() % n] = 0;
        TensorView va{DType::kInt32, {n}, {1}, 0, reinterpret_cast<const std::byte*>(a.data()),
                      n * 4};
        TensorView vb{DType::kInt32, {n}, {1}, 0, reinterpret_cast<const std::byte*>(b.data()),
                      n * 4};
        const TensorView host_inputs[] = {va, vb};
        auto op = PrepareOp("floor_divide", host_inputs, {});
        if (!op.ok()) {
          ++failures;
          continue;
        }
        auto lane = d->AcquireLane();
        std::vector<StoragePtr> keep;
        std::vector<TensorView> views;
        bool ok = true;
        for (const TensorView& v : host_inputs) {
          auto s = d->Allocate(v.storage_bytes, false, absl::InfiniteFuture());
          ok = ok && s.ok() && d->Write(*lane, **s, 0, v.data, v.storage_bytes).ok();
          if (!ok) break;
          TensorView dv = v;
          dv.data = (*s)->data();
          views.push_back(dv);
          keep.push_back(*s);
        }
        auto out = d->Allocate(n * 4, false, absl::InfiniteFuture());
        if (!ok || !out.ok()) {
          ++failures;
          continue;
        }
        std::promise<absl::Status> p;
        d->Run(*lane, *op, views, (*out)->data(), [&p](absl::Status s) { p.set_value(s); });
        const absl::Status st = p.get_future().get();
        if (zero) {
          if (st.code() != absl::StatusCode::kInvalidArgument) ++failures;
          continue;
        }
        std::vector<int32_t> got(n);
        if (!st.ok() || !d->Read(*lane, **out, 0, got.data(), n * 4).ok()) {
          ++failures;
          continue;
        }
        for (int64_t i = 0; i < n; ++i) {
          const int32_t q = a[i] / b[i] - ((a[i] % b[i] != 0) && ((a[i] < 0) != (b[i] < 0)));
          if (got[i] != q) {
            ++failures;
            break;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(d->memory_in_use(), 0);
  EXPECT_EQ(d->in_flight(), 0);
}

}  // namespace tc::testing
