#include "stagehand/backend/app_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

EnvironmentLookup FakeEnvironment(const std::map<std::string, std::string>& variables) {
  return [variables](const std::string& name) -> std::optional<std::string> {
    auto it = variables.find(name);
    if (it == variables.end()) {
      return std::nullopt;
    }
    return it->second;
  };
}

// Splits a multi-line error message into its lines.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      end = text.size();
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

class AppConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "stagehand_app_config_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& contents) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << contents;
    return path;
  }

  Result<Config> Load(const std::vector<std::string>& paths,
                      const std::map<std::string, std::string>& env = {}) {
    return LoadAppConfig(paths, FakeEnvironment(env));
  }

  std::string LoadError(const std::vector<std::string>& paths,
                        const std::map<std::string, std::string>& env = {}) {
    Result<Config> config = Load(paths, env);
    EXPECT_THAT(config, Not(IsOk()));
    if (config.ok()) {
      return "";
    }
    EXPECT_THAT(config, StatusIs(StatusCode::kInvalidArgument));
    return config.status().message();
  }

  // Loads `yaml` (plus a SQLite database block unless it has its own) and reads the backend.
  Result<BackendConfig> ReadBackend(const std::string& yaml,
                                    const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> paths = {
        Write("base.yaml",
              "backend:\n  database:\n    client: better-sqlite3\n    connection: ':memory:'\n"),
        Write("app-config.yaml", yaml)};
    Result<Config> config = Load(paths, env);
    EXPECT_THAT(config, IsOk());
    if (!config.ok()) {
      return config.status();
    }
    return ReadBackendConfig(*config);
  }

  BackendConfig ReadBackendOk(const std::string& yaml,
                              const std::map<std::string, std::string>& env = {}) {
    Result<BackendConfig> config = ReadBackend(yaml, env);
    EXPECT_THAT(config, IsOk());
    return config.ok() ? *config : BackendConfig{};
  }

  std::string ReadBackendError(const std::string& yaml) {
    Result<BackendConfig> config = ReadBackend(yaml);
    EXPECT_THAT(config, Not(IsOk()));
    if (config.ok()) {
      return "";
    }
    EXPECT_THAT(config, StatusIs(StatusCode::kInvalidArgument));
    return config.status().message();
  }

  std::string File(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

// --- LoadAppConfig -------------------------------------------------------------------------------

TEST_F(AppConfigTest, NoFilesGiveAnEmptyConfig) {
  Result<Config> config = Load({});
  ASSERT_THAT(config, IsOk());
  EXPECT_TRUE(config->Keys().empty());
}

TEST_F(AppConfigTest, MergesFilesInOrderLaterWinning) {
  const std::string a = Write("a.yaml",
                              "app:\n  title: A\n  keep: 1\n  list: [1, 2]\n"
                              "only: a\n");
  const std::string b = Write("b.yaml", "app:\n  title: B\n  list: [3]\n");
  const std::string c = Write("c.yaml", "app:\n  title: C\n  extra: true\n");
  Result<Config> config = Load({a, b, c});
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(*config->GetString("app.title"), "C");
  EXPECT_EQ(*config->GetNumber("app.keep"), 1);
  EXPECT_TRUE(*config->GetBoolean("app.extra"));
  EXPECT_EQ(*config->GetString("only"), "a");
  const auto& list = std::get<ConfigNode::Array>(config->Node("app.list")->value);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(std::get<double>(list[0]->value), 3);
  EXPECT_EQ(config->Context("app.title"), c);
  EXPECT_EQ(config->Context("app.keep"), a);

  Result<Config> reversed = Load({c, b, a});
  ASSERT_THAT(reversed, IsOk());
  EXPECT_EQ(*reversed->GetString("app.title"), "A");
}

TEST_F(AppConfigTest, SubstitutesInEveryStringValueButNotInKeys) {
  const std::string path = Write("app-config.yaml",
                                 "top: ${A}\n"
                                 "nested:\n  deeper:\n    value: 'pre-${B}-post'\n"
                                 "list:\n  - ${A}\n  - [x, '${B}']\n  - {inner: '${A}${B}'}\n"
                                 "'${A}': key-untouched\n"
                                 "number: 5\n");
  Result<Config> config = Load({path}, {{"A", "alpha"}, {"B", "beta"}});
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(*config->GetString("top"), "alpha");
  EXPECT_EQ(*config->GetString("nested.deeper.value"), "pre-beta-post");
  const auto& list = std::get<ConfigNode::Array>(config->Node("list")->value);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(std::get<std::string>(list[0]->value), "alpha");
  const auto& pair = std::get<ConfigNode::Array>(list[1]->value);
  EXPECT_EQ(std::get<std::string>(pair[1]->value), "beta");
  const auto& object = std::get<ConfigNode::Object>(list[2]->value);
  EXPECT_EQ(std::get<std::string>(object[0].second->value), "alphabeta");
  EXPECT_EQ(*config->GetString("${A}"), "key-untouched");
  EXPECT_EQ(*config->GetNumber("number"), 5);
}

TEST_F(AppConfigTest, SubstitutedNumbersStillReadAsNumbers) {
  const std::string path = Write("app-config.yaml", "backend:\n  listen:\n    port: ${PORT}\n");
  Result<Config> config = Load({path}, {{"PORT", "7010"}});
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(*config->GetNumber("backend.listen.port"), 7010);
}

TEST_F(AppConfigTest, DoubleDollarIsALiteralReference) {
  const std::string path =
      Write("app-config.yaml", "a: '$${HOME}'\nb: 'x $${A} ${A}'\nc: '$$ and $ alone'\n");
  Result<Config> config = Load({path}, {{"A", "1"}});
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(*config->GetString("a"), "${HOME}");
  EXPECT_EQ(*config->GetString("b"), "x ${A} 1");
  EXPECT_EQ(*config->GetString("c"), "$$ and $ alone");
}

TEST_F(AppConfigTest, ValuesFromTheEnvironmentAreNotScannedAgain) {
  const std::string path = Write("app-config.yaml", "a: ${A}\n");
  Result<Config> config = Load({path}, {{"A", "${B}"}});
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(*config->GetString("a"), "${B}");
}

TEST_F(AppConfigTest, SpacesInsideAReferenceAreIgnored) {
  const std::string path = Write("app-config.yaml", "a: '${ A }'\n");
  Result<Config> config = Load({path}, {{"A", "v"}});
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(*config->GetString("a"), "v");
}

TEST_F(AppConfigTest, MissingVariableNamesItTheKeyTheFileAndTheLine) {
  const std::string path = Write("app-config.yaml",
                                 "backend:\n  database:\n    client: pg\n    connection:\n"
                                 "      password: ${NOPE}\n");
  EXPECT_EQ(LoadError({path}),
            "Environment variable 'NOPE' is not set; it is used by config key "
            "'backend.database.connection.password' in '" +
                path + "' at line 5");
}

TEST_F(AppConfigTest, MissingVariableInAnArrayNamesTheIndex) {
  const std::string path = Write("app-config.yaml", "list:\n  - ok\n  - {x: '${NOPE}'}\n");
  EXPECT_THAT(LoadError({path}), HasSubstr("config key 'list[1].x' in '" + path + "' at line 3"));
}

TEST_F(AppConfigTest, UnterminatedReferenceIsAnError) {
  const std::string path = Write("app-config.yaml", "a:\n  b: '${HOST'\n");
  EXPECT_EQ(LoadError({path}, {{"HOST", "h"}}),
            "Unterminated '${' in config value for key 'a.b' in '" + path + "' at line 2");
}

TEST_F(AppConfigTest, MalformedYamlNamesTheFile) {
  const std::string path = Write("broken.yaml", "a: [1, 2\nb: c\n");
  const std::string error = LoadError({path});
  EXPECT_THAT(error, HasSubstr("Invalid YAML in '" + path + "'"));
  EXPECT_THAT(error, HasSubstr("line"));
}

TEST_F(AppConfigTest, UnreadableFileNamesIt) {
  EXPECT_THAT(LoadError({File("missing.yaml")}), HasSubstr(File("missing.yaml")));
}

TEST_F(AppConfigTest, EveryProblemOfEveryFileIsReported) {
  const std::string one = Write("one.yaml", "a: ${X}\nb:\n  c: ${Y}\n");
  const std::string two = Write("two.yaml", "a: [\n");
  const std::string three = Write("three.yaml", "d: '${X}-${Z}'\n");
  const std::vector<std::string> lines = Lines(LoadError({one, two, three, File("nope.yaml")}));
  ASSERT_EQ(lines.size(), 6u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0], "Environment variable 'X' is not set; it is used by config key 'a' in '" +
                          one + "' at line 1");
  EXPECT_EQ(lines[1], "Environment variable 'Y' is not set; it is used by config key 'b.c' in '" +
                          one + "' at line 3");
  EXPECT_THAT(lines[2], HasSubstr(two));
  EXPECT_EQ(lines[3], "Environment variable 'X' is not set; it is used by config key 'd' in '" +
                          three + "' at line 1");
  EXPECT_EQ(lines[4], "Environment variable 'Z' is not set; it is used by config key 'd' in '" +
                          three + "' at line 1");
  EXPECT_THAT(lines[5], HasSubstr(File("nope.yaml")));
}

TEST(SubstituteEnvironmentTest, ReplacesEveryReference) {
  Result<std::string> value = SubstituteEnvironment("${A}-${ B }-$${C}", "k", "f",
                                                    FakeEnvironment({{"A", "1"}, {"B", "2"}}));
  ASSERT_THAT(value, IsOk());
  EXPECT_EQ(*value, "1-2-${C}");
}

TEST(SubstituteEnvironmentTest, WithoutALineNamesOnlyTheFile) {
  Result<std::string> value = SubstituteEnvironment("${A}", "k", "f", FakeEnvironment({}));
  ASSERT_THAT(value, Not(IsOk()));
  EXPECT_EQ(value.status().message(),
            "Environment variable 'A' is not set; it is used by config key 'k' in 'f'");
}

TEST(SubstituteEnvironmentTest, ProcessEnvironmentReadsTheRealEnvironment) {
  ::setenv("STAGEHAND_APP_CONFIG_TEST_VARIABLE", "here", 1);  // NOLINT(concurrency-mt-unsafe)
  EXPECT_EQ(ProcessEnvironment()("STAGEHAND_APP_CONFIG_TEST_VARIABLE"), "here");
  ::unsetenv("STAGEHAND_APP_CONFIG_TEST_VARIABLE");  // NOLINT(concurrency-mt-unsafe)
  EXPECT_EQ(ProcessEnvironment()("STAGEHAND_APP_CONFIG_TEST_VARIABLE"), std::nullopt);
}

// The database block gets its `${VAR}`s from the loader (they used to be substituted per value
// when the database block was read).
TEST_F(AppConfigTest, DatabaseValuesAreSubstituted) {
  const std::string path =
      Write("app-config.yaml",
            "backend:\n  database:\n    client: pg\n    connection:\n      host: ${PGHOST}\n"
            "      port: ${PGPORT}\n      password: 'x${SECRET}y'\n      user: '$${literal}'\n");
  Result<Config> config = Load({path}, {{"PGHOST", "db"}, {"PGPORT", "7000"}, {"SECRET", "s"}});
  ASSERT_THAT(config, IsOk());
  Result<DatabaseConfig> database = ReadDatabaseConfig(*config);
  ASSERT_THAT(database, IsOk());
  EXPECT_EQ(database->connection.at("host"), "db");
  EXPECT_EQ(database->connection.at("port"), "7000");
  EXPECT_EQ(database->connection.at("password"), "xsy");
  EXPECT_EQ(database->connection.at("user"), "${literal}");
}

TEST_F(AppConfigTest, DatabaseConnectionStringIsSubstituted) {
  const std::string path =
      Write("app-config.yaml",
            "backend:\n  database:\n    client: pg\n    connection: ${DATABASE_URL}\n");
  Result<Config> config = Load({path}, {{"DATABASE_URL", "postgresql://a@b:1/c"}});
  ASSERT_THAT(config, IsOk());
  Result<DatabaseConfig> database = ReadDatabaseConfig(*config);
  ASSERT_THAT(database, IsOk());
  EXPECT_EQ(database->connection.at("host"), "b");
  EXPECT_EQ(database->connection.at("user"), "a");
}

// --- ReadBackendConfig ---------------------------------------------------------------------------

TEST_F(AppConfigTest, BackendDefaults) {
  BackendConfig config = ReadBackendOk("");
  EXPECT_EQ(config.listen_host, "0.0.0.0");
  EXPECT_EQ(config.listen_port, 7007);
  EXPECT_EQ(config.max_request_body_bytes, 1024u * 1024u);
  EXPECT_EQ(config.request_timeout, 10s);
  EXPECT_TRUE(config.auth.static_tokens.empty());
  EXPECT_FALSE(config.auth.default_policy_disabled);
  EXPECT_EQ(config.database.client, DatabaseClient::kSqlite);
  EXPECT_EQ(config.database.connection.at("filename"), ":memory:");
  const EngineOptions defaults;
  EXPECT_EQ(config.engine.lease, defaults.lease);
  EXPECT_EQ(config.engine.poll_interval, defaults.poll_interval);
  EXPECT_EQ(config.engine.max_concurrency, defaults.max_concurrency);
  EXPECT_EQ(config.engine.shutdown_grace, defaults.shutdown_grace);
}

TEST_F(AppConfigTest, ListenObject) {
  BackendConfig config =
      ReadBackendOk("backend:\n  listen:\n    host: 127.0.0.1\n    port: 7100\n");
  EXPECT_EQ(config.listen_host, "127.0.0.1");
  EXPECT_EQ(config.listen_port, 7100);

  config = ReadBackendOk("backend:\n  listen:\n    port: '${PORT}'\n", {{"PORT", "0"}});
  EXPECT_EQ(config.listen_host, "0.0.0.0");
  EXPECT_EQ(config.listen_port, 0);

  config = ReadBackendOk("backend:\n  listen:\n    host: ''\n    port: 80\n");
  EXPECT_EQ(config.listen_host, "0.0.0.0");
  EXPECT_EQ(config.listen_port, 80);
}

TEST_F(AppConfigTest, ListenStringAndNumberForms) {
  BackendConfig config = ReadBackendOk("backend:\n  listen: ':7008'\n");
  EXPECT_EQ(config.listen_host, "0.0.0.0");
  EXPECT_EQ(config.listen_port, 7008);

  config = ReadBackendOk("backend:\n  listen: 'localhost:9000'\n");
  EXPECT_EQ(config.listen_host, "localhost");
  EXPECT_EQ(config.listen_port, 9000);

  config = ReadBackendOk("backend:\n  listen: '9001'\n");
  EXPECT_EQ(config.listen_host, "0.0.0.0");
  EXPECT_EQ(config.listen_port, 9001);

  config = ReadBackendOk("backend:\n  listen: 9002\n");
  EXPECT_EQ(config.listen_host, "0.0.0.0");
  EXPECT_EQ(config.listen_port, 9002);
}

TEST_F(AppConfigTest, BadListenValuesNameTheKeyAndTheFile) {
  const std::string file = File("app-config.yaml");
  for (const std::string& listen :
       std::vector<std::string>{"'a:b:c'", "'host:'", "abc", "'host:70000'", "'::1:80'"}) {
    const std::string error = ReadBackendError("backend:\n  listen: " + listen + "\n");
    EXPECT_THAT(error, HasSubstr("Invalid config value for key 'backend.listen' in '" + file +
                                 "' at line 2: Unable to parse listen address "))
        << listen;
    EXPECT_THAT(error, HasSubstr(", expected <port> or <host>:<port>")) << listen;
  }
  EXPECT_EQ(ReadBackendError("backend:\n  listen: 70000\n"),
            "Invalid config value for key 'backend.listen' in '" + file +
                "' at line 2: not a port number (0-65535)");
  for (const std::string& port : std::vector<std::string>{"-1", "1.5", "65536"}) {
    EXPECT_EQ(ReadBackendError("backend:\n  listen:\n    port: " + port + "\n"),
              "Invalid config value for key 'backend.listen.port' in '" + file +
                  "' at line 3: not a port number (0-65535)")
        << port;
  }
  EXPECT_EQ(
      ReadBackendError("backend:\n  listen:\n    port: http\n"),
      "Unable to convert config value for key 'backend.listen.port' in '" + file + "' to a number");
  EXPECT_EQ(ReadBackendError("backend:\n  listen:\n    host: 5\n"),
            "Invalid type in config for key 'backend.listen.host' in '" + file +
                "', got number, wanted string");
  EXPECT_EQ(ReadBackendError("backend:\n  listen: [1]\n"),
            "Invalid type in config for key 'backend.listen' in '" + file +
                "', got array, wanted object");
}

TEST_F(AppConfigTest, ServerLimits) {
  BackendConfig config = ReadBackendOk(
      "stagehand:\n  server:\n    maxRequestBodySize: 2048\n    requestTimeout: 30s\n");
  EXPECT_EQ(config.max_request_body_bytes, 2048u);
  EXPECT_EQ(config.request_timeout, 30s);

  config = ReadBackendOk(
      "stagehand:\n  server:\n    maxRequestBodySize: 1mb\n    requestTimeout: {seconds: 5}\n");
  EXPECT_EQ(config.max_request_body_bytes, 1024u * 1024u);
  EXPECT_EQ(config.request_timeout, 5s);

  config = ReadBackendOk(
      "stagehand:\n  server:\n    maxRequestBodySize: 512 KB\n    requestTimeout: PT1M\n");
  EXPECT_EQ(config.max_request_body_bytes, 512u * 1024u);
  EXPECT_EQ(config.request_timeout, 1min);

  config = ReadBackendOk("stagehand:\n  server:\n    maxRequestBodySize: '1.5kb'\n");
  EXPECT_EQ(config.max_request_body_bytes, 1536u);
  config = ReadBackendOk("stagehand:\n  server:\n    maxRequestBodySize: '100'\n");
  EXPECT_EQ(config.max_request_body_bytes, 100u);
}

TEST_F(AppConfigTest, ConnectionLimits) {
  BackendConfig config = ReadBackendOk("stagehand: {}\n");
  EXPECT_EQ(config.headers_timeout, 10s);
  EXPECT_EQ(config.keep_alive_timeout, 5s);
  EXPECT_EQ(config.max_connections, 4096u);
  EXPECT_EQ(config.max_connections_per_client, 256u);
  config = ReadBackendOk(
      "stagehand:\n  server:\n    headersTimeout: 2s\n    keepAliveTimeout: 1m\n"
      "    maxConnections: 20000\n    maxConnectionsPerClient: 8\n");
  EXPECT_EQ(config.headers_timeout, 2s);
  EXPECT_EQ(config.keep_alive_timeout, 1min);
  EXPECT_EQ(config.max_connections, 20000u);
  EXPECT_EQ(config.max_connections_per_client, 8u);
}

TEST_F(AppConfigTest, PerTaskMetricSeriesCanBeTurnedOff) {
  EXPECT_TRUE(ReadBackendOk("stagehand: {}\n").metrics_per_task_series);
  EXPECT_FALSE(
      ReadBackendOk("stagehand:\n  metrics:\n    perTaskSeries: false\n").metrics_per_task_series);
  EXPECT_THAT(ReadBackendError("stagehand:\n  metrics:\n    perTaskSeries: maybe\n"),
              HasSubstr("stagehand.metrics.perTaskSeries"));
  EXPECT_THAT(ReadBackendError("stagehand:\n  metrics:\n    perTask: false\n"),
              HasSubstr("perTaskSeries"));
}

TEST_F(AppConfigTest, BadConnectionLimitsNameTheKey) {
  const std::string file = File("app-config.yaml");
  for (const std::string& count : std::vector<std::string>{"0", "-1", "1.5", "1000001", "lots"}) {
    EXPECT_THAT(ReadBackendError("stagehand:\n  server:\n    maxConnections: " + count + "\n"),
                HasSubstr("'stagehand.server.maxConnections' in '" + file + "'"))
        << count;
  }
  EXPECT_EQ(ReadBackendError("stagehand:\n  server:\n    maxConnectionsPerClient: 0\n"),
            "Invalid config value for key 'stagehand.server.maxConnectionsPerClient' in '" + file +
                "' at line 3: expected an integer from 1 to 1000000");
  EXPECT_EQ(ReadBackendError("stagehand:\n  server:\n    headersTimeout: 0s\n"),
            "Invalid config value for key 'stagehand.server.headersTimeout' in '" + file +
                "' at line 3: must be at least 1 millisecond, got 0 ms");
  EXPECT_THAT(ReadBackendError("stagehand:\n  server:\n    keepAliveTime: 1s\n"),
              HasSubstr("keepAliveTimeout"));
}

TEST_F(AppConfigTest, BadServerLimitsNameTheKeyAndTheFile) {
  const std::string file = File("app-config.yaml");
  for (const std::string& size :
       std::vector<std::string>{"0", "-5", "1.5", "1xb", "mb", "'1..5kb'", "true"}) {
    EXPECT_THAT(
        ReadBackendError("stagehand:\n  server:\n    maxRequestBodySize: " + size + "\n"),
        HasSubstr("Invalid config value for key 'stagehand.server.maxRequestBodySize' in '" + file +
                  "' at line 3: expected a positive number of bytes"))
        << size;
  }
  EXPECT_EQ(ReadBackendError("stagehand:\n  server:\n    requestTimeout: 0s\n"),
            "Invalid config value for key 'stagehand.server.requestTimeout' in '" + file +
                "' at line 3: must be at least 1 millisecond, got 0 ms");
  EXPECT_THAT(ReadBackendError("stagehand:\n  server:\n    requestTimeout: soon\n"),
              HasSubstr("Invalid config value for key 'stagehand.server.requestTimeout' in '" +
                        file + "' at line 3: Invalid duration 'soon'"));
}

TEST_F(AppConfigTest, StaticAccessTokens) {
  BackendConfig config = ReadBackendOk(
      "backend:\n  auth:\n    externalAccess:\n"
      "      - type: static\n        options: {token: '${TOKEN_A}', subject: cli-operator}\n"
      "      - type: static\n        options: {token: second-token, subject: ci}\n",
      {{"TOKEN_A", "first-token"}});
  ASSERT_EQ(config.auth.static_tokens.size(), 2u);
  EXPECT_EQ(config.auth.static_tokens[0].token, "first-token");
  EXPECT_EQ(config.auth.static_tokens[0].subject, "cli-operator");
  EXPECT_EQ(config.auth.static_tokens[1].token, "second-token");
  EXPECT_EQ(config.auth.static_tokens[1].subject, "ci");
  EXPECT_FALSE(config.auth.default_policy_disabled);
}

TEST_F(AppConfigTest, DisablingTheDefaultAuthPolicy) {
  EXPECT_TRUE(ReadBackendOk("backend:\n  auth:\n    dangerouslyDisableDefaultAuthPolicy: true\n")
                  .auth.default_policy_disabled);
  EXPECT_FALSE(ReadBackendOk("backend:\n  auth:\n    dangerouslyDisableDefaultAuthPolicy: false\n")
                   .auth.default_policy_disabled);
  EXPECT_EQ(ReadBackendError("backend:\n  auth:\n    dangerouslyDisableDefaultAuthPolicy: maybe\n"),
            "Unable to convert config value for key "
            "'backend.auth.dangerouslyDisableDefaultAuthPolicy' in '" +
                File("app-config.yaml") + "' to a boolean");
}

TEST_F(AppConfigTest, BadAccessEntriesAreAllReportedWithoutTheToken) {
  const std::string file = File("app-config.yaml");
  const std::string error = ReadBackendError(
      "backend:\n  auth:\n    externalAccess:\n"
      "      - type: jwks\n        options: {url: 'http://x'}\n"                      // [0]
      "      - type: static\n        options: {subject: a}\n"                         // [1]
      "      - type: static\n        options: {token: 'has space1', subject: a}\n"    // [2]
      "      - type: static\n        options: {token: short77, subject: a}\n"         // [3]
      "      - type: static\n        options: {token: goodtoken1, subject: 'a b'}\n"  // [4]
      "      - type: static\n        options: {token: goodtoken2, subject: a}\n"      // [5]
      "      - type: static\n        options: {token: goodtoken2, subject: b}\n"      // [6]
      "      - type: static\n        options: {token: goodtoken3, subject: c}\n"
      "        accessRestrictions: [{plugin: jobs}]\n"        // [7]
      "      - options: {token: goodtoken4, subject: d}\n");  // [8]
  EXPECT_THAT(
      Lines(error),
      ElementsAre(
          "Invalid config value for key 'backend.auth.externalAccess[0].type' in '" + file +
              "' at line 4: unsupported access method 'jwks'; only type static is "
              "supported",
          "Missing required config value at 'backend.auth.externalAccess[1].options.token' "
          "in '" +
              file + "'",
          "Invalid config value for key 'backend.auth.externalAccess[2].options.token' in '" +
              file + "' at line 9: Illegal token, must be a set of non-space characters",
          "Invalid config value for key 'backend.auth.externalAccess[3].options.token' in '" +
              file + "' at line 11: Illegal token, must be at least 8 characters length",
          "Invalid config value for key 'backend.auth.externalAccess[4].options.subject' "
          "in '" +
              file +
              "' at line 13: Illegal subject, must be a set of non-space "
              "characters",
          "Invalid config value for key 'backend.auth.externalAccess[6].options.token' in '" +
              file + "' at line 17: Static externalAccess token was declared more than once",
          "Invalid config value for key 'backend.auth.externalAccess[7].accessRestrictions' "
          "in '" +
              file + "' at line 20: accessRestrictions are not supported",
          "Missing required config value at 'backend.auth.externalAccess[8].type' in '" + file +
              "'"));
  for (const std::string& token :
       std::vector<std::string>{"has space1", "short77", "goodtoken2", "goodtoken3"}) {
    EXPECT_THAT(error, Not(HasSubstr(token)));
  }
}

TEST_F(AppConfigTest, ExternalAccessMustBeAnArrayOfObjects) {
  EXPECT_EQ(ReadBackendError("backend:\n  auth:\n    externalAccess: {type: static}\n"),
            "Invalid type in config for key 'backend.auth.externalAccess' in '" +
                File("app-config.yaml") + "', got object, wanted object-array");
}

TEST_F(AppConfigTest, SchedulerOptions) {
  BackendConfig config = ReadBackendOk(
      "stagehand:\n  scheduler:\n    lease: 30s\n    pollInterval: {seconds: 2}\n"
      "    maxConcurrency: 4\n    shutdownGrace: PT5S\n    maxPollInterval: 2s\n"
      "    maxRunningTasks: 12\n");
  EXPECT_EQ(config.engine.lease, 30s);
  EXPECT_EQ(config.max_running_tasks, 12);
  EXPECT_EQ(config.engine.poll_interval, 2s);
  EXPECT_EQ(config.engine.max_poll_interval, 2s);
  EXPECT_EQ(config.engine.max_concurrency, 4);
  EXPECT_EQ(config.engine.shutdown_grace, 5s);

  config = ReadBackendOk(
      "stagehand:\n  scheduler:\n    lease: 1s\n    pollInterval: 1ms\n    maxConcurrency: "
      "'10000'\n"
      "    shutdownGrace: 0s\n");
  EXPECT_EQ(config.engine.lease, 1s);
  EXPECT_EQ(config.engine.poll_interval, 1ms);
  EXPECT_EQ(config.engine.max_concurrency, 10000);
  EXPECT_EQ(config.engine.shutdown_grace, 0ms);
  EXPECT_EQ(config.engine.max_poll_interval, 60s) << "the default";
  EXPECT_EQ(config.max_running_tasks, 256) << "the default";
  EXPECT_EQ(config.idempotency_key_retention, 24h) << "the default";

  config = ReadBackendOk("stagehand:\n  scheduler:\n    idempotencyKeyRetention: 2h\n");
  EXPECT_EQ(config.idempotency_key_retention, 2h);
  EXPECT_EQ(ReadBackendError("stagehand:\n  scheduler:\n    idempotencyKeyRetention: 10ms\n"),
            "Invalid config value for key 'stagehand.scheduler.idempotencyKeyRetention' in '" +
                File("app-config.yaml") + "' at line 3: must be at least 1 second, got 10 ms");
}

TEST_F(AppConfigTest, HistoryOptions) {
  BackendConfig config = ReadBackendOk("stagehand:\n  scheduler: {}\n");
  EXPECT_TRUE(config.history_enabled);
  EXPECT_EQ(config.history, RunHistoryLimits{}) << "100 runs, 30 days, 64 KiB of output";

  config = ReadBackendOk(
      "stagehand:\n  history:\n    enabled: false\n    maxRunsPerTask: 7\n    maxAge: 2d\n"
      "    maxOutputBytes: 1kb\n");
  EXPECT_FALSE(config.history_enabled);
  EXPECT_EQ(config.history.max_runs_per_task, 7);
  EXPECT_EQ(config.history.max_age, 48h);
  EXPECT_EQ(config.history.max_output_bytes, 1024u);

  const std::string file = File("app-config.yaml");
  EXPECT_THAT(
      Lines(ReadBackendError("stagehand:\n  history:\n    maxRunsPerTask: 0\n"
                             "    maxAge: 10m\n    maxOutputBytes: none\n"
                             "    enable: true\n")),
      ElementsAre("Invalid config value for key 'stagehand.history.enable' in '" + file +
                      "': unknown key 'enable'; did you mean 'enabled'?",
                  "Invalid config value for key 'stagehand.history.maxRunsPerTask' in '" + file +
                      "' at line 3: expected an integer from 1 to 100000",
                  "Invalid config value for key 'stagehand.history.maxAge' in '" + file +
                      "' at line 4: must be at least 1 hour, got 600000 ms",
                  "Invalid config value for key 'stagehand.history.maxOutputBytes' in '" + file +
                      "' at line 5: expected a positive number of bytes or a size such "
                      "as '512kb' or '1mb' (units b, kb, mb, gb, tb)"));
}

TEST_F(AppConfigTest, BadSchedulerOptionsAreAllReported) {
  const std::string file = File("app-config.yaml");
  const std::string error = ReadBackendError(
      "stagehand:\n  scheduler:\n    lease: 500ms\n    pollInterval: 0s\n"
      "    maxConcurrency: 0\n    shutdownGrace: {minutes: -1}\n");
  EXPECT_THAT(Lines(error),
              ElementsAre("Invalid config value for key 'stagehand.scheduler.lease' in '" + file +
                              "' at line 3: must be at least 1 second, got 500 ms",
                          "Invalid config value for key 'stagehand.scheduler.pollInterval' in '" +
                              file + "' at line 4: must be at least 1 millisecond, got 0 ms",
                          "Invalid config value for key 'stagehand.scheduler.shutdownGrace' in '" +
                              file + "' at line 6: must be at least 0 milliseconds, got -60000 ms",
                          "Invalid config value for key 'stagehand.scheduler.maxConcurrency' in '" +
                              file + "' at line 5: expected an integer from 1 to 10000"));
  for (const std::string& value : std::vector<std::string>{"10001", "2.5", "-3"}) {
    EXPECT_THAT(ReadBackendError("stagehand:\n  scheduler:\n    maxConcurrency: " + value + "\n"),
                HasSubstr("expected an integer from 1 to 10000"))
        << value;
  }
  EXPECT_EQ(ReadBackendError("stagehand:\n  scheduler:\n    maxRunningTasks: 0\n"),
            "Invalid config value for key 'stagehand.scheduler.maxRunningTasks' in '" + file +
                "' at line 3: expected an integer from 1 to 10000");
  EXPECT_EQ(ReadBackendError("stagehand:\n  scheduler:\n    maxPollInterval: 0s\n"),
            "Invalid config value for key 'stagehand.scheduler.maxPollInterval' in '" + file +
                "' at line 3: must be at least 1 millisecond, got 0 ms");
  EXPECT_EQ(ReadBackendError("stagehand:\n  scheduler:\n    maxConcurrency: many\n"),
            "Unable to convert config value for key 'stagehand.scheduler.maxConcurrency' in '" +
                file + "' to a number");
  EXPECT_THAT(ReadBackendError("stagehand:\n  scheduler:\n    lease: {weeks: x}\n"),
              HasSubstr("Invalid config value for key 'stagehand.scheduler.lease' in '" + file +
                        "' at line 3: "));
}

TEST_F(AppConfigTest, EveryBackendProblemIsReportedWithItsFile) {
  const std::string first = Write("first.yaml",
                                  "backend:\n  listen: 'x:y'\n  database:\n    client: oracledb\n"
                                  "    connection: ':memory:'\n");
  const std::string second = Write("second.yaml",
                                   "backend:\n  auth:\n    externalAccess:\n      - type: legacy\n"
                                   "stagehand:\n  scheduler:\n    maxConcurrency: 0\n");
  Result<Config> config = Load({first, second});
  ASSERT_THAT(config, IsOk());
  Result<BackendConfig> backend = ReadBackendConfig(*config);
  ASSERT_THAT(backend, Not(IsOk()));
  const std::vector<std::string> lines = Lines(backend.status().message());
  ASSERT_EQ(lines.size(), 4u) << backend.status().message();
  EXPECT_THAT(lines[0], HasSubstr("'backend.listen' in '" + first + "' at line 2"));
  EXPECT_THAT(lines[1], HasSubstr("'backend.auth.externalAccess[0].type' in '" + second + "'"));
  EXPECT_THAT(lines[2], HasSubstr("'backend.database.client' in '" + first + "'"));
  EXPECT_THAT(lines[3], HasSubstr("'stagehand.scheduler.maxConcurrency' in '" + second + "'"));
}

TEST_F(AppConfigTest, DatabaseBlockIsRequired) {
  const std::string path = Write("only.yaml", "backend:\n  listen: 7007\n");
  Result<Config> config = Load({path});
  ASSERT_THAT(config, IsOk());
  Result<BackendConfig> backend = ReadBackendConfig(*config);
  ASSERT_THAT(backend, Not(IsOk()));
  EXPECT_EQ(backend.status().message(),
            "Missing required config value at 'backend.database' in '" + path + "'");
}

TEST_F(AppConfigTest, BackendThatIsNotAnObject) {
  const std::string path = Write("odd.yaml", "backend: 5\nstagehand: [1]\n");
  Result<Config> config = Load({path});
  ASSERT_THAT(config, IsOk());
  Result<BackendConfig> backend = ReadBackendConfig(*config);
  ASSERT_THAT(backend, Not(IsOk()));
  EXPECT_THAT(backend.status().message(),
              HasSubstr("Invalid type in config for key 'backend' in '" + path +
                        "', got number, wanted object"));
  EXPECT_THAT(backend.status().message(), HasSubstr("'stagehand'"));
}

// Issue 13: misspelt `stagehand` sections were ignored and the daemon ran with defaults.
TEST_F(AppConfigTest, MisspeltStagehandSectionsNameTheKeyMeant) {
  const std::string file = File("app-config.yaml");
  EXPECT_THAT(
      Lines(ReadBackendError("stagehand:\n  plugin: {}\n  schedular: {lease: 5s}\n  Server: {}\n")),
      ElementsAre("Invalid config value for key 'stagehand.plugin' in '" + file +
                      "': unknown key 'plugin'; did you mean 'plugins'?",
                  "Invalid config value for key 'stagehand.schedular' in '" + file +
                      "': unknown key 'schedular'; did you mean 'scheduler'?",
                  "Invalid config value for key 'stagehand.Server' in '" + file +
                      "': unknown key 'Server'; did you mean 'server'?"));
  EXPECT_EQ(ReadBackendError("stagehand:\n  workers: 4\n"),
            "Invalid config value for key 'stagehand.workers' in '" + file +
                "': unknown key 'workers'; expected plugins, server, scheduler, metrics, database, "
                "history, tracing, dashboard");
}

TEST_F(AppConfigTest, TheDashboardIsOnAtTheRootUnlessConfiguredOtherwise) {
  Result<BackendConfig> plain = ReadBackend("");
  ASSERT_THAT(plain, IsOk());
  EXPECT_TRUE(plain->dashboard_enabled);
  EXPECT_EQ(plain->dashboard_path, "/");

  Result<BackendConfig> moved =
      ReadBackend("stagehand:\n  dashboard: { enabled: false, path: /ops/scheduler }\n");
  ASSERT_THAT(moved, IsOk());
  EXPECT_FALSE(moved->dashboard_enabled);
  EXPECT_EQ(moved->dashboard_path, "/ops/scheduler/");
}

TEST_F(AppConfigTest, TheDashboardTraceUrlIsReadAndCheckedNamingTheKey) {
  Result<BackendConfig> plain = ReadBackend("");
  ASSERT_THAT(plain, IsOk());
  EXPECT_EQ(plain->dashboard_trace_url, "");

  Result<BackendConfig> linked =
      ReadBackend("stagehand:\n  dashboard:\n    traceUrl: http://jaeger:16686/trace/{traceId}\n");
  ASSERT_THAT(linked, IsOk());
  EXPECT_EQ(linked->dashboard_trace_url, "http://jaeger:16686/trace/{traceId}");

  const std::string file = File("app-config.yaml");
  EXPECT_EQ(ReadBackendError("stagehand:\n  dashboard:\n    traceUrl: http://jaeger/trace/\n"),
            "Invalid config value for key 'stagehand.dashboard.traceUrl' in '" + file +
                "' at line 3: it must hold {traceId}, where the page puts a run's trace id");
  EXPECT_EQ(ReadBackendError("stagehand:\n  dashboard:\n    traceUrl: ftp://jaeger/{traceId}\n"),
            "Invalid config value for key 'stagehand.dashboard.traceUrl' in '" + file +
                "' at line 3: it must be an http or https URL, not ftp");
}

TEST_F(AppConfigTest, ABadDashboardPathNamesTheKey) {
  const std::string file = File("app-config.yaml");
  EXPECT_EQ(ReadBackendError("stagehand:\n  dashboard: { path: /api/ui }\n"),
            "Invalid config value for key 'stagehand.dashboard.path' in '" + file +
                "' at line 2: dashboard path '/api/ui' is under the daemon's own route /api: "
                "choose another");
  EXPECT_EQ(ReadBackendError("stagehand:\n  dashboard: { pth: /ui }\n"),
            "Invalid config value for key 'stagehand.dashboard.pth' in '" + file +
                "': unknown key 'pth'; did you mean 'path'?");
}

TEST_F(AppConfigTest, UnknownServerAndSchedulerKeysNameTheKeyMeant) {
  const std::string file = File("app-config.yaml");
  EXPECT_THAT(
      Lines(ReadBackendError("stagehand:\n  server:\n    requestTimout: 5s\n"
                             "  scheduler:\n    lease: {secnds: 30}\n"
                             "    maxConcurency: 4\n    threads: 4\n")),
      ElementsAre("Invalid config value for key 'stagehand.server.requestTimout' in '" + file +
                      "': unknown key 'requestTimout'; did you mean "
                      "'requestTimeout'?",
                  "Invalid config value for key 'stagehand.scheduler.maxConcurency' in '" + file +
                      "': unknown key 'maxConcurency'; did you mean "
                      "'maxConcurrency'?",
                  "Invalid config value for key 'stagehand.scheduler.threads' in '" + file +
                      "': unknown key 'threads'; expected lease, pollInterval, "
                      "maxPollInterval, shutdownGrace, maxConcurrency, maxRunningTasks, "
                      "idempotencyKeyRetention",
                  "Invalid config value for key 'stagehand.scheduler.lease.secnds' in '" + file +
                      "': unknown key 'secnds'; did you mean 'seconds'?"));
}

TEST_F(AppConfigTest, IgnoredBackendKeysAreWarningsNotProblems) {
  const std::string path =
      Write("app.yaml",
            "backend:\n  baseUrl: http://localhost:7007\n  cors: {origin: '*'}\n  databse: {}\n"
            "  listen: {port: 7007, hots: x}\n"
            "  auth: {keys: [{secret: s}], dangerouslyDisableDefaultAuthPolicy: true}\n"
            "  database:\n    client: better-sqlite3\n    connection: ':memory:'\n"
            "    ensureExists: false\n    knexConfig: {debug: true}\n"
            "    plugin:\n      jobs: {skipMigrations: true, role: owner, clinet: pg}\n");
  Result<Config> config = Load({path});
  ASSERT_THAT(config, IsOk());
  EXPECT_THAT(ReadBackendConfig(*config), IsOk());
  EXPECT_THAT(BackendConfigWarnings(*config),
              ElementsAre("Ignoring config key 'backend.baseUrl' in '" + path +
                              "': a Backstage setting that stagehand does not use",
                          "Ignoring config key 'backend.cors' in '" + path +
                              "': a Backstage setting that stagehand does not use",
                          "Ignoring config key 'backend.databse' in '" + path +
                              "': unknown key 'databse'; did you mean 'database'?",
                          "Ignoring config key 'backend.listen.hots' in '" + path +
                              "': unknown key 'hots'; did you mean 'host'?",
                          "Ignoring config key 'backend.auth.keys' in '" + path +
                              "': a Backstage setting that stagehand does not use",
                          "Ignoring config key 'backend.database.ensureExists' in '" + path +
                              "': a Backstage setting that stagehand does not use",
                          "Ignoring config key 'backend.database.knexConfig.debug' in '" + path +
                              "': a Backstage setting that stagehand does not use",
                          "Ignoring config key 'backend.database.plugin.jobs.role' in '" + path +
                              "': a Backstage setting that stagehand does not use",
                          "Ignoring config key 'backend.database.plugin.jobs.clinet' in '" + path +
                              "': unknown key 'clinet'; did you mean 'client'?"));
}

TEST_F(AppConfigTest, UsedBackendKeysGiveNoWarnings) {
  const std::string path = Write(
      "app.yaml",
      "backend:\n  listen: {host: 127.0.0.1, port: 7007}\n"
      "  auth:\n    dangerouslyDisableDefaultAuthPolicy: false\n"
      "    externalAccess: [{type: static, options: {token: abcdefgh, subject: ci}}]\n"
      "  database:\n    client: pg\n    connection: {host: db, port: 5432, user: u, password: p}\n"
      "    prefix: bs_\n    pluginDivisionMode: schema\n    skipMigrations: false\n"
      "    plugin:\n      jobs: {client: pg, connection: 'postgres://x/y', skipMigrations: true}\n"
      "stagehand:\n  server: {maxRequestBodySize: 1mb, requestTimeout: 5s}\n"
      "  scheduler: {lease: 10s}\n  plugins: {}\n");
  Result<Config> config = Load({path});
  ASSERT_THAT(config, IsOk());
  EXPECT_THAT(ReadBackendConfig(*config), IsOk());
  EXPECT_THAT(BackendConfigWarnings(*config), ::testing::IsEmpty());
  EXPECT_THAT(BackendConfigWarnings(Config::Empty()), ::testing::IsEmpty());
}

}  // namespace
}  // namespace stagehand
