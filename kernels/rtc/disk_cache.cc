#include "kernels/rtc/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tc::rtc {
namespace {

// An entry: this header, the key, the value. The digest covers key and value; the sizes are
// checked against the file's own.
constexpr char kMagic[8] = {'T', 'C', 'K', 'E', 'R', 'N', 'E', 'L'};
constexpr uint32_t kVersion = 1;
struct EntryHeader {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  uint64_t key_size;
  uint64_t value_size;
  unsigned char digest[32];
};
static_assert(sizeof(EntryHeader) == 64);

constexpr const char* kSuffix = ".kernel";
constexpr const char* kTempPrefix = "tmp-";
constexpr int64_t kMaxKeyBytes = int64_t{16} << 20;
// Temporary files older than this are a writer's that died: removed when trimming.
constexpr time_t kStaleTempSeconds = 600;

absl::Status Errno(const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(what, ": ", std::strerror(errno)));
}

void Digest(const std::string& key, const std::string& value, unsigned char out[32]) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned int n = 0;
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx, key.data(), key.size());
  EVP_DigestUpdate(ctx, value.data(), value.size());
  EVP_DigestFinal_ex(ctx, out, &n);
  EVP_MD_CTX_free(ctx);
}

bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

std::string DiskCache::Sha256Hex(const std::string& data) {
  unsigned char md[32];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string hex(64, '0');
  for (int i = 0; i < 32; ++i) {
    hex[2 * i] = kHex[md[i] >> 4];
    hex[2 * i + 1] = kHex[md[i] & 15];
  }
  return hex;
}

absl::StatusOr<std::unique_ptr<DiskCache>> DiskCache::Open(const std::string& dir,
                                                           int64_t max_bytes) {
  if (dir.empty() || dir[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel cache: '", dir, "' is not an absolute path"));
  }
  if (max_bytes <= 0)
    return absl::InvalidArgumentError("kernel cache: the size bound must be positive");
  // Missing components are made 0700; existing ones are left as they are.
  for (size_t at = dir.find('/', 1);; at = dir.find('/', at + 1)) {
    const std::string part = dir.substr(0, at);
    if (!part.empty() && mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      return Errno(absl::StrCat("kernel cache: cannot create ", part));
    }
    if (at == std::string::npos) break;
  }
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return Errno(absl::StrCat("kernel cache: ", dir));
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel cache: ", dir, " is not a directory (a link is not followed)"));
  }
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat("kernel cache: ", dir, " belongs to user ",
                                                      st.st_uid, ", not to this server's (",
                                                      geteuid(), ")"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel cache: group or others can write to ", dir, " (chmod go-w it)"));
  }
  std::unique_ptr<DiskCache> cache(new DiskCache(dir, max_bytes));
  cache->Trim();
  return cache;
}

std::string DiskCache::PathFor(const std::string& key) const {
  return absl::StrCat(dir_, "/", Sha256Hex(key), kSuffix);
}

void DiskCache::Count(uint64_t DiskCacheStats::*field) {
  std::lock_guard<std::mutex> lock(mu_);
  ++(stats_.*field);
}

DiskCacheStats DiskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::optional<std::string> DiskCache::Load(const std::string& key) {
  const std::string path = PathFor(key);
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) {
      Count(&DiskCacheStats::misses);
      return std::nullopt;
    }
    // A link, or something unreadable, under an entry's name: not ours to use.
    unlink(path.c_str());
    Count(&DiskCacheStats::rejected);
    return std::nullopt;
  }
  auto reject = [&] {
    close(fd);
    unlink(path.c_str());
    Count(&DiskCacheStats::rejected);
    return std::nullopt;
  };
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 ||
      st.st_size < static_cast<off_t>(sizeof(EntryHeader)) ||
      st.st_size > static_cast<off_t>(sizeof(EntryHeader)) + kMaxKeyBytes + max_bytes_) {
    return reject();
  }
  EntryHeader h;
  if (!ReadAll(fd, reinterpret_cast<char*>(&h), sizeof(h)) ||
      std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.version != kVersion ||
      h.key_size != key.size() ||
      h.value_size != static_cast<uint64_t>(st.st_size) - sizeof(EntryHeader) - key.size() ||
      static_cast<uint64_t>(st.st_size) < sizeof(EntryHeader) + key.size()) {
    return reject();
  }
  std::string stored_key(key.size(), '\0'), value(h.value_size, '\0');
  if (!ReadAll(fd, stored_key.data(), stored_key.size()) || stored_key != key ||
      !ReadAll(fd, value.data(), value.size())) {
    return reject();
  }
  unsigned char digest[32];
  Digest(stored_key, value, digest);
  if (std::memcmp(digest, h.digest, sizeof(digest)) != 0) return reject();
  (void)futimens(fd, nullptr);  // used now: the last to be trimmed
  close(fd);
  Count(&DiskCacheStats::hits);
  return value;
}

absl::Status DiskCache::Store(const std::string& key, const std::string& value) {
  if (static_cast<int64_t>(key.size()) > kMaxKeyBytes ||
      static_cast<int64_t>(value.size()) > max_bytes_) {
    Count(&DiskCacheStats::store_failures);
    return absl::InvalidArgumentError("kernel cache: entry larger than the cache may hold");
  }
  EntryHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.key_size = key.size();
  h.value_size = value.size();
  Digest(key, value, h.digest);
  std::string temp = absl::StrCat(dir_, "/", kTempPrefix, "XXXXXX");
  const int fd = mkostemp(temp.data(), O_CLOEXEC);  // mode 0600
  if (fd < 0) {
    Count(&DiskCacheStats::store_failures);
    return Errno(absl::StrCat("kernel cache: cannot write in ", dir_));
  }
  const bool written = WriteAll(fd, reinterpret_cast<const char*>(&h), sizeof(h)) &&
                       WriteAll(fd, key.data(), key.size()) &&
                       WriteAll(fd, value.data(), value.size());
  if (close(fd) != 0 || !written || rename(temp.c_str(), PathFor(key).c_str()) != 0) {
    const absl::Status s = Errno(absl::StrCat("kernel cache: writing ", temp));
    unlink(temp.c_str());
    Count(&DiskCacheStats::store_failures);
    return s;
  }
  Count(&DiskCacheStats::stores);
  Trim();
  return absl::OkStatus();
}

void DiskCache::Trim() {
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return;
  struct Found {
    struct timespec used;
    std::string path;
    int64_t bytes;
  };
  std::vector<Found> entries;
  int64_t total = 0;
  const time_t now = time(nullptr);
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const bool entry = absl::EndsWith(name, kSuffix), temp = absl::StartsWith(name, kTempPrefix);
    if (!entry && !temp) continue;
    std::string path = absl::StrCat(dir_, "/", name);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) continue;
    if (temp) {
      if (now - st.st_mtime > kStaleTempSeconds) unlink(path.c_str());
      continue;
    }
    entries.push_back({st.st_mtim, std::move(path), static_cast<int64_t>(st.st_size)});
    total += st.st_size;
  }
  closedir(d);
  if (total <= max_bytes_) return;
  std::sort(entries.begin(), entries.end(), [](const Found& a, const Found& b) {
    return std::tie(a.used.tv_sec, a.used.tv_nsec) < std::tie(b.used.tv_sec, b.used.tv_nsec);
  });
  for (const Found& f : entries) {
    if (total <= max_bytes_) break;
    if (unlink(f.path.c_str()) == 0) Count(&DiskCacheStats::evictions);
    total -= f.bytes;
  }
}

}  // namespace tc::rtc
