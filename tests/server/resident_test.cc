// The resident tensor store on its own: ownership, quotas, TTLs, release and sweep, with
// storage from a CPU device so that memory accounting is checked too.
#include <memory>
#include <set>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/cpu_device.h"
#include "server/resident.h"

namespace tc::server {
namespace {

class ResidentStoreTest : public ::testing::Test {
 protected:
  runtime::StoragePtr Storage(int64_t bytes) {
    auto s = device_.Allocate(bytes, /*zero=*/true, absl::InfiniteFuture());
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }
  static TensorView View(int64_t n) {
    return TensorView{DType::kFloat32, {n}, {1}, 0, nullptr, n * 4};
  }
  runtime::CpuDevice device_{1, {}};
};

TEST_F(ResidentStoreTest, OwnerFindsItOthersGetNotFound) {
  ResidentStore store({});
  auto t = store.Add("alice", Storage(400), View(100), 0);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->handle.size(), 32u);
  EXPECT_EQ((*t)->view.data, (*t)->storage->data());
  EXPECT_EQ((*t)->view.storage_bytes, 400);
  auto found = store.Find("alice", (*t)->handle);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->get(), t->get());
  // Another identity cannot tell it apart from a handle that never existed.
  auto other = store.Find("bob", (*t)->handle);
  auto none = store.Find("alice", std::string(32, '0'));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Release("bob", (*t)->handle).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.count(), 1);
  EXPECT_EQ(store.bytes(), 400);
}

TEST_F(ResidentStoreTest, QuotasPerIdentity) {
  ResidentOptions options;
  options.quota_bytes = 1000;
  options.max_tensors = 2;
  ResidentStore store(options);
  ASSERT_TRUE(store.Add("alice", Storage(600), View(150), 0).ok());
  auto too_big = store.Add("alice", Storage(600), View(150), 0);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("release some first"), std::string::npos);
  // Bob's quota is his own.
  EXPECT_TRUE(store.Add("bob", Storage(600), View(150), 0).ok());
  ASSERT_TRUE(store.Add("alice", Storage(400), View(100), 0).ok());
  auto third = store.Add("alice", Storage(4), View(1), 0);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("2 tensors"), std::string::npos);
  EXPECT_EQ(store.CheckQuota("carol", 1000).code(), absl::StatusCode::kOk);
  EXPECT_EQ(store.CheckQuota("carol", 1001).code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(ResidentStoreTest, ReleaseFreesQuotaAndMemoryOnceUnused) {
  ResidentOptions options;
  options.quota_bytes = 1000;
  ResidentStore store(options);
  auto t = store.Add("alice", Storage(800), View(200), 0);
  ASSERT_TRUE(t.ok());
  const std::string handle = (*t)->handle;
  std::shared_ptr<ResidentTensor> in_use = *t;  // a request still holding it
  t = absl::InternalError("dropped");
  auto released = store.Release("alice", handle);
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(*released, 800);
  EXPECT_EQ(store.count(), 0);
  EXPECT_EQ(store.bytes(), 0);
  EXPECT_EQ(store.Find("alice", handle).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.CheckQuota("alice", 1000).ok());
  // The storage lives as long as the request that uses it.
  EXPECT_EQ(device_.memory_in_use(), 800);
  in_use.reset();
  EXPECT_EQ(device_.memory_in_use(), 0);
}

TEST_F(ResidentStoreTest, ExpiredTensorsVanishAndAreSwept) {
  ResidentOptions options;
  options.default_ttl = absl::Seconds(30);
  options.max_ttl = absl::Seconds(60);
  ResidentStore store(options);
  auto short_lived = store.Add("alice", Storage(40), View(10), 0);
  auto capped = store.Add("alice", Storage(40), View(10), 3600);
  ASSERT_TRUE(short_lived.ok() && capped.ok());
  const absl::Time now = absl::Now();
  EXPECT_LE((*short_lived)->expires, now + absl::Seconds(30));
  EXPECT_GT((*short_lived)->expires, now + absl::Seconds(25));
  EXPECT_LE((*capped)->expires, now + absl::Seconds(60));  // capped at max_ttl
  EXPECT_EQ(store.Sweep(now), 0);
  EXPECT_EQ(store.Sweep(now + absl::Seconds(45)), 1);
  EXPECT_EQ(store.Find("alice", (*short_lived)->handle).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.Find("alice", (*capped)->handle).ok());
  EXPECT_EQ(store.Sweep(now + absl::Seconds(61)), 1);
  EXPECT_EQ(store.count(), 0);
  EXPECT_EQ(store.bytes(), 0);
}

TEST(NewHandle, HexAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string h = NewHandle();
    ASSERT_EQ(h.size(), 32u);
    EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos) << h;
    seen.insert(h);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace tc::server
