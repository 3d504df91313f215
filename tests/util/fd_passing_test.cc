// Descriptors over a Unix socket (util/fd_passing.h): what is sent arrives as the same open
// file, close-on-exec; every descriptor a message carries is taken, also from a message its
// reader will refuse; too many is refused before anything is sent; a closed peer reads as 0.
#include "util/fd_passing.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tc {
namespace {

struct Pair {
  int a = -1, b = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  ~Pair() {
    if (a >= 0) close(a);
    if (b >= 0) close(b);
  }
};

int Memfd(int64_t bytes) {
  const int fd = memfd_create("fd-passing-test", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, bytes), 0);
  return fd;
}

bool SameFile(int x, int y) {
  struct stat sx, sy;
  return fstat(x, &sx) == 0 && fstat(y, &sy) == 0 && sx.st_dev == sy.st_dev &&
         sx.st_ino == sy.st_ino;
}

TEST(FdPassing, DescriptorsArriveAsTheSameFilesCloseOnExec) {
  Pair p;
  const int files[3] = {Memfd(4096), Memfd(8192), Memfd(1)};
  ASSERT_EQ(SendWithFds(p.a, "register", 8, files, 3), 8);
  char buf[64];
  std::vector<int> got;
  int flags = -1;
  ASSERT_EQ(ReceiveWithFds(p.b, buf, sizeof buf, &got, &flags), 8);
  EXPECT_EQ(std::string(buf, 8), "register");
  EXPECT_EQ(flags & (MSG_TRUNC | MSG_CTRUNC), 0);
  ASSERT_EQ(got.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_NE(got[k], files[k]);
    EXPECT_TRUE(SameFile(got[k], files[k])) << k;
    EXPECT_TRUE(fcntl(got[k], F_GETFD) & FD_CLOEXEC) << k;
    close(got[k]);
    close(files[k]);
  }
}

TEST(FdPassing, APlainMessageCarriesNone) {
  Pair p;
  ASSERT_EQ(SendWithFds(p.a, "hello", 5, nullptr, 0), 5);
  char buf[16];
  std::vector<int> got;
  int flags = 0;
  EXPECT_EQ(ReceiveWithFds(p.b, buf, sizeof buf, &got, &flags), 5);
  EXPECT_TRUE(got.empty());
}

TEST(FdPassing, TooManyIsRefusedBeforeSending) {
  Pair p;
  std::vector<int> many(kMaxPassedFds + 1, 0);
  errno = 0;
  EXPECT_EQ(SendWithFds(p.a, "x", 1, many.data(), static_cast<int>(many.size())), -1);
  EXPECT_EQ(errno, EINVAL);
  char buf[4];
  std::vector<int> got;
  int flags = 0;
  EXPECT_EQ(ReceiveWithFds(p.b, buf, sizeof buf, &got, &flags, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);  // nothing was sent
}

TEST(FdPassing, ALongMessageIsFlaggedAndItsDescriptorsStillTaken) {
  Pair p;
  const int file = Memfd(64);
  const std::string text(300, 'm');
  ASSERT_EQ(SendWithFds(p.a, text.data(), text.size(), &file, 1), 300);
  char buf[16];
  std::vector<int> got;
  int flags = 0;
  EXPECT_EQ(ReceiveWithFds(p.b, buf, sizeof buf, &got, &flags), 16);
  EXPECT_TRUE(flags & MSG_TRUNC);
  ASSERT_EQ(got.size(), 1u);  // the reader that refuses the message closes it: none leaks
  EXPECT_TRUE(SameFile(got[0], file));
  close(got[0]);
  close(file);
}

TEST(FdPassing, AClosedPeerReadsAsZeroAndASendToItFails) {
  Pair p;
  close(p.a);
  p.a = -1;
  char buf[4];
  std::vector<int> got;
  int flags = 0;
  EXPECT_EQ(ReceiveWithFds(p.b, buf, sizeof buf, &got, &flags), 0);
  EXPECT_EQ(SendWithFds(p.b, "x", 1, nullptr, 0), -1);
  EXPECT_EQ(errno, EPIPE);  // and no SIGPIPE: this test is still running
}

}  // namespace
}  // namespace tc
