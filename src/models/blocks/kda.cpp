#include "models/blocks/kda.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/ops.h"

namespace sluice {

namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x / (1.0f + std::exp(-x)); }
}  // namespace

namespace {

// Causal depthwise conv over one sequence's rows with its carried taps, then SiLU. raw/out: rows at stride `ld`.
// Channels are independent, so they are split over the pool (no bit depends on the split).
void short_conv(const std::vector<float>& weight, int64_t P, int64_t K, float* taps, const float* raw, int64_t m,
                int64_t ld, float* out, ThreadPool& pool) {
    pool.parallel_for(P, [&](int64_t c0, int64_t c1) {
        std::vector<float> win(static_cast<size_t>(K));
        for (int64_t ch = c0; ch < c1; ++ch) {
            float* tp = taps + ch * (K - 1);
            const float* wc = weight.data() + ch * K;
            for (int64_t j = 0; j < m; ++j) {
                std::copy_n(tp, K - 1, win.data());
                win[size_t(K - 1)] = raw[j * ld + ch];
                float s = 0;
                for (int64_t i = 0; i < K; ++i) s += wc[i] * win[size_t(i)];
                out[j * ld + ch] = silu(s);
                std::copy_n(win.data() + 1, K - 1, tp);
            }
        }
    }, 64);
}

void l2_normalise(float* x, int64_t D, float scale) {
    float ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += x[d] * x[d];
    const float inv = 1.0f / std::sqrt(ss + 1e-6f);
    for (int64_t d = 0; d < D; ++d) x[d] = x[d] * inv * scale;
}

}  // namespace

uint64_t kda_scratch_bytes(const KdaConfig& c, int64_t n) {
    using A = ScratchArena;
    const int64_t H = c.n_heads, D = c.head_dim, P = c.proj_dim();
    // raw q|k|v, f, g, gate, o and beta; then the low-rank gate input, or one sequence's gathered rows
    return A::f32_bytes(3 * n * P) + 4 * A::f32_bytes(n * P) + A::f32_bytes(n * H) +
           std::max(A::f32_bytes(n * D), 4 * A::f32_bytes(n * 3 * P) + A::f32_bytes(n * H));
}

void kda_forward(const KdaConfig& c, const KdaWeights& w, const float* x, int64_t n, const std::vector<KdaSeqRows>& seqs,
                 float* out, ThreadPool& pool, ScratchArena& arena, KdaForm form) {
    const int64_t H = c.n_heads, D = c.head_dim, P = c.proj_dim(), K = c.conv_kernel;
    const int64_t nP = n * P;
    ScratchArena::Scope scope(arena);
    float* raw = arena.f32(3 * nP);
    float* f = arena.f32(nP);
    float* g = arena.f32(nP);
    float* gate = arena.f32(nP);
    float* o = arena.f32(nP);
    float* beta = arena.f32(n * H);
    for (int p = 0; p < 3; ++p) ops::matmul(p == 0 ? w.q_proj : p == 1 ? w.k_proj : w.v_proj, x, n, raw + p * nP, pool);
    {
        ScratchArena::Scope fa_scope(arena);
        float* fa = arena.f32(n * D);
        ops::matmul(w.f_a_proj, x, n, fa, pool);
        ops::matmul(w.f_b_proj, fa, n, f, pool);
        if (c.full_rank_gate) {
            ops::matmul(w.g_proj, x, n, gate, pool);
        } else {
            ops::matmul(w.g_a_proj, x, n, fa, pool);
            ops::matmul(w.g_b_proj, fa, n, gate, pool);
        }
        ops::matmul(w.b_proj, x, n, beta, pool);
    }
    for (int64_t i = 0; i < n * H; ++i) beta[i] = sigmoid(beta[i]);
    // the elementwise loops below are split over the pool by rows: each element's arithmetic is unchanged
    pool.parallel_for(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
            for (int64_t h = 0; h < H; ++h) {
                const float a = std::exp(w.A_log[size_t(h)]);
                for (int64_t d = 0; d < D; ++d) {
                    const size_t j = size_t(i * P + h * D + d);
                    const float u = f[j] + w.dt_bias[size_t(h * D + d)];
                    if (c.gate_lower_bound < 0) {
                        g[j] = c.gate_lower_bound * sigmoid(a * u);
                    } else {
                        const float sp = u > 20.0f ? u : std::log(1.0f + std::exp(u));
                        g[j] = -a * sp;
                    }
                }
            }
    });

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
            short_conv(cw, P, K, s.state->conv.data() + p * P * (K - 1), sraw + p * P, m, 3 * P, sq + p * P, pool);
        }
        pool.parallel_for(m, [&](int64_t j0, int64_t j1) {
            for (int64_t j = j0; j < j1; ++j)
                for (int64_t h = 0; h < H; ++h) {
                    l2_normalise(sq + j * 3 * P + h * D, D, scale);
                    l2_normalise(sq + j * 3 * P + P + h * D, D, 1.0f);
                }
        });
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
        pool.parallel_for(H, [&](int64_t h0, int64_t h1) {
            // q/k/v interleaved per row ([q|k|v] of width 3P); g and o in 3P-strided rows too
            for (int64_t h = h0; h < h1; ++h) {
                KdaHeadIo io{sq + h * D, sq + P + h * D, sq + 2 * P + h * D, sg + h * D, sb + h, so + h * D, 3 * P, H};
                float* S = s.state->state.data() + h * D * D;
                if (form == KdaForm::Chunked && m > 1)
                    kda_chunked(io, m, D, c.chunk_size, S);
                else
                    kda_recurrent(io, m, D, S);
            }
        });
        for (int64_t j = 0; j < m; ++j) std::copy_n(so + j * 3 * P, P, o + s.rows[size_t(j)] * P);
    }

    // gated RMSNorm per head, then o_proj
    pool.parallel_for(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
            for (int64_t h = 0; h < H; ++h) {
                float* oh = o + i * P + h * D;
                ops::rms_norm(oh, w.o_norm.data(), 1, D, c.norm_eps, oh);
                const float* gt = gate + i * P + h * D;
                for (int64_t d = 0; d < D; ++d) oh[d] *= sigmoid(gt[d]);
            }
    });
    ops::matmul(w.o_proj, o, n, out, pool);
}

}  // namespace sluice
