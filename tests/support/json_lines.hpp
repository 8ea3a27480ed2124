// The tools' --json output: one JSON object per line among other text.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace rdmakit::testing {

/// The last line of `output` that starts with '{', parsed; null if there is none.
nlohmann::json last_json(const std::string& output);

}  // namespace rdmakit::testing
