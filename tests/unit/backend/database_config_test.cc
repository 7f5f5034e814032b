#include "stagehand/backend/database_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "stagehand/config/config.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kFile[] = "app-config.yaml";

Result<DatabaseConfig> Read(const std::string& yaml) {
  Result<Config> config = Config::FromYaml(yaml, kFile);
  EXPECT_THAT(config, IsOk());
  return ReadDatabaseConfig(*config);
}

DatabaseConfig ReadOk(const std::string& yaml) {
  Result<DatabaseConfig> config = Read(yaml);
  EXPECT_THAT(config, IsOk());
  return config.ok() ? *config : DatabaseConfig{};
}

std::string ReadError(const std::string& yaml) {
  Result<DatabaseConfig> config = Read(yaml);
  EXPECT_THAT(config, Not(IsOk()));
  if (config.ok()) {
    return "";
  }
  EXPECT_THAT(config, StatusIs(StatusCode::kInvalidArgument));
  return config.status().message();
}

PluginDatabase Resolve(const DatabaseConfig& config, const std::string& plugin) {
  Result<PluginDatabase> database = ResolvePluginDatabase(config, plugin);
  EXPECT_THAT(database, IsOk());
  return database.ok() ? *database : PluginDatabase{};
}

TEST(DatabaseConfigTest, SqliteMemoryWithDefaults) {
  DatabaseConfig config =
      ReadOk("backend:\n  database:\n    client: better-sqlite3\n    connection: ':memory:'\n");
  EXPECT_EQ(config.client, DatabaseClient::kSqlite);
  EXPECT_EQ(config.client_name, "better-sqlite3");
  EXPECT_EQ(config.prefix, "backstage_plugin_");
  EXPECT_EQ(config.division_mode, PluginDivisionMode::kDatabase);
  EXPECT_FALSE(config.skip_migrations);
  EXPECT_TRUE(config.plugins.empty());
  EXPECT_EQ(config.context, kFile);
  PluginDatabase database = Resolve(config, "catalog");
  EXPECT_EQ(database.database, ":memory:");
  EXPECT_FALSE(database.skip_migrations);
}

TEST(DatabaseConfigTest, SqliteDirectoryGivesOneFilePerPlugin) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: sqlite3\n    connection:\n      directory: ./data\n");
  EXPECT_EQ(config.client, DatabaseClient::kSqlite);
  EXPECT_EQ(Resolve(config, "catalog").database, "./data/catalog.sqlite");
  EXPECT_EQ(Resolve(config, "search").database, "./data/search.sqlite");
}

TEST(DatabaseConfigTest, SqliteWithoutDirectoryUsesTheWorkingDirectory) {
  DatabaseConfig config =
      ReadOk("backend:\n  database:\n    client: better-sqlite3\n    connection: {}\n");
  EXPECT_EQ(Resolve(config, "catalog").database, "./catalog.sqlite");
}

TEST(DatabaseConfigTest, SqliteBaseFilenameIsRejected) {
  std::string error =
      ReadError("backend:\n  database:\n    client: better-sqlite3\n    connection: ./db.sqlite\n");
  EXPECT_THAT(error, HasSubstr("'backend.database.connection'"));
  EXPECT_THAT(error, HasSubstr(kFile));
}

TEST(DatabaseConfigTest, SqlitePluginFilenameAndDirectory) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: better-sqlite3\n    connection:\n"
      "      directory: /var/db\n    plugin:\n      catalog:\n        connection:\n"
      "          filename: cat.db\n      search:\n        connection: ':memory:'\n");
  EXPECT_EQ(Resolve(config, "catalog").database, "/var/db/cat.db");
  EXPECT_EQ(Resolve(config, "search").database, ":memory:");
  EXPECT_EQ(Resolve(config, "other").database, "/var/db/other.sqlite");
}

TEST(DatabaseConfigTest, PostgresObjectConnection) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: pg\n    connection:\n      host: db.local\n"
      "      port: 5433\n      user: backstage\n      password: secret\n      database: main\n"
      "      ssl: true\n");
  EXPECT_EQ(config.client, DatabaseClient::kPostgres);
  EXPECT_EQ(config.connection.at("host"), "db.local");
  EXPECT_EQ(config.connection.at("port"), "5433");
  EXPECT_EQ(config.connection.at("user"), "backstage");
  EXPECT_EQ(config.connection.at("password"), "secret");
  EXPECT_EQ(config.connection.at("dbname"), "main");
  EXPECT_EQ(config.connection.at("sslmode"), "require");

  PluginDatabase database = Resolve(config, "catalog");
  EXPECT_EQ(database.client, DatabaseClient::kPostgres);
  EXPECT_EQ(database.database, "backstage_plugin_catalog");
  EXPECT_TRUE(database.schema.empty());
  EXPECT_THAT(database.server_connection, HasSubstr("dbname='postgres'"));
  EXPECT_THAT(database.server_connection, HasSubstr("host='db.local'"));
  EXPECT_THAT(database.server_connection, HasSubstr("port='5433'"));
  EXPECT_THAT(database.server_connection, HasSubstr("password='secret'"));
}

TEST(DatabaseConfigTest, PostgresUrlConnection) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: pg\n"
      "    connection: postgresql://u:p%40ss@127.0.0.1:5432/postgres\n");
  EXPECT_EQ(config.connection.at("host"), "127.0.0.1");
  EXPECT_EQ(config.connection.at("user"), "u");
  EXPECT_EQ(config.connection.at("password"), "p@ss");
  EXPECT_EQ(config.connection.at("port"), "5432");
}

TEST(DatabaseConfigTest, PostgresKeywordConnectionString) {
  DatabaseConfig config =
      ReadOk("backend:\n  database:\n    client: pg\n    connection: host=h port=6000 user=x\n");
  EXPECT_EQ(config.connection.at("host"), "h");
  EXPECT_EQ(config.connection.at("port"), "6000");
}

TEST(DatabaseConfigTest, PostgresBadConnectionStringDoesNotEchoIt) {
  std::string error = ReadError(
      "backend:\n  database:\n    client: pg\n    connection: "
      "'postgresql://u:hunter2@h/db?bogus=1'\n");
  EXPECT_THAT(error, HasSubstr("'backend.database.connection'"));
  EXPECT_THAT(error, HasSubstr(kFile));
  EXPECT_THAT(error, ::testing::Not(HasSubstr("hunter2")));
}

TEST(DatabaseConfigTest, PrefixAndSchemaMode) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: pg\n    prefix: acme_\n    pluginDivisionMode: schema\n"
      "    connection:\n      host: h\n      database: shared\n");
  EXPECT_EQ(config.prefix, "acme_");
  EXPECT_EQ(config.division_mode, PluginDivisionMode::kSchema);
  PluginDatabase database = Resolve(config, "catalog");
  EXPECT_EQ(database.schema, "catalog");
  EXPECT_EQ(database.database, "shared");
  EXPECT_THAT(database.server_connection, HasSubstr("dbname='shared'"));
}

TEST(DatabaseConfigTest, PrefixInDatabaseModeIgnoresTheBaseDatabase) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: pg\n    prefix: acme_\n"
      "    connection:\n      host: h\n      database: shared\n");
  PluginDatabase database = Resolve(config, "catalog");
  EXPECT_EQ(database.database, "acme_catalog");
  EXPECT_THAT(database.server_connection, HasSubstr("dbname='postgres'"));
}

// Issue 14: PostgreSQL truncates identifiers at 63 bytes, so two long plugin ids could share a
// database.
TEST(DatabaseConfigTest, DatabaseNameLongerThanPostgresAllowsIsRejected) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: pg\n    prefix: a_rather_long_company_prefix_\n"
      "    connection:\n      host: h\n");
  const std::string fits(63 - config.prefix.size(), 'p');
  EXPECT_EQ(Resolve(config, fits).database.size(), 63u);
  Result<PluginDatabase> too_long = ResolvePluginDatabase(config, fits + "q");
  ASSERT_THAT(too_long, StatusIs(StatusCode::kInvalidArgument, "'" + config.prefix + fits + "q'"));
  EXPECT_THAT(too_long.status().message(), HasSubstr("64 bytes long; PostgreSQL's limit is 63"));
}

TEST(DatabaseConfigTest, SkipMigrationsGlobalAndPerPlugin) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: better-sqlite3\n    connection: ':memory:'\n"
      "    skipMigrations: true\n    plugin:\n      catalog:\n        skipMigrations: false\n"
      "      search: {}\n");
  EXPECT_TRUE(config.skip_migrations);
  EXPECT_FALSE(Resolve(config, "catalog").skip_migrations);
  EXPECT_TRUE(Resolve(config, "search").skip_migrations);
  EXPECT_TRUE(Resolve(config, "unlisted").skip_migrations);
}

TEST(DatabaseConfigTest, PluginConnectionMergesOverTheBaseWithTheSameClient) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: pg\n    connection:\n      host: h\n      user: u\n"
      "      password: p\n    plugin:\n      catalog:\n        connection:\n"
      "          host: other\n          database: catalogdb\n");
  PluginDatabase catalog = Resolve(config, "catalog");
  EXPECT_EQ(catalog.database, "catalogdb");
  EXPECT_THAT(catalog.server_connection, HasSubstr("host='other'"));
  EXPECT_THAT(catalog.server_connection, HasSubstr("user='u'"));
  EXPECT_THAT(catalog.server_connection, HasSubstr("password='p'"));
}

TEST(DatabaseConfigTest, PluginWithAnotherClientReplacesTheConnection) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: pg\n    connection:\n      host: h\n"
      "    plugin:\n      search:\n        client: better-sqlite3\n        connection:\n"
      "          directory: /tmp/s\n");
  ASSERT_EQ(config.plugins.count("search"), 1u);
  EXPECT_EQ(config.plugins.at("search").client, DatabaseClient::kSqlite);
  PluginDatabase search = Resolve(config, "search");
  EXPECT_EQ(search.client, DatabaseClient::kSqlite);
  EXPECT_EQ(search.database, "/tmp/s/search.sqlite");
  EXPECT_EQ(Resolve(config, "catalog").client, DatabaseClient::kPostgres);
}

// Substitution happens once, when the files are loaded (LoadAppConfig); reading the database block
// must not substitute a second time (a value from the environment may itself contain "${").
TEST(DatabaseConfigTest, LeavesEnvironmentReferencesToTheLoader) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: pg\n    connection:\n      host: ${PGHOST}\n"
      "      password: 'x$${y'\n");
  EXPECT_EQ(config.connection.at("host"), "${PGHOST}");
  EXPECT_EQ(config.connection.at("password"), "x$${y");
}

TEST(DatabaseConfigTest, MissingDatabaseBlock) {
  std::string error = ReadError("backend:\n  baseUrl: http://x\n");
  EXPECT_THAT(error, HasSubstr("'backend.database'"));
  EXPECT_THAT(error, HasSubstr(kFile));
}

TEST(DatabaseConfigTest, MissingClientAndConnectionAreBothReported) {
  std::string error = ReadError("backend:\n  database:\n    prefix: x_\n");
  EXPECT_THAT(error, HasSubstr("'backend.database.client'"));
  EXPECT_THAT(error, HasSubstr("'backend.database.connection'"));
  EXPECT_THAT(error, HasSubstr(kFile));
}

TEST(DatabaseConfigTest, UnknownClientNamesTheAcceptedValues) {
  std::string error =
      ReadError("backend:\n  database:\n    client: oracledb\n    connection: ':memory:'\n");
  EXPECT_THAT(error, HasSubstr("'backend.database.client'"));
  EXPECT_THAT(error, HasSubstr(kFile));
  EXPECT_THAT(error, HasSubstr("'oracledb'"));
  EXPECT_THAT(error, HasSubstr("better-sqlite3, sqlite3, pg, mysql2, mysql"));
}

TEST(DatabaseConfigTest, UnknownPluginClientNamesThePluginKey) {
  std::string error = ReadError(
      "backend:\n  database:\n    client: pg\n    connection: ''\n    plugin:\n      catalog:\n"
      "        client: oracle\n");
  EXPECT_THAT(error, HasSubstr("'backend.database.plugin.catalog.client'"));
  EXPECT_THAT(error, HasSubstr(kFile));
}

TEST(DatabaseConfigTest, InvalidDivisionMode) {
  std::string error = ReadError(
      "backend:\n  database:\n    client: pg\n    connection: ''\n    pluginDivisionMode: table\n");
  EXPECT_THAT(error, HasSubstr("'backend.database.pluginDivisionMode'"));
  EXPECT_THAT(error, HasSubstr(kFile));
  EXPECT_THAT(error, HasSubstr("database, schema"));
}

TEST(DatabaseConfigTest, WrongTypesNameTheirKeys) {
  std::string error = ReadError(
      "backend:\n  database:\n    client: pg\n    connection: ''\n    skipMigrations: maybe\n"
      "    prefix: [a]\n    plugin:\n      catalog:\n        skipMigrations: [1]\n"
      "      search: 3\n");
  EXPECT_THAT(error, HasSubstr("'backend.database.skipMigrations'"));
  EXPECT_THAT(error, HasSubstr("'backend.database.prefix'"));
  EXPECT_THAT(error, HasSubstr("'backend.database.plugin.catalog.skipMigrations'"));
  EXPECT_THAT(error, HasSubstr("'backend.database.plugin.search'"));
  EXPECT_THAT(error, HasSubstr(kFile));
}

TEST(DatabaseConfigTest, ErrorsNameTheFileTheValueCameFrom) {
  Result<Config> base =
      Config::FromYaml("backend:\n  database:\n    client: pg\n    connection: ''\n", "base.yaml");
  Result<Config> local =
      Config::FromYaml("backend:\n  database:\n    client: cockroach\n", "local.yaml");
  ASSERT_TRUE(base.ok() && local.ok());
  Result<DatabaseConfig> config = ReadDatabaseConfig(Config::Merge({*base, *local}));
  ASSERT_THAT(config, Not(IsOk()));
  EXPECT_THAT(config.status().message(), HasSubstr("'backend.database.client' in 'local.yaml'"));
}

TEST(PostgresConnectionStringTest, QuotesValues) {
  EXPECT_EQ(PostgresConnectionString({{"host", "h"}, {"password", "a'b\\c d"}}),
            "host='h' password='a\\'b\\\\c d'");
}

TEST(DatabaseConfigTest, PoolDefaultsAreZeroToFourWithATenSecondIdleTimeout) {
  const DatabaseConfig config =
      ReadOk("backend:\n  database:\n    client: pg\n    connection: host=h\n");
  EXPECT_EQ(config.max_statement_connections, 10);
  const PluginDatabase jobs = Resolve(config, "jobs");
  EXPECT_EQ(jobs.pool_min, 0);
  EXPECT_EQ(jobs.pool_max, 4);
  EXPECT_EQ(jobs.idle_timeout, std::chrono::milliseconds(10000));
}

TEST(DatabaseConfigTest, KnexPoolSettingsApplyToEveryPluginAndPluginsOverrideThem) {
  const DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: pg\n    connection: host=h\n"
      "    knexConfig:\n      pool: {min: 1, max: 6, idleTimeoutMillis: 2500}\n"
      "    plugin:\n      busy:\n        knexConfig: {pool: {max: 8}}\n"
      "stagehand:\n  database: {maxConnections: 12}\n");
  EXPECT_EQ(config.max_statement_connections, 12);
  const PluginDatabase jobs = Resolve(config, "jobs");
  EXPECT_EQ(jobs.pool_min, 1);
  EXPECT_EQ(jobs.pool_max, 6);
  EXPECT_EQ(jobs.idle_timeout, std::chrono::milliseconds(2500));
  const PluginDatabase busy = Resolve(config, "busy");
  EXPECT_EQ(busy.pool_min, 1);
  EXPECT_EQ(busy.pool_max, 8);
  EXPECT_EQ(busy.idle_timeout, std::chrono::milliseconds(2500));
}

TEST(DatabaseConfigTest, KnexPoolSettingsOutOfRangeAreProblems) {
  const std::string message = ReadError(
      "backend:\n  database:\n    client: pg\n    connection: host=h\n"
      "    knexConfig:\n      pool: {min: 5, max: 2, idleTimeoutMillis: -1}\n"
      "stagehand:\n  database: {maxConnections: 1.5}\n");
  EXPECT_THAT(message, HasSubstr("'backend.database.knexConfig.pool.idleTimeoutMillis'"));
  EXPECT_THAT(message, HasSubstr("min (5) is greater than max (2)"));
  EXPECT_THAT(message, HasSubstr("'stagehand.database.maxConnections'"));
}

}  // namespace
}  // namespace stagehand

namespace stagehand {
namespace {

TEST(DatabaseConfigTest, MySqlUrlGivesOneDatabasePerPlugin) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: mysql2\n    connection: "
      "'mysql://back%40stage:p%3Ass@db.internal:3307/ignored?ssl=true&charset=utf8mb4'\n");
  EXPECT_EQ(config.client, DatabaseClient::kMySql);
  const PluginDatabase database = Resolve(config, "catalog");
  EXPECT_EQ(database.client, DatabaseClient::kMySql);
  EXPECT_EQ(database.database, "backstage_plugin_catalog") << "the base database is not used";
  EXPECT_EQ(database.mysql_server, (DatabaseConnection{{"host", "db.internal"},
                                                       {"password", "p:ss"},
                                                       {"port", "3307"},
                                                       {"ssl", "true"},
                                                       {"user", "back@stage"}}));
}

TEST(DatabaseConfigTest, ATransactionPoolerAndADirectNotifyConnectionReachEveryPlugin) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: pg\n"
      "    connection: postgresql://u:p@pgbouncer:6432/postgres\n"
      "stagehand:\n  database:\n    pooler: transaction\n"
      "    notifyConnection: postgresql://u:p@db1:5432/postgres\n");
  EXPECT_TRUE(config.transaction_pooler);
  const PluginDatabase database = Resolve(config, "jobs");
  EXPECT_TRUE(database.transaction_pooler);
  EXPECT_THAT(database.notify_connection, HasSubstr("host='db1'"));
  EXPECT_THAT(database.server_connection, HasSubstr("host='pgbouncer'"));

  const DatabaseConfig session = ReadOk(
      "backend:\n  database:\n    client: pg\n    connection: postgresql://pgbouncer/postgres\n"
      "stagehand:\n  database:\n    pooler: session\n");
  EXPECT_FALSE(session.transaction_pooler);
  EXPECT_EQ(Resolve(session, "jobs").notify_connection, "");
}

TEST(DatabaseConfigTest, PoolerSettingsAreChecked) {
  const std::string base =
      "backend:\n  database:\n    client: pg\n    connection: postgresql://pgbouncer/postgres\n";
  EXPECT_THAT(ReadError(base + "stagehand:\n  database:\n    pooler: statement\n"),
              AllOf(HasSubstr("'stagehand.database.pooler'"), HasSubstr("statement"),
                    HasSubstr("none, session, transaction")));
  EXPECT_THAT(ReadError(base + "    pluginDivisionMode: schema\n"
                               "stagehand:\n  database:\n    pooler: transaction\n"),
              AllOf(HasSubstr("'stagehand.database.pooler'"), HasSubstr("pluginDivisionMode")));
  const std::string bad_url = ReadError(
      base + "stagehand:\n  database:\n    notifyConnection: 'postgresql://u:secret@db?x=1'\n");
  EXPECT_THAT(bad_url, HasSubstr("'stagehand.database.notifyConnection'"));
  EXPECT_THAT(bad_url, Not(HasSubstr("secret")));
}

TEST(DatabaseConfigTest, MySqlObjectConnectionAndPluginOverrides) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: mysql\n    prefix: bs_\n    connection:\n"
      "      socketPath: /run/mysqld/mysqld.sock\n      user: backstage\n      password: s\n"
      "      port: 3306\n    knexConfig: { pool: { max: 7 } }\n    plugin:\n      jobs:\n"
      "        connection: { database: jobs_db, ssl: { rejectUnauthorized: true } }\n");
  const PluginDatabase catalog = Resolve(config, "catalog");
  EXPECT_EQ(catalog.database, "bs_catalog");
  EXPECT_EQ(catalog.pool_max, 7);
  EXPECT_EQ(catalog.mysql_server, (DatabaseConnection{{"password", "s"},
                                                      {"port", "3306"},
                                                      {"socket", "/run/mysqld/mysqld.sock"},
                                                      {"user", "backstage"}}));
  const PluginDatabase jobs = Resolve(config, "jobs");
  EXPECT_EQ(jobs.database, "jobs_db");
  EXPECT_EQ(jobs.mysql_server.at("ssl"), "true");
  EXPECT_EQ(jobs.mysql_server.at("user"), "backstage") << "merged over the base connection";
}

TEST(DatabaseConfigTest, MySqlBadUrlNamesTheKeyWithoutEchoingIt) {
  const std::string error = ReadError(
      "backend:\n  database:\n    client: mysql2\n    connection: 'postgres://u:secret@h/db'\n");
  EXPECT_THAT(error, HasSubstr("'backend.database.connection'"));
  EXPECT_THAT(error, HasSubstr("mysql://"));
  EXPECT_THAT(error, ::testing::Not(HasSubstr("secret")));
}

TEST(DatabaseConfigTest, MySqlPortMustBeAPortNumber) {
  const std::string error = ReadError(
      "backend:\n  database:\n    client: mysql2\n    connection: { host: h, port: 'x1' }\n");
  EXPECT_THAT(error, HasSubstr("'backend.database.connection.port'"));
  EXPECT_THAT(error, HasSubstr("1 to 65535"));
}

TEST(DatabaseConfigTest, MySqlHasNoSchemaMode) {
  DatabaseConfig config = ReadOk(
      "backend:\n  database:\n    client: mysql2\n    pluginDivisionMode: schema\n"
      "    connection: { host: h }\n");
  Result<PluginDatabase> database = ResolvePluginDatabase(config, "catalog");
  ASSERT_THAT(database, Not(IsOk()));
  EXPECT_THAT(database.status().message(), HasSubstr("pluginDivisionMode"));
  EXPECT_THAT(database.status().message(), HasSubstr("PostgreSQL only"));
}

TEST(DatabaseConfigTest, MySqlDatabaseNamesAreAtMost64Characters) {
  DatabaseConfig config =
      ReadOk("backend:\n  database:\n    client: mysql2\n    prefix: " + std::string(60, 'p') +
             "_\n    connection: { host: h }\n");
  EXPECT_EQ(Resolve(config, "abc").database.size(), 64u);
  Result<PluginDatabase> database = ResolvePluginDatabase(config, "abcd");
  ASSERT_THAT(database, Not(IsOk()));
  EXPECT_THAT(database.status().message(), HasSubstr("MySQL's limit is 64"));
}

}  // namespace
}  // namespace stagehand
