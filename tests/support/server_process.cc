#include "tests/support/server_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

namespace tc::testing {

ServerProcess::ServerProcess(const std::string& binary, const std::vector<std::string>& extra) {
  char dir[] = "/tmp/tc-server-XXXXXX";
  if (mkdtemp(dir) == nullptr) return;
  port_file_ = std::string(dir) + "/port";
  std::vector<std::string> args = {binary, "--address=127.0.0.1", "--port=0",
                                   "--port_file=" + port_file_, "--metrics_port=0"};
  // $TC_TEST_CPU_DEVICES: the CPU backend split into that many devices, so that the suite
  // runs as against a server of several GPUs (a test's own flags come after, and win).
  if (const char* n = std::getenv("TC_TEST_CPU_DEVICES"); n != nullptr) {
    args.push_back(std::string("--test_cpu_devices=") + n);
  }
  // $TC_TEST_SERVER_FLAGS: more flags for every server, such as --device_workers.
  if (const char* more = std::getenv("TC_TEST_SERVER_FLAGS"); more != nullptr) {
    for (const std::string& f : SplitFlags(more)) args.push_back(f);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline && running()) {
    std::ifstream in(port_file_);
    if (in >> port_ && port_ > 0) return;
    port_ = 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool ServerProcess::running() {
  if (pid_ <= 0) return false;
  int status;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

int ServerProcess::Terminate(double timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  return WaitExit(timeout_s);
}

int ServerProcess::WaitExit(double timeout_s) {
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && Terminate() == -1) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!port_file_.empty()) {
    std::remove(port_file_.c_str());
    rmdir(port_file_.substr(0, port_file_.rfind('/')).c_str());
  }
}

int64_t ProcStatusKb(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, field.size() + 1, field + ":") == 0) {
      return std::strtoll(line.c_str() + field.size() + 1, nullptr, 10);
    }
  }
  return -1;
}

std::vector<std::string> SplitFlags(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin < list.size()) {
    size_t end = list.find(",--", begin);
    if (end == std::string::npos) end = list.size();
    if (end > begin) out.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

}  // namespace tc::testing
