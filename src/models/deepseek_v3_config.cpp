#include "models/deepseek_v3_config.h"

#include <cmath>

#include "core/error.h"

namespace sluice {

namespace {
double yarn_get_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }
}  // namespace

float DeepseekV3Config::softmax_scale() const {
    double s = 1.0 / std::sqrt(double(qk_head_dim()));
    if (rope.rope_type != "default" && rope.mscale_all_dim != 0.0) {
        const double m = yarn_get_mscale(rope.factor, rope.mscale_all_dim);
        s = s * m * m;
    }
    return float(s);
}

DeepseekV3Config DeepseekV3Config::from_json(const JsonObject& j) {
    DeepseekV3Config c;
    c.model_type = j.get_string("model_type", "deepseek_v3");
    c.vocab_size = j.get_int("vocab_size");
    c.hidden_size = j.get_int("hidden_size");
    c.intermediate_size = j.get_int("intermediate_size");
    c.moe_intermediate_size = j.get_int("moe_intermediate_size");
    c.num_hidden_layers = j.get_int("num_hidden_layers");
    read_mla_fields(j, c);
    c.n_routed_experts = j.get_int("n_routed_experts", 0);
    c.num_experts_per_tok = j.get_int("num_experts_per_tok", 0);
    c.n_shared_experts = j.get_int("n_shared_experts", 0);
    c.n_group = j.get_int("n_group", 1);
    c.topk_group = j.get_int("topk_group", 1);
    c.first_k_dense_replace = j.get_int("first_k_dense_replace", 0);
    c.moe_layer_freq = j.get_int("moe_layer_freq", 1);
    c.norm_topk_prob = j.get_bool("norm_topk_prob", true);
    c.routed_scaling_factor = j.get_float("routed_scaling_factor", 1.0);
    c.scoring_func = j.get_string("scoring_func", "sigmoid");
    c.topk_method = j.get_string("topk_method", "noaux_tc");
    c.rms_norm_eps = j.get_float("rms_norm_eps", 1e-6);
    c.tie_word_embeddings = j.get_bool("tie_word_embeddings", false);
    c.rope_interleave = j.get_bool("rope_interleave", true);
    c.attention_bias = j.get_bool("attention_bias", false);
    c.max_position_embeddings = j.get_int("max_position_embeddings", 4096);
    c.rope = parse_rope_parameters(j);
    if (c.rope.rope_type == "yarn" && c.rope.original_max_position_embeddings == 0)
        c.rope.original_max_position_embeddings = c.max_position_embeddings;
    c.bos_token_id = int32_t(j.get_int("bos_token_id", -1));
    if (j.has("eos_token_id")) {
        for (auto id : j.get_int_list("eos_token_id")) c.eos_token_ids.push_back(int32_t(id));
    }

    const std::string& w = j.what();
    require_positive(w, {{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                         {"num_hidden_layers", c.num_hidden_layers}, {"num_attention_heads", c.num_attention_heads},
                         {"kv_lora_rank", c.kv_lora_rank}, {"qk_rope_head_dim", c.qk_rope_head_dim},
                         {"v_head_dim", c.v_head_dim}, {"moe_layer_freq", c.moe_layer_freq}});
    SLUICE_CHECK(c.qk_nope_head_dim >= 0, w, ": field 'qk_nope_head_dim' must be >= 0");
    SLUICE_CHECK(c.q_lora_rank >= 0, w, ": field 'q_lora_rank' must be >= 0 or null");
    SLUICE_CHECK(c.qk_rope_head_dim % 2 == 0, w, ": field 'qk_rope_head_dim' must be even, got ", c.qk_rope_head_dim);
    SLUICE_CHECK(c.first_k_dense_replace >= 0, w, ": field 'first_k_dense_replace' must be >= 0");
    if (c.n_routed_experts > 0) {
        require_positive(w, {{"moe_intermediate_size", c.moe_intermediate_size}});
        SLUICE_CHECK(c.num_experts_per_tok > 0 && c.num_experts_per_tok <= c.n_routed_experts, w,
                     ": field 'num_experts_per_tok' must be in [1, n_routed_experts=", c.n_routed_experts, "], got ",
                     c.num_experts_per_tok);
        SLUICE_CHECK(c.n_group > 0 && c.n_routed_experts % c.n_group == 0, w, ": field 'n_group' (", c.n_group,
                     ") must divide n_routed_experts (", c.n_routed_experts, ")");
        SLUICE_CHECK(c.topk_group > 0 && c.topk_group <= c.n_group, w, ": field 'topk_group' must be in [1, n_group]");
        SLUICE_CHECK(c.n_routed_experts / c.n_group >= 2, w, ": each expert group needs >= 2 experts (top-2 group score)");
        SLUICE_CHECK(c.num_experts_per_tok <= c.topk_group * (c.n_routed_experts / c.n_group), w,
                     ": num_experts_per_tok exceeds the experts left after group selection");
        SLUICE_CHECK(c.scoring_func == "sigmoid", w, ": field 'scoring_func' '", c.scoring_func,
                     "' is not supported (DeepseekV3 routes with sigmoid)");
    }
    if (c.first_k_dense_replace > 0 || c.n_routed_experts == 0)
        require_positive(w, {{"intermediate_size", c.intermediate_size}});
    SLUICE_CHECK(c.rms_norm_eps > 0, w, ": field 'rms_norm_eps' must be > 0");
    SLUICE_CHECK(c.rope.rope_theta > 0, w, ": rope_theta must be > 0");
    require_positive(w, {{"max_position_embeddings", c.max_position_embeddings}});
    if (c.rope.rope_type == "yarn")
        SLUICE_CHECK(c.rope.original_max_position_embeddings > 0, w,
                     ": rope scaling field 'original_max_position_embeddings' must be > 0");
    return c;
}

}  // namespace sluice
