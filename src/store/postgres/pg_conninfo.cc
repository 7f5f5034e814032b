#include <libpq-fe.h>

#include <map>
#include <string>

#include "stagehand/store/postgres_task_store.h"

namespace stagehand {

Result<std::map<std::string, std::string>> ParsePostgresConninfo(const std::string& conninfo) {
  char* message = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &message);
  if (options == nullptr) {
    std::string error = message != nullptr ? message : "cannot parse the connection string";
    while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) {
      error.pop_back();
    }
    PQfreemem(message);
    return InvalidArgumentError(error);
  }
  std::map<std::string, std::string> keywords;
  for (const PQconninfoOption* option = options; option->keyword != nullptr; ++option) {
    if (option->val != nullptr) keywords[option->keyword] = option->val;
  }
  PQconninfoFree(options);
  return keywords;
}

}  // namespace stagehand
