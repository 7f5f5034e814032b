#include "cli/client_verb.h"

#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>

#include "stagehand/backend/app_config.h"
#include "stagehand/backend/backend.h"
#include "stagehand/base/text.h"
#include "stagehand/base/uuid.h"
#include "stagehand/cli/cli.h"
#include "stagehand/config/config.h"
#include "stagehand/service/scheduler.h"

namespace stagehand::cli {
namespace {

constexpr std::string_view kDefaultUrl = "http://127.0.0.1:7007";
// The pauses before each repeat of a task action that got no answer or a 503: about 4 s in all,
// as long as a database failover usually takes.
constexpr std::array<std::chrono::milliseconds, 4> kTaskActionRetryPauses = {
    std::chrono::milliseconds(250), std::chrono::milliseconds(500), std::chrono::milliseconds(1000),
    std::chrono::milliseconds(2000)};

// The name and message of Backstage's error body `{"error":{"name","message"}}`; empty when the
// body is not one.
struct ErrorBody {
  std::string name;
  std::string message;
};

ErrorBody ParseErrorBody(std::string_view body) {
  ErrorBody parsed;
  nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return parsed;
  }
  auto error = json.find("error");
  if (error == json.end() || !error->is_object()) {
    return parsed;
  }
  if (auto name = error->find("name"); name != error->end() && name->is_string()) {
    parsed.name = name->get<std::string>();
  }
  if (auto message = error->find("message"); message != error->end() && message->is_string()) {
    parsed.message = OneLine(message->get<std::string>());
  }
  return parsed;
}

// Returns "404 NotFoundError: Task x does not exist", "404" or "500 Error" from what is known.
std::string StatusAndError(int status, const ErrorBody& error) {
  std::string text = std::to_string(status);
  if (!error.name.empty()) {
    text += " " + error.name;
  }
  if (!error.message.empty()) {
    text += ": " + error.message;
  }
  return text;
}

}  // namespace

const char* const kClientHelpFooter =
    "The daemon is found at --url, else at backend.listen of the --config files, else at "
    "$STAGEHAND_URL, else at http://127.0.0.1:7007. The token is --token, else $STAGEHAND_TOKEN; "
    "it is sent as "
    "'Authorization: Bearer <token>'.\n"
    "Exit codes: 0 done, 1 other failure, 2 bad usage, 3 not found (404), 4 conflict (409), "
    "5 not authenticated (401/403), 6 daemon error (5xx), 7 daemon unreachable, 8 not offered by "
    "the daemon (501: e.g. its run history is disabled), 78 invalid --config.";

void AddClientOptions(CLI::App& command, ClientOptions& options) {
  command.add_option("--url", options.url,
                     "Base URL of the daemon, e.g. http://127.0.0.1:7007 (default: backend.listen "
                     "of --config, else $STAGEHAND_URL, else http://127.0.0.1:7007)");
  command.add_option("--token", options.token,
                     "Bearer token for the daemon's API (default: $STAGEHAND_TOKEN)");
  command
      .add_option("-c,--config", options.config_files,
                  "App-config YAML file(s) to take the daemon's address from; repeat to merge")
      ->allow_extra_args(false);
}

ClientOrFailure MakeClient(const ClientOptions& options, const Context& context) {
  ClientOrFailure made;
  std::string url_text(kDefaultUrl);
  if (options.url) {
    url_text = *options.url;
  } else if (!options.config_files.empty()) {
    std::string problems;
    Result<Config> root = LoadAppConfig(options.config_files, ProcessEnvironment());
    if (!root.ok()) {
      problems = root.status().message();
    } else if (Result<BackendConfig> backend = ReadBackendConfig(*root); !backend.ok()) {
      problems = backend.status().message();
    } else {
      url_text = "http://" + ConnectableHost(backend->listen_host) + ":" +
                 std::to_string(backend->listen_port);
    }
    if (!problems.empty()) {
      made.failure = {kExitConfig, problems};
      return made;
    }
  } else if (std::optional<std::string> from_environment =
                 LookupEnvironment(context, "STAGEHAND_URL");
             from_environment && !from_environment->empty()) {
    url_text = *from_environment;
  }
  Result<ServerUrl> url = ParseServerUrl(url_text);
  if (!url.ok()) {
    made.failure = {kExitUsage, url.status().message()};
    return made;
  }
  std::optional<std::string> token = options.token;
  if (!token) {
    token = LookupEnvironment(context, "STAGEHAND_TOKEN");
  }
  if (token && token->empty()) {
    token.reset();
  }
  made.client.emplace(std::move(*url), std::move(token));
  return made;
}

int ExitCodeForHttpStatus(int status) {
  switch (status) {
    case 401:
    case 403:
      return kExitUnauthenticated;
    case 404:
      return kExitNotFound;
    case 409:
      return kExitConflict;
    case 501:
      return kExitNotOffered;
    default:
      return status >= 500 && status <= 599 ? kExitServerError : kExitFailure;
  }
}

ClientFailure DescribeHttpFailure(const RestReply& reply, std::string_view action,
                                  std::string_view not_found_hint, const ServerUrl& url,
                                  bool had_token) {
  const ErrorBody error = ParseErrorBody(reply.body);
  ClientFailure failure{ExitCodeForHttpStatus(reply.status), std::string(action) + ": "};
  switch (reply.status) {
    case 401:
      failure.message += had_token ? "the daemon at " + url.ToString() +
                                         " did not accept the token (401); check --token or "
                                         "STAGEHAND_TOKEN"
                                   : "the daemon at " + url.ToString() +
                                         " needs a token (401); pass --token or set "
                                         "STAGEHAND_TOKEN";
      break;
    case 403:
      failure.message += "not allowed (" + StatusAndError(reply.status, error) + ")";
      break;
    case 404:
      failure.message +=
          error.message.empty() ? std::string(not_found_hint) + " (404)" : error.message + " (404)";
      break;
    case 409:
      failure.message += error.message.empty() ? "conflict (409)" : error.message + " (409)";
      break;
    case 501:
      failure.message +=
          error.message.empty() ? "the daemon does not offer this (501)" : error.message;
      break;
    default:
      if (reply.status >= 500 && reply.status <= 599) {
        failure.message += "the daemon failed (" + StatusAndError(reply.status, error) + ")";
      } else {
        failure.message += "unexpected answer (" + StatusAndError(reply.status, error) + ")";
      }
      break;
  }
  return failure;
}

ClientFailure DescribeUnreachable(const Status& status) {
  return {kExitUnreachable,
          OneLine(status.message()) + " (is 'stagehand serve' running? see --url)"};
}

int Report(const Context& context, const ClientFailure& failure) {
  std::string_view rest = failure.message;
  while (true) {
    std::size_t end = rest.find('\n');
    context.err << "stagehand: " << rest.substr(0, end) << '\n';
    if (end == std::string_view::npos) {
      break;
    }
    rest.remove_prefix(end + 1);
  }
  context.err.flush();
  return failure.exit_code;
}

}  // namespace stagehand::cli

namespace stagehand::cli {

void AddTaskActionArguments(CLI::App& command, TaskActionOptions& options) {
  command.add_option("plugin", options.plugin_id, "Plugin id, e.g. jobs")->required();
  command.add_option("task", options.task_id, "Task id, e.g. report")->required();
  AddClientOptions(command, options.client);
}

std::optional<ClientFailure> PostTaskAction(const RestClient& client, std::string_view verb,
                                            const std::string& plugin_id,
                                            const std::string& task_id, std::string_view api,
                                            std::string_view json_body) {
  const std::string path = "/api/" + EncodePathSegment(plugin_id) + "/" + std::string(api) + "/" +
                           EncodePathSegment(task_id) + "/" + std::string(verb);
  // One key for every attempt: a repeat of a request whose answer was lost, or that met a
  // database failing over (503), is applied at most once, and answered as the first was.
  const std::string key = NewUuidV4();
  Result<RestReply> reply = client.Post(path, json_body, key);
  for (const std::chrono::milliseconds pause : kTaskActionRetryPauses) {
    const bool unanswered = !reply.ok() && reply.status().code() == StatusCode::kDeadlineExceeded;
    if (!unanswered && !(reply.ok() && reply->status == 503)) break;
    std::this_thread::sleep_for(pause);
    reply = client.Post(path, json_body, key);
  }
  if (!reply.ok()) {
    return DescribeUnreachable(reply.status());
  }
  if (reply->status < 200 || reply->status > 299) {
    return DescribeHttpFailure(*reply,
                               "cannot " + std::string(verb) + " " + plugin_id + "/" + task_id,
                               "no plugin '" + plugin_id + "' at " + client.url().ToString(),
                               client.url(), client.has_token());
  }
  return std::nullopt;
}

std::optional<int> RejectInvalidIds(const TaskActionOptions& options, const Context& context) {
  if (Status valid = ValidatePluginId(options.plugin_id); !valid.ok()) {
    return UsageError(context, valid.message());
  }
  if (Status valid = ValidateTaskId(options.task_id); !valid.ok()) {
    return UsageError(context, valid.message());
  }
  return std::nullopt;
}

int RunTaskAction(std::string_view verb, std::string_view done, const TaskActionOptions& options,
                  const Context& context, std::string_view api, std::string_view json_body) {
  if (std::optional<int> rejected = RejectInvalidIds(options, context)) return *rejected;
  ClientOrFailure made = MakeClient(options.client, context);
  if (!made.client) {
    return Report(context, made.failure);
  }
  if (std::optional<ClientFailure> failure =
          PostTaskAction(*made.client, verb, options.plugin_id, options.task_id, api, json_body)) {
    return Report(context, *failure);
  }
  context.out << done << ' ' << options.plugin_id << '/' << options.task_id << '\n';
  context.out.flush();
  return kExitOk;
}

}  // namespace stagehand::cli
