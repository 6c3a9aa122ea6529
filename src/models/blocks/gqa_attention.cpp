#include "models/blocks/gqa_attention.h"

#include <algorithm>

#include "core/error.h"
#include "core/phase_times.h"
#include "models/blocks/row_runs.h"
#include "ops/elementwise.h"
#include "ops/ops.h"

namespace sluice {

namespace {
void add_bias(float* y, int64_t n, const std::vector<float>& b) {
    if (!b.empty()) ops::add_bias(y, b.data(), n, int64_t(b.size()));
}
}  // namespace

uint64_t gqa_scratch_bytes(const GqaConfig& c, int64_t n) {
    using A = ScratchArena;
    // q, k, v, o
    return 2 * A::f32_bytes(n * c.q_width()) + 2 * A::f32_bytes(n * c.kv_width());
}

void gqa_forward(const GqaConfig& c, const GqaWeights& w, const Rope& rope, const float* x, int64_t n,
                 const int64_t* positions, std::span<const GqaSeqRows> seqs, float* out, ExecContext& ctx) {
    phase_times::Scope timed(phase_times::kGqa);
    ScratchArena& arena = ctx.arena();
    const int64_t H = c.n_heads, G = c.n_kv_heads, D = c.head_dim, qw = c.q_width(), kw = c.kv_width();
    SLUICE_ASSERT(H > 0 && G > 0 && H % G == 0 && D > 0, "gqa: bad head configuration");
    ScratchArena::Scope scope(arena);
    float* q = arena.f32(n * qw);
    float* k = arena.f32(n * kw);
    float* v = arena.f32(n * kw);
    ops::matmul(w.q_proj, x, n, q, ctx);
    ops::matmul(w.k_proj, x, n, k, ctx);
    ops::matmul(w.v_proj, x, n, v, ctx);
    add_bias(q, n, w.q_bias);
    add_bias(k, n, w.k_bias);
    add_bias(v, n, w.v_bias);
    if (!w.q_norm.empty()) ops::rms_norm(q, w.q_norm.data(), n * H, D, c.qk_norm_eps, q);
    if (!w.k_norm.empty()) ops::rms_norm(k, w.k_norm.data(), n * G, D, c.qk_norm_eps, k);
    if (c.use_rope) {
        for (int64_t i = 0; i < n; ++i) {
            if (c.rope_interleave) {
                rope.apply_interleaved(q + i * qw, H, D, positions[i]);
                rope.apply_interleaved(k + i * kw, G, D, positions[i]);
            } else {
                rope.apply_half(q + i * qw, H, D, positions[i]);
                rope.apply_half(k + i * kw, G, D, positions[i]);
            }
        }
    }
    for (const auto& s : seqs) {
        for (int64_t r : s.rows) {
            std::copy_n(k + r * kw, kw, s.cache->k.write_row(positions[r]));
            std::copy_n(v + r * kw, kw, s.cache->v.write_row(positions[r]));
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
    float* o = arena.f32(n * qw);  // every row belongs to one sequence: all written
    // in place, a contiguous run of a sequence's batch rows at a time (as MLA: a row depends on its own query only)
    for (const auto& s : seqs)
        for_each_run(s.rows, [&](int64_t r0, int64_t m) {
            ops::attention(ap, q + r0 * qw, m, positions + r0, s.cache->k.view(), s.cache->v.view(), o + r0 * qw, ctx);
        });
    ops::matmul(w.o_proj, o, n, out, ctx);
    add_bias(out, n, w.o_bias);
}

}  // namespace sluice
