// An independent check that a JSON value is an instance of a schema, for the structured-output tests: the subset
// runtime/json_schema supports (type, properties, required, additionalProperties, items, minItems, maxItems, enum,
// const, anyOf, $ref "#"), written straight from the JSON Schema rules rather than from the automaton.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace sluice::test {

inline bool is_instance(const nlohmann::json& v, const nlohmann::json& s, const nlohmann::json& root) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) return is_instance(v, root, root);
    if (s.contains("anyOf")) {
        for (const auto& a : s["anyOf"])
            if (is_instance(v, a, root)) return true;
        return false;
    }
    if (s.contains("const") && v != s["const"]) return false;
    if (s.contains("enum")) {
        bool found = false;
        for (const auto& e : s["enum"]) found = found || e == v;
        if (!found) return false;
    }
    if (s.contains("type")) {
        nlohmann::json types = s["type"].is_array() ? s["type"] : nlohmann::json::array({s["type"]});
        bool ok = false;
        for (const auto& t : types) {
            const std::string n = t.get<std::string>();
            ok = ok || (n == "object" && v.is_object()) || (n == "array" && v.is_array()) ||
                 (n == "string" && v.is_string()) || (n == "number" && v.is_number()) ||
                 (n == "integer" && (v.is_number_integer() || v.is_number_unsigned())) ||
                 (n == "boolean" && v.is_boolean()) || (n == "null" && v.is_null());
        }
        if (!ok) return false;
    }
    if (v.is_object()) {
        const nlohmann::json props = s.value("properties", nlohmann::json::object());
        for (const auto& r : s.value("required", nlohmann::json::array()))
            if (!v.contains(r.get<std::string>())) return false;
        for (const auto& [k, x] : v.items()) {
            if (props.contains(k)) {
                if (!is_instance(x, props[k], root)) return false;
            } else if (s.contains("additionalProperties")) {
                if (!is_instance(x, s["additionalProperties"], root)) return false;
            }
        }
    }
    if (v.is_array()) {
        if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
        if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
        if (s.contains("items"))
            for (const auto& x : v)
                if (!is_instance(x, s["items"], root)) return false;
    }
    return true;
}

inline bool is_instance(const nlohmann::json& v, const nlohmann::json& schema) { return is_instance(v, schema, schema); }

}  // namespace sluice::test
