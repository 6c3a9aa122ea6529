#include "formats/hf_config.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace sluice {

struct JsonObject::Impl {
    nlohmann::json j;
};

JsonObject::JsonObject() : impl_(std::make_unique<Impl>()) { impl_->j = nlohmann::json::object(); }
JsonObject::~JsonObject() = default;
JsonObject::JsonObject(const JsonObject& o) : impl_(std::make_unique<Impl>(*o.impl_)), what_(o.what_) {}
JsonObject& JsonObject::operator=(const JsonObject& o) {
    impl_ = std::make_unique<Impl>(*o.impl_);
    what_ = o.what_;
    return *this;
}

JsonObject JsonObject::parse(const std::string& text, const std::string& what) {
    JsonObject o;
    o.what_ = what;
    try {
        o.impl_->j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail(what, ": not valid JSON: ", e.what());
    }
    if (!o.impl_->j.is_object()) fail(what, ": top level is not a JSON object");
    return o;
}

JsonObject JsonObject::load_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) fail(path, ": cannot open");
    std::stringstream ss;
    ss << f.rdbuf();
    return parse(ss.str(), path);
}

bool JsonObject::has(const std::string& key) const {
    auto it = impl_->j.find(key);
    return it != impl_->j.end() && !it->is_null();
}

#define FIELD what_, ": field '", key, "'"

int64_t JsonObject::get_int(const std::string& key) const {
    if (!has(key)) fail(FIELD, " is missing");
    const auto& v = impl_->j[key];
    if (v.is_number_unsigned()) {
        if (v.get<uint64_t>() <= uint64_t(INT64_MAX)) return v.get<int64_t>();
    } else if (v.is_number_integer()) {
        return v.get<int64_t>();
    } else if (v.is_number_float()) {
        // A whole number inside int64's range (casting anything else, 3e32 or NaN, is undefined).
        const double d = v.get<double>();
        if (d >= -0x1p63 && d < 0x1p63 && d == std::trunc(d)) return int64_t(d);
    }
    fail(FIELD, " must be an integer, got ", v.dump());
}

int64_t JsonObject::get_int(const std::string& key, int64_t fallback) const {
    return has(key) ? get_int(key) : fallback;
}

double JsonObject::get_float(const std::string& key) const {
    if (!has(key)) fail(FIELD, " is missing");
    const auto& v = impl_->j[key];
    if (!v.is_number()) fail(FIELD, " must be a number, got ", v.dump());
    return v.get<double>();
}

double JsonObject::get_float(const std::string& key, double fallback) const {
    return has(key) ? get_float(key) : fallback;
}

bool JsonObject::get_bool(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const auto& v = impl_->j[key];
    if (!v.is_boolean()) fail(FIELD, " must be true or false, got ", v.dump());
    return v.get<bool>();
}

std::string JsonObject::get_string(const std::string& key) const {
    if (!has(key)) fail(FIELD, " is missing");
    const auto& v = impl_->j[key];
    if (!v.is_string()) fail(FIELD, " must be a string, got ", v.dump());
    return v.get<std::string>();
}

std::string JsonObject::get_string(const std::string& key, const std::string& fallback) const {
    return has(key) ? get_string(key) : fallback;
}

std::vector<int64_t> JsonObject::get_int_list(const std::string& key) const {
    if (!has(key)) fail(FIELD, " is missing");
    const auto& v = impl_->j[key];
    std::vector<int64_t> out;
    if (v.is_number_integer()) return {v.get<int64_t>()};
    if (!v.is_array()) fail(FIELD, " must be a list of integers, got ", v.dump());
    for (const auto& e : v) {
        if (!e.is_number_integer()) fail(FIELD, " must be a list of integers, got ", v.dump());
        out.push_back(e.get<int64_t>());
    }
    return out;
}

std::vector<std::string> JsonObject::get_string_list(const std::string& key) const {
    if (!has(key)) fail(FIELD, " is missing");
    const auto& v = impl_->j[key];
    std::vector<std::string> out;
    if (!v.is_array()) fail(FIELD, " must be a list of strings, got ", v.dump());
    for (const auto& e : v) {
        if (!e.is_string()) fail(FIELD, " must be a list of strings, got ", v.dump());
        out.push_back(e.get<std::string>());
    }
    return out;
}

std::optional<JsonObject> JsonObject::get_object(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const auto& v = impl_->j[key];
    if (!v.is_object()) fail(FIELD, " must be an object, got ", v.dump());
    JsonObject o;
    o.impl_->j = v;
    o.what_ = what_ + ": " + key;
    return o;
}

std::string JsonObject::dump() const { return impl_->j.dump(); }

#undef FIELD

RopeParameters parse_rope_parameters(const JsonObject& cfg) {
    RopeParameters r;
    r.rope_theta = cfg.get_float("rope_theta", 10000.0);
    std::optional<JsonObject> rs = cfg.get_object("rope_parameters");
    if (!rs) rs = cfg.get_object("rope_scaling");
    if (!rs) return r;
    r.rope_theta = rs->get_float("rope_theta", r.rope_theta);
    if (rs->has("rope_type"))
        r.rope_type = rs->get_string("rope_type");
    else if (rs->has("type"))
        r.rope_type = rs->get_string("type");
    if (r.rope_type != "default" && r.rope_type != "yarn" && r.rope_type != "linear")
        fail(rs->what(), ": rope type '", r.rope_type, "' is not supported (default, linear, yarn)");
    r.factor = rs->get_float("factor", 1.0);
    if (r.rope_type != "default" && !(r.factor > 0)) fail(rs->what(), ": field 'factor' must be > 0");
    r.beta_fast = rs->get_float("beta_fast", 32.0);
    r.beta_slow = rs->get_float("beta_slow", 1.0);
    r.mscale = rs->get_float("mscale", 0.0);
    r.mscale_all_dim = rs->get_float("mscale_all_dim", 0.0);
    if (rs->has("attention_factor")) r.attention_factor = rs->get_float("attention_factor");
    r.original_max_position_embeddings = rs->get_int("original_max_position_embeddings", 0);
    r.truncate = rs->get_bool("truncate", true);
    return r;
}

void require_positive(const std::string& where, std::initializer_list<std::pair<const char*, int64_t>> fields) {
    for (const auto& [name, v] : fields) SLUICE_CHECK(v > 0, where, ": field '", name, "' must be > 0, got ", v);
}

}  // namespace sluice
