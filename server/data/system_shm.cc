#include "server/data/system_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/env/grpc_status.h"

namespace tc::server {

namespace {

std::string ErrnoText(int e) { return std::strerror(e); }

absl::Status CheckRange(const SystemShm& r, int64_t at, int64_t n) {
  if (at < 0 || n < 0 || at > r.bytes || n > r.bytes - at) {
    return absl::InvalidArgumentError(absl::StrCat("bytes [", at, ", ", at + n,
                                                   ") are outside shared-memory region '", r.name,
                                                   "' (", r.bytes, " bytes registered)"));
  }
  return absl::OkStatus();
}

}  // namespace

SystemShm::~SystemShm() { close(fd); }

absl::Status SystemShm::Read(int64_t at, int64_t n, std::string* out) const {
  if (absl::Status s = CheckRange(*this, at, n); !s.ok()) return s;
  try {
    out->resize(static_cast<size_t>(n));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no memory for the ", n, " bytes of shared-memory region '", name, "'"));
  } catch (const std::length_error&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no memory for the ", n, " bytes of shared-memory region '", name, "'"));
  }
  int64_t done = 0;
  while (done < n) {
    const ssize_t got = pread(fd, out->data() + done, static_cast<size_t>(n - done),
                              static_cast<off_t>(offset + at + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("shared-memory region '", name, "' (object '", key, "') could not be read: ",
                       got < 0 ? ErrnoText(errno) : "it is shorter than when it was registered"));
    }
    done += got;
  }
  return absl::OkStatus();
}

absl::Status SystemShm::Write(int64_t at, absl::string_view data) const {
  const int64_t n = static_cast<int64_t>(data.size());
  if (absl::Status s = CheckRange(*this, at, n); !s.ok()) return s;
  // Writing past the object's end would grow it back: its size is checked first (a
  // truncation racing with the write can at worst grow it again, never fault anything).
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < offset + at + n) {
    return absl::FailedPreconditionError(absl::StrCat("shared-memory region '", name, "' (object '",
                                                      key,
                                                      "') is shorter than when it was registered"));
  }
  int64_t done = 0;
  while (done < n) {
    const ssize_t put = pwrite(fd, data.data() + done, static_cast<size_t>(n - done),
                               static_cast<off_t>(offset + at + done));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shared-memory region '", name, "' could not be written: ", ErrnoText(errno)));
    }
    done += put;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const SystemShm>> OpenSystemShm(const std::string& name,
                                                               const std::string& key,
                                                               int64_t offset, int64_t bytes) {
  if (name.empty()) return absl::InvalidArgumentError("a shared-memory region needs a name");
  if (name.size() > 256) {
    return absl::InvalidArgumentError("a shared-memory region's name is at most 256 bytes");
  }
  // shm_open names: one component after the leading slash, a C string.
  const std::string object = absl::StartsWith(key, "/") ? key : "/" + key;
  if (object.size() < 2 || object.size() > 255 || object.find('/', 1) != std::string::npos ||
      object.find('\0') != std::string::npos || object == "/." || object == "/..") {
    return absl::InvalidArgumentError(
        absl::StrCat("'", Echo(key),
                     "' is not a shared-memory key: a name as given to shm_open, one path "
                     "component of at most 254 bytes, no NUL"));
  }
  if (offset < 0 || bytes <= 0 || offset > INT64_MAX - bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", offset, " and byte_size ", bytes, " do not describe a range"));
  }
  const int fd = shm_open(object.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("no shared-memory object '", Echo(key), "' on this host"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory object '", Echo(key), "' cannot be opened: ", ErrnoText(e)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory object '", Echo(key),
                     "' is not a regular file (a FIFO, socket or "
                     "device): only shared-memory objects are taken"));
  }
  if (st.st_size < offset + bytes) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("shared-memory object '", Echo(key), "' is ",
                                                   st.st_size, " bytes: [", offset, ", ",
                                                   offset + bytes, ") is not inside it"));
  }
  return std::make_shared<const SystemShm>(name, key, fd, offset, bytes);
}

}  // namespace tc::server
