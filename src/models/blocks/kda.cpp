#include "models/blocks/kda.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/phase_times.h"
#include "ops/elementwise.h"
#include "ops/kda.h"
#include "ops/kda_ops.h"
#include "ops/ops.h"

namespace sluice {

uint64_t kda_scratch_bytes(const KdaConfig& c, int64_t n) {
    using A = ScratchArena;
    const int64_t H = c.n_heads, D = c.head_dim, P = c.proj_dim();
    // raw q|k|v, f, g, gate, o and beta; then the low-rank gate input, or one sequence's gathered rows
    return A::f32_bytes(3 * n * P) + 4 * A::f32_bytes(n * P) + A::f32_bytes(n * H) +
           std::max(A::f32_bytes(n * D), 4 * A::f32_bytes(n * 3 * P) + A::f32_bytes(n * H));
}

void kda_forward(const KdaConfig& c, const KdaWeights& w, const float* x, int64_t n, std::span<const KdaSeqRows> seqs,
                 float* out, ExecContext& ctx, KdaForm form) {
    phase_times::Scope timed(phase_times::kKda);
    ThreadPool& pool = ctx.pool();
    ScratchArena& arena = ctx.arena();
    const int64_t H = c.n_heads, D = c.head_dim, P = c.proj_dim(), K = c.conv_kernel;
    const int64_t nP = n * P;
    ScratchArena::Scope scope(arena);
    float* raw = arena.f32(3 * nP);
    float* f = arena.f32(nP);
    float* g = arena.f32(nP);
    float* gate = arena.f32(nP);
    float* o = arena.f32(nP);
    float* beta = arena.f32(n * H);
    for (int p = 0; p < 3; ++p) ops::matmul(p == 0 ? w.q_proj : p == 1 ? w.k_proj : w.v_proj, x, n, raw + p * nP, ctx);
    {
        ScratchArena::Scope fa_scope(arena);
        float* fa = arena.f32(n * D);
        ops::matmul(w.f_a_proj, x, n, fa, ctx);
        ops::matmul(w.f_b_proj, fa, n, f, ctx);
        if (c.full_rank_gate) {
            ops::matmul(w.g_proj, x, n, gate, ctx);
        } else {
            ops::matmul(w.g_a_proj, x, n, fa, ctx);
            ops::matmul(w.g_b_proj, fa, n, gate, ctx);
        }
        ops::matmul(w.b_proj, x, n, beta, ctx);
    }
    ops::sigmoid(beta, n * H, beta);
    ops::kda_decay_gate(f, w.A_log.data(), w.dt_bias.data(), n, H, D, c.gate_lower_bound, g, pool);

    const float scale = 1.0f / std::sqrt(float(D));
    // one sequence's rows gathered (for at most n rows): raw q|k|v and their conv [m, 3P]; g and o at the same
    // stride 3P as q/k/v, so each head's kernel reads and writes them in place; beta [m, H]
    float* sraw = arena.f32(n * 3 * P);
    float* sq = arena.f32(n * 3 * P);
    float* sg = arena.f32(n * 3 * P);
    float* so = arena.f32(n * 3 * P);
    float* sb = arena.f32(n * H);
    for (const auto& s : seqs) {
        const int64_t m = int64_t(s.rows.size());
        SLUICE_ASSERT(s.state && !s.state->state.empty(), "KDA state not initialised");
        // gather this sequence's rows: [m, 3P] raw, then conv, normalise
        for (int64_t j = 0; j < m; ++j) {
            const int64_t r = s.rows[size_t(j)];
            for (int p = 0; p < 3; ++p) std::copy_n(raw + p * nP + r * P, P, sraw + j * 3 * P + p * P);
            std::copy_n(g + r * P, P, sg + j * 3 * P);
            std::copy_n(beta + r * H, H, sb + j * H);
        }
        for (int p = 0; p < 3; ++p) {
            const auto& cw = p == 0 ? w.q_conv : p == 1 ? w.k_conv : w.v_conv;
            ops::kda_short_conv(cw.data(), P, K, s.state->conv.data() + p * P * (K - 1), sraw + p * P, m, 3 * P,
                                sq + p * P, pool);
        }
        ops::l2_norm_heads(sq, m, H, D, 3 * P, scale, pool);
        ops::l2_norm_heads(sq + P, m, H, D, 3 * P, 1.0f, pool);
        if (s.state->journaling) {
            // what a rollback replays (state/caches.h): raw q|k|v, then k, v, g, beta
            KdaState& st = *s.state;
            const int64_t W = st.journal_width();
            const size_t at = st.journal.size();
            st.journal.resize(at + size_t(m * W));
            for (int64_t j = 0; j < m; ++j) {
                float* row = st.journal.data() + at + size_t(j * W);
                std::copy_n(sraw + j * 3 * P, 3 * P, row);
                std::copy_n(sq + j * 3 * P + P, 2 * P, row + 3 * P);
                std::copy_n(sg + j * 3 * P, P, row + 5 * P);
                std::copy_n(sb + j * H, H, row + 6 * P);
            }
        }
        // q/k/v interleaved per row ([q|k|v] of width 3P); g and o in 3P-strided rows too
        const KdaHeadIo io{sq, sq + P, sq + 2 * P, sg, sb, so, 3 * P, H};
        float* S = s.state->state.data();
        phase_times::Scope rule_timed(phase_times::kKdaDeltaRule);
        if (form == KdaForm::Chunked && m > 1)
            pool.parallel_for(H, [&](int64_t h0, int64_t h1) {
                for (int64_t h = h0; h < h1; ++h) {
                    const int64_t at = h * D;
                    KdaHeadIo one{sq + at, sq + P + at, sq + 2 * P + at, sg + at, sb + h, so + at, 3 * P, H};
                    kda_chunked(one, m, D, c.chunk_size, S + at * D);
                }
            });
        else
            ops::kda_recurrent_heads(io, H, m, D, S, ctx);
        for (int64_t j = 0; j < m; ++j) std::copy_n(so + j * 3 * P, P, o + s.rows[size_t(j)] * P);
    }

    // gated RMSNorm per head, then o_proj
    ops::kda_output_gate(gate, w.o_norm.data(), n, H, D, c.norm_eps, o, pool);
    ops::matmul(w.o_proj, o, n, out, ctx);
}

}  // namespace sluice
