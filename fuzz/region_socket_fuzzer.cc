// libFuzzer: the region socket as a local caller drives it. Each input is a script of steps:
// connections opened (as some pid and uid) and closed, messages of any words with any number and
// kind of descriptors attached (sealable memfds of many sizes, sparse ones, sealed ones, sent
// read-only, pipes, /dev/null), tickets claimed by two identities or made up, regions
// unregistered and looked up. After each input every connection is closed, and then nothing
// may be left: no region, no ticket's descriptor, no byte counted against the limit.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_env.h"
#include "server/data/region_socket.h"

namespace {

using tc::server::MappedBytes;
using tc::server::RegionOptions;
using tc::server::RegionStore;

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

int OpenDescriptors() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

// Whether more descriptors are open than `before`, and stay open: descriptors other threads of
// the process hold for a moment (a clock's first calibration reading /proc, say) are not a
// leak, which stays. Fewer than `before` is no leak either (`before` may have counted one).
bool DescriptorsLeaked(int before) {
  for (int i = 0; i < 200; ++i) {
    if (OpenDescriptors() <= before) return false;
    usleep(5000);
  }
  return true;
}

class Script {
 public:
  Script(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  std::string Bytes(size_t n) {
    n = std::min(n, size_ - std::min(at_, size_));
    std::string s(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// A descriptor of the kind the script names; -1 where none could be made.
int MakeDescriptor(Script& s) {
  const uint8_t kind = s.Byte() % 8;
  // Sizes from 0 to 16 MiB, sparse: nothing is allocated until touched.
  const int64_t size = (int64_t{s.Byte()} << 16) + s.Byte();
  switch (kind) {
    case 0:
    case 1:
    case 2:
    case 3: {
      const int fd = memfd_create("fuzz", kind == 1 ? 0 : MFD_ALLOW_SEALING);
      if (fd < 0) return -1;
      if (ftruncate(fd, size) != 0) {
        close(fd);
        return -1;
      }
      if (kind == 2) (void)fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK);
      if (kind == 3) (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL);
      return fd;
    }
    case 4: {
      // The same memfd, sent read-only.
      const int fd = memfd_create("fuzz-ro", MFD_ALLOW_SEALING);
      if (fd < 0) return -1;
      int ro = -1;
      if (ftruncate(fd, size) == 0) {
        const std::string path = "/proc/self/fd/" + std::to_string(fd);
        ro = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      }
      close(fd);
      return ro;
    }
    case 5: {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0) return -1;
      close(p[1]);
      return p[0];
    }
    case 6:
      return open("/dev/null", O_RDWR | O_CLOEXEC);
    default: {
      const int fd = memfd_create("fuzz-fw", MFD_ALLOW_SEALING);
      if (fd >= 0 &&
          (ftruncate(fd, size) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) != 0)) {
        // The seal may be unknown to an old kernel: the memfd goes as it is.
      }
      return fd;
    }
  }
}

// The message's words: the ones the socket knows, mixed with the script's own bytes.
std::string MakeText(Script& s) {
  static const char* const kWords[] = {"register",         "cuda ",  "cuda", " ",
                                       "0123456789abcdef", "ticket", "\0",   "register "};
  std::string text;
  const int parts = s.Byte() % 5;
  for (int i = 0; i < parts; ++i) {
    const uint8_t w = s.Byte();
    if (w & 0x80) {
      text += s.Bytes(w & 0x3f);
    } else {
      const char* word = kWords[w % (sizeof(kWords) / sizeof(kWords[0]))];
      text.append(word, word[0] == '\0' ? 1 : std::strlen(word));
    }
  }
  // Sometimes longer than any message the socket takes.
  if (s.Byte() == 0xff) text.append(300, 'x');
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static MappedBytes* mapped = new MappedBytes(int64_t{48} << 20);
  static RegionStore* store = [] {
    RegionOptions o;
    o.quota_bytes = int64_t{32} << 20;
    o.max_regions = 8;
    o.max_connections = 6;
    o.max_connections_per_process = 3;
    o.max_connections_per_user = 4;
    o.max_pending = 3;
    o.max_pending_total = 8;
    o.pin = false;
    return new RegionStore(o, tc::fuzz::FuzzEnv().devices, mapped);
  }();
  const int descriptors_before = OpenDescriptors();
  Script s(data, size);
  std::vector<uint64_t> open;
  std::vector<std::string> tickets;
  std::vector<std::pair<std::string, std::string>> regions;  // owner, id
  uint64_t next_connection = 1;
  const std::string owners[] = {"alice", "bob"};
  for (int step = 0; step < 64 && !s.done(); ++step) {
    switch (s.Byte() % 7) {
      case 0: {  // A new connection from some process of some user.
        const uint64_t id = next_connection++;
        std::string why;
        if (store->OpenConnection(id, s.Byte() % 4, s.Byte() % 3, &why)) {
          open.push_back(id);
        } else if (why.rfind("error ", 0) != 0) {
          std::abort();
        }
        break;
      }
      case 1: {  // A connection closes.
        if (open.empty()) break;
        const size_t k = s.Byte() % open.size();
        store->CloseConnection(open[k]);
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(k));
        break;
      }
      case 2: {  // A message, on an open connection or one already gone.
        const uint64_t connection =
            open.empty() || (s.Byte() & 1) ? next_connection + 7 : open[s.Byte() % open.size()];
        const std::string text = MakeText(s);
        std::vector<int> fds;
        const int n = s.Byte() % 4;
        for (int i = 0; i < n; ++i) {
          if (int fd = MakeDescriptor(s); fd >= 0) fds.push_back(fd);
        }
        const std::string reply =
            tc::server::HandleRegionMessage(*store, text, std::move(fds), connection);
        if (reply.rfind("ticket ", 0) == 0) {
          const size_t end = reply.find(' ', 7);
          tickets.push_back(reply.substr(7, end == std::string::npos ? end : end - 7));
        } else if (reply.rfind("error ", 0) != 0) {
          std::abort();  // Every reply is a ticket or an error.
        }
        break;
      }
      case 3: {  // A ticket claimed, by either identity; or one made up.
        std::string ticket = tickets.empty() || (s.Byte() & 1) ? s.Bytes(s.Byte() % 40)
                                                               : tickets[s.Byte() % tickets.size()];
        const std::string& owner = owners[s.Byte() & 1];
        auto r = store->Claim(owner, ticket, s.Bytes(s.Byte() % 8));
        if (r.ok()) {
          if ((*r)->bytes <= 0 || (*r)->base() == nullptr) std::abort();
          // Every byte of a claimed region can be read (and written, where it is writable).
          volatile std::byte first = (*r)->base()[0];
          volatile std::byte last = (*r)->base()[(*r)->bytes - 1];
          (void)first;
          (void)last;
          regions.emplace_back(owner, (*r)->id);
        }
        break;
      }
      case 4: {  // A region unregistered, by its owner or the other identity.
        if (regions.empty()) break;
        const size_t k = s.Byte() % regions.size();
        const std::string& owner = (s.Byte() & 1) ? owners[0] : regions[k].first;
        (void)store->Unregister(owner, regions[k].second);
        break;
      }
      case 5: {  // A range checked against a region still registered.
        if (regions.empty()) break;
        const auto& [owner, id] = regions[s.Byte() % regions.size()];
        auto r = store->Find(owner, id);
        if (!r.ok()) break;
        const int64_t offset = static_cast<int8_t>(s.Byte()) * int64_t{4096};
        const int64_t n = static_cast<int8_t>(s.Byte()) * int64_t{65536};
        if (tc::server::CheckRegionRange(**r, offset, n, 4, "fuzz").ok()) {
          if (offset < 0 || n < 0 || offset + n > (*r)->bytes) std::abort();
        }
        break;
      }
      default:
        (void)store->List(owners[s.Byte() & 1]);
        break;
    }
    if (mapped->used() > mapped->limit()) std::abort();
  }
  for (uint64_t id : open) store->CloseConnection(id);
  // Tickets and regions of closed connections are gone, with their descriptors and bytes.
  if (store->count() != 0 || store->bytes() != 0 || mapped->used() != 0 ||
      store->connections() != 0 || DescriptorsLeaked(descriptors_before)) {
    std::abort();
  }
  return 0;
}
