// The region store on its own (server/data/regions.h), without its socket: a memfd offered
// over a connection becomes a ticket, the ticket a region of the identity that claims it,
// mapped with the caller's bytes; each identity sees only its own; quotas, the server-wide
// cap, the ticket limits and the connection limits refuse with their codes; closing a
// connection or unregistering lets go, and every byte charged comes back.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "runtime/cpu_device.h"
#include "server/data/mapped_bytes.h"
#include "server/data/regions.h"
#include "tests/support/random_tensors.h"

namespace tc::server {
namespace {

// A memfd of `bytes` holding random bytes (returned in `content`).
std::shared_ptr<const int> MakeMemfd(int64_t bytes, std::string* content) {
  const int fd = memfd_create("region_store_test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  std::mt19937_64 rng(testing::TestSeed() ^ static_cast<uint64_t>(bytes));
  content->resize(static_cast<size_t>(bytes));
  for (char& c : *content) c = static_cast<char>(rng());
  EXPECT_EQ(ftruncate(fd, bytes), 0);
  EXPECT_EQ(pwrite(fd, content->data(), content->size(), 0), bytes);
  return std::shared_ptr<const int>(new int(fd), [](const int* p) {
    close(*p);
    delete p;
  });
}

class RegionStoreTest : public ::testing::Test {
 protected:
  void Make(RegionOptions options, int64_t cap = int64_t{1} << 30) {
    options.pin = false;  // no GPU here; pinning is the devices' business
    mapped_ = std::make_unique<MappedBytes>(cap);
    store_ = std::make_unique<RegionStore>(options, &devices_, mapped_.get());
  }

  // Offers `bytes` of a fresh memfd on `connection`: the ticket, or the store's answer.
  std::string Offer(uint64_t connection, int64_t bytes, std::string* content,
                    bool writable = true) {
    server::Offer o;
    o.fd = MakeMemfd(bytes, content);
    o.bytes = bytes;
    o.writable = writable;
    o.connection = connection;
    const std::string answer = store_->Ticket(std::move(o));
    if (!absl::StartsWith(answer, "ticket ")) return answer;
    const std::vector<std::string> parts = absl::StrSplit(answer, ' ');
    EXPECT_EQ(parts.size(), 3u) << answer;
    EXPECT_EQ(parts[2], std::to_string(bytes));
    return parts[1];
  }

  runtime::DeviceSet devices_{[] {
    std::vector<std::unique_ptr<runtime::Device>> d;
    d.push_back(std::make_unique<runtime::CpuDevice>(1, runtime::DeviceOptions{}));
    return d;
  }()};
  std::unique_ptr<MappedBytes> mapped_;
  std::unique_ptr<RegionStore> store_;
};

TEST_F(RegionStoreTest, AClaimedTicketIsTheCallersMemoryAndOnlyTheirs) {
  Make({});
  std::string why;
  ASSERT_TRUE(store_->OpenConnection(1, /*pid=*/100, /*uid=*/1000, &why)) << why;
  std::string content;
  const int64_t bytes = 4096 + 1 + static_cast<int64_t>(testing::TestSeed() % 4096);
  const std::string ticket = Offer(1, bytes, &content);
  auto region = store_->Claim("alice", ticket, "weights");
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->bytes, bytes);
  EXPECT_TRUE((*region)->writable);
  EXPECT_EQ((*region)->owner, "alice");
  EXPECT_EQ((*region)->name, "weights");
  EXPECT_EQ((*region)->device(), nullptr);
  // The caller's bytes, mapped.
  EXPECT_EQ(std::memcmp((*region)->base(), content.data(), content.size()), 0);
  EXPECT_EQ(store_->count(), 1);
  EXPECT_EQ(store_->bytes(), bytes);

  const std::string id = (*region)->id;
  auto found = store_->Find("alice", id);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->get(), region->get());
  // Another identity, an unknown id: the same NOT_FOUND.
  EXPECT_EQ(store_->Find("bob", id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Find("alice", "no-such").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->List("alice").size(), 1u);
  EXPECT_TRUE(store_->List("bob").empty());
  // A ticket is claimed once.
  EXPECT_EQ(store_->Claim("alice", ticket, "again").status().code(), absl::StatusCode::kNotFound);
  // Only its owner unregisters it.
  EXPECT_FALSE(store_->Unregister("bob", id).ok());
  ASSERT_TRUE(store_->Unregister("alice", id).ok());
  EXPECT_EQ(store_->Find("alice", id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->count(), 0);
}

TEST_F(RegionStoreTest, ASealedMemfdIsMappedReadOnly) {
  Make({});
  std::string why;
  ASSERT_TRUE(store_->OpenConnection(1, 100, 1000, &why));
  std::string content;
  server::Offer o;
  o.fd = MakeMemfd(8192, &content);
  ASSERT_EQ(fcntl(*o.fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW), 0);
  o.bytes = 8192;
  o.connection = 1;
  const std::string answer = store_->Ticket(std::move(o));
  ASSERT_TRUE(absl::StartsWith(answer, "ticket ")) << answer;
  const std::vector<std::string> parts = absl::StrSplit(answer, ' ');
  auto region = store_->Claim("alice", parts[1], "");
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_FALSE((*region)->writable);
  EXPECT_EQ(std::memcmp((*region)->base(), content.data(), content.size()), 0);
}

TEST_F(RegionStoreTest, QuotasAndTheServerWideCapRefuse) {
  RegionOptions o;
  o.quota_bytes = 10000;
  o.max_regions = 2;
  Make(o, /*cap=*/20000);
  std::string why, content;
  ASSERT_TRUE(store_->OpenConnection(1, 100, 1000, &why));
  ASSERT_TRUE(store_->Claim("alice", Offer(1, 6000, &content), "").ok());
  // Past alice's bytes.
  auto over = store_->Claim("alice", Offer(1, 6000, &content), "");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.status().message(), "quota")) << over.status();
  ASSERT_TRUE(store_->Claim("alice", Offer(1, 1000, &content), "").ok());
  // Past alice's count.
  EXPECT_EQ(store_->Claim("alice", Offer(1, 10, &content), "").status().code(),
            absl::StatusCode::kResourceExhausted);
  // Bob has a quota of his own: 9,000 fit it and the cap (16,000 of 20,000 then held);
  // Carol's 5,000 fit her quota but not the cap.
  ASSERT_TRUE(store_->Claim("bob", Offer(1, 9000, &content), "").ok());
  auto capped = store_->Claim("carol", Offer(1, 5000, &content), "");
  EXPECT_EQ(capped.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(capped.status().message(), "--shared_memory_limit_bytes"))
      << capped.status();
  EXPECT_EQ(store_->bytes(), 16000);
}

TEST_F(RegionStoreTest, TicketAndConnectionLimits) {
  RegionOptions o;
  o.max_pending = 2;
  o.max_connections = 3;
  o.max_connections_per_process = 2;
  o.max_connections_per_user = 2;
  Make(o);
  std::string why, content;
  ASSERT_TRUE(store_->OpenConnection(1, 100, 1000, &why)) << why;
  ASSERT_TRUE(store_->OpenConnection(2, 100, 1000, &why)) << why;
  // A third from the same process, then from the same user.
  EXPECT_FALSE(store_->OpenConnection(3, 100, 1000, &why));
  EXPECT_FALSE(why.empty());
  EXPECT_FALSE(store_->OpenConnection(3, 101, 1000, &why));
  ASSERT_TRUE(store_->OpenConnection(3, 102, 1001, &why)) << why;
  // Past the server's connections.
  EXPECT_FALSE(store_->OpenConnection(4, 103, 1002, &why));
  EXPECT_EQ(store_->connections(), 3);

  // Two unclaimed tickets a connection, then an error answer.
  const std::string a = Offer(1, 100, &content);
  const std::string b = Offer(1, 100, &content);
  const std::string c = Offer(1, 100, &content);
  EXPECT_TRUE(absl::StartsWith(c, "error ")) << c;
  // Expired tickets go.
  store_->ExpireTickets(absl::Now() + o.ticket_ttl + absl::Seconds(1));
  EXPECT_EQ(store_->Claim("alice", a, "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Claim("alice", b, "").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RegionStoreTest, ClosingTheConnectionLetsGoOfItsTicketsAndRegions) {
  Make({});
  std::string why, content;
  ASSERT_TRUE(store_->OpenConnection(7, 100, 1000, &why));
  auto region = store_->Claim("alice", Offer(7, 4096, &content), "");
  ASSERT_TRUE(region.ok());
  const std::string id = (*region)->id;
  const std::string pending = Offer(7, 4096, &content);
  region->reset();
  store_->CloseConnection(7);
  EXPECT_EQ(store_->Find("alice", id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Claim("alice", pending, "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->count(), 0);
  EXPECT_EQ(store_->bytes(), 0);
  EXPECT_EQ(store_->connections(), 0);
  // A closed connection offers nothing more.
  EXPECT_TRUE(absl::StartsWith(Offer(7, 10, &content), "error ")) << "closed connection";
  // Every byte charged against the cap came back: the whole cap is free again.
  auto all = mapped_->Charge(int64_t{1} << 30, "everything");
  EXPECT_TRUE(all.ok()) << all.status();
}

TEST_F(RegionStoreTest, AdoptedRegionsAreFoundByNameOncePerOwner) {
  Make({});
  std::string content;
  std::vector<char> memory(512);
  auto adopt = [&](const std::string& owner, const std::string& name) {
    auto r = std::make_shared<Region>(
        HostMapping{reinterpret_cast<std::byte*>(memory.data()), nullptr, nullptr},
        static_cast<int64_t>(memory.size()), true, RegionStore::kNoConnection);
    return store_->Adopt(owner, name, std::move(r));
  };
  ASSERT_TRUE(adopt("alice", "input").ok());
  EXPECT_EQ(adopt("alice", "input").status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(adopt("bob", "input").ok());  // another owner, the same name
  auto named = store_->FindNamed("alice", "input");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ((*named)->owner, "alice");
  EXPECT_EQ(store_->FindNamed("alice", "other").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->ListNamed("alice", "").size(), 1u);
  EXPECT_EQ(store_->count(), 2);
}

}  // namespace
}  // namespace tc::server
