// An independent check that a JSON value is an instance of a schema, for the structured-output tests: the subset
// runtime/json_schema supports (type, properties, required, additionalProperties, items, minItems, maxItems,
// minLength, maxLength, minimum, maximum, exclusiveMinimum, exclusiveMaximum, enum, const, anyOf, $ref "#"), written
// straight from the JSON Schema rules rather than from the automaton.
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
    if (v.is_number()) {  // compared as long double: exact for the 64-bit integers the tests use
        const long double x = v.is_number_unsigned() ? (long double)v.get<uint64_t>()
                              : v.is_number_integer() ? (long double)v.get<int64_t>() : (long double)v.get<double>();
        const auto bound = [&](const char* k) { return (long double)s[k].get<double>(); };
        if (s.contains("minimum") && x < bound("minimum")) return false;
        if (s.contains("maximum") && x > bound("maximum")) return false;
        if (s.contains("exclusiveMinimum") && x <= bound("exclusiveMinimum")) return false;
        if (s.contains("exclusiveMaximum") && x >= bound("exclusiveMaximum")) return false;
    }
    if (v.is_string()) {  // lengths in code points
        size_t n = 0;
        for (unsigned char c : v.get<std::string>()) n += (c & 0xC0) != 0x80;
        if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
        if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
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
