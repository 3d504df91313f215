// Starts the real server binary on an ephemeral 127.0.0.1 port for a test, and stops it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tc::testing {

class ServerProcess {
 public:
  // Runs `binary --address=127.0.0.1 --port=0 --port_file=... extra_args...` and waits until
  // it has written its port. port() is 0 if it did not start.
  ServerProcess(const std::string& binary, const std::vector<std::string>& extra_args);
  ~ServerProcess();

  int port() const { return port_; }
  int pid() const { return pid_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  bool running();
  // Sends SIGTERM and returns the exit status (as from waitpid), or -1 after `timeout_s`.
  int Terminate(double timeout_s = 30);
  // Waits for the process to exit by itself: its status, or -1 after `timeout_s`.
  int WaitExit(double timeout_s);

 private:
  int pid_ = -1;
  int port_ = 0;
  std::string port_file_;
};

// Flags written as one comma-separated list: a comma starts a new flag only where "--"
// follows it, so that values keep theirs ("--devices=0,1,--streams_per_device=8").
std::vector<std::string> SplitFlags(const std::string& list);

// kB of a /proc/<pid>/status field (VmRSS, VmHWM); -1 if unreadable.
int64_t ProcStatusKb(int pid, const std::string& field);

}  // namespace tc::testing
