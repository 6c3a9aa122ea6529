// Kimi Delta Attention (Kimi Linear, Kimi K3): q/k/v projections through short causal depthwise convolutions
// (SiLU), per-head L2-normalised q/k, a per-channel log-decay gate, a per-head beta, and a gated delta rule over a
// fp32 [D_k, D_v] state per head; output is RMSNorm(o) * weight * sigmoid(gate), then o_proj.
// Two evaluation forms of the delta rule: recurrent (token by token) and chunked (WY/UT transform per chunk, as
// transformers' chunk_kimi_delta_attention); they agree to fp32 rounding, not bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/scratch_arena.h"
#include "ops/exec_context.h"
#include "ops/weight.h"
#include "ops/kda.h"
#include "state/caches.h"

namespace sluice {

struct KdaConfig {
    int64_t hidden_size = 0;
    int64_t n_heads = 0;
    int64_t head_dim = 0;          // D = D_k = D_v
    int64_t conv_kernel = 4;
    float norm_eps = 1e-5f;        // o_norm (rms_norm_eps)
    float gate_lower_bound = 0;    // 0: Kimi Linear gate -exp(A)*softplus(f+dt); <0: K3 lb*sigmoid(exp(A)*(f+dt))
    bool full_rank_gate = false;   // output gate g_proj [P, hidden] (K3) instead of g_b_proj(g_a_proj(x))
    int64_t chunk_size = 64;

    int64_t proj_dim() const { return n_heads * head_dim; }
};

struct KdaWeights {
    Weight q_proj, k_proj, v_proj;          // [P, hidden]
    std::vector<float> q_conv, k_conv, v_conv;  // [P, conv_kernel]; tap conv_kernel-1 multiplies the current token
    Weight f_a_proj, f_b_proj;              // [D, hidden], [P, D]
    std::vector<float> A_log;               // [H]
    std::vector<float> dt_bias;             // [P]
    Weight b_proj;                          // [H, hidden]
    Weight g_a_proj, g_b_proj;              // low-rank output gate [D, hidden], [P, D]
    Weight g_proj;                          // full-rank output gate [P, hidden]
    std::vector<float> o_norm;              // [D]
    Weight o_proj;                          // [hidden, P]
    std::vector<Weight*> matrices() {
        return {&q_proj, &k_proj, &v_proj, &f_a_proj, &f_b_proj, &b_proj, &g_a_proj, &g_b_proj, &g_proj, &o_proj};
    }
};

struct KdaSeqRows {
    std::span<const int64_t> rows;  // batch rows of this sequence, in position order
    KdaState* state = nullptr;
};

enum class KdaForm { Recurrent, Chunked };

// out[n, hidden] = KDA(x[n, hidden]); each sequence's rows are run in order through its state. `form` chooses how
// a sequence's rows are evaluated (Chunked: chunks of chunk_size starting at that sequence's first row).
// It runs in ctx (its backend and pool); its activations come from ctx's arena.
void kda_forward(const KdaConfig& c, const KdaWeights& w, const float* x, int64_t n, std::span<const KdaSeqRows> seqs,
                 float* out, ExecContext& ctx, KdaForm form);
// What kda_forward carves for n rows.
uint64_t kda_scratch_bytes(const KdaConfig& c, int64_t n);

}  // namespace sluice
