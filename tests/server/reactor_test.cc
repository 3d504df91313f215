// PooledReactor (server/calls/reactor.h) on its own, over a stand-in for gRPC's writer reactor that
// records what the reactor asks of it: the call finishes exactly once and is counted once;
// StartSending writes every message in order, filling the next while one is on the wire;
// a failing fill or a client that stops reading ends the call with its status; the drain and
// authentication refuse calls; the reactor lives until gRPC's OnDone and its last task.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/calls/reactor.h"
#include "tensorcompute/v1/tensor_service.pb.h"

namespace tc::server {
namespace {

using Msg = ::tensorcompute::v1::Tensor;  // Any message; the k-th carries k as its offset.
constexpr auto kWait = std::chrono::seconds(10);

// What gRPC's writer reactor offers the reactor, recorded for the test.
class FakeWriter {
 public:
  virtual ~FakeWriter() = default;
  virtual void OnDone() {}
  virtual void OnCancel() {}

  void StartWrite(const Msg* m) {
    std::lock_guard<std::mutex> lock(mu_);
    writes_.push_back(m->offset());
    unacked_.push_back(m->offset());
    cv_.notify_all();
  }
  void Finish(const grpc::Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    finishes_.push_back(s);
    cv_.notify_all();
  }

  // Waits for a write that is not yet acknowledged; -1 after kWait.
  int64_t NextWrite() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, kWait, [this] { return !unacked_.empty(); })) return -1;
    const int64_t k = unacked_.front();
    unacked_.pop_front();
    return k;
  }
  // Waits for the call to finish; its status (UNKNOWN "never" after kWait).
  grpc::Status WaitFinish() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, kWait, [this] { return !finishes_.empty(); })) {
      return grpc::Status(grpc::StatusCode::UNKNOWN, "never");
    }
    return finishes_.front();
  }
  std::vector<int64_t> writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }
  size_t finishes() {
    std::lock_guard<std::mutex> lock(mu_);
    return finishes_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> writes_;
  std::deque<int64_t> unacked_;
  std::vector<grpc::Status> finishes_;
};

class TestReactor : public PooledReactor<FakeWriter> {
 public:
  TestReactor(grpc::CallbackServerContext* ctx, const ServiceEnv& env, std::atomic<bool>* gone)
      : PooledReactor(ctx, env, "Test"), gone_(gone) {}
  ~TestReactor() override { gone_->store(true); }

  using PooledReactor::Authorized;
  using PooledReactor::FinishOnce;
  using PooledReactor::Ref;
  using PooledReactor::StartSending;
  using PooledReactor::Unref;
  void Ack(bool ok) { WriteDone<Msg>(ok); }

 private:
  std::atomic<bool>* gone_;
};

class ReactorTest : public ::testing::Test {
 protected:
  ReactorTest() {
    env_ =
        ServiceEnv{nullptr, &pool_, nullptr, nullptr, &metrics_, &auth_, ServiceOptions{}, &life_};
  }

  // A reactor that refuses nothing it is not told to: with a token configured, a context
  // without metadata is unauthenticated, and Authorized() is asked only where a test means to.
  TestReactor* Make() { return new TestReactor(&ctx_, env_, &gone_); }

  // gRPC's last call on a reactor; then waits (bounded) for the reactor to be destroyed.
  bool DoneAndGone(TestReactor* r) {
    r->OnDone();
    for (int i = 0; i < 10000 && !gone_.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return gone_.load();
  }

  std::string Counted(const std::string& code) {
    const std::string line =
        "tensorcompute_requests_total{method=\"Test\",op=\"\",code=\"" + code + "\"}";
    const std::string text = metrics_.Render();
    const size_t at = text.find(line);
    if (at == std::string::npos) return "0";
    const size_t end = text.find('\n', at);
    return text.substr(at + line.size() + 1, end - at - line.size() - 1);
  }

  ThreadPool pool_{2};
  Metrics metrics_;
  Auth auth_{{{"alice", "secret"}}};
  Lifecycle life_;
  grpc::CallbackServerContext ctx_;
  ServiceEnv env_{};
  std::atomic<bool> gone_{false};
};

TEST_F(ReactorTest, FinishesOnceAndIsCountedOnce) {
  TestReactor* r = Make();
  r->FinishOnce(absl::InvalidArgumentError("first"));
  r->FinishOnce(absl::OkStatus());
  r->OnCancel();  // Posts a CANCELLED finish, which must be a no-op now.
  const grpc::Status s = r->WaitFinish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "first");
  ASSERT_TRUE(DoneAndGone(r));
  EXPECT_EQ(Counted("INVALID_ARGUMENT"), "1");
  EXPECT_EQ(Counted("OK"), "0");
  EXPECT_EQ(Counted("CANCELLED"), "0");
}

TEST_F(ReactorTest, SendsEveryMessageInOrderFillingTheNextDuringAWrite) {
  TestReactor* r = Make();
  constexpr int64_t kTotal = 7;
  std::mutex mu;
  std::condition_variable cv;
  int64_t filled = 0;
  r->StartSending<Msg>(kTotal, [&](int64_t k, Msg* m) {
    m->set_offset(k);
    std::lock_guard<std::mutex> lock(mu);
    filled = k + 1;
    cv.notify_all();
    return absl::OkStatus();
  });
  for (int64_t k = 0; k < kTotal; ++k) {
    ASSERT_EQ(r->NextWrite(), k);
    if (k + 1 < kTotal) {
      // The next message is filled while this one is still unacknowledged.
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, kWait, [&] { return filled >= k + 2; }))
          << "message " << k + 1 << " was not filled while " << k << " was on the wire";
      // ...and no further: at most one message waits behind the one being written.
      EXPECT_LE(filled, k + 2);
    }
    EXPECT_EQ(r->finishes(), 0u);
    r->Ack(true);
  }
  EXPECT_TRUE(r->WaitFinish().ok());
  EXPECT_EQ(r->writes(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(DoneAndGone(r));
  EXPECT_EQ(Counted("OK"), "1");
}

TEST_F(ReactorTest, NothingToSendFinishesAtOnce) {
  TestReactor* r = Make();
  r->StartSending<Msg>(0, [](int64_t, Msg*) { return absl::InternalError("never called"); });
  EXPECT_TRUE(r->WaitFinish().ok());
  EXPECT_TRUE(r->writes().empty());
  ASSERT_TRUE(DoneAndGone(r));
}

TEST_F(ReactorTest, AFailingFillEndsTheCallWithItsStatus) {
  TestReactor* r = Make();
  r->StartSending<Msg>(5, [](int64_t k, Msg* m) {
    if (k == 2) return absl::ResourceExhaustedError("out of memory at 2");
    m->set_offset(k);
    return absl::OkStatus();
  });
  ASSERT_EQ(r->NextWrite(), 0);
  r->Ack(true);
  // Message 1 may be written before the failure of 2 finishes the call; nothing after it is.
  const grpc::Status s = r->WaitFinish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(), "out of memory at 2");
  for (int64_t k : r->writes()) EXPECT_LT(k, 2);
  EXPECT_EQ(r->finishes(), 1u);
  ASSERT_TRUE(DoneAndGone(r));
}

TEST_F(ReactorTest, AClientThatStopsReadingCancelsTheCall) {
  TestReactor* r = Make();
  r->StartSending<Msg>(3, [](int64_t k, Msg* m) {
    m->set_offset(k);
    return absl::OkStatus();
  });
  ASSERT_EQ(r->NextWrite(), 0);
  r->Ack(false);
  EXPECT_EQ(r->WaitFinish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(r->writes(), (std::vector<int64_t>{0}));
  ASSERT_TRUE(DoneAndGone(r));
  EXPECT_EQ(Counted("CANCELLED"), "1");
}

TEST_F(ReactorTest, UnauthenticatedCallsAreRefused) {
  TestReactor* r = Make();
  EXPECT_FALSE(r->Authorized());
  const grpc::Status s = r->WaitFinish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("bearer token"), std::string::npos) << s.error_message();
  ASSERT_TRUE(DoneAndGone(r));
}

TEST_F(ReactorTest, CallsAreCountedInFlightUntilDestroyedAndRefusedOnceDraining) {
  TestReactor* r = Make();
  EXPECT_EQ(life_.active(), 1);
  r->FinishOnce(absl::OkStatus());
  ASSERT_TRUE(DoneAndGone(r));
  EXPECT_EQ(life_.active(), 0);

  life_.StartDraining();
  gone_ = false;
  TestReactor* late = Make();
  EXPECT_EQ(life_.active(), 0);
  EXPECT_FALSE(late->Authorized());
  EXPECT_EQ(late->WaitFinish().error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(DoneAndGone(late));
  EXPECT_EQ(life_.active(), 0);
}

TEST_F(ReactorTest, AReferenceKeepsTheReactorPastOnDone) {
  TestReactor* r = Make();
  r->Ref();  // As for a device completion still to come.
  r->FinishOnce(absl::OkStatus());
  r->OnDone();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(gone_.load());
  r->Unref();
  EXPECT_TRUE(gone_.load());
}

}  // namespace
}  // namespace tc::server
