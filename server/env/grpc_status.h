// absl::Status inside, grpc::Status at the server boundary.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace tc::server {

// The longest status message the server sends: gRPC carries it in a header, and clients refuse
// headers past their metadata limit (8 KiB by default) with an error of their own.
inline constexpr size_t kMaxStatusMessage = 2048;

// A caller's string as an error message quotes it: at most `max` bytes of it, non-printing
// bytes escaped, and a note of how much was left out.
inline std::string Echo(absl::string_view s, size_t max = 64) {
  if (s.size() <= max) return absl::CHexEscape(s);
  return absl::StrCat(absl::CHexEscape(s.substr(0, max)), "...(", s.size(), " bytes)");
}

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  // absl's canonical codes are gRPC's codes, number for number.
  absl::string_view m = s.message();
  if (m.size() <= kMaxStatusMessage) {
    return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(m));
  }
  // Cut at a character boundary.
  size_t keep = kMaxStatusMessage - 32;
  while (keep > 0 && (static_cast<unsigned char>(m[keep]) & 0xC0) == 0x80) --keep;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      absl::StrCat(m.substr(0, keep), "... (", m.size() - keep, " bytes cut)"));
}

}  // namespace tc::server
