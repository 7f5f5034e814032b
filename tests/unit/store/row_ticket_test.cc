// RowTicket: every form of a row's current_run_ticket decoded, encoded back to the bytes stagehand
// wrote before the codec existed, and the SQL statements' spelling of the forms (ticket_sql).
#include "stagehand/store/row_ticket.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "stagehand/store/task_store.h"
#include "stagehand/testing/status_matchers.h"
#include "stagehand/time/time_zone.h"
#include "store/ticket_sql.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;

WallTime At(const std::string& iso) {
  Result<WallTime> instant = ParseIsoInstant(iso);
  EXPECT_THAT(instant, IsOk());
  return instant.ok() ? *instant : WallTime{};
}

PauseRequest Request(std::string by, std::string reason) {
  PauseRequest request;
  request.by = std::move(by);
  request.reason = std::move(reason);
  return request;
}

TEST(RowTicketTest, APlainTicketIsItsRun) {
  const RowTicket ticket = RowTicket::Decode("0f8e7a52-3c1d-4b6e-9a2f-5d4c3b2a1908");
  EXPECT_EQ(ticket.kind, RowTicket::Kind::kRun);
  EXPECT_EQ(ticket.run, "0f8e7a52-3c1d-4b6e-9a2f-5d4c3b2a1908");
  EXPECT_FALSE(ticket.cancel_requested);
  EXPECT_FALSE(ticket.pause_json.has_value());
  EXPECT_FALSE(ticket.paused());
  EXPECT_TRUE(ticket.HeldBy("0f8e7a52-3c1d-4b6e-9a2f-5d4c3b2a1908"));
  EXPECT_FALSE(ticket.HeldBy("other"));
}

TEST(RowTicketTest, ACancelMarksTheRunsTicket) {
  EXPECT_EQ(CancelRequestedTicket("t1"), "cancel:t1");
  const RowTicket ticket = RowTicket::Decode("cancel:t1");
  EXPECT_EQ(ticket.kind, RowTicket::Kind::kRun);
  EXPECT_EQ(ticket.run, "t1");
  EXPECT_TRUE(ticket.cancel_requested);
  EXPECT_TRUE(ticket.HeldBy("t1"));
  EXPECT_EQ(ticket.Encode(), "cancel:t1");
}

TEST(RowTicketTest, APauseIsWrittenAsBeforeAndReadBack) {
  PauseRequest request = Request("ann", "deploy \"v2\"");
  EXPECT_EQ(PausedTicket(request), R"(paused:{"by":"ann","reason":"deploy \"v2\""})");
  request.until = At("2026-03-08T07:00:00.250Z");
  const std::string stored = PausedTicket(request);
  EXPECT_EQ(stored,
            R"(paused:{"by":"ann","reason":"deploy \"v2\"","until":"2026-03-08T07:00:00.250Z"})");
  const RowTicket ticket = RowTicket::Decode(stored);
  EXPECT_EQ(ticket.kind, RowTicket::Kind::kPaused);
  EXPECT_TRUE(ticket.paused());
  EXPECT_FALSE(ticket.HeldBy(""));
  EXPECT_EQ(ticket.Encode(), stored);
  const TaskPause pause = ticket.DecodePause();
  EXPECT_EQ(pause.by, "ann");
  EXPECT_EQ(pause.reason, "deploy \"v2\"");
  EXPECT_EQ(pause.until, request.until);
}

TEST(RowTicketTest, APendingPauseKeepsTheRunAndItsCancelMark) {
  const PauseRequest request = Request("ann", "deploy");
  const std::string pausing = RowTicket::Decode("t1").WithPendingPause(request);
  EXPECT_EQ(pausing, R"(pausing:t1:{"by":"ann","reason":"deploy"})");
  const std::string marked = RowTicket::Decode("cancel:t1").WithPendingPause(request);
  EXPECT_EQ(marked, R"(cancel:pausing:t1:{"by":"ann","reason":"deploy"})");
  EXPECT_EQ(CancelRequestedTicket(pausing), marked);

  const RowTicket ticket = RowTicket::Decode(marked);
  EXPECT_EQ(ticket.kind, RowTicket::Kind::kRun);
  EXPECT_EQ(ticket.run, "t1");
  EXPECT_TRUE(ticket.cancel_requested);
  EXPECT_EQ(ticket.pause_json, R"({"by":"ann","reason":"deploy"})");
  EXPECT_TRUE(ticket.HeldBy("t1"));
  EXPECT_FALSE(ticket.paused());
  EXPECT_EQ(ticket.DecodePause().by, "ann");

  EXPECT_EQ(ticket.WithoutPendingPause(), "cancel:t1");
  EXPECT_EQ(RowTicket::Decode(pausing).WithoutPendingPause(), "t1");
  EXPECT_EQ(RowTicket::Decode(pausing).WithPendingPause(Request("bob", "")),
            R"(pausing:t1:{"by":"bob","reason":""})")
      << "a second pause replaces the first";
}

TEST(RowTicketTest, APendingPauseWithoutItsSeparatorIsHeldByNoRun) {
  for (const std::string& stored :
       std::vector<std::string>{"pausing:t1", "cancel:pausing:t1", "pausing:"}) {
    const RowTicket ticket = RowTicket::Decode(stored);
    EXPECT_EQ(ticket.kind, RowTicket::Kind::kUnreadable) << stored;
    EXPECT_FALSE(ticket.HeldBy("t1")) << stored;
    EXPECT_FALSE(ticket.paused()) << stored;
    EXPECT_EQ(ticket.Encode(), stored);
  }
  EXPECT_TRUE(RowTicket::Decode("cancel:pausing:t1").cancel_requested);
}

TEST(RowTicketTest, EveryTextDecodesAndEncodesBackByteForByte) {
  const std::vector<std::string> stored = {
      "",
      "t1",
      "cancel:",
      "cancel:cancel:t1",
      "cancel:paused:x",
      "paused:",
      "paused:not json",
      "paused:cancel:x",
      "pausing::",
      "pausing:t1:",
      "pausing:t1:{\"by\":\"a:b\",\"reason\":\"c\"}",
      "cancel:pausing:t1:{}",
      "pausing:t1",
      "pausing:pausing:t1:x",
      "cancel:pausing:",
  };
  for (const std::string& text : stored) {
    EXPECT_EQ(RowTicket::Decode(text).Encode(), text) << text;
  }
}

TEST(RowTicketTest, APausesMalformedFieldsStayEmpty) {
  EXPECT_EQ(RowTicket::Decode("paused:not json").DecodePause(), TaskPause{});
  const TaskPause pause =
      RowTicket::Decode(R"(paused:{"by":7,"reason":"r","until":"tomorrow"})").DecodePause();
  EXPECT_EQ(pause.by, "");
  EXPECT_EQ(pause.reason, "r");
  EXPECT_FALSE(pause.until.has_value());
  EXPECT_EQ(RowTicket::Decode("t1").DecodePause(), TaskPause{});
}

TEST(RowTicketTest, PauseOfReadsTheRowsTimes) {
  TaskRow row;
  EXPECT_FALSE(PauseOf(row).has_value());
  row.current_run_ticket = "cancel:t1";
  EXPECT_FALSE(PauseOf(row).has_value());
  row.current_run_ticket = "pausing:t1";
  EXPECT_FALSE(PauseOf(row).has_value()) << "held by no run, paused by nobody";

  row.current_run_ticket =
      R"(paused:{"by":"ann","reason":"deploy","until":"2026-03-08T09:00:00Z"})";
  row.current_run_started_at = At("2026-03-08T07:00:00Z");
  row.current_run_expires_at = At("2026-03-08T08:00:00Z");
  std::optional<TaskPause> pause = PauseOf(row);
  ASSERT_TRUE(pause.has_value());
  EXPECT_EQ(pause->by, "ann");
  EXPECT_EQ(pause->since, At("2026-03-08T07:00:00Z"));
  EXPECT_EQ(pause->until, At("2026-03-08T08:00:00Z")) << "a pause's expiry is the row's";
  EXPECT_FALSE(pause->pending);

  row.current_run_ticket =
      R"(cancel:pausing:t1:{"by":"ann","reason":"deploy","until":"2026-03-08T09:00:00Z"})";
  pause = PauseOf(row);
  ASSERT_TRUE(pause.has_value());
  EXPECT_TRUE(pause->pending);
  EXPECT_EQ(pause->since, At("2026-03-08T07:00:00Z")) << "the run's start";
  EXPECT_EQ(pause->until, At("2026-03-08T09:00:00Z")) << "a pending pause's is its own";
}

// The SQL statements spell the forms as ticket_sql says (and static_assert their literals against
// it): these must be what RowTicket writes.
TEST(RowTicketTest, TheSqlSpellingOfTheFormsIsTheCodecs) {
  using store_internal::ticket_sql::kCancelRequested;
  using store_internal::ticket_sql::kPaused;
  using store_internal::ticket_sql::kPausePending;
  const PauseRequest request = Request("ann", "deploy");
  const std::string json = R"({"by":"ann","reason":"deploy"})";
  EXPECT_EQ(CancelRequestedTicket("t1"), std::string(kCancelRequested) + "t1");
  EXPECT_EQ(PausedTicket(request), std::string(kPaused) + json);
  EXPECT_EQ(RowTicket::Decode("t1").WithPendingPause(request),
            std::string(kPausePending) + "t1:" + json);
  EXPECT_EQ(RowTicket::Decode("cancel:t1").WithPendingPause(request),
            std::string(kCancelRequested) + std::string(kPausePending) + "t1:" + json);
  EXPECT_TRUE(RowTicket::Decode(std::string(kPaused) + json).paused());
  EXPECT_TRUE(RowTicket::Decode(std::string(kCancelRequested) + "t1").cancel_requested);
  EXPECT_EQ(RowTicket::Decode(std::string(kPausePending) + "t1:" + json).pause_json, json);
}

}  // namespace
}  // namespace stagehand
