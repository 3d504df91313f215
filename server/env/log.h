// The process's log lines (stderr, UTC timestamps), and the way out on a bad start.
#pragma once

#include <string>

namespace tc::server {

void Log(const std::string& line);
[[noreturn]] void Fail(const std::string& line, int code = 2);

}  // namespace tc::server
