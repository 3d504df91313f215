#include "util/name_values.h"

#include "gtest/gtest.h"

namespace tc::util {
namespace {

TEST(NameIntegersTest, PairsInOrderAndEveryMalformedEntryQuoted) {
  auto empty = ParseNameIntegers("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  auto two = ParseNameIntegers("grpc.http2.lookahead_bytes=8388608,, a.b=-3 ");
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0], (std::pair<std::string, int>{"grpc.http2.lookahead_bytes", 8388608}));
  EXPECT_EQ((*two)[1], (std::pair<std::string, int>{"a.b", -3}));
  for (const char* bad : {"x", "x=", "=5", "x=lots", "x=4294967296", "x=1.5"}) {
    auto r = ParseNameIntegers(std::string("ok=1,") + bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string("\"") + bad + "\" is not NAME=INTEGER"),
              std::string::npos)
        << r.status();
  }
}

}  // namespace
}  // namespace tc::util
