// Shared by the Kimi Linear and Kimi K3 model files: the text config (hub field names, with the transformers
// aliases), binding of KDA and MLA layer weights, and the per-sequence state layout (KDA recurrent + conv state
// per KDA layer, MLA latent cache per MLA layer; rollback through snapshots, see state/sequence_state.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "models/blocks/kda.h"
#include "models/blocks/mla.h"
#include "models/blocks/moe.h"
#include "models/forward_common.h"
#include "models/model.h"

namespace sluice {

struct KimiConfig {
    std::string model_type;
    int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, moe_intermediate_size = 0;
    int64_t num_hidden_layers = 0, num_attention_heads = 0;
    int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
    int64_t n_routed_experts = 0, num_experts_per_tok = 0, n_shared_experts = 0, n_group = 1, topk_group = 1;
    bool norm_topk_prob = true;
    double routed_scaling_factor = 1.0;
    double rms_norm_eps = 1e-5;
    GluActivation act;
    bool tie_word_embeddings = false;
    int64_t max_position_embeddings = 0;
    int32_t bos_token_id = -1;
    std::vector<int32_t> eos_token_ids;
    // linear_attn_config
    int64_t kda_heads = 0, kda_head_dim = 0, conv_kernel = 4;
    float gate_lower_bound = 0;  // 0 = unbounded (Kimi Linear)
    bool full_rank_gate = false;
    std::vector<bool> is_mla;     // per layer (models/kimi_layout.h: either config form)
    std::vector<bool> is_sparse;  // per layer: MoE, else dense MLP
    // Kimi K3
    bool mla_output_gate = false;
    int64_t attn_res_block_size = 0;        // 0 = plain residual stream
    int64_t routed_expert_hidden_size = 0;  // 0 = experts read the full hidden state (no latent MoE)
    bool latent_moe_use_norm = false;

    int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
    bool is_moe_layer(int64_t il) const { return n_routed_experts > 0 && is_sparse[size_t(il)]; }
    KdaConfig kda() const;
    MlaConfig mla() const;
    RouterParams router() const;

    static KimiConfig from_json(const JsonObject& cfg);  // errors name the field
};

KdaWeights bind_kda(const Checkpoint& ck, const std::string& prefix, const KimiConfig& c);
MlaWeights bind_mla(const Checkpoint& ck, const std::string& prefix, const KimiConfig& c);
SwigluWeights bind_swiglu(const Checkpoint& ck, const std::string& prefix, int64_t inter, int64_t hidden);

// The activation scratch of a pass of `rows` rows (Model::activation_bytes; look_ahead: experts stream, so the
// next layer's router runs while a layer's experts are read).
uint64_t kimi_linear_activation_bytes(const KimiConfig& c, int64_t rows, bool look_ahead);
uint64_t kimi_k3_activation_bytes(const KimiConfig& c, int64_t rows, bool look_ahead);

// What a Kimi sequence holds: an MLA latent cache per MLA layer, KDA conv + recurrent state per KDA layer.
std::shared_ptr<const StateLayout> kimi_state_layout(const KimiConfig& c);

// Layer il's token mixer over the normed rows h [n, d] -> y: NoPE MLA on its latent caches when `mla`, else KDA on
// its recurrent state, for the batch's sequences (rows_of: group_rows).
void kimi_attention_forward(int64_t il, bool mla, const MlaConfig& mla_cfg, const MlaWeights& attn,
                            const KdaConfig& kda_cfg, const KdaWeights& kda, KdaForm form, const float* h, int64_t n,
                            const Batch& batch, std::span<SequenceState* const> seqs,
                            const RowGroups& rows_of, float* y, ExecContext& ctx);

}  // namespace sluice
