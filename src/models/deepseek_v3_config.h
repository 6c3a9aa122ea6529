// DeepseekV3ForCausalLM configuration (model_type deepseek_v3 and kimi_k2), with the Hugging Face field names.
// Reference: transformers models/deepseek_v3/configuration_deepseek_v3.py and the hub config.json files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/hf_config.h"

namespace sluice {

struct DeepseekV3Config {
    std::string model_type;
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;       // dense layers
    int64_t moe_intermediate_size = 0;   // per routed expert
    int64_t num_hidden_layers = 0;
    int64_t num_attention_heads = 0;
    int64_t q_lora_rank = 0;             // 0 = null (plain q_proj)
    int64_t kv_lora_rank = 0;
    int64_t qk_nope_head_dim = 0;
    int64_t qk_rope_head_dim = 0;
    int64_t v_head_dim = 0;
    int64_t n_routed_experts = 0;
    int64_t num_experts_per_tok = 0;
    int64_t n_shared_experts = 0;
    int64_t n_group = 1;
    int64_t topk_group = 1;
    int64_t first_k_dense_replace = 0;
    int64_t moe_layer_freq = 1;
    bool norm_topk_prob = true;
    double routed_scaling_factor = 1.0;
    std::string scoring_func = "sigmoid";
    std::string topk_method = "noaux_tc";
    double rms_norm_eps = 1e-6;
    bool tie_word_embeddings = false;
    bool rope_interleave = true;
    bool attention_bias = false;
    int64_t max_position_embeddings = 0;
    RopeParameters rope;
    int32_t bos_token_id = -1;
    std::vector<int32_t> eos_token_ids;

    int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
    // As transformers does: every layer from first_k_dense_replace on is MoE (moe_layer_freq is not consulted).
    bool is_moe_layer(int64_t il) const { return n_routed_experts > 0 && il >= first_k_dense_replace; }
    // Softmax scale: qk_head_dim^-1/2, times mscale(factor, mscale_all_dim)^2 for scaled RoPE (HF yarn_apply_mscale).
    float softmax_scale() const;

    static DeepseekV3Config from_json(const JsonObject& cfg);  // validates; errors name the field
};

}  // namespace sluice
