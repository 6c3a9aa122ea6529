// The decoder shared by Qwen3-MoE and Mixtral: pre-norm layers of grouped-query attention (blocks/gqa_attention)
// and either a softmax-routed MoE without shared experts or a dense SwiGLU MLP, then a final RMSNorm and the LM
// head. Each architecture file (qwen3_moe.cpp, mixtral.cpp) reads its config.json into a GqaMoeConfig, names its
// tensors with GqaMoeNames and calls make_gqa_moe_model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "formats/hf_config.h"
#include "models/blocks/gqa_attention.h"
#include "models/model.h"

namespace sluice {

struct GqaMoeConfig {
    std::string architecture, model_type;
    int64_t vocab_size = 0, hidden_size = 0, num_hidden_layers = 0;
    int64_t intermediate_size = 0;      // dense layers
    int64_t moe_intermediate_size = 0;  // one routed expert
    int64_t n_experts = 0, top_k = 0;
    bool norm_topk_prob = true;
    GqaConfig attn;                     // heads, head_dim, scale, window; hidden_size filled in too
    bool attention_bias = false;        // q/k/v/o biases
    bool qk_norm = false;               // per-head q_norm / k_norm (Qwen3)
    double rms_norm_eps = 1e-6;
    RopeParameters rope;
    bool tie_word_embeddings = false;
    std::vector<bool> is_moe;           // per layer
    int32_t bos_token_id = -1;
    std::vector<int32_t> eos_token_ids;
    int64_t max_position_embeddings = 0;
};

// Where a layer's MoE tensors live, after "model.layers.L.".
struct GqaMoeNames {
    std::string moe_prefix;                          // hub: "mlp." (Qwen3) or "block_sparse_moe." (Mixtral)
    std::string expert_gate, expert_up, expert_down;  // per-expert linear names: gate_proj/up_proj/down_proj, w1/w3/w2
    std::string fused_prefix = "mlp.";               // transformers 5 in memory: gate.weight, experts.gate_up_proj
};

// Common fields from config.json (errors name the field): vocab/hidden/layers/heads/kv heads/head_dim, norms, RoPE,
// tie, bos/eos. default_theta: rope_theta when the config has none (Mixtral's class default is 1e6).
GqaMoeConfig parse_gqa_moe_common(const JsonObject& j, double default_theta);

// Checks the filled config (positive sizes, head divisibility, top_k range) naming the file's fields.
void validate_gqa_moe(const GqaMoeConfig& c, const std::string& what);

// The activation scratch of a pass of `rows` rows (Model::activation_bytes).
uint64_t gqa_moe_activation_bytes(const GqaMoeConfig& c, int64_t rows);

std::unique_ptr<Model> make_gqa_moe_model(const std::string& dir, const GqaMoeConfig& cfg, const GqaMoeNames& names,
                                          const LoadOptions& opt);

}  // namespace sluice
