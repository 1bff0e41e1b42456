#include "formats/json_strict.h"

#include <set>
#include <vector>

#include "perfx/status.h"

namespace perfx::formats_detail {

nlohmann::json parse_json_no_duplicates(const char* begin, const char* end,
                                        const std::string& origin) {
  using json = nlohmann::json;
  // One key set per currently open object.
  std::vector<std::set<std::string>> open_objects;
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty()) {
          const std::string& k = parsed.get_ref<const std::string&>();
          if (!open_objects.back().insert(k).second) {
            throw Error(origin + ": duplicate key '" + k + "' in JSON");
          }
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(begin, end, cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    throw Error(origin + ": invalid JSON: " + e.what());
  }
}

std::string json_snippet(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', /*ensure_ascii=*/true);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

}  // namespace perfx::formats_detail
