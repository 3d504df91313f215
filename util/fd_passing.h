// Descriptors passed over a Unix socket (SCM_RIGHTS), each direction written once: the region
// socket takes callers' memfds with it, the worker channel hands memfds and connections to a
// device's worker, and the client sends its regions' memfds. Security-sensitive: a received
// message's descriptors are all taken (none leaks, whatever the message turns out to say),
// close-on-exec from the moment they arrive.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <vector>

namespace tc {

// Most descriptors one message carries.
inline constexpr int kMaxPassedFds = 16;

// Sends `size` bytes with `fds` attached (none: a plain message), retrying on EINTR. The bytes
// sent, or -1 with errno (EINVAL for more than kMaxPassedFds descriptors). MSG_NOSIGNAL: a
// closed peer is EPIPE, not a signal.
ssize_t SendWithFds(int socket, const void* bytes, size_t size, const int* fds, int nfds);

// Receives one message into `buf` (at most `size` bytes) and appends every descriptor attached
// to it to `fds`, close-on-exec. `flags`: recvmsg's (MSG_DONTWAIT...); `msg_flags`: the
// message's (MSG_TRUNC, MSG_CTRUNC: more bytes or descriptors were sent than taken; those
// descriptors are closed by the kernel). recvmsg's result: the bytes read, 0 where the peer
// closed, -1 with errno (EINTR is the caller's to retry).
ssize_t ReceiveWithFds(int socket, void* buf, size_t size, std::vector<int>* fds, int* msg_flags,
                       int flags = 0);

}  // namespace tc
