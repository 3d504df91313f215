// Gives the memory the allocator keeps free back to the system, once a second.
//
// Large tensors arrive as many chunk-sized buffers, and a request's storage is freed when it
// ends: an allocator that kept nothing would fault fresh pages in for every chunk, one that
// kept everything would leave the process at its peak after a burst. So while calls come,
// free memory beyond `cushion_bytes` goes back; once none has been in flight at two checks
// in a row, all of it does.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace tc::server {

// What the allocator says of the process's heap: bytes handed out and not yet freed, and bytes
// freed but still held (mapped, so counted in RSS) for reuse. -1 where the allocator cannot say.
// Under load RSS follows allocated + free, and the free part holds up to the cushion below,
// so RSS keeps the high-water mark of a burst; allocated bytes follow only what is in use.
struct HeapStats {
  int64_t allocated_bytes = -1;
  int64_t free_bytes = -1;
};
HeapStats ReadHeapStats();

class MemoryReleaser {
 public:
  // `busy`: whether calls are in flight (polled from the releaser's thread).
  MemoryReleaser(std::function<bool()> busy, int64_t cushion_bytes);
  ~MemoryReleaser();
  MemoryReleaser(const MemoryReleaser&) = delete;
  MemoryReleaser& operator=(const MemoryReleaser&) = delete;

  // One round (what the thread does each second); returns the bytes given back where the
  // allocator says (tcmalloc), else 0.
  static int64_t ReleaseOnce(bool busy, int64_t cushion_bytes);

 private:
  std::function<bool()> busy_;
  int64_t cushion_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tc::server
