// config.json access with typed getters whose errors name the file and the field. Model config structs
// (models/*_config.h) are filled from this and keep the Hugging Face field names.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
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

// Throws "<where>: field 'NAME' must be > 0, got V" for the first of the {NAME, V} fields (in order) not > 0.
void require_positive(const std::string& where, std::initializer_list<std::pair<const char*, int64_t>> fields);

// The MLA attention fields of a hub config, read in this order into c's fields of the same names:
// num_attention_heads, q_lora_rank (0 when null or absent), kv_lora_rank, qk_nope/qk_rope/v head dims.
template <class C>
void read_mla_fields(const JsonObject& j, C& c) {
    c.num_attention_heads = j.get_int("num_attention_heads");
    c.q_lora_rank = j.get_int("q_lora_rank", 0);
    c.kv_lora_rank = j.get_int("kv_lora_rank");
    c.qk_nope_head_dim = j.get_int("qk_nope_head_dim");
    c.qk_rope_head_dim = j.get_int("qk_rope_head_dim");
    c.v_head_dim = j.get_int("v_head_dim");
}

}  // namespace sluice
