#include "server/env/auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tc::server {

namespace {

// Equal length and content, in time that depends only on the lengths.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<Auth> Auth::FromText(const std::string& text, char separator) {
  std::vector<std::pair<std::string, std::string>> tokens;
  int line = 0;
  for (absl::string_view entry : absl::StrSplit(text, separator)) {
    ++line;
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty() || absl::StartsWith(entry, "#")) continue;
    std::pair<std::string, std::string> t;
    if (const size_t colon = entry.find(':'); colon != absl::string_view::npos) {
      t = {std::string(absl::StripAsciiWhitespace(entry.substr(0, colon))),
           std::string(absl::StripAsciiWhitespace(entry.substr(colon + 1)))};
    } else {
      t = {std::string(entry), std::string(entry)};
    }
    if (t.first.empty() || t.second.size() < 16) {
      // Says where, never what: the text holds secrets.
      return absl::InvalidArgumentError(absl::StrCat(
          "token entry ", line, ": needs a name and a token of at least 16 characters"));
    }
    tokens.push_back(std::move(t));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens found");
  return Auth(std::move(tokens));
}

absl::StatusOr<std::string> Auth::Identify(const grpc::CallbackServerContext& ctx) const {
  if (!tokens_.empty()) {
    const auto& md = ctx.client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) {
      return absl::UnauthenticatedError(
          "this server requires a bearer token: send metadata 'authorization: Bearer <token>'");
    }
    absl::string_view value(it->second.data(), it->second.size());
    if (!absl::ConsumePrefix(&value, "Bearer ")) {
      return absl::UnauthenticatedError("the authorization metadata is not 'Bearer <token>'");
    }
    // Every entry is compared, so the time taken says nothing about which one matched.
    const std::string* name = nullptr;
    for (const auto& [n, token] : tokens_) {
      if (ConstantTimeEquals(value, token)) name = &n;
    }
    if (name == nullptr) return absl::UnauthenticatedError("the bearer token is not valid");
    return absl::StrCat("token:", *name);
  }
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    std::string id = "cert:";
    for (const grpc::string_ref& s : auth->GetPeerIdentity()) id.append(s.data(), s.size());
    return id;
  }
  // "ipv4:127.0.0.1:5678" -> "ipv4:127.0.0.1"
  std::string peer = ctx.peer();
  if (const size_t colon = peer.rfind(':'); colon != std::string::npos && colon > 5) {
    peer.resize(colon);
  }
  return peer;
}

std::string SessionKey(const grpc::CallbackServerContext& ctx, const std::string& owner) {
  const auto& md = ctx.client_metadata();
  if (auto it = md.find("tc-session"); it != md.end() && it->second.size() <= 64) {
    return absl::StrCat(owner, "\nsession ",
                        absl::string_view(it->second.data(), it->second.size()));
  }
  return absl::StrCat(owner, "\npeer ", ctx.peer());
}

}  // namespace tc::server
