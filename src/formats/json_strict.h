// Internal helper of the formats module: JSON parsing that rejects duplicate object keys.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace perfx::formats_detail {

/// Parses the JSON text in [begin, end). Throws perfx::Error "<origin>: invalid JSON: ..." on a
/// syntax error (incl. ill-formed UTF-8) and "<origin>: duplicate key 'K' in JSON" when an object
/// holds the same key twice (nlohmann would silently keep the last one).
nlohmann::json parse_json_no_duplicates(const char* begin, const char* end,
                                        const std::string& origin);

/// Short rendering of a JSON value for error messages (at most ~60 characters).
std::string json_snippet(const nlohmann::json& j);

}  // namespace perfx::formats_detail
