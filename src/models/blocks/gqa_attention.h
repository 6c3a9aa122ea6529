// Grouped-query attention with a per-sequence KV cache (Qwen3-MoE, Mixtral; general enough for gpt-oss):
// q/k/v projections with optional biases, optional per-head RMSNorm of q and k (Qwen3) before RoPE, RoPE on the
// first rope.dim() of every head (half-split NeoX layout, or interleaved pairs), cache append, ops::attention
// (GQA, optional sliding window and per-head sink logits), then o_proj (optional bias).
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

struct GqaConfig {
    int64_t hidden_size = 0;
    int64_t n_heads = 0;
    int64_t n_kv_heads = 0;   // divides n_heads
    int64_t head_dim = 0;
    float scale = 1.0f;       // multiplies q.k (usually head_dim^-0.5)
    float qk_norm_eps = 1e-6f;
    bool use_rope = true;
    bool rope_interleave = false;  // false: half-split pairs (i, i + d/2) as Llama/Qwen/Mixtral
    int64_t window = 0;       // > 0: a row at position p sees keys (p - window, p]; 0 = full causal

    int64_t q_width() const { return n_heads * head_dim; }
    int64_t kv_width() const { return n_kv_heads * head_dim; }
};

struct GqaWeights {
    Weight q_proj, k_proj, v_proj;   // [H*D, hidden], [G*D, hidden], [G*D, hidden]
    Weight o_proj;                   // [hidden, H*D]
    std::vector<float> q_bias, k_bias, v_bias, o_bias;  // empty = no bias
    std::vector<float> q_norm, k_norm;                  // [head_dim] RMSNorm weights, empty = none
    std::vector<float> sinks;                           // [n_heads] sink logits, empty = none
    std::vector<Weight*> matrices() { return {&q_proj, &k_proj, &v_proj, &o_proj}; }
};

// The rows of one sequence inside a batch: batch row indices (increasing positions) and that sequence's cache.
struct GqaSeqRows {
    std::span<const int64_t> rows;  // batch rows of this sequence, in position order (RowGroups' lists)
    KvCache* cache = nullptr;
};

// out[n, hidden] = attention(x[n, hidden]) at positions[n]. Writes each row's k/v at its position first, so rows of
// one sequence in the same batch see each other causally. Runs in ctx (its backend and pool; scratch from its arena).
void gqa_forward(const GqaConfig& c, const GqaWeights& w, const Rope& rope, const float* x, int64_t n,
                 const int64_t* positions, std::span<const GqaSeqRows> seqs, float* out, ExecContext& ctx);
// What gqa_forward carves for n rows.
uint64_t gqa_scratch_bytes(const GqaConfig& c, int64_t n);

}  // namespace sluice
