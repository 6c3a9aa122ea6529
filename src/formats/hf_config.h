// config.json access with typed getters whose errors name the file and the field. Model config structs
// (models/*_config.h) are filled from this and keep the Hugging Face field names.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice {

class JsonObject {
public:
    static JsonObject load_file(const std::string& path);    // throws Error naming the path
    static JsonObject parse(const std::string& text, const std::string& what);
    JsonObject();
    ~JsonObject();
    JsonObject(const JsonObject&);
    JsonObject& operator=(const JsonObject&);

    const std::string& what() const { return what_; }  // e.g. "m/config.json: text_config"
    bool has(const std::string& key) const;            // present and not null
    int64_t get_int(const std::string& key) const;
    int64_t get_int(const std::string& key, int64_t fallback) const;
    double get_float(const std::string& key) const;
    double get_float(const std::string& key, double fallback) const;
    bool get_bool(const std::string& key, bool fallback) const;
    std::string get_string(const std::string& key) const;
    std::string get_string(const std::string& key, const std::string& fallback) const;
    std::vector<int64_t> get_int_list(const std::string& key) const;  // also accepts a single int
    std::vector<std::string> get_string_list(const std::string& key) const;
    std::optional<JsonObject> get_object(const std::string& key) const;
    std::string dump() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string what_;
};

// RoPE parameters from either the hub form (rope_theta + rope_scaling{type|rope_type,...}) or the
// transformers-5 form (rope_parameters{rope_type, rope_theta, ...}).
struct RopeParameters {
    std::string rope_type = "default";  // default | yarn | linear | ...
    double rope_theta = 10000.0;
    double factor = 1.0;
    double beta_fast = 32.0, beta_slow = 1.0;
    double mscale = 0.0, mscale_all_dim = 0.0;  // 0 = absent
    std::optional<double> attention_factor;
    int64_t original_max_position_embeddings = 0;
    bool truncate = true;
};

RopeParameters parse_rope_parameters(const JsonObject& cfg);

}  // namespace sluice
