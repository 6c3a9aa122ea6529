#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/hf_config.h"
#include "models/blocks/rope.h"
#include "models/deepseek_v3_config.h"

using namespace sluice;

namespace {
const char* kBase = R"({"model_type":"kimi_k2","vocab_size":256,"hidden_size":64,"intermediate_size":128,
 "moe_intermediate_size":32,"num_hidden_layers":2,"num_attention_heads":4,"q_lora_rank":null,"kv_lora_rank":32,
 "qk_nope_head_dim":16,"qk_rope_head_dim":8,"v_head_dim":16,"n_routed_experts":8,"num_experts_per_tok":2,
 "n_shared_experts":1,"n_group":1,"topk_group":1,"first_k_dense_replace":1,"routed_scaling_factor":2.827,
 "rope_theta":50000.0,"rope_scaling":{"type":"yarn","factor":32.0,"beta_fast":1.0,"beta_slow":1.0,"mscale":1.0,
 "mscale_all_dim":1.0,"original_max_position_embeddings":4096},"eos_token_id":[163585,163586]})";

std::string with(const std::string& key, const std::string& value) {
    auto j = nlohmann::json::parse(kBase);
    j[key] = nlohmann::json::parse(value);
    return j.dump();
}

std::string config_error(const std::string& json) {
    try {
        DeepseekV3Config::from_json(JsonObject::parse(json, "config.json"));
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}
}  // namespace

TEST(Config, HubFormWithYarn) {
    auto c = DeepseekV3Config::from_json(JsonObject::parse(kBase, "config.json"));
    EXPECT_EQ(c.model_type, "kimi_k2");
    EXPECT_EQ(c.q_lora_rank, 0);
    EXPECT_EQ(c.rope.rope_type, "yarn");
    EXPECT_EQ(c.rope.factor, 32.0);
    EXPECT_EQ(c.rope.rope_theta, 50000.0);
    EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{163585, 163586}));
    // Kimi-K2 at real size: 192^-1/2 * (0.1 ln 32 + 1)^2 = 0.130861 (specs digest 1.4)
    c.qk_nope_head_dim = 128;
    c.qk_rope_head_dim = 64;
    EXPECT_NEAR(c.softmax_scale(), 0.130861, 1e-6);
}

TEST(Config, Transformers5RopeParameters) {
    std::string s = kBase;
    auto p = s.find("\"rope_theta\"");
    s = s.substr(0, p) +
        R"("rope_parameters":{"rope_type":"yarn","rope_theta":10000.0,"factor":40,"original_max_position_embeddings":4096}})";
    auto c = DeepseekV3Config::from_json(JsonObject::parse(s, "config.json"));
    EXPECT_EQ(c.rope.rope_type, "yarn");
    EXPECT_EQ(c.rope.rope_theta, 10000.0);
    EXPECT_EQ(c.rope.factor, 40.0);
    // no mscale_all_dim: softmax scale unchanged; cos/sin scaled by 0.1 ln(40) + 1
    EXPECT_NEAR(c.softmax_scale(), 1.0 / std::sqrt(24.0), 1e-7);
    Rope r(c.rope, 64);
    EXPECT_NEAR(r.attention_factor(), 0.1 * std::log(40.0) + 1.0, 1e-6);
}

TEST(Config, YarnFrequenciesMatchDigest) {
    // DeepSeek-V3: theta 10000, factor 40, beta 32/1, orig 4096, D=64 -> low=10, high=23 (specs digest 1.4)
    RopeParameters p;
    p.rope_type = "yarn";
    p.rope_theta = 10000;
    p.factor = 40;
    p.original_max_position_embeddings = 4096;
    p.mscale = p.mscale_all_dim = 1.0;
    Rope r(p, 64);
    const auto& f = r.inv_freq();
    for (int i = 0; i <= 10; ++i) EXPECT_FLOAT_EQ(f[size_t(i)], 1.0f / std::pow(10000.0f, 2.0f * float(i) / 64.0f));
    for (int i = 23; i < 32; ++i) EXPECT_NEAR(f[size_t(i)], 1.0 / std::pow(10000.0, 2.0 * i / 64.0) / 40.0, 1e-9);
    EXPECT_FLOAT_EQ(r.attention_factor(), 1.0f);  // mscale == mscale_all_dim
}

TEST(Config, ErrorsNameTheField) {
    struct Case {
        std::string json, needle;
    } cases[] = {
        {"{", "not valid JSON"},
        {"[]", "not a JSON object"},
        {with("hidden_size", "\"big\""), "'hidden_size' must be an integer"},
        {with("hidden_size", "3e32"), "'hidden_size' must be an integer"},  // found by fuzz_config (UB cast)
        {with("hidden_size", "64.5"), "'hidden_size' must be an integer"},
        {with("hidden_size", "18446744073709551615"), "'hidden_size' must be an integer"},
        {with("hidden_size", "0"), "'hidden_size' must be > 0"},
        {with("vocab_size", "null"), "'vocab_size' is missing"},
        {with("num_experts_per_tok", "9"), "'num_experts_per_tok' must be in [1, n_routed_experts=8]"},
        {with("n_group", "3"), "'n_group' (3) must divide n_routed_experts (8)"},
        {with("qk_rope_head_dim", "7"), "'qk_rope_head_dim' must be even"},
        {with("rope_scaling", R"({"type":"dynamic-ntk","factor":2})"), "rope type 'dynamic-ntk' is not supported"},
        {with("rope_scaling", R"({"type":"yarn","factor":-1})"), "'factor' must be > 0"},
        {with("eos_token_id", "\"x\""), "'eos_token_id' must be a list of integers"},
    };
    for (const auto& c : cases) {
        const std::string err = config_error(c.json);
        EXPECT_NE(err.find(c.needle), std::string::npos) << "expected '" << c.needle << "' in: " << err;
        EXPECT_EQ(err.rfind("config.json", 0), 0u) << err;
    }
}
