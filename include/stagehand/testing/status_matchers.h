// GoogleMock matchers for Status and Result<T>, for stagehand's own tests and for plugin authors'.
// Header-only; a test that includes it links GoogleMock. A failed match prints the status.
//
//   using stagehand::testing::IsOk;
//   using stagehand::testing::StatusIs;
//   ASSERT_THAT(store.Load("job"), IsOk());
//   EXPECT_THAT(store.Load("gone"), StatusIs(StatusCode::kNotFound, "gone"));
//   EXPECT_THAT(Parse("5m"), IsOkAndHolds(std::chrono::minutes(5)));
//
// Inside `namespace stagehand`, `testing::` names stagehand::testing once this header is included:
// name GoogleTest's own namespace `::testing` there.
#pragma once

#include <gmock/gmock.h>

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "stagehand/base/status.h"

namespace stagehand {

// Prints a Result as its value or, when it holds none, as its status (GoogleTest's printers find
// this through argument-dependent lookup).
template <typename T>
void PrintTo(const Result<T>& result, std::ostream* out) {
  if (result.ok()) {
    *out << "value " << ::testing::PrintToString(*result);
  } else {
    *out << result.status();
  }
}

namespace testing {
namespace status_matchers_internal {

template <typename ResultType>
struct ResultValue;
template <typename T>
struct ResultValue<Result<T>> {
  using type = T;
};

class IsOkMatcher {
 public:
  template <typename StatusOrResult>
  bool MatchAndExplain(const StatusOrResult& actual, ::testing::MatchResultListener*) const {
    return ::stagehand::internal::StatusOf(actual).ok();
  }
  void DescribeTo(std::ostream* out) const { *out << "is OK"; }
  void DescribeNegationTo(std::ostream* out) const { *out << "is not OK"; }
};

class StatusIsMatcher {
 public:
  StatusIsMatcher(StatusCode code, std::string message_part)
      : code_(code), message_part_(std::move(message_part)) {}

  template <typename StatusOrResult>
  bool MatchAndExplain(const StatusOrResult& actual,
                       ::testing::MatchResultListener* listener) const {
    const Status& status = ::stagehand::internal::StatusOf(actual);
    if (status.code() != code_) {
      *listener << "whose status code is " << StatusCodeName(status.code());
      return false;
    }
    if (status.message().find(message_part_) == std::string::npos) {
      *listener << "whose message does not contain \"" << message_part_ << "\"";
      return false;
    }
    return true;
  }
  void DescribeTo(std::ostream* out) const {
    *out << "has status code " << StatusCodeName(code_);
    if (!message_part_.empty()) *out << " and a message that contains \"" << message_part_ << "\"";
  }
  void DescribeNegationTo(std::ostream* out) const {
    *out << "does not have status code " << StatusCodeName(code_);
    if (!message_part_.empty()) {
      *out << " or has a message that does not contain \"" << message_part_ << "\"";
    }
  }

 private:
  StatusCode code_;
  std::string message_part_;
};

template <typename ResultType>
class IsOkAndHoldsMatcherImpl : public ::testing::MatcherInterface<const ResultType&> {
 public:
  using Value = typename ResultValue<ResultType>::type;

  template <typename InnerMatcher>
  explicit IsOkAndHoldsMatcherImpl(InnerMatcher&& inner)
      : inner_(::testing::SafeMatcherCast<const Value&>(std::forward<InnerMatcher>(inner))) {}

  bool MatchAndExplain(const ResultType& actual,
                       ::testing::MatchResultListener* listener) const override {
    if (!actual.ok()) return false;
    return inner_.MatchAndExplain(*actual, listener);
  }
  void DescribeTo(std::ostream* out) const override {
    *out << "is OK and has a value that ";
    inner_.DescribeTo(out);
  }
  void DescribeNegationTo(std::ostream* out) const override {
    *out << "is not OK or has a value that ";
    inner_.DescribeNegationTo(out);
  }

 private:
  ::testing::Matcher<const Value&> inner_;
};

template <typename InnerMatcher>
class IsOkAndHoldsMatcher {
 public:
  explicit IsOkAndHoldsMatcher(InnerMatcher inner) : inner_(std::move(inner)) {}

  template <typename ResultType>
  operator ::testing::Matcher<ResultType>() const {  // NOLINT(google-explicit-constructor)
    using Bare = std::remove_cvref_t<ResultType>;
    return ::testing::Matcher<ResultType>(new IsOkAndHoldsMatcherImpl<Bare>(inner_));
  }

 private:
  InnerMatcher inner_;
};

}  // namespace status_matchers_internal

// Matches an OK Status, or a Result that holds a value.
inline ::testing::PolymorphicMatcher<status_matchers_internal::IsOkMatcher> IsOk() {
  return ::testing::MakePolymorphicMatcher(status_matchers_internal::IsOkMatcher());
}

// Matches a Status, or the status of a Result, whose code is `code` and whose message contains
// `message_part` (any message when it is empty).
inline ::testing::PolymorphicMatcher<status_matchers_internal::StatusIsMatcher> StatusIs(
    StatusCode code, std::string message_part = "") {
  return ::testing::MakePolymorphicMatcher(
      status_matchers_internal::StatusIsMatcher(code, std::move(message_part)));
}

// Matches a Result that holds a value matching `inner` (a matcher or a value to compare with).
template <typename InnerMatcher>
status_matchers_internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>> IsOkAndHolds(
    InnerMatcher&& inner) {
  return status_matchers_internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>>(
      std::forward<InnerMatcher>(inner));
}

}  // namespace testing
}  // namespace stagehand
