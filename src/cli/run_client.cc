#include "cli/run_client.h"

#include <fmt/format.h>

#include <algorithm>

#include "stagehand/cli/cli.h"

namespace stagehand::cli {

std::string TaskRunsPath(std::string_view plugin_id, std::string_view task_id, int limit,
                         const std::optional<std::string>& before) {
  std::string path = "/api/" + EncodePathSegment(plugin_id) + "/.stagehand/v1/tasks/" +
                     EncodePathSegment(task_id) + "/runs?limit=" + std::to_string(limit);
  if (before) {
    path += "&before=" + EncodePathSegment(*before);
  }
  return path;
}

std::string RunPath(std::string_view plugin_id, std::string_view run_id) {
  return "/api/" + EncodePathSegment(plugin_id) + "/.stagehand/v1/runs/" +
         EncodePathSegment(run_id);
}

Fetched<std::string> FetchBody(const RestClient& client, const std::string& path,
                               std::string_view action, std::string_view plugin_id) {
  Fetched<std::string> fetched;
  Result<RestReply> reply = client.Get(path);
  if (!reply.ok()) {
    fetched.failure = DescribeUnreachable(reply.status());
    return fetched;
  }
  if (reply->status < 200 || reply->status > 299) {
    fetched.failure = DescribeHttpFailure(
        *reply, action, fmt::format("no plugin '{}' at {}", plugin_id, client.url().ToString()),
        client.url(), client.has_token());
    return fetched;
  }
  fetched.value = std::move(reply->body);
  return fetched;
}

Fetched<RunPage> FetchRunPage(const RestClient& client, std::string_view plugin_id,
                              std::string_view task_id, int limit,
                              const std::optional<std::string>& before) {
  const std::string what = fmt::format("the runs of {}/{}", plugin_id, task_id);
  Fetched<RunPage> fetched;
  Fetched<std::string> body = FetchBody(client, TaskRunsPath(plugin_id, task_id, limit, before),
                                        "cannot list " + what, plugin_id);
  if (!body.value) {
    fetched.failure = std::move(body.failure);
    return fetched;
  }
  Result<RunPage> page = ParseRunPage(*body.value, what);
  if (!page.ok()) {
    fetched.failure = {kExitFailure, page.status().message()};
    return fetched;
  }
  fetched.value = std::move(*page);
  return fetched;
}

Fetched<RunDetail> FetchRun(const RestClient& client, std::string_view plugin_id,
                            std::string_view run_id) {
  const std::string what = fmt::format("run {} of plugin '{}'", run_id, plugin_id);
  Fetched<RunDetail> fetched;
  Fetched<std::string> body =
      FetchBody(client, RunPath(plugin_id, run_id), "cannot read " + what, plugin_id);
  if (!body.value) {
    fetched.failure = std::move(body.failure);
    return fetched;
  }
  Result<RunDetail> detail = ParseRunDetail(*body.value, what);
  if (!detail.ok()) {
    fetched.failure = {kExitFailure, detail.status().message()};
    return fetched;
  }
  fetched.value = std::move(*detail);
  return fetched;
}

void PrintOutput(const Context& context, const OutputFollower::Step& step) {
  if (!step.note.empty()) {
    context.out.flush();
    context.err << "stagehand: " << step.note << '\n';
    context.err.flush();
  }
  if (!step.bytes.empty()) {
    context.out << step.bytes;
    context.out.flush();
  }
}

Fetched<RunDetail> FollowRun(const RestClient& client, const Context& context,
                             std::string_view plugin_id, const RunDetail& first,
                             MonoTime deadline) {
  Fetched<RunDetail> fetched;
  RunDetail detail = first;
  OutputFollower follower;
  bool seen_live = false;
  bool said_elsewhere = false;
  while (true) {
    const bool ended = HasEnded(detail.run.outcome);
    if (detail.live || ended) {
      seen_live = seen_live || detail.live;
      PrintOutput(context, follower.Next(detail));
    } else if (!seen_live && !said_elsewhere) {
      // Once seen live, a run that is not is one that has just ended and is being recorded.
      context.err << fmt::format(
          "Run {} is running on {} (pid {}), not on the daemon at {}; its output is shown when "
          "it ends.\n",
          detail.run.run_id, detail.run.host.empty() ? "another host" : detail.run.host,
          detail.run.pid, client.url().ToString());
      context.err.flush();
      said_elsewhere = true;
    }
    if (ended) {
      fetched.value = std::move(detail);
      return fetched;
    }
    const MonoTime now = context.clock.MonoNow();
    if (now >= deadline) {
      fetched.failure = {kExitStillRunning, "run " + detail.run.run_id + " is still running"};
      return fetched;
    }
    const auto pause = std::min<std::chrono::nanoseconds>(kRunPollInterval, deadline - now);
    if (!context.clock.SleepFor(pause, context.stop)) {
      fetched.failure = {kExitFailure, "interrupted while following run " + detail.run.run_id};
      return fetched;
    }
    Fetched<RunDetail> next = FetchRun(client, plugin_id, detail.run.run_id);
    if (!next.value) {
      return next;
    }
    detail = std::move(*next.value);
  }
}

}  // namespace stagehand::cli
