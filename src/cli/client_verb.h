// What the client verbs (tasks, trigger, cancel, runs, logs) share: the --url, --token and --config
// flags, building the REST client from them, and turning an answer that is not a success into one
// line and a distinct exit code (see the kExit* codes in stagehand/cli/cli.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command.h"
#include "cli/rest_client.h"
#include "stagehand/base/status.h"

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11's namespace
class App;
}  // namespace CLI

namespace stagehand::cli {

// The flags every client verb takes. A value type; filled by the parser.
struct ClientOptions {
  std::optional<std::string> url;
  std::optional<std::string> token;
  std::vector<std::string> config_files;
};

// The text put into each client verb's --help about the flags, the defaults and the exit codes.
extern const char* const kClientHelpFooter;

// Adds --url, --token and --config to `command`, storing into `options` (which must outlive the
// parse).
void AddClientOptions(CLI::App& command, ClientOptions& options);

// A failed client verb: the exit code and the one line to print after "stagehand: ". A value type.
struct ClientFailure {
  int exit_code = 1;
  std::string message;
};

// A client, or why there is none. A value type.
struct ClientOrFailure {
  std::optional<RestClient> client;
  ClientFailure failure;
};

// Returns the client for `options`: the URL from --url, else from the --config files'
// backend.listen, else http://127.0.0.1:7007; the token from --token, else STAGEHAND_TOKEN (an
// empty value means none). Fails with kExitUsage for a bad --url and kExitConfig (one line per
// problem) for bad --config files.
ClientOrFailure MakeClient(const ClientOptions& options, const Context& context);

// Returns the exit code for an HTTP status that is not 2xx: kExitNotFound (404), kExitConflict
// (409), kExitUnauthenticated (401, 403), kExitNotOffered (501), kExitServerError (other 5xx),
// else kExitFailure.
int ExitCodeForHttpStatus(int status);

// Returns the failure for a non-2xx `reply` to the request described by `action` ("cannot trigger
// jobs/report"). The message is one line: the action, then the server's error message (from
// Backstage's `{"error":{"name","message"}}` body) or, for a 404 without one, `not_found_hint`.
// A 501's message (what the daemon does not offer and how to turn it on) is given as it is.
// `had_token` selects the advice for a 401.
ClientFailure DescribeHttpFailure(const RestReply& reply, std::string_view action,
                                  std::string_view not_found_hint, const ServerUrl& url,
                                  bool had_token);

// Returns the failure for a request that got no answer (RestClient's kUnavailable status).
ClientFailure DescribeUnreachable(const Status& status);

// The arguments of `trigger`, `cancel`, `pause` and `resume`. A value type; filled by the parser.
struct TaskActionOptions {
  ClientOptions client;
  std::string plugin_id;
  std::string task_id;
};

// Adds the PLUGIN and TASK arguments and the client flags to `command`.
void AddTaskActionArguments(CLI::App& command, TaskActionOptions& options);

// Checks the PLUGIN and TASK ids of `options`: nullopt when both are valid, else the usage
// error's exit code, with one line on context.err.
std::optional<int> RejectInvalidIds(const TaskActionOptions& options, const Context& context);

// The REST APIs a task action goes to, under /api/<plugin>/.
inline constexpr std::string_view kBackstageTasksApi = ".backstage/scheduler/v1/tasks";
inline constexpr std::string_view kStagehandTasksApi = ".stagehand/v1/tasks";

// Sends POST /api/<plugin>/<api>/<task>/<verb> (both ids percent-encoded) with `json_body` and an
// idempotency key of its own, and sends it again with that key, up to 4 times over about 4 s,
// while it gets no answer after sending or a 503 (a database failing over): it is applied at most
// once. Returns nullopt on a 2xx answer, else the failure ("cannot trigger jobs/report: ...").
std::optional<ClientFailure> PostTaskAction(const RestClient& client, std::string_view verb,
                                            const std::string& plugin_id,
                                            const std::string& task_id,
                                            std::string_view api = kBackstageTasksApi,
                                            std::string_view json_body = {});

// Validates the ids, sends PostTaskAction and prints "<done> <plugin>/<task>" on success (done is
// "Triggered", "Cancelled", ...). Returns kExitOk or the failure's exit code, with one line on
// context.err.
int RunTaskAction(std::string_view verb, std::string_view done, const TaskActionOptions& options,
                  const Context& context, std::string_view api = kBackstageTasksApi,
                  std::string_view json_body = {});

// Writes "stagehand: <message>" to context.err and returns the failure's exit code.
int Report(const Context& context, const ClientFailure& failure);

}  // namespace stagehand::cli
