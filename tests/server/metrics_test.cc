// The Prometheus exposition on its own: counters, cumulative histogram buckets, label
// escaping and scrape-time gauges, checked line by line.
#include <string>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/env/metrics.h"

namespace tc::server {
namespace {

bool HasLine(const std::string& text, const std::string& line) {
  for (absl::string_view l : absl::StrSplit(text, '\n')) {
    if (l == line) return true;
  }
  return false;
}

TEST(Metrics, CountsCallsByMethodOpAndCode) {
  Metrics m;
  m.RecordCall("Compute", "add", "OK", absl::Microseconds(50));
  m.RecordCall("Compute", "add", "OK", absl::Milliseconds(3));
  m.RecordCall("Compute", "add", "INVALID_ARGUMENT", absl::Microseconds(20));
  m.RecordCall("ListOps", "", "OK", absl::Microseconds(10));
  const std::string text = m.Render();
  EXPECT_TRUE(HasLine(text, "# TYPE tensorcompute_requests_total counter")) << text;
  EXPECT_TRUE(
      HasLine(text, "tensorcompute_requests_total{method=\"Compute\",op=\"add\",code=\"OK\"} 2"))
      << text;
  EXPECT_TRUE(HasLine(
      text,
      "tensorcompute_requests_total{method=\"Compute\",op=\"add\",code=\"INVALID_ARGUMENT\"} 1"));
  EXPECT_TRUE(
      HasLine(text, "tensorcompute_requests_total{method=\"ListOps\",op=\"\",code=\"OK\"} 1"));
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Metrics m;
  m.RecordCall("Compute", "mul", "OK", absl::Microseconds(50));   // <= 0.0001
  m.RecordCall("Compute", "mul", "OK", absl::Microseconds(700));  // <= 0.001
  m.RecordCall("Compute", "mul", "OK", absl::Seconds(100));       // past the last bound
  const std::string text = m.Render();
  const std::string l = "tensorcompute_request_duration_seconds";
  const std::string labels = "method=\"Compute\",op=\"mul\"";
  EXPECT_TRUE(HasLine(text, "# TYPE " + l + " histogram"));
  EXPECT_TRUE(HasLine(text, l + "_bucket{" + labels + ",le=\"0.0001\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, l + "_bucket{" + labels + ",le=\"0.001\"} 2")) << text;
  EXPECT_TRUE(HasLine(text, l + "_bucket{" + labels + ",le=\"60\"} 2")) << text;
  EXPECT_TRUE(HasLine(text, l + "_bucket{" + labels + ",le=\"+Inf\"} 3")) << text;
  EXPECT_TRUE(HasLine(text, l + "_count{" + labels + "} 3")) << text;
}

TEST(Metrics, BytesAndGauges) {
  Metrics m;
  m.AddBytes("Upload", 1000, 10);
  m.AddBytes("Upload", 24, 0);
  int scrapes = 0;
  m.AddGauge("tensorcompute_test_gauge", "A gauge read at scrape time.", [&scrapes] {
    ++scrapes;
    return std::vector<std::pair<std::string, double>>{{"device=\"0\"", 1.5}, {"device=\"1\"", 2}};
  });
  const std::string text = m.Render();
  EXPECT_TRUE(HasLine(text, "tensorcompute_received_bytes_total{method=\"Upload\"} 1024")) << text;
  EXPECT_TRUE(HasLine(text, "tensorcompute_sent_bytes_total{method=\"Upload\"} 10")) << text;
  EXPECT_TRUE(HasLine(text, "# HELP tensorcompute_test_gauge A gauge read at scrape time."))
      << text;
  EXPECT_TRUE(HasLine(text, "tensorcompute_test_gauge{device=\"0\"} 1.5")) << text;
  EXPECT_TRUE(HasLine(text, "tensorcompute_test_gauge{device=\"1\"} 2")) << text;
  EXPECT_EQ(scrapes, 1);
}

TEST(Metrics, LabelValuesAreEscaped) {
  Metrics m;
  m.RecordCall("Compute", "we\"ird\\op\nname", "OK", absl::Microseconds(1));
  const std::string text = m.Render();
  EXPECT_TRUE(
      HasLine(text,
              "tensorcompute_requests_total{method=\"Compute\",op=\"we\\\"ird\\\\op\\nname\","
              "code=\"OK\"} 1"))
      << text;
}

}  // namespace
}  // namespace tc::server
