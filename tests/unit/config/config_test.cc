#include "stagehand/config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_internal.h"
#include "stagehand/config/config_problems.h"
#include "stagehand/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

Config Yaml(std::string_view text, std::string context = "app-config.yaml") {
  auto config = Config::FromYaml(text, std::move(context));
  EXPECT_THAT(config, IsOk());
  return config.ok() ? *config : Config::Empty();
}

Config Json(std::string_view text, std::string context = "mock-config") {
  auto config = Config::FromJson(text, std::move(context));
  EXPECT_THAT(config, IsOk());
  return config.ok() ? *config : Config::Empty();
}

std::string TypeOf(const Config& config, std::string_view key) {
  const ConfigNode* node = config.Node(key);
  return node == nullptr ? "missing" : std::string(node->TypeName());
}

template <typename T>
std::string ErrorOf(const Result<T>& result) {
  EXPECT_THAT(result, Not(IsOk()));
  if (result.ok()) {
    return "<ok>";
  }
  EXPECT_THAT(result, StatusIs(StatusCode::kInvalidArgument));
  return result.status().message();
}

TEST(ConfigYamlTest, PlainScalarsFollowTheCoreSchema) {
  const Config config = Yaml(R"(
t1: true
t2: True
t3: TRUE
f1: false
yes_is_a_string: yes
on_is_a_string: on
n1: null
n2: ~
n3:
n4: Null
int: 42
negative: -7
plus: +3
float: 1.5
leading_dot: .5
exp: 1e3
hex: 0x1F
octal: 0o17
infinity: .inf
minus_infinity: -.Inf
not_a_number: .nan
version: 1.2.3
time: 12:30
word: hello world
)");
  for (const char* key : {"t1", "t2", "t3", "f1"}) {
    EXPECT_EQ(TypeOf(config, key), "boolean") << key;
  }
  EXPECT_EQ(*config.GetBoolean("t3"), true);
  EXPECT_EQ(*config.GetBoolean("f1"), false);
  EXPECT_EQ(*config.GetString("yes_is_a_string"), "yes");
  EXPECT_EQ(*config.GetString("on_is_a_string"), "on");
  for (const char* key : {"n1", "n2", "n3", "n4"}) {
    EXPECT_EQ(TypeOf(config, key), "null") << key;
  }
  EXPECT_EQ(*config.GetNumber("int"), 42);
  EXPECT_EQ(*config.GetNumber("negative"), -7);
  EXPECT_EQ(*config.GetNumber("plus"), 3);
  EXPECT_EQ(*config.GetNumber("float"), 1.5);
  EXPECT_EQ(*config.GetNumber("leading_dot"), 0.5);
  EXPECT_EQ(*config.GetNumber("exp"), 1000);
  EXPECT_EQ(*config.GetNumber("hex"), 31);
  EXPECT_EQ(*config.GetNumber("octal"), 15);
  EXPECT_EQ(*config.GetNumber("infinity"), HUGE_VAL);
  EXPECT_EQ(*config.GetNumber("minus_infinity"), -HUGE_VAL);
  EXPECT_EQ(TypeOf(config, "not_a_number"), "nan");
  EXPECT_EQ(*config.GetString("version"), "1.2.3");
  EXPECT_EQ(*config.GetString("time"), "12:30");
  EXPECT_EQ(*config.GetString("word"), "hello world");
}

TEST(ConfigYamlTest, QuotedBlockAndStrTaggedScalarsAreStrings) {
  const Config config = Yaml(R"(
single: 'true'
double: "42"
quoted_null: "null"
empty: ""
block: |
  line
folded: >
  folded
tagged: !!str 8080
custom_tag: !secret 12
typed_int: !!int 7
)");
  EXPECT_EQ(*config.GetString("single"), "true");
  EXPECT_EQ(*config.GetString("double"), "42");
  EXPECT_EQ(*config.GetString("quoted_null"), "null");
  EXPECT_EQ(TypeOf(config, "empty"), "empty-string");
  EXPECT_EQ(*config.GetString("block"), "line\n");
  EXPECT_EQ(*config.GetString("folded"), "folded\n");
  EXPECT_EQ(*config.GetString("tagged"), "8080");
  EXPECT_EQ(*config.GetString("custom_tag"), "12");
  EXPECT_EQ(*config.GetNumber("typed_int"), 7);
}

TEST(ConfigYamlTest, RecordsSourceAndLinePerNode) {
  const Config config = Yaml(
      "backend:\n  baseUrl: http://localhost\n  listen:\n    port: 7007\n"
      "  empty:\nlist:\n  - a\n  - b\n",
      "/etc/stagehand/app-config.yaml");
  const ConfigNode* port = config.Node("backend.listen.port");
  ASSERT_NE(port, nullptr);
  EXPECT_EQ(port->line, 4);
  ASSERT_NE(port->source, nullptr);
  EXPECT_EQ(*port->source, "/etc/stagehand/app-config.yaml");
  EXPECT_EQ(config.Node("backend.baseUrl")->line, 2);
  EXPECT_EQ(config.Node("backend.empty")->line, 5);
  const auto& list = std::get<ConfigNode::Array>(config.Node("list")->value);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1]->line, 8);
  EXPECT_EQ(config.Context("backend.listen.port"), "/etc/stagehand/app-config.yaml");
}

TEST(ConfigYamlTest, KeepsKeyOrder) {
  const Config config = Yaml("zeta: 1\nalpha: 2\nmid: 3\n");
  EXPECT_EQ(config.Keys(), (std::vector<std::string>{"zeta", "alpha", "mid"}));
}

TEST(ConfigYamlTest, ResolvesAliases) {
  const Config config = Yaml("base: &base\n  minutes: 5\nother: *base\n");
  EXPECT_EQ(*config.GetNumber("other.minutes"), 5);
}

TEST(ConfigYamlTest, EmptyDocumentIsAnEmptyObject) {
  EXPECT_TRUE(Yaml("").Keys().empty());
  EXPECT_TRUE(Yaml("# only a comment\n").Keys().empty());
  EXPECT_TRUE(Yaml("---\n").Keys().empty());
}

TEST(ConfigYamlTest, MalformedYamlNamesContextAndLine) {
  const std::string message =
      ErrorOf(Config::FromYaml("a: 1\nb: [1, 2\nc: 3\n", "conf/app-config.yaml"));
  EXPECT_THAT(message, StartsWith("Invalid YAML in 'conf/app-config.yaml' at line "));
  EXPECT_THAT(message, HasSubstr("end of sequence flow not found"));
}

TEST(ConfigYamlTest, RejectsBadIndentationWithLine) {
  const std::string message = ErrorOf(Config::FromYaml("a:\n  b: 1\n c: 2\n", "x.yaml"));
  EXPECT_THAT(message, StartsWith("Invalid YAML in 'x.yaml' at line 3"));
}

TEST(ConfigYamlTest, RejectsDuplicateKeys) {
  EXPECT_EQ(ErrorOf(Config::FromYaml("a: 1\nb: 2\na: 3\n", "dup.yaml")),
            "Invalid YAML in 'dup.yaml' at line 3, column 1: map keys must be unique; 'a' is "
            "repeated");
}

TEST(ConfigYamlTest, RejectsNonObjectRoot) {
  EXPECT_EQ(ErrorOf(Config::FromYaml("- a\n- b\n", "list.yaml")),
            "Invalid YAML in 'list.yaml' at line 1, column 1: expected an object at the config "
            "root");
  EXPECT_THAT(ErrorOf(Config::FromYaml("just a string", "s.yaml")),
              HasSubstr("expected an object at the config root"));
}

TEST(ConfigYamlTest, RejectsSeveralDocuments) {
  EXPECT_THAT(ErrorOf(Config::FromYaml("a: 1\n---\nb: 2\n", "multi.yaml")),
              HasSubstr("more than one document"));
}

TEST(ConfigYamlTest, RejectsComplexKeys) {
  EXPECT_THAT(ErrorOf(Config::FromYaml("? [a, b]\n: 1\n", "k.yaml")),
              HasSubstr("keys must be scalars"));
}

TEST(ConfigYamlTest, RejectsScalarThatContradictsItsTag) {
  EXPECT_THAT(ErrorOf(Config::FromYaml("a: !!int abc\n", "t.yaml")),
              HasSubstr("'abc' does not match its tag tag:yaml.org,2002:int"));
}

TEST(ConfigYamlTest, BoundsNestingDepth) {
  std::string deep;
  for (int i = 0; i < 300; ++i) {
    deep += "[";
  }
  for (int i = 0; i < 300; ++i) {
    deep += "]";
  }
  const auto result = Config::FromYaml("a: " + deep + "\n", "deep.yaml");
  EXPECT_THAT(result, Not(IsOk()));
}

TEST(ConfigYamlTest, BoundsAliasExpansion) {
  std::string yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 12; ++i) {
    yaml += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) {
      yaml += (j ? ", *a" : "*a") + std::to_string(i - 1);
    }
    yaml += "]\n";
  }
  EXPECT_THAT(ErrorOf(Config::FromYaml(yaml, "bomb.yaml")), HasSubstr("too many nodes"));
}

// yaml-cpp 0.7's LoadAll loops forever on this input (found by fuzzing): its parser keeps
// reporting empty documents.
TEST(ConfigYamlTest, EndlessEmptyDocumentsRegression) {
  static constexpr char kInput[] =
      "\x00\x00\x00,:2e\x22risveonr\x22:\x22.T1MZ}\x04\xff\xff\x00{\x22v\x00\x00\x00,:2e"
      "\x22risveonr\x22:\x22.T1MZ}\x04\xff\xff\x00";
  const auto result = Config::FromYaml(std::string_view(kInput, sizeof(kInput) - 1), "fuzz.yaml");
  EXPECT_THAT(ErrorOf(result), HasSubstr("more than one document"));
}

TEST(ConfigYamlTest, ReadsFiles) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("stagehand-config-test-" + std::to_string(getpid()) + ".yaml");
  {
    std::ofstream out(path);
    out << "scheduler:\n  timeout: 10m\n";
  }
  auto config = Config::FromYamlFile(path.string());
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(*config->GetString("scheduler.timeout"), "10m");
  EXPECT_EQ(config->Context("scheduler.timeout"), path.string());
  EXPECT_EQ(ErrorOf(config->GetNumber("scheduler.missing")),
            "Missing required config value at 'scheduler.missing' in '" + path.string() + "'");
  std::filesystem::remove(path);
  EXPECT_THAT(ErrorOf(Config::FromYamlFile(path.string())),
              StartsWith("Unable to read config file '" + path.string() + "'"));
}

TEST(ConfigJsonTest, ParsesTypesAndKeepsKeyOrder) {
  const Config config =
      Json(R"({"b":1,"a":"x","n":null,"t":true,"arr":[1,"two"],"obj":{"k":2.5},"e":""})");
  EXPECT_EQ(config.Keys(), (std::vector<std::string>{"b", "a", "n", "t", "arr", "obj", "e"}));
  EXPECT_EQ(TypeOf(config, "b"), "number");
  EXPECT_EQ(TypeOf(config, "a"), "string");
  EXPECT_EQ(TypeOf(config, "n"), "null");
  EXPECT_EQ(TypeOf(config, "t"), "boolean");
  EXPECT_EQ(TypeOf(config, "arr"), "array");
  EXPECT_EQ(TypeOf(config, "obj"), "object");
  EXPECT_EQ(TypeOf(config, "e"), "empty-string");
  EXPECT_EQ(*config.GetNumber("obj.k"), 2.5);
  EXPECT_EQ(config.Context("obj.k"), "mock-config");
}

TEST(ConfigJsonTest, RejectsMalformedJsonAndNonObjectRoot) {
  EXPECT_THAT(ErrorOf(Config::FromJson("{\"a\":", "fixture.json")),
              StartsWith("Invalid JSON in 'fixture.json': "));
  EXPECT_EQ(ErrorOf(Config::FromJson("[1]", "fixture.json")),
            "Invalid JSON in 'fixture.json': expected an object at the config root");
}

TEST(ConfigGetterTest, MissingValuesNameFullKeyAndContext) {
  const Config config = Json(R"({"a":{"b":{}}})");
  EXPECT_EQ(ErrorOf(config.GetString("x")),
            "Missing required config value at 'x' in 'mock-config'");
  EXPECT_EQ(ErrorOf(config.GetNumber("a.b.c")),
            "Missing required config value at 'a.b.c' in 'mock-config'");
  EXPECT_EQ(ErrorOf(config.GetBoolean("a.z")),
            "Missing required config value at 'a.z' in 'mock-config'");
  EXPECT_EQ(ErrorOf(config.GetConfig("a.q")),
            "Missing required config value at 'a.q' in 'mock-config'");
  EXPECT_EQ(ErrorOf(config.GetConfigArray("list")),
            "Missing required config value at 'list' in 'mock-config'");
  EXPECT_EQ(ErrorOf(config.GetStringArray("strings")),
            "Missing required config value at 'strings' in 'mock-config'");
  EXPECT_FALSE(config.GetOptionalString("x")->has_value());
  EXPECT_FALSE(config.GetOptionalNumber("a.b.c")->has_value());
  EXPECT_FALSE(config.GetOptionalBoolean("a.missing.deeper")->has_value());
  EXPECT_FALSE(config.GetOptionalConfig("nope")->has_value());
}

TEST(ConfigGetterTest, SubviewsReportKeysFromTheRoot) {
  const Config root = Json(R"({"a":{"b":{"c":true,"s":""}}})");
  auto a = root.GetConfig("a");
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->FullKey(), "a");
  EXPECT_EQ(a->FullKey("b"), "a.b");
  EXPECT_EQ(ErrorOf(a->GetString("b")),
            "Invalid type in config for key 'a.b' in 'mock-config', got object, wanted string");
  auto b = a->GetConfig("b");
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(ErrorOf(b->GetNumber("c")),
            "Invalid type in config for key 'a.b.c' in 'mock-config', got boolean, wanted number");
  EXPECT_EQ(ErrorOf(b->GetString("missing")),
            "Missing required config value at 'a.b.missing' in 'mock-config'");
  EXPECT_EQ(ErrorOf(b->GetString("s")),
            "Invalid type in config for key 'a.b.s' in 'mock-config', got empty-string, wanted "
            "string");
  EXPECT_EQ(b->Keys(), (std::vector<std::string>{"c", "s"}));
}

struct TypeCase {
  const char* key;
  const char* type;
};

TEST(ConfigGetterTest, TypeErrorsNameEveryType) {
  const Config config = Json(R"({"n":null,"b":false,"num":1,"s":"text","e":"","a":[],"o":{}})");
  const TypeCase cases[] = {{"n", "null"},         {"b", "boolean"}, {"num", "number"},
                            {"e", "empty-string"}, {"a", "array"},   {"o", "object"}};
  for (const TypeCase& c : cases) {
    EXPECT_EQ(ErrorOf(config.GetString(c.key)), std::string("Invalid type in config for key '") +
                                                    c.key + "' in 'mock-config', got " + c.type +
                                                    ", wanted string");
  }
  EXPECT_EQ(ErrorOf(config.GetConfig("s")),
            "Invalid type in config for key 's' in 'mock-config', got string, wanted object");
  EXPECT_EQ(ErrorOf(config.GetOptionalConfig("a")),
            "Invalid type in config for key 'a' in 'mock-config', got array, wanted object");
  EXPECT_EQ(ErrorOf(config.GetNumber("o")),
            "Invalid type in config for key 'o' in 'mock-config', got object, wanted number");
  EXPECT_EQ(ErrorOf(config.GetBoolean("n")),
            "Invalid type in config for key 'n' in 'mock-config', got null, wanted boolean");
  EXPECT_EQ(ErrorOf(config.GetOptionalString("n")),
            "Invalid type in config for key 'n' in 'mock-config', got null, wanted string");
}

TEST(ConfigGetterTest, WalkingThroughAScalarIsATypeError) {
  const Config config = Json(R"({"a":{"b":"text"},"s":5})");
  EXPECT_EQ(ErrorOf(config.GetString("a.b.c")),
            "Invalid type in config for key 'a.b' in 'mock-config', got string, wanted object");
  EXPECT_EQ(ErrorOf(config.GetOptionalNumber("s.x.y")),
            "Invalid type in config for key 's' in 'mock-config', got number, wanted object");
  EXPECT_FALSE(config.Has("a.b.c"));
  EXPECT_EQ(config.Node("a.b.c"), nullptr);
}

TEST(ConfigGetterTest, RejectsEmptyKeySegments) {
  const Config config = Json(R"({"a":{"b":1}})");
  EXPECT_EQ(ErrorOf(config.GetNumber("a..b")), "Invalid config key 'a..b'");
  EXPECT_EQ(ErrorOf(config.GetNumber("a.")), "Invalid config key 'a.'");
}

TEST(ConfigGetterTest, NumbersAcceptNumericStrings) {
  const Config config =
      Json(R"({"i":"5","f":" 2.5 ","neg":"-3","hex":"0x10","exp":"1e3","dot":".5","empty":"",)"
           R"("bad":"5px","inf":"Infinity","huge":"1e400","word":"ten","bool":true,"real":7})");
  EXPECT_EQ(*config.GetNumber("i"), 5);
  EXPECT_EQ(*config.GetNumber("f"), 2.5);
  EXPECT_EQ(*config.GetNumber("neg"), -3);
  EXPECT_EQ(*config.GetNumber("hex"), 16);
  EXPECT_EQ(*config.GetNumber("exp"), 1000);
  EXPECT_EQ(*config.GetNumber("dot"), 0.5);
  EXPECT_EQ(*config.GetNumber("empty"), 0);  // JavaScript's Number('') is 0.
  EXPECT_EQ(*config.GetNumber("real"), 7);
  for (const char* key : {"bad", "inf", "huge", "word"}) {
    EXPECT_EQ(ErrorOf(config.GetNumber(key)),
              std::string("Unable to convert config value for key '") + key +
                  "' in 'mock-config' to a number");
  }
  EXPECT_EQ(ErrorOf(config.GetOptionalNumber("bool")),
            "Invalid type in config for key 'bool' in 'mock-config', got boolean, wanted number");
}

TEST(ParseJsNumberTest, FollowsJavaScriptNumber) {
  using config_internal::ParseJsNumber;
  EXPECT_EQ(ParseJsNumber(""), 0.0);
  EXPECT_EQ(ParseJsNumber(" \t\n"), 0.0);
  EXPECT_EQ(ParseJsNumber("0b101"), 5.0);
  EXPECT_EQ(ParseJsNumber("0O17"), 15.0);
  EXPECT_EQ(ParseJsNumber("0XfF"), 255.0);
  EXPECT_EQ(ParseJsNumber("+.5e1"), 5.0);
  EXPECT_EQ(ParseJsNumber("5."), 5.0);
  EXPECT_EQ(ParseJsNumber("-0"), 0.0);
  for (const char* bad : {"-0x10", "0x", "0b2", "1e", ".", "+", "1_000", "nan", "inf", "Infinity",
                          "-Infinity", "1 2", "0x1p3", "12px"}) {
    EXPECT_EQ(ParseJsNumber(bad), std::nullopt) << bad;
  }
}

TEST(ConfigGetterTest, BooleansAcceptBackstageSpellings) {
  const Config config =
      Json(R"({"t":true,"yes":"yes","on":" ON ","one":1,"s1":"1","f":false,"no":"n","off":"off",)"
           R"("zero":0,"two":2,"maybe":"maybe","list":[]})");
  for (const char* key : {"t", "yes", "on", "one", "s1"}) {
    EXPECT_TRUE(*config.GetBoolean(key)) << key;
  }
  for (const char* key : {"f", "no", "off", "zero"}) {
    EXPECT_FALSE(*config.GetBoolean(key)) << key;
  }
  EXPECT_EQ(ErrorOf(config.GetBoolean("two")),
            "Unable to convert config value for key 'two' in 'mock-config' to a boolean");
  EXPECT_EQ(ErrorOf(config.GetBoolean("maybe")),
            "Unable to convert config value for key 'maybe' in 'mock-config' to a boolean");
  EXPECT_EQ(ErrorOf(config.GetBoolean("list")),
            "Invalid type in config for key 'list' in 'mock-config', got array, wanted boolean");
}

TEST(ConfigGetterTest, StringArrays) {
  const Config config = Json(R"({"ok":["a","b"],"bad":["a",""],"num":["a",3],"s":"a"})");
  EXPECT_EQ(*config.GetStringArray("ok"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ErrorOf(config.GetStringArray("bad")),
            "Invalid type in config for key 'bad[1]' in 'mock-config', got empty-string, wanted "
            "string-array");
  EXPECT_EQ(ErrorOf(config.GetStringArray("num")),
            "Invalid type in config for key 'num[1]' in 'mock-config', got number, wanted "
            "string-array");
  EXPECT_EQ(ErrorOf(config.GetStringArray("s")),
            "Invalid type in config for key 's' in 'mock-config', got string, wanted string-array");
}

TEST(ConfigGetterTest, ConfigArraysIndexTheirKeys) {
  const Config config = Json(R"({"tasks":[{"id":"a"},{"id":5}],"mixed":[{},"x"]})");
  auto tasks = config.GetConfigArray("tasks");
  ASSERT_THAT(tasks, IsOk());
  ASSERT_EQ(tasks->size(), 2u);
  EXPECT_EQ(*(*tasks)[0].GetString("id"), "a");
  EXPECT_EQ((*tasks)[1].FullKey("id"), "tasks[1].id");
  EXPECT_EQ(ErrorOf((*tasks)[1].GetString("id")),
            "Invalid type in config for key 'tasks[1].id' in 'mock-config', got number, wanted "
            "string");
  EXPECT_EQ(ErrorOf(config.GetConfigArray("mixed")),
            "Invalid type in config for key 'mixed[1]' in 'mock-config', got string, wanted "
            "object-array");
}

TEST(ConfigGetterTest, HasAndNodeSeeNulls) {
  const Config config = Json(R"({"a":null,"b":{"c":0}})");
  EXPECT_TRUE(config.Has("a"));
  EXPECT_TRUE(config.Has("b.c"));
  EXPECT_FALSE(config.Has("b.d"));
  EXPECT_TRUE(config.Has(""));
  EXPECT_NE(config.Node(), nullptr);
  EXPECT_EQ(config.Node()->TypeName(), "object");
}

TEST(ConfigGetterTest, KeysOfNonObjectViewAreEmpty) {
  EXPECT_TRUE(Config::Empty().Keys().empty());
  EXPECT_EQ(Config::Empty("nothing").Context(), "nothing");
}

TEST(ConfigMergeTest, LaterLayersWinAndObjectsMergeKeyWise) {
  const Config base = Yaml(R"(
backend:
  baseUrl: http://localhost
  listen: { port: 7007, host: 0.0.0.0 }
  plugins: [a, b]
scheduler:
  enabled: true
)",
                           "app-config.yaml");
  const Config local = Yaml(R"(
backend:
  listen: { port: 8080 }
  plugins: [c]
scheduler: null
extra: yes
)",
                            "app-config.local.yaml");
  const Config merged = Config::Merge({base, local});
  EXPECT_EQ(merged.Keys(), (std::vector<std::string>{"backend", "scheduler", "extra"}));
  EXPECT_EQ(*merged.GetString("backend.baseUrl"), "http://localhost");
  EXPECT_EQ(*merged.GetNumber("backend.listen.port"), 8080);
  EXPECT_EQ(*merged.GetString("backend.listen.host"), "0.0.0.0");
  EXPECT_EQ(*merged.GetStringArray("backend.plugins"), (std::vector<std::string>{"c"}));
  EXPECT_EQ(TypeOf(merged, "scheduler"), "null");
  EXPECT_EQ(merged.Context("backend.baseUrl"), "app-config.yaml");
  EXPECT_EQ(merged.Context("backend.listen.port"), "app-config.local.yaml");
  EXPECT_EQ(ErrorOf(merged.GetNumber("backend.listen.host")),
            "Unable to convert config value for key 'backend.listen.host' in 'app-config.yaml' to "
            "a number");
  EXPECT_TRUE(*merged.GetBoolean("extra"));
}

TEST(ConfigMergeTest, ScalarReplacesObjectAndBack) {
  const Config a = Json(R"({"x":{"y":1},"z":5})", "a");
  const Config b = Json(R"({"x":"flat","z":{"w":2}})", "b");
  const Config ab = Config::Merge({a, b});
  EXPECT_EQ(*ab.GetString("x"), "flat");
  EXPECT_EQ(*ab.GetNumber("z.w"), 2);
  const Config ba = Config::Merge({b, a});
  EXPECT_EQ(*ba.GetNumber("x.y"), 1);
  EXPECT_EQ(*ba.GetNumber("z"), 5);
}

TEST(ConfigMergeTest, MergingLeavesLayersUntouched) {
  const Config a = Json(R"({"x":{"y":1}})", "a");
  const Config b = Json(R"({"x":{"z":2}})", "b");
  const Config merged = Config::Merge({a, b});
  EXPECT_EQ(merged.GetConfig("x")->Keys(), (std::vector<std::string>{"y", "z"}));
  EXPECT_EQ(a.GetConfig("x")->Keys(), (std::vector<std::string>{"y"}));
  EXPECT_EQ(b.GetConfig("x")->Keys(), (std::vector<std::string>{"z"}));
  EXPECT_TRUE(Config::Merge({}).Keys().empty());
  EXPECT_EQ(Config::Merge({a}).Keys(), (std::vector<std::string>{"x"}));
}

TEST(ConfigTransformTest, ReplacesEveryStringValueButNoKey) {
  const Config config =
      Yaml("up: a\nnested:\n  up: b\n  list: [c, {up: d}, 3, true, null]\nnumber: 7\n");
  std::vector<std::string> keys;
  auto upper = [&keys](const std::string& value, const std::string& full_key,
                       const ConfigNode&) -> Result<std::string> {
    keys.push_back(full_key);
    std::string out = value;
    for (char& c : out) {
      c = static_cast<char>(c - 'a' + 'A');
    }
    return out;
  };
  Result<Config> transformed = config.TransformStrings(upper);
  ASSERT_THAT(transformed, IsOk());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"up", "nested.up", "nested.list[0]", "nested.list[1].up"}));
  EXPECT_EQ(*transformed->GetString("up"), "A");
  EXPECT_EQ(*transformed->GetString("nested.up"), "B");
  const auto& list = std::get<ConfigNode::Array>(transformed->Node("nested.list")->value);
  ASSERT_EQ(list.size(), 5u);
  EXPECT_EQ(std::get<std::string>(list[0]->value), "C");
  EXPECT_EQ(std::get<double>(list[2]->value), 3);
  EXPECT_EQ(*transformed->GetNumber("number"), 7);
  EXPECT_EQ(transformed->Keys(), (std::vector<std::string>{"up", "nested", "number"}));
  EXPECT_EQ(*config.GetString("up"), "a");
}

TEST(ConfigTransformTest, KeepsSourcesAndLines) {
  const Config config = Yaml("a:\n  b: x\n", "file.yaml");
  Result<Config> transformed = config.TransformStrings(
      [](const std::string&, const std::string&, const ConfigNode&) -> Result<std::string> {
        return std::string("y");
      });
  ASSERT_THAT(transformed, IsOk());
  const ConfigNode* node = transformed->Node("a.b");
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(std::get<std::string>(node->value), "y");
  EXPECT_EQ(node->line, 2);
  EXPECT_EQ(transformed->Context("a.b"), "file.yaml");
}

TEST(ConfigTransformTest, ReportsEveryFailureInDocumentOrder) {
  const Config config = Yaml("a: bad1\nb: good\nc: [bad2]\n");
  auto fail_bad = [](const std::string& value, const std::string& full_key,
                     const ConfigNode& node) -> Result<std::string> {
    if (value.rfind("bad", 0) == 0) {
      return InvalidArgumentError(full_key + "@" + std::to_string(node.line));
    }
    return value;
  };
  Result<Config> transformed = config.TransformStrings(fail_bad);
  ASSERT_THAT(transformed, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(transformed.status().message(), "a@1\nc[0]@3");
}

TEST(ConfigTransformTest, SubviewKeysAreFull) {
  const Config config = Yaml("outer:\n  inner: v\n");
  std::string seen;
  Result<Config> transformed = config.GetConfig("outer")->TransformStrings(
      [&seen](const std::string& value, const std::string& full_key,
              const ConfigNode&) -> Result<std::string> {
        seen = full_key;
        return value;
      });
  ASSERT_THAT(transformed, IsOk());
  EXPECT_EQ(seen, "outer.inner");
  EXPECT_EQ(transformed->FullKey("inner"), "outer.inner");
}

constexpr std::array<std::string_view, 4> kScheduleKeys = {"frequency", "timeout", "initialDelay",
                                                           "scope"};

TEST(NearestKeyTest, FindsTyposWithinTwoEditsIgnoringCase) {
  EXPECT_EQ(NearestKey("intialDelay", kScheduleKeys), "initialDelay");    // deletion
  EXPECT_EQ(NearestKey("tiemout", kScheduleKeys), "timeout");             // transposition
  EXPECT_EQ(NearestKey("frequancy", kScheduleKeys), "frequency");         // substitution
  EXPECT_EQ(NearestKey("initialDelays", kScheduleKeys), "initialDelay");  // insertion
  EXPECT_EQ(NearestKey("InitialDelay", kScheduleKeys), "initialDelay");   // case
  EXPECT_EQ(NearestKey("initalDely", kScheduleKeys), "initialDelay");     // two edits
  EXPECT_EQ(NearestKey("scop", kScheduleKeys), "scope");
}

TEST(NearestKeyTest, RefusesKeysTooFarFromEveryCandidate) {
  EXPECT_EQ(NearestKey("delay", kScheduleKeys), std::nullopt);
  EXPECT_EQ(NearestKey("initlDly", kScheduleKeys), std::nullopt);  // three edits
  EXPECT_EQ(NearestKey("scp", kScheduleKeys), std::nullopt);       // two edits, a short key
  EXPECT_EQ(NearestKey("", kScheduleKeys), std::nullopt);
  EXPECT_EQ(NearestKey("timeout", {}), std::nullopt);
}

TEST(NearestKeyTest, ComparesDottedCandidatesByTheirLastPart) {
  constexpr std::array<std::string_view, 2> kBelow = {"frequency.cron", "frequency.timeZone"};
  EXPECT_EQ(NearestKey("timezone", kBelow), "frequency.timeZone");
  EXPECT_EQ(NearestKey("cron", kBelow), "frequency.cron");
}

TEST(NearestKeyTest, TheFirstOfEquallyCloseCandidatesWins) {
  constexpr std::array<std::string_view, 2> kKeys = {"lease", "least"};
  EXPECT_EQ(NearestKey("leasx", kKeys), "lease");
}

TEST(UnknownKeyMessageTest, SuggestsOrListsTheExpectedKeys) {
  EXPECT_EQ(UnknownKeyMessage("intialDelay", kScheduleKeys),
            "unknown key 'intialDelay'; did you mean 'initialDelay'?");
  EXPECT_EQ(UnknownKeyMessage("retries", kScheduleKeys),
            "unknown key 'retries'; expected frequency, timeout, initialDelay, scope");
  constexpr std::array<std::string_view, 1> kElsewhere = {"frequency.timeZone"};
  EXPECT_EQ(UnknownKeyMessage("timeZone", kScheduleKeys, kElsewhere),
            "unknown key 'timeZone'; did you mean 'frequency.timeZone'?");
  EXPECT_EQ(UnknownKeyMessage("zone", kScheduleKeys, kElsewhere),
            "unknown key 'zone'; expected frequency, timeout, initialDelay, scope");
}

TEST(AddUnknownKeysTest, NamesEachUnknownKeyWithItsFullKeyAndFile) {
  const Config config = Yaml(R"(
stagehand:
  schedule: { frequency: 1m, tiemout: 1m, scope: local, retries: 3 }
)",
                             "app.yaml");
  auto schedule = config.GetConfig("stagehand.schedule");
  ASSERT_THAT(schedule, IsOk());
  ConfigProblems problems;
  EXPECT_FALSE(AddUnknownKeys(*schedule, kScheduleKeys, problems));
  EXPECT_THAT(problems.lines(),
              ::testing::ElementsAre(
                  "Invalid config value for key 'stagehand.schedule.tiemout' in 'app.yaml': "
                  "unknown key 'tiemout'; did you mean 'timeout'?",
                  "Invalid config value for key 'stagehand.schedule.retries' in 'app.yaml': "
                  "unknown key 'retries'; expected frequency, timeout, initialDelay, scope"));
}

TEST(AddUnknownKeysTest, KeysThatCannotBePartOfAPathNameTheObject) {
  const Config config = Json(R"({"block": {"a.b": 1, "": 2, "scope": 3}})");
  auto block = config.GetConfig("block");
  ASSERT_THAT(block, IsOk());
  ConfigProblems problems;
  EXPECT_FALSE(AddUnknownKeys(*block, kScheduleKeys, problems));
  EXPECT_THAT(problems.lines(),
              ::testing::ElementsAre("Invalid config key 'block' in 'mock-config': unknown key "
                                     "'a.b'; expected frequency, timeout, initialDelay, scope",
                                     "Invalid config key 'block' in 'mock-config': unknown key "
                                     "''; expected frequency, timeout, initialDelay, scope"));
}

TEST(AddUnknownKeysTest, KnownKeysAndEmptyObjectsAddNothing) {
  ConfigProblems problems;
  EXPECT_TRUE(AddUnknownKeys(Json(R"({"frequency": 1, "scope": 2})"), kScheduleKeys, problems));
  EXPECT_TRUE(AddUnknownKeys(Config::Empty(), kScheduleKeys, problems));
  EXPECT_TRUE(problems.empty());
}

}  // namespace
}  // namespace stagehand
