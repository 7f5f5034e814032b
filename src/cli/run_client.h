// The client side of the daemon's run history: fetching a task's runs and one run over REST, and
// following a run until it ends while its new output is printed. Shared by `runs`, `logs`,
// `trigger --wait` and `tasks`.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "cli/client_verb.h"
#include "cli/command.h"
#include "cli/rest_client.h"
#include "cli/run_view.h"

namespace stagehand::cli {

// How often a followed run, or the history of a task waiting for its run, is asked for again.
inline constexpr std::chrono::milliseconds kRunPollInterval{500};

// A value fetched from the daemon, or why there is none. A value type.
template <typename T>
struct Fetched {
  std::optional<T> value;
  ClientFailure failure;  // meaningful when `value` is empty
};

// Returns `GET /api/<plugin>/.stagehand/v1/tasks/<task>/runs?limit=<limit>[&before=<cursor>]`,
// the ids and the cursor percent-encoded.
std::string TaskRunsPath(std::string_view plugin_id, std::string_view task_id, int limit,
                         const std::optional<std::string>& before);

// Returns `GET /api/<plugin>/.stagehand/v1/runs/<runId>`, the ids percent-encoded.
std::string RunPath(std::string_view plugin_id, std::string_view run_id);

// Fetches `path`: the body of a 2xx answer, else the failure of `action` (see DescribeHttpFailure;
// a 404 without a message says "no plugin '<plugin>' at <url>").
Fetched<std::string> FetchBody(const RestClient& client, const std::string& path,
                               std::string_view action, std::string_view plugin_id);

// Fetches a page of the runs of `plugin_id`/`task_id`, newest first.
Fetched<RunPage> FetchRunPage(const RestClient& client, std::string_view plugin_id,
                              std::string_view task_id, int limit,
                              const std::optional<std::string>& before = std::nullopt);

// Fetches run `run_id` of plugin `plugin_id`, with its output.
Fetched<RunDetail> FetchRun(const RestClient& client, std::string_view plugin_id,
                            std::string_view run_id);

// Prints the output of run `first.run` of plugin `plugin_id` to context.out as it comes, asking
// for the run every
// kRunPollInterval on context.clock, and returns its last answer once it has ended. A run still
// going on another host than the one answering (live false) is said so once on context.err, and
// its output is printed when it ends. Notes about output that was not kept go to context.err.
// Fails with kExitStillRunning when `deadline` (monotonic, on context.clock) passes first, with
// kExitFailure when context.stop is requested, and as FetchRun does.
Fetched<RunDetail> FollowRun(const RestClient& client, const Context& context,
                             std::string_view plugin_id, const RunDetail& first, MonoTime deadline);

// Prints what `step` holds: its bytes on context.out, its note on context.err.
void PrintOutput(const Context& context, const OutputFollower::Step& step);

}  // namespace stagehand::cli
