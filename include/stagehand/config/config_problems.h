// Collects every problem found while reading a config, so that one run reports them all (a user
// fixes a file once, not once per error). Each problem is one line that names the key and the file.
// Blocks that stagehand owns are read strictly: a key a block does not know is a problem, reported
// with the known key the user most likely meant.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stagehand/base/status.h"
#include "stagehand/config/config.h"

namespace stagehand {

// Thread-compatible.
class ConfigProblems {
 public:
  // Adds each non-empty line of a failed `status`'s message as its own problem; OK adds nothing.
  void Add(const Status& status);
  void Add(std::string problem);

  bool empty() const { return lines_.empty(); }
  const std::vector<std::string>& lines() const { return lines_; }

  // Returns OK when there are no problems, else kInvalidArgument with one problem per line.
  Status ToStatus() const;

 private:
  std::vector<std::string> lines_;
};

// Returns ConfigReader's message for a value that has the right type but is not acceptable:
// "Invalid config value for key '<full key>' in '<file>': <why>".
std::string InvalidConfigValue(const Config& config, std::string_view key, std::string_view why);

// Returns the entry of `candidates` that `key` is most likely a misspelling of, or nullopt when
// none is close: at most one edit away for keys of up to five characters, two for longer ones (an
// edit inserts, deletes or replaces a character, or swaps two neighbours; case is ignored). A
// dotted candidate ("frequency.timeZone") is compared by its last part. The first of equally close
// candidates wins.
std::optional<std::string_view> NearestKey(std::string_view key,
                                           std::span<const std::string_view> candidates);

// Returns "unknown key '<key>'; did you mean '<nearest>'?" when NearestKey finds one among `known`
// and `elsewhere`, else "unknown key '<key>'; expected <known, comma-separated>".
std::string UnknownKeyMessage(std::string_view key, std::span<const std::string_view> known,
                              std::span<const std::string_view> elsewhere = {});

// Adds a problem for each key of the object `config` that is not in `known`:
// "Invalid config value for key '<full key>' in '<file>': <UnknownKeyMessage>". `elsewhere` lists
// keys that belong at other paths below `config` ("frequency.timeZone"): never accepted here, only
// suggested. A key that is empty or holds a dot cannot be named as part of a path, so its problem
// names the object instead: "Invalid config key '<object key>' in '<file>': unknown key ...".
// Returns whether every key is known (true when `config` is not an object).
bool AddUnknownKeys(const Config& config, std::span<const std::string_view> known,
                    ConfigProblems& problems, std::span<const std::string_view> elsewhere = {});

}  // namespace stagehand
