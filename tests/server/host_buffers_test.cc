// The server's pool of reused host buffers: sizes, reuse, its budget, pins, and leases that
// outlive the pool.
#include "server/pipeline/host_buffers.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace tc::server {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(HostBuffersTest, RoundsToFewSizesAtMostAQuarterUp) {
  EXPECT_EQ(HostBuffers::RoundedSize(1), kMiB);
  EXPECT_EQ(HostBuffers::RoundedSize(kMiB), kMiB);
  EXPECT_EQ(HostBuffers::RoundedSize(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(HostBuffers::RoundedSize(256 * kMiB), 256 * kMiB);
  EXPECT_EQ(HostBuffers::RoundedSize(256 * kMiB + 1), 320 * kMiB);
  for (int64_t n = 1; n < (int64_t{1} << 36); n = n * 3 / 2 + 7) {
    const int64_t r = HostBuffers::RoundedSize(n);
    EXPECT_GE(r, n);
    EXPECT_EQ(r % kMiB, 0);
    if (n > 4 * kMiB) {
      EXPECT_LE(r, n + n / 4) << n;
    }
  }
}

TEST(HostBuffersTest, ReusesWhatComesBackAndKeepsItsBudget) {
  int pins = 0, unpins = 0;
  HostBuffers pool(3 * kMiB, [&](void* p, int64_t) {
    ++pins;
    return std::shared_ptr<void>(p, [&](void*) { ++unpins; });
  });
  std::byte* first = nullptr;
  {
    HostBuffers::Lease a = pool.Acquire(1000);
    ASSERT_NE(a, nullptr);
    EXPECT_TRUE(a->pinned());
    EXPECT_EQ(a->size(), kMiB);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 4096, 0u);
    std::memset(a->data(), 7, static_cast<size_t>(a->size()));
    first = a->data();
    EXPECT_EQ(pool.lent_bytes(), kMiB);
  }
  EXPECT_EQ(pool.lent_bytes(), 0);
  EXPECT_EQ(pool.idle_bytes(), kMiB);
  // The same size again: the same buffer, not pinned again.
  HostBuffers::Lease b = pool.Acquire(kMiB);
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(pins, 1);
  // Two of another size, then everything back: past the budget of three MiB, the least
  // recently returned go.
  HostBuffers::Lease c = pool.Acquire(2 * kMiB);
  HostBuffers::Lease d = pool.Acquire(2 * kMiB);
  EXPECT_NE(c->data(), d->data());
  EXPECT_EQ(pool.lent_bytes(), 5 * kMiB);
  b.reset();
  c.reset();
  EXPECT_EQ(pool.idle_bytes(), 3 * kMiB);
  d.reset();
  EXPECT_EQ(pool.idle_bytes(), 2 * kMiB);  // b's and c's buffers went; d's stays.
  EXPECT_EQ(unpins, 2);
  // A buffer larger than the whole budget is never kept.
  pool.Acquire(4 * kMiB).reset();
  EXPECT_EQ(pool.idle_bytes(), 2 * kMiB);
  EXPECT_EQ(unpins, 3);
  EXPECT_EQ(pool.Acquire(0), nullptr);
}

TEST(HostBuffersTest, LeasesOutliveThePool) {
  HostBuffers::Lease kept;
  bool unpinned = false;
  {
    HostBuffers pool(kMiB * 8, [&](void* p, int64_t) {
      return std::shared_ptr<void>(p, [&](void*) { unpinned = true; });
    });
    kept = pool.Acquire(100);
    std::memset(kept->data(), 1, 100);
  }
  EXPECT_FALSE(unpinned);
  EXPECT_EQ(static_cast<int>(kept->data()[99]), 1);
  kept.reset();
  EXPECT_TRUE(unpinned);
}

TEST(HostBuffersTest, UnpinnedBuffersWhereNothingPins) {
  HostBuffers pool(kMiB * 8, [](void*, int64_t) { return std::shared_ptr<void>(); });
  HostBuffers::Lease a = pool.Acquire(5 * kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(a->pinned());
  std::vector<std::byte> zeros(static_cast<size_t>(a->size()));
  EXPECT_EQ(std::memcmp(a->data(), zeros.data(), zeros.size()), 0);
}

}  // namespace
}  // namespace tc::server
