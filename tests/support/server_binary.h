// Which server binary and backend the end-to-end tests run: $TC_SERVER_BINARY overrides the
// binary built here (to test a bundled one elsewhere), $TC_TEST_BACKEND the backend (cpu by
// default; cuda on a GPU machine). Tests registered with tc_server_test define
// TC_SERVER_BINARY.
#pragma once

#include <cstdlib>
#include <string>

namespace tc::testing {

inline std::string ServerBinary() {
  const char* env = std::getenv("TC_SERVER_BINARY");
  return env ? env : TC_SERVER_BINARY;
}

inline std::string BackendFlag() {
  const char* env = std::getenv("TC_TEST_BACKEND");
  return std::string("--backend=") + (env ? env : "cpu");
}

}  // namespace tc::testing
