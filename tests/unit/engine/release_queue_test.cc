// The engine's queue of run-ending writes: finished runs kept in order while the database does
// not answer, the delivered releases kept for the replay window, the claims whose answer was lost,
// and each run reported at risk once.
#include "engine/release_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace stagehand::engine_internal {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

const MonoTime kT0 = MonoTime{} + std::chrono::hours(1000);

ReleaseRequest Request(std::string id, std::string ticket) {
  ReleaseRequest request;
  request.id = std::move(id);
  request.ticket = std::move(ticket);
  return request;
}

std::vector<std::string> Tickets(const std::vector<ReleaseRequest>& requests) {
  std::vector<std::string> tickets;
  for (const ReleaseRequest& request : requests) tickets.push_back(request.ticket);
  return tickets;
}

PendingRelease Ended(std::string run_id) {
  PendingRelease ended;
  ended.run = std::make_shared<PlannedRun>();
  ended.run->run_id = std::move(run_id);
  return ended;
}

TEST(ReleaseQueueTest, RunsPutBackGoBeforeThoseQueuedMeanwhile) {
  ReleaseQueue queue(seconds(30));
  queue.Push(Ended("r1"));
  queue.Push(Ended("r2"));
  std::vector<PendingRelease> unanswered = queue.TakePending();
  ASSERT_EQ(unanswered.size(), 2u);
  EXPECT_TRUE(queue.TakePending().empty());
  queue.Push(Ended("r3"));
  queue.ReturnPending(std::move(unanswered));
  EXPECT_TRUE(queue.HasWork(/*pending=*/true));
  EXPECT_FALSE(queue.HasWork(/*pending=*/false));
  std::vector<std::string> order;
  for (const PendingRelease& ended : queue.TakePending()) order.push_back(ended.run->run_id);
  EXPECT_THAT(order, ElementsAre("r1", "r2", "r3"));
}

TEST(ReleaseQueueTest, DeliveredReleasesAreReplayedAsRetriedWithinTheWindowOnly) {
  ReleaseQueue queue(seconds(30));
  ReleaseRequest old = Request("a", "t1");
  ReleaseRequest recent = Request("b", "t2");
  recent.history = ReleasedRun{};
  recent.history->finish.output_tail = std::string(5000, 'x');
  queue.RememberDelivered({old}, kT0);
  queue.RememberDelivered({recent}, kT0 + seconds(31));  // forgets the first: out of the window
  queue.ReplayDelivered();
  const std::vector<ReleaseRequest> replays = queue.TakeReplays();
  ASSERT_THAT(Tickets(replays), ElementsAre("t2"));
  EXPECT_TRUE(replays[0].retried);
  EXPECT_EQ(replays[0].history->finish.output_tail.size(), ReleaseQueue::kReplayOutputBytes);
  queue.ReplayDelivered();
  EXPECT_THAT(queue.TakeReplays(), IsEmpty()) << "a release is replayed once";
}

TEST(ReleaseQueueTest, UnansweredReplaysKeepTheirOrder) {
  ReleaseQueue queue(seconds(30));
  queue.RememberDelivered({Request("a", "t1"), Request("b", "t2")}, kT0);
  queue.ReplayDelivered();
  std::vector<ReleaseRequest> first = queue.TakeReplays();
  queue.RememberDelivered({Request("c", "t3")}, kT0);
  queue.ReplayDelivered();
  queue.ReturnReplays(std::move(first));
  EXPECT_THAT(Tickets(queue.TakeReplays()), ElementsAre("t1", "t2", "t3"));
}

TEST(ReleaseQueueTest, KeepsTheFirstDoubtfulClaimsOfEachTask) {
  ReleaseQueue queue(seconds(30));
  for (int i = 0; i < 6; ++i) queue.AddDoubtfulClaim(Request("a", "a" + std::to_string(i)));
  queue.AddDoubtfulClaim(Request("b", "b0"));
  EXPECT_TRUE(queue.HasWork(/*pending=*/false));
  EXPECT_THAT(Tickets(queue.TakeDoubtfulClaims()), ElementsAre("a0", "a1", "a2", "a3", "b0"));
  EXPECT_FALSE(queue.HasWork(/*pending=*/false));
}

TEST(ReleaseQueueTest, ARunIsReportedAtRiskOnce) {
  ReleaseQueue queue(seconds(30));
  EXPECT_TRUE(queue.FirstReportAtRisk("r1"));
  EXPECT_FALSE(queue.FirstReportAtRisk("r1"));
  EXPECT_TRUE(queue.FirstReportAtRisk("r2"));
}

TEST(ReleaseQueueTest, BatchesNameEachTaskOnceInOrder) {
  const std::vector<std::vector<ReleaseRequest>> batches = ReleaseQueue::BatchesNamingEachTaskOnce(
      {Request("a", "1"), Request("b", "2"), Request("a", "3"), Request("c", "4")});
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_THAT(Tickets(batches[0]), ElementsAre("1", "2"));
  EXPECT_THAT(Tickets(batches[1]), ElementsAre("3", "4"));
}

}  // namespace
}  // namespace stagehand::engine_internal
