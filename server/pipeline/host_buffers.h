// Large host buffers that requests borrow and give back: the inputs a unary request carries
// (parsed straight out of gRPC's slices into one) and the outputs its reply sends. A buffer
// is mapped once, pinned for the devices where they take pinned memory (copies to and from
// it then skip staging), and reused: no page faults and no pinning on the way of a request
// once the pool is warm. Idle buffers are kept up to a byte budget, the least recently
// returned let go first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>

#include <grpcpp/support/slice.h>

namespace tc::server {

class HostBuffers {
 public:
  // Pins [p, p + n) for the devices; null where that does not apply or failed (the buffer is
  // then plain memory). Unpinned when the handle goes.
  using Pin = std::function<std::shared_ptr<void>(void* p, int64_t n)>;

  // One borrowed buffer: at least the bytes asked for, aligned to a page. Given back to the
  // pool when its owner lets go (or unmapped, past the pool's budget).
  class Buffer {
   public:
    std::byte* data() const { return data_; }
    int64_t size() const { return size_; }
    bool pinned() const { return pin_ != nullptr; }

   private:
    friend class HostBuffers;
    std::byte* data_ = nullptr;
    int64_t size_ = 0;
    std::shared_ptr<void> pin_;
  };
  using Lease = std::shared_ptr<Buffer>;

  // Keeps at most `keep_bytes` of idle buffers.
  HostBuffers(int64_t keep_bytes, Pin pin);
  ~HostBuffers();
  HostBuffers(const HostBuffers&) = delete;
  HostBuffers& operator=(const HostBuffers&) = delete;

  // A buffer of at least `n` bytes (n > 0): an idle one of the size `n` rounds to, else a
  // new one; null where no memory could be mapped.
  Lease Acquire(int64_t n);

  // The size a request for `n` bytes gets: a whole number of MiB, at most a quarter above
  // `n` (sizes in four steps per power of two), so that similar requests share buffers.
  static int64_t RoundedSize(int64_t n);

  // Idle bytes kept, and bytes lent out now.
  int64_t idle_bytes() const;
  int64_t lent_bytes() const;

 private:
  struct State;
  static void Free(Buffer* b);
  // Shared with every lease's deleter: a buffer given back after the pool is gone is freed.
  std::shared_ptr<State> state_;
};

// The first `n` bytes of a leased buffer as a slice that holds the lease: the buffer goes back
// to the pool once gRPC has sent the slice and let it go.
grpc::Slice LeasedSlice(HostBuffers::Lease lease, size_t n);

}  // namespace tc::server
