// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2) in the absorbed form: the cache holds, per token, the
// normalised latent c_kv [kv_lora_rank] followed by the rotated shared key k_pe [qk_rope_head_dim]; queries are
// projected into the latent space (W_UK^T q_nope) so attention runs as multi-query attention over the cache, and
// W_UV maps the attended latent back to each head's value. Same math as transformers' expanded form.
// Options for the Kimi family: no RoPE at all, and a sigmoid output gate read from the layer input.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/scratch_arena.h"
#include "ops/exec_context.h"
#include "models/blocks/rope.h"
#include "ops/weight.h"
#include "state/caches.h"

namespace sluice {

struct MlaConfig {
    int64_t hidden_size = 0;
    int64_t n_heads = 0;
    int64_t q_lora_rank = 0;  // 0: plain q_proj
    int64_t kv_lora_rank = 0;
    int64_t qk_nope_head_dim = 0;
    int64_t qk_rope_head_dim = 0;
    int64_t v_head_dim = 0;
    float softmax_scale = 1.0f;
    float q_a_eps = 1e-6f, kv_a_eps = 1e-6f;
    bool rope_interleave = true;
    bool use_rope = true;     // false: NoPE (Kimi Linear, K3): the "rope" dims are unrotated content dims
    bool output_gate = false; // K3: o *= sigmoid(g_proj x) (MlaWeights::g_proj bound)

    int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
    int64_t cache_width() const { return kv_lora_rank + qk_rope_head_dim; }
};

// The MLA shape of a DeepSeek-V3-style config (DeepSeek-V3, Kimi), fields under the hub's names; the scale, RoPE and
// gate settings are the caller's.
template <typename Config>
MlaConfig mla_shape(const Config& c) {
    return {.hidden_size = c.hidden_size, .n_heads = c.num_attention_heads, .q_lora_rank = c.q_lora_rank,
            .kv_lora_rank = c.kv_lora_rank, .qk_nope_head_dim = c.qk_nope_head_dim,
            .qk_rope_head_dim = c.qk_rope_head_dim, .v_head_dim = c.v_head_dim};
}

struct MlaWeights {
    Weight q_proj;                  // [H*qk_head_dim, hidden] when q_lora_rank == 0
    Weight q_a_proj;                // [q_lora_rank, hidden]
    std::vector<float> q_a_layernorm;  // [q_lora_rank]
    Weight q_b_proj;                // [H*qk_head_dim, q_lora_rank]
    Weight kv_a_proj_with_mqa;      // [kv_lora_rank + rope, hidden]
    std::vector<float> kv_a_layernorm; // [kv_lora_rank]
    Weight kv_b_proj;               // [H*(nope + v), kv_lora_rank]
    Weight g_proj;                  // optional output gate [H*v, hidden] (K3): o *= sigmoid(g_proj x); rows 0 = none
    Weight o_proj;                  // [hidden, H*v]
    std::vector<Weight*> matrices() { return {&q_proj, &q_a_proj, &q_b_proj, &kv_a_proj_with_mqa, &kv_b_proj, &g_proj, &o_proj}; }
};

// The rows of one sequence inside a batch: batch row indices (increasing positions) and that sequence's cache.
struct MlaSeqRows {
    std::span<const int64_t> rows;  // batch rows of this sequence, in position order (RowGroups' lists)
    MlaCache* cache = nullptr;
};

// out[n, hidden] = MLA(x[n, hidden]). positions[n]. Writes each row's cache entry at its position first. Its
// activations (queries, latents, absorbed queries, attended latents) come from ctx's arena. attend_to: null for causal
// attention (row i sees cache positions <= positions[i]); else row i sees positions <= attend_to[i] (a DSpark block
// whose rows all see the whole block: non-causal within it).
void mla_forward(const MlaConfig& c, const MlaWeights& w, const Rope& rope, const float* x, int64_t n,
                 const int64_t* positions, std::span<const MlaSeqRows> seqs, float* out, ExecContext& ctx,
                 const int64_t* attend_to = nullptr);
// What mla_forward carves for n rows.
uint64_t mla_scratch_bytes(const MlaConfig& c, int64_t n);

}  // namespace sluice
