// The on-disk kernel cache (kernels/rtc/disk_cache.h): what it keeps comes back; whatever
// else lies under an entry's name (corrupt, truncated, another key's, a link, writable by
// others) is refused and removed; unsafe directories are refused; the size bound holds, least
// recently used first; several processes' worth of writers never make a reader see a wrong
// value.
#include "kernels/rtc/disk_cache.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tc::rtc {
namespace {

namespace fs = std::filesystem;

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tc-kernel-cache-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/kernels";
    rng_.seed(std::random_device{}());
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string RandomBytes(size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng_() & 0xff);
    return s;
  }
  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static void WriteFile(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  std::unique_ptr<DiskCache> OpenCache(int64_t max_bytes = int64_t{1} << 30) {
    auto c = DiskCache::Open(dir_, max_bytes);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::string root_, dir_;
  std::mt19937_64 rng_;
};

TEST(DiskCacheHash, Sha256OfTheStandardsTestVectors) {
  // FIPS 180-2, appendix B.1 and B.2; and the empty message.
  EXPECT_EQ(DiskCache::Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(DiskCache::Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(DiskCache::Sha256Hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_F(DiskCacheTest, WhatIsStoredComesBackUnderItsKeyOnly) {
  auto cache = OpenCache();
  ASSERT_NE(cache, nullptr);
  struct stat st;
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "a created directory is the user's alone";

  const std::string key = "arch 90\n" + RandomBytes(3000), value = RandomBytes(70001);
  EXPECT_FALSE(cache->Load(key).has_value());
  ASSERT_TRUE(cache->Store(key, value).ok());
  EXPECT_EQ(cache->Load(key), value);
  EXPECT_FALSE(cache->Load(key + " ").has_value());
  EXPECT_FALSE(cache->Load("").has_value());
  ASSERT_EQ(stat(cache->PathFor(key).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // A second cache over the same directory (a restart) finds it; a new value replaces it.
  auto again = OpenCache();
  EXPECT_EQ(again->Load(key), value);
  const std::string other = RandomBytes(5);
  ASSERT_TRUE(again->Store(key, other).ok());
  EXPECT_EQ(cache->Load(key), other);
  // An empty value is a value.
  ASSERT_TRUE(again->Store("empty", "").ok());
  EXPECT_EQ(again->Load("empty"), std::string());

  const DiskCacheStats s = cache->stats();
  EXPECT_EQ(s.stores, 1u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.rejected, 0u);
}

// Every way the bytes of an entry can differ from what was stored: the entry is not used,
// is removed, and the next store puts a good one back.
TEST_F(DiskCacheTest, DamagedEntriesAreRefusedAndRemoved) {
  auto cache = OpenCache();
  const std::string key = RandomBytes(500), value = RandomBytes(4000);
  ASSERT_TRUE(cache->Store(key, value).ok());
  const std::string path = cache->PathFor(key), good = ReadFile(path);
  ASSERT_EQ(good.size(), 64 + key.size() + value.size());

  std::vector<std::pair<std::string, std::string>> damaged;
  for (size_t at : {size_t{0}, size_t{9}, size_t{17}, size_t{30}, size_t{40}, size_t{64},
                    64 + key.size() - 1, 64 + key.size(), good.size() - 1}) {
    std::string b = good;
    b[at] = static_cast<char>(b[at] ^ 0x20);
    damaged.emplace_back("byte " + std::to_string(at) + " flipped", b);
  }
  damaged.emplace_back("truncated by one", good.substr(0, good.size() - 1));
  damaged.emplace_back("truncated to its header", good.substr(0, 64));
  damaged.emplace_back("truncated inside its header", good.substr(0, 20));
  damaged.emplace_back("empty", "");
  damaged.emplace_back("one byte more", good + "x");
  damaged.emplace_back("random bytes of the same size", RandomBytes(good.size()));
  damaged.emplace_back("random bytes", RandomBytes(100000));
  for (const auto& [what, bytes] : damaged) {
    SCOPED_TRACE(what);
    WriteFile(path, bytes);
    chmod(path.c_str(), 0600);
    const uint64_t rejected = cache->stats().rejected;
    EXPECT_FALSE(cache->Load(key).has_value());
    EXPECT_EQ(cache->stats().rejected, rejected + 1);
    EXPECT_FALSE(fs::exists(path)) << "a refused entry is removed";
    ASSERT_TRUE(cache->Store(key, value).ok());
    EXPECT_EQ(cache->Load(key), value);
  }
}

// Another key's entry renamed to this key's file (what a hash collision would look like) is
// refused: the whole key is compared, not only its hash.
TEST_F(DiskCacheTest, AnotherKeysEntryIsNotThisKeys) {
  auto cache = OpenCache();
  const std::string a = "source a", b = "source b";
  ASSERT_TRUE(cache->Store(a, "cubin of a").ok());
  fs::copy_file(cache->PathFor(a), cache->PathFor(b));
  EXPECT_FALSE(cache->Load(b).has_value());
  EXPECT_EQ(cache->stats().rejected, 1u);
  EXPECT_EQ(cache->Load(a), "cubin of a");
}

TEST_F(DiskCacheTest, LinksAndEntriesOthersMayWriteAreRefused) {
  auto cache = OpenCache();
  const std::string key = "k", value = RandomBytes(100);
  ASSERT_TRUE(cache->Store(key, value).ok());
  const std::string path = cache->PathFor(key), outside = root_ + "/elsewhere";
  fs::rename(path, outside);  // a valid entry, reached through a link
  fs::create_symlink(outside, path);
  EXPECT_FALSE(cache->Load(key).has_value());
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(path)));
  EXPECT_TRUE(fs::exists(outside)) << "the link is removed, not what it points at";

  ASSERT_TRUE(cache->Store(key, value).ok());
  chmod(path.c_str(), 0622);
  EXPECT_FALSE(cache->Load(key).has_value());
  ASSERT_TRUE(cache->Store(key, value).ok());
  EXPECT_EQ(cache->Load(key), value);

  // A directory under an entry's name.
  ASSERT_TRUE(cache->Store("d", "x").ok());
  fs::remove(cache->PathFor("d"));
  fs::create_directory(cache->PathFor("d"));
  EXPECT_FALSE(cache->Load("d").has_value());
  EXPECT_EQ(cache->stats().rejected, 3u);
}

TEST_F(DiskCacheTest, UnsafeDirectoriesAreRefused) {
  EXPECT_FALSE(DiskCache::Open("relative/dir", 1 << 20).ok());
  EXPECT_FALSE(DiskCache::Open(dir_, 0).ok());

  fs::create_directory(dir_);
  chmod(dir_.c_str(), 0777);
  auto c = DiskCache::Open(dir_, 1 << 20);
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("chmod go-w"), std::string::npos) << c.status();
  chmod(dir_.c_str(), 0770);
  EXPECT_FALSE(DiskCache::Open(dir_, 1 << 20).ok());
  chmod(dir_.c_str(), 0755);  // others may read: allowed, they cannot plant anything
  EXPECT_TRUE(DiskCache::Open(dir_, 1 << 20).ok());

  const std::string link = root_ + "/link";
  fs::create_symlink(dir_, link);
  EXPECT_FALSE(DiskCache::Open(link, 1 << 20).ok());
  const std::string file = root_ + "/file";
  WriteFile(file, "x");
  EXPECT_FALSE(DiskCache::Open(file, 1 << 20).ok());

  if (geteuid() == 0) {  // root can hand the directory to someone else
    const std::string theirs = root_ + "/theirs";
    fs::create_directory(theirs);
    chmod(theirs.c_str(), 0700);
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    auto t = DiskCache::Open(theirs, 1 << 20);
    EXPECT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("belongs to user 65534"), std::string::npos) << t.status();
  }
  // Missing parents are made, 0700.
  const std::string deep = root_ + "/a/b/c";
  EXPECT_TRUE(DiskCache::Open(deep, 1 << 20).ok());
  struct stat st;
  ASSERT_EQ(stat((root_ + "/a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(DiskCacheTest, TheSizeBoundHoldsAndRecentlyUsedEntriesStay) {
  const int64_t bound = 20 * 1024;
  auto cache = OpenCache(bound);
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) {
    keys.push_back("key " + std::to_string(i));
    ASSERT_TRUE(cache->Store(keys.back(), RandomBytes(1000)).ok());
    // Entry 0 is used after every store: it must outlive the others of its age.
    ASSERT_TRUE(cache->Load(keys[0]).has_value()) << "after store " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // distinct times of use
  }
  int64_t total = 0;
  int kept = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    total += static_cast<int64_t>(e.file_size());
    ++kept;
  }
  EXPECT_LE(total, bound);
  EXPECT_GE(kept, 10);
  EXPECT_GT(cache->stats().evictions, 0u);
  EXPECT_TRUE(cache->Load(keys[0]).has_value());
  EXPECT_TRUE(cache->Load(keys[39]).has_value());
  EXPECT_FALSE(cache->Load(keys[1]).has_value()) << "the least recently used went first";
  // A value larger than the whole bound is not stored.
  EXPECT_FALSE(cache->Store("big", RandomBytes(bound + 1)).ok());
}

TEST_F(DiskCacheTest, AWritersLeftoversAreClearedWhenStale) {
  fs::create_directories(dir_);
  chmod(dir_.c_str(), 0700);
  const std::string stale = dir_ + "/tmp-AAAAAA", fresh = dir_ + "/tmp-BBBBBB";
  WriteFile(stale, "half an entry");
  WriteFile(fresh, "being written");
  const struct timespec old[2] = {{time(nullptr) - 3600, 0}, {time(nullptr) - 3600, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, stale.c_str(), old, 0), 0);
  auto cache = OpenCache();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh)) << "it may be another process's, still writing";
}

// Several caches over one directory (a server's GPU workers), storing and loading the same
// keys at once: a load finds nothing or the key's own value, never a mix.
TEST_F(DiskCacheTest, ConcurrentWritersNeverShowAWrongValue) {
  std::vector<std::string> values;
  for (int k = 0; k < 8; ++k) values.push_back(RandomBytes(20000 + 977 * k));
  std::atomic<int> wrong{0}, found{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto c = DiskCache::Open(dir_, int64_t{1} << 30);
      if (!c.ok()) {
        ++wrong;
        return;
      }
      for (int i = 0; i < 200; ++i) {
        const int k = (i * 7 + t) % 8;
        const std::string key = "key " + std::to_string(k);
        if ((i + t) % 3 == 0) {
          (void)(*c)->Store(key, values[k]);
        } else if (auto v = (*c)->Load(key)) {
          ++found;
          if (*v != values[k]) ++wrong;
        }
      }
      if ((*c)->stats().rejected != 0) ++wrong;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(found.load(), 0);
}

}  // namespace
}  // namespace tc::rtc
