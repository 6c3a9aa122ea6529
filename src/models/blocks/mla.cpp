#include "models/blocks/mla.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/mla_ops.h"
#include "ops/ops.h"

namespace sluice {

void mla_forward(const MlaConfig& c, const MlaWeights& w, const Rope& rope, const float* x, int64_t n,
                 const int64_t* positions, std::span<const MlaSeqRows> seqs, float* out, ThreadPool& pool) {
    const int64_t H = c.n_heads, dqk = c.qk_head_dim(), nope = c.qk_nope_head_dim, dr = c.qk_rope_head_dim;
    const int64_t r_kv = c.kv_lora_rank, cw = c.cache_width(), dv = c.v_head_dim;

    // queries [n, H, dqk]
    std::vector<float> q(static_cast<size_t>(n * H * dqk));
    if (c.q_lora_rank > 0) {
        std::vector<float> qa(static_cast<size_t>(n * c.q_lora_rank));
        ops::matmul(w.q_a_proj, x, n, qa.data(), pool);
        ops::rms_norm(qa.data(), w.q_a_layernorm.data(), n, c.q_lora_rank, c.q_a_eps, qa.data());
        ops::matmul(w.q_b_proj, qa.data(), n, q.data(), pool);
    } else {
        ops::matmul(w.q_proj, x, n, q.data(), pool);
    }
    // latent + shared rope key [n, r_kv + dr]
    std::vector<float> kva(static_cast<size_t>(n * cw));
    ops::matmul(w.kv_a_proj_with_mqa, x, n, kva.data(), pool);
    for (int64_t i = 0; i < n; ++i) {
        float* row = kva.data() + i * cw;
        ops::rms_norm(row, w.kv_a_layernorm.data(), 1, r_kv, c.kv_a_eps, row);
        float* qpe = q.data() + i * H * dqk + nope;
        if (!c.use_rope) {
            // NoPE: k_pe and q_pe are used as they are
        } else if (c.rope_interleave) {
            rope.apply_interleaved(row + r_kv, 1, dr, positions[i]);
            rope.apply_interleaved(qpe, H, dqk, positions[i]);
        } else {
            rope.apply_half(row + r_kv, 1, dr, positions[i]);
            rope.apply_half(qpe, H, dqk, positions[i]);
        }
    }
    // append to caches
    for (const auto& s : seqs) {
        for (int64_t r : s.rows) std::copy_n(kva.data() + r * cw, cw, s.cache->data.write_row(positions[r]));
    }

    // absorb: q_cat[n, H, cw] = [W_UK^h^T q_nope^h ; q_pe^h]
    const ops::MlaHeads heads{H, nope, dr, dv, r_kv};
    std::vector<float> q_cat(static_cast<size_t>(n * H * cw));
    std::vector<float> lat(static_cast<size_t>(n * H * r_kv));  // attended latents
    std::vector<float> o(static_cast<size_t>(n * H * dv));
    ops::mla_absorb(heads, w.kv_b_proj, q.data(), n, q_cat.data(), pool);

    AttentionParams ap;
    ap.n_heads = H;
    ap.n_kv_heads = 1;
    ap.head_dim_k = cw;
    ap.head_dim_v = r_kv;
    ap.scale = c.softmax_scale;
    for (const auto& s : seqs) {
        // rows of one sequence are contiguous in neither q nor out in general: gather, attend, scatter
        const int64_t m = int64_t(s.rows.size());
        std::vector<float> qs(static_cast<size_t>(m * H * cw)), ls(static_cast<size_t>(m * H * r_kv));
        std::vector<int64_t> pos(static_cast<size_t>(m));
        for (int64_t j = 0; j < m; ++j) {
            std::copy_n(q_cat.data() + s.rows[size_t(j)] * H * cw, H * cw, qs.data() + j * H * cw);
            pos[size_t(j)] = positions[s.rows[size_t(j)]];
        }
        const ops::RowView cache = s.cache->data.view();
        ops::attention(ap, qs.data(), m, pos.data(), cache, cache, ls.data(), pool);
        for (int64_t j = 0; j < m; ++j)
            std::copy_n(ls.data() + j * H * r_kv, H * r_kv, lat.data() + s.rows[size_t(j)] * H * r_kv);
    }

    // o^h = W_UV^h lat^h
    ops::mla_unabsorb(heads, w.kv_b_proj, lat.data(), n, o.data(), pool);
    if (w.g_proj.rows > 0) {
        std::vector<float> gate(static_cast<size_t>(n * H * dv));
        ops::matmul(w.g_proj, x, n, gate.data(), pool);
        for (size_t i = 0; i < gate.size(); ++i) o[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
    }
    ops::matmul(w.o_proj, o.data(), n, out, pool);
}

}  // namespace sluice
