#include "models/blocks/gqa_attention.h"

#include <algorithm>

#include "core/error.h"
#include "ops/ops.h"

namespace sluice {

namespace {
void add_bias(float* y, int64_t n, const std::vector<float>& b) {
    if (b.empty()) return;
    const int64_t w = int64_t(b.size());
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < w; ++j) y[i * w + j] += b[size_t(j)];
}
}  // namespace

void gqa_forward(const GqaConfig& c, const GqaWeights& w, const Rope& rope, const float* x, int64_t n,
                 const int64_t* positions, std::span<const GqaSeqRows> seqs, float* out, ThreadPool& pool) {
    const int64_t H = c.n_heads, G = c.n_kv_heads, D = c.head_dim, qw = c.q_width(), kw = c.kv_width();
    SLUICE_ASSERT(H > 0 && G > 0 && H % G == 0 && D > 0, "gqa: bad head configuration");
    std::vector<float> q(static_cast<size_t>(n * qw)), k(static_cast<size_t>(n * kw)), v(static_cast<size_t>(n * kw));
    ops::matmul(w.q_proj, x, n, q.data(), pool);
    ops::matmul(w.k_proj, x, n, k.data(), pool);
    ops::matmul(w.v_proj, x, n, v.data(), pool);
    add_bias(q.data(), n, w.q_bias);
    add_bias(k.data(), n, w.k_bias);
    add_bias(v.data(), n, w.v_bias);
    if (!w.q_norm.empty()) ops::rms_norm(q.data(), w.q_norm.data(), n * H, D, c.qk_norm_eps, q.data());
    if (!w.k_norm.empty()) ops::rms_norm(k.data(), w.k_norm.data(), n * G, D, c.qk_norm_eps, k.data());
    if (c.use_rope) {
        for (int64_t i = 0; i < n; ++i) {
            if (c.rope_interleave) {
                rope.apply_interleaved(q.data() + i * qw, H, D, positions[i]);
                rope.apply_interleaved(k.data() + i * kw, G, D, positions[i]);
            } else {
                rope.apply_half(q.data() + i * qw, H, D, positions[i]);
                rope.apply_half(k.data() + i * kw, G, D, positions[i]);
            }
        }
    }
    for (const auto& s : seqs) {
        for (int64_t r : s.rows) {
            std::copy_n(k.data() + r * kw, kw, s.cache->k.write_row(positions[r]));
            std::copy_n(v.data() + r * kw, kw, s.cache->v.write_row(positions[r]));
        }
    }

    AttentionParams ap;
    ap.n_heads = H;
    ap.n_kv_heads = G;
    ap.head_dim_k = D;
    ap.head_dim_v = D;
    ap.scale = c.scale;
    ap.window = c.window;
    ap.sinks = w.sinks.empty() ? nullptr : w.sinks.data();
    std::vector<float> o(static_cast<size_t>(n * qw));
    std::vector<float> qs, os;
    std::vector<int64_t> pos;
    for (const auto& s : seqs) {
        // rows of one sequence are in general not contiguous in the batch: gather, attend, scatter
        const int64_t m = int64_t(s.rows.size());
        qs.resize(size_t(m * qw));
        os.resize(size_t(m * qw));
        pos.resize(size_t(m));
        for (int64_t j = 0; j < m; ++j) {
            std::copy_n(q.data() + s.rows[size_t(j)] * qw, qw, qs.data() + j * qw);
            pos[size_t(j)] = positions[s.rows[size_t(j)]];
        }
        ops::attention(ap, qs.data(), m, pos.data(), s.cache->k.view(), s.cache->v.view(), os.data(), pool);
        for (int64_t j = 0; j < m; ++j) std::copy_n(os.data() + j * qw, qw, o.data() + s.rows[size_t(j)] * qw);
    }
    ops::matmul(w.o_proj, o.data(), n, out, pool);
    add_bias(out, n, w.o_bias);
}

}  // namespace sluice
