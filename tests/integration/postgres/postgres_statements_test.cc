// Checks of the PostgreSQL store's pieces that need no server: timestamp text conversions,
// notification channels and payloads, and that the pgbench script of the claim benchmark runs
// exactly the store's own claim and release statements.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "stagehand/testing/status_matchers.h"
#include "store/postgres/pg_notifications.h"
#include "store/postgres/pg_time.h"
#include "store/postgres/statements.h"

namespace stagehand::store_internal {
namespace {

using ::stagehand::testing::IsOk;
using ::testing::Not;

using std::chrono::microseconds;
using std::chrono::seconds;

WallTime At(long long epoch_us) { return WallTime(microseconds(epoch_us)); }

TEST(PgTimeTest, FormatsMicrosecondsInUtc) {
  EXPECT_EQ(FormatPgTimestamp(At(1'796'083'199'000'000)), "2026-11-30 23:59:59.000000+00");
  EXPECT_EQ(FormatPgTimestamp(At(1'796'083'199'123'456)), "2026-11-30 23:59:59.123456+00");
  EXPECT_EQ(FormatPgTimestamp(At(-1)), "1969-12-31 23:59:59.999999+00");
  // Nanoseconds below a microsecond are truncated, as the column stores microseconds.
  EXPECT_EQ(FormatPgTimestamp(At(1'000'000) + std::chrono::nanoseconds(999)),
            "1970-01-01 00:00:01.000000+00");
}

TEST(PgTimeTest, ParsesServerOutputWithAnyFractionAndOffset) {
  const WallTime base = At(1'796'083'199'000'000);
  EXPECT_EQ(*ParsePgTimestamp("2026-11-30 23:59:59+00"), base);
  EXPECT_EQ(*ParsePgTimestamp("2026-11-30 23:59:59.5+00"), base + std::chrono::milliseconds(500));
  EXPECT_EQ(*ParsePgTimestamp("2026-11-30 23:59:59.123456+00"), base + microseconds(123'456));
  EXPECT_EQ(*ParsePgTimestamp("2026-12-01 01:29:59+01:30"), base);
  EXPECT_EQ(*ParsePgTimestamp("2026-11-30 18:59:59-05"), base);
  EXPECT_EQ(*ParsePgTimestamp("2026-11-30 23:59:59.000+00:00:00"), base);
  EXPECT_EQ(*ParsePgTimestamp("infinity"), WallTime::max());
  EXPECT_EQ(*ParsePgTimestamp("-infinity"), WallTime::min());
  EXPECT_EQ(*ParsePgTimestamp("0099-01-01 00:00:00+00 BC"), WallTime::min());
  EXPECT_EQ(*ParsePgTimestamp("294276-12-31 23:59:59+00"), WallTime::max());
  for (const char* bad : {"", "2026-11-30", "2026-11-30T23:59:59Z", "2026-13-01 00:00:00+00",
                          "2026-11-30 23:59:59.+00", "2026-11-30 23:59:59+00 junk"}) {
    EXPECT_THAT(ParsePgTimestamp(bad), Not(IsOk())) << bad;
  }
}

TEST(PgTimeTest, RoundTripsEveryMicrosecond) {
  for (long long us : {0LL, 1LL, 999'999LL, 1'796'083'199'000'001LL, -86'400'000'001LL}) {
    EXPECT_EQ(*ParsePgTimestamp(FormatPgTimestamp(At(us))), At(us)) << us;
  }
}

TEST(PgNotificationsTest, ChannelIsPerSchemaAndFitsPostgresLimit) {
  EXPECT_EQ(NotificationChannel(""), "stagehand_tasks");
  EXPECT_EQ(NotificationChannel("catalog"), "stagehand_tasks_catalog");
  const std::string long_a = NotificationChannel(std::string(60, 'a'));
  const std::string long_b = NotificationChannel(std::string(59, 'a') + "b");
  EXPECT_LE(long_a.size(), 63u);
  EXPECT_EQ(long_a.rfind("stagehand_tasks_", 0), 0u);
  EXPECT_NE(long_a, long_b);
  EXPECT_EQ(NotificationChannel(std::string(47, 'x')).size(), 63u);  // still spelled out
}

TEST(PgNotificationsTest, ParsesKindAndIdUpToTheFirstColon) {
  std::vector<StoreEvent> events;
  ASSERT_TRUE(ParseNotification("release:a:b", events));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StoreEvent::Kind::kRelease);
  EXPECT_EQ(events[0].task_id, "a:b");
  const std::map<std::string, StoreEvent::Kind> kinds = {{"upsert", StoreEvent::Kind::kUpsert},
                                                         {"trigger", StoreEvent::Kind::kTrigger},
                                                         {"cancel", StoreEvent::Kind::kCancel},
                                                         {"sweep", StoreEvent::Kind::kSweep},
                                                         {"delete", StoreEvent::Kind::kDelete}};
  for (const auto& [name, kind] : kinds) {
    events.clear();
    ASSERT_TRUE(ParseNotification(name + ":x", events)) << name;
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].kind, kind);
  }
  events.clear();
  EXPECT_TRUE(ParseNotification("upsert:", events));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].task_id, "");
  events.clear();
  EXPECT_FALSE(ParseNotification("resync", events));
  EXPECT_FALSE(ParseNotification("other:x", events));
  EXPECT_TRUE(events.empty());
}

TEST(PgNotificationsTest, ATracedTriggerCarriesItsContextByLength) {
  std::vector<StoreEvent> events;
  ASSERT_TRUE(ParseNotification(
      "traced-trigger:3:a:b55:00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-013:v=1",
      events));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StoreEvent::Kind::kTrigger);
  EXPECT_EQ(events[0].task_id, "a:b");
  EXPECT_EQ(FormatTraceparent(events[0].caller),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_EQ(events[0].caller.trace_state, "v=1");
  events.clear();
  ASSERT_TRUE(ParseNotification("traced-trigger:1:a7:garbage0:", events));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].task_id, "a");
  EXPECT_FALSE(events[0].caller.valid()) << "a context that does not parse leaves it untraced";
  for (const std::string bad :
       {"traced-trigger:1:a", "traced-trigger:1:a2:xy", "traced-trigger:"}) {
    events.clear();
    EXPECT_FALSE(ParseNotification(bad, events)) << bad;
    EXPECT_TRUE(events.empty()) << bad;
  }
}

TEST(PgNotificationsTest, ParsesTheReleasesAndClaimsOfABatchByLength) {
  std::vector<StoreEvent> events;
  ASSERT_TRUE(ParseNotification("releases:1:a3:b:c3:x\ny6:\xc3\xa9t\xc3\xa9:", events));
  ASSERT_EQ(events.size(), 4u);
  for (const StoreEvent& event : events) EXPECT_EQ(event.kind, StoreEvent::Kind::kRelease);
  EXPECT_EQ(events[0].task_id, "a");
  EXPECT_EQ(events[1].task_id, "b:c");
  EXPECT_EQ(events[2].task_id, "x\ny");
  EXPECT_EQ(events[3].task_id, "\xc3\xa9t\xc3\xa9:");
  events.clear();
  ASSERT_TRUE(ParseNotification("claims:3:a:b2:t13:x\ny3:t:2", events));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, StoreEvent::Kind::kClaim);
  EXPECT_EQ(events[0].task_id, "a:b");
  EXPECT_EQ(events[0].ticket, "t1");
  EXPECT_EQ(events[1].task_id, "x\ny");
  EXPECT_EQ(events[1].ticket, "t:2");
  for (const std::string bad : {"releases:2:a", "releases:x:a", "releases::a", "releases:1a",
                                "claims:1:a", "claims:1:a5:t"}) {
    events.clear();
    EXPECT_FALSE(ParseNotification(bad, events)) << bad;
    EXPECT_TRUE(events.empty()) << bad;
  }
}

std::string Squeeze(const std::string& sql) {
  return std::regex_replace(std::regex_replace(sql, std::regex("\\s+"), " "), std::regex("^ | $"),
                            "");
}

// The SQL commands of a pgbench script: everything but comments and meta-commands, split at ';'
// and at `\gset` (which ends a command in its place).
std::vector<std::string> PgbenchCommands(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::string text;
  while (std::getline(file, line)) {
    if (line.rfind("\\gset", 0) == 0) text += ";\n";
    if (line.rfind("--", 0) == 0 || line.rfind("\\", 0) == 0) continue;
    text += line + "\n";
  }
  std::vector<std::string> commands;
  std::stringstream stream(text);
  std::string command;
  while (std::getline(stream, command, ';')) {
    if (!Squeeze(command).empty()) commands.push_back(Squeeze(command));
  }
  return commands;
}

// Replaces pgbench variables (and the literal NULLs pgbench cannot bind) with the store's
// parameter numbers.
std::string AsParameters(std::string sql,
                         const std::vector<std::pair<std::string, std::string>>& mapping) {
  for (const auto& [from, to] : mapping) {
    for (size_t at = sql.find(from); at != std::string::npos; at = sql.find(from, at + to.size())) {
      sql.replace(at, from.size(), to);
    }
  }
  return sql;
}

TEST(PgbenchScriptTest, RunsTheStoresOwnClaimAndReleaseStatements) {
  const std::vector<std::string> commands =
      PgbenchCommands(STAGEHAND_SOURCE_DIR "/bench/pgbench/claim_release.sql");
  ASSERT_EQ(commands.size(), 2u);
  const pg_sql::Statements& statements = pg_sql::TaskStatements();
  EXPECT_EQ(AsParameters(commands[0], {{":id::", "$1::"},
                                       {":ticket::", "$2::"},
                                       {":timeout_ms::", "$3::"},
                                       {":lease_ms::", "$4::"}}),
            Squeeze(statements.claim.sql));
  EXPECT_EQ(AsParameters(commands[1], {{":id::", "$1::"},
                                       {":ticket::", "$2::"},
                                       {":plan_kind::", "$3::"},
                                       {":seconds::", "$4::"},
                                       {"NULL::timestamptz", "$5::timestamptz"},
                                       {"NULL::text", "$6::text"},
                                       {":channel::", "$7::"},
                                       {":event::", "$8::"},
                                       {":marked::", "$9::"},
                                       {":cancelled::", "$10::"}}),
            Squeeze(statements.release.sql));
}

TEST(PgbenchScriptTest, RunsTheStoresOwnBatchedClaimAndReleaseStatements) {
  const std::vector<std::string> commands =
      PgbenchCommands(STAGEHAND_SOURCE_DIR "/bench/pgbench/claim_release_many.sql");
  ASSERT_EQ(commands.size(), 3u) << "the arrays' set-up, the claim and the release";
  const pg_sql::Statements& statements = pg_sql::TaskStatements();
  EXPECT_EQ(AsParameters(commands[1], {{":ids::", "$1::"},
                                       {":tickets::", "$2::"},
                                       {":timeouts::", "$3::"},
                                       {":lease_ms::", "$4::"},
                                       {":expected::", "$5::"},
                                       {":channel::", "$6::"}}),
            Squeeze(statements.claim_many.sql));
  EXPECT_EQ(AsParameters(commands[2], {{":ids::", "$1::"},
                                       {":tickets::", "$2::"},
                                       {":next_kinds::", "$3::"},
                                       {":next_seconds::", "$4::"},
                                       {":next_instants::", "$5::"},
                                       {":errors::", "$6::"},
                                       {":marked_tickets::", "$7::"},
                                       {":cancelled::", "$8::"},
                                       {":channel::", "$9::"}}),
            Squeeze(statements.release_many.sql));
}

}  // namespace
}  // namespace stagehand::store_internal
