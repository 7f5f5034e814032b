// How the SQL statements spell the stagehand forms of a ticket (RowTicket) where they must
// recognise one in the database: a WHERE clause, a mark stripped or a pause read in SQL. Every
// statement that spells one of these as a literal static_asserts it against these constants, and
// tests/unit/store/row_ticket_test.cc checks them against RowTicket's encoding. Code other than
// SQL text decodes tickets with RowTicket instead.
#pragma once

#include <string_view>

namespace stagehand::store_internal::ticket_sql {

// What RowTicket::Encode writes before a run ticket marked by a cancel.
inline constexpr std::string_view kCancelRequested = "cancel:";
// What it writes before an operator's pause.
inline constexpr std::string_view kPaused = "paused:";
// What it writes before a run ticket with a pending pause (after a cancel's mark, if any).
inline constexpr std::string_view kPausePending = "pausing:";

}  // namespace stagehand::store_internal::ticket_sql
