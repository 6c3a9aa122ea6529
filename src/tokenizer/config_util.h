// Small helpers shared by the tokenizer loaders for reading tokenizer_config.json.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"

namespace sluice::tok {

inline nlohmann::json parse_json(std::string_view text, const std::string& origin) {
    if (text.empty()) return nlohmann::json::object();
    try {
        nlohmann::json j = nlohmann::json::parse(text);
        SLUICE_CHECK(j.is_object(), "tokenizer: ", origin, " is not a JSON object");
        return j;
    } catch (const nlohmann::json::exception& e) {
        fail("tokenizer: ", origin, " is not valid JSON: ", e.what());
    }
}

// bos_token / eos_token may be a string, an AddedToken object with "content", or null.
inline std::optional<std::string> config_token(const nlohmann::json& config, const char* key) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        return (*it)["content"].get<std::string>();
    fail("tokenizer_config.json: field ", key, " is neither a string nor an object with \"content\"");
}

inline bool config_flag(const nlohmann::json& config, const char* key, bool fallback) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return fallback;
    SLUICE_CHECK(it->is_boolean(), "tokenizer_config.json: field ", key, " is not a boolean");
    return it->get<bool>();
}

}  // namespace sluice::tok
