#include "models/blocks/mla.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/phase_times.h"
#include "models/blocks/row_runs.h"
#include "ops/elementwise.h"
#include "ops/mla_ops.h"
#include "ops/ops.h"

namespace sluice {

uint64_t mla_scratch_bytes(const MlaConfig& c, int64_t n) {
    using A = ScratchArena;
    const int64_t H = c.n_heads, cw = c.cache_width(), r_kv = c.kv_lora_rank, dv = c.v_head_dim;
    const uint64_t qa = c.q_lora_rank > 0 ? A::f32_bytes(n * c.q_lora_rank) : 0;
    // q, then kva, q_cat, lat, o and the output gate
    const uint64_t rest = A::f32_bytes(n * cw) + A::f32_bytes(n * H * cw) + A::f32_bytes(n * H * r_kv) +
                          A::f32_bytes(n * H * dv) + (c.output_gate ? A::f32_bytes(n * H * dv) : 0);
    return A::f32_bytes(n * H * c.qk_head_dim()) + std::max(qa, rest);
}

void mla_forward(const MlaConfig& c, const MlaWeights& w, const Rope& rope, const float* x, int64_t n,
                 const int64_t* positions, std::span<const MlaSeqRows> seqs, float* out, ExecContext& ctx,
                 const int64_t* attend_to) {
    phase_times::Scope timed(phase_times::kMla);
    ThreadPool& pool = ctx.pool();
    ScratchArena& arena = ctx.arena();
    const int64_t H = c.n_heads, dqk = c.qk_head_dim(), nope = c.qk_nope_head_dim, dr = c.qk_rope_head_dim;
    const int64_t r_kv = c.kv_lora_rank, cw = c.cache_width(), dv = c.v_head_dim;
    SLUICE_ASSERT(c.output_gate == (w.g_proj.rows > 0), "MLA: output gate configured ", c.output_gate,
                  " but g_proj rows ", w.g_proj.rows);
    ScratchArena::Scope scope(arena);

    // queries [n, H, dqk]
    float* q = arena.f32(n * H * dqk);
    if (c.q_lora_rank > 0) {
        ScratchArena::Scope qa_scope(arena);
        float* qa = arena.f32(n * c.q_lora_rank);
        ops::matmul(w.q_a_proj, x, n, qa, ctx);
        ops::rms_norm(qa, w.q_a_layernorm.data(), n, c.q_lora_rank, c.q_a_eps, qa);
        ops::matmul(w.q_b_proj, qa, n, q, ctx);
    } else {
        ops::matmul(w.q_proj, x, n, q, ctx);
    }
    // latent + shared rope key [n, r_kv + dr]
    float* kva = arena.f32(n * cw);
    ops::matmul(w.kv_a_proj_with_mqa, x, n, kva, ctx);
    for (int64_t i = 0; i < n; ++i) {
        float* row = kva + i * cw;
        ops::rms_norm(row, w.kv_a_layernorm.data(), 1, r_kv, c.kv_a_eps, row);
        float* qpe = q + i * H * dqk + nope;
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
        for (int64_t r : s.rows) std::copy_n(kva + r * cw, cw, s.cache->data.write_row(positions[r]));
    }

    // absorb: q_cat[n, H, cw] = [W_UK^h^T q_nope^h ; q_pe^h]
    const ops::MlaHeads heads{H, nope, dr, dv, r_kv};
    float* q_cat = arena.f32(n * H * cw);
    float* lat = arena.f32(n * H * r_kv);  // attended latents (every row belongs to one sequence: all written)
    float* o = arena.f32(n * H * dv);
    ops::mla_absorb(heads, w.kv_b_proj, q, n, q_cat, pool);

    AttentionParams ap;
    ap.n_heads = H;
    ap.n_kv_heads = 1;
    ap.head_dim_k = cw;
    ap.head_dim_v = r_kv;
    ap.scale = c.softmax_scale;
    // Each sequence's rows attend to its cache (all of this pass's entries are written above), in place, one
    // contiguous run of batch rows at a time (a whole prefill chunk is one run): an attention row depends only on its
    // own query, position and the cache, so no gather is needed.
    const int64_t* last_key = attend_to ? attend_to : positions;
    for (const auto& s : seqs) {
        const ops::RowView cache = s.cache->data.view();
        for_each_run(s.rows, [&](int64_t r0, int64_t m) {
            ops::attention(ap, q_cat + r0 * H * cw, m, last_key + r0, cache, cache, lat + r0 * H * r_kv, ctx);
        });
    }

    // o^h = W_UV^h lat^h
    ops::mla_unabsorb(heads, w.kv_b_proj, lat, n, o, pool);
    if (c.output_gate) {
        float* gate = arena.f32(n * H * dv);
        ops::matmul(w.g_proj, x, n, gate, ctx);
        ops::mul_sigmoid(gate, n * H * dv, o);
    }
    ops::matmul(w.o_proj, o, n, out, ctx);
}

}  // namespace sluice
