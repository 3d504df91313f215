// The resident tensor store on its own: ownership, quotas, TTLs, release and sweep, with
// storage from a CPU device so that memory accounting is checked too.
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/cpu_device.h"
#include "server/data/resident.h"

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

// New tensors of one session share a device; an owner's sessions spread over the devices,
// uninfluenced by another owner's; a named device wins; failed devices are avoided; and the
// sessions remembered per owner are bounded.
TEST(PlaceResident, SessionsShareAndSpread) {
  std::vector<std::unique_ptr<runtime::Device>> list;
  for (int i = 0; i < 2; ++i) {
    runtime::DeviceOptions o;
    o.memory_budget = int64_t{1} << 30;
    list.push_back(std::make_unique<runtime::CpuDevice>(1, o, i));
  }
  runtime::DeviceSet devices(std::move(list));
  ResidentStore store({});
  auto place = [&](const std::string& owner, const std::string& session,
                   std::optional<int> wanted = std::nullopt) {
    auto d = PlaceResident(devices, store, owner, session, 1 << 20, wanted);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? (*d)->info().index : -1;
  };
  const int first = place("alice", "alice\n1");
  EXPECT_EQ(place("alice", "alice\n1"), first);
  EXPECT_EQ(place("alice", "alice\n2"), 1 - first);
  EXPECT_EQ(place("alice", "alice\n3"), first);
  EXPECT_EQ(place("alice", "alice\n4"), 1 - first);
  // Another owner's sessions spread by its own count: two in a row go to different devices.
  const int b1 = place("bob", "bob\n1");
  EXPECT_EQ(place("bob", "bob\n2"), 1 - b1);
  EXPECT_EQ(place("alice", "alice\n1", 1 - first), 1 - first);
  EXPECT_EQ(PlaceResident(devices, store, "alice", "x", 1, 7).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A failed device: its sessions move, named requests for it are refused.
  devices.at(first).MarkFailed(absl::InternalError("test"));
  EXPECT_EQ(place("alice", "alice\n1"), 1 - first);
  EXPECT_EQ(place("alice", "alice\n5"), 1 - first);
  EXPECT_EQ(PlaceResident(devices, store, "alice", "y", 1, first).status().code(),
            absl::StatusCode::kUnavailable);
  const int64_t before = store.sessions();
  for (int i = 0; i < ResidentStore::kMaxSessionsPerOwner + 100; ++i) {
    place("carol", "carol\n" + std::to_string(i));
  }
  EXPECT_EQ(store.sessions() - before, ResidentStore::kMaxSessionsPerOwner);
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
