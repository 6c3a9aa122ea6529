#include "models/draft_mla.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/weights.h"
#include "ops/ops.h"

namespace sluice {

namespace {

double yarn_mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; }

}  // namespace

DraftMla parse_draft_mla(const JsonObject& j, const std::string& where, int64_t hidden_size, double rms_norm_eps,
                         int64_t max_position_embeddings) {
    const std::string act = j.get_string("hidden_act", "silu");
    SLUICE_CHECK(act == "silu", where, ": field 'hidden_act' must be silu, got '", act, "'");
    SLUICE_CHECK(!j.get_bool("mla_use_output_gate", false), where,
                 ": field 'mla_use_output_gate' true is not supported (the drafter's layout has no g_proj)");
    DraftMla out;
    MlaConfig& m = out.mla;
    m.hidden_size = hidden_size;
    m.n_heads = j.get_int("num_attention_heads");
    m.q_lora_rank = j.get_int("q_lora_rank");
    m.kv_lora_rank = j.get_int("kv_lora_rank");
    m.qk_nope_head_dim = j.get_int("qk_nope_head_dim");
    m.qk_rope_head_dim = j.get_int("qk_rope_head_dim");
    m.v_head_dim = j.get_int("v_head_dim");
    require_positive(where, {{"num_attention_heads", m.n_heads}, {"q_lora_rank", m.q_lora_rank},
                             {"kv_lora_rank", m.kv_lora_rank}, {"qk_nope_head_dim", m.qk_nope_head_dim},
                             {"qk_rope_head_dim", m.qk_rope_head_dim}, {"v_head_dim", m.v_head_dim}});
    SLUICE_CHECK(m.qk_rope_head_dim % 2 == 0, where, ": field 'qk_rope_head_dim' must be even, got ",
                 m.qk_rope_head_dim);
    m.q_a_eps = m.kv_a_eps = float(rms_norm_eps);
    m.rope_interleave = true;
    m.use_rope = !j.get_bool("mla_use_nope", false);
    m.output_gate = false;
    RopeParameters& rope = out.rope;
    rope = parse_rope_parameters(j);
    SLUICE_CHECK(rope.rope_theta > 0, where, ": field 'rope_theta' must be > 0");
    if (rope.rope_type == "yarn") {
        if (rope.original_max_position_embeddings == 0) rope.original_max_position_embeddings = max_position_embeddings;
        SLUICE_CHECK(rope.original_max_position_embeddings > 0, where,
                     ": rope scaling field 'original_max_position_embeddings' must be > 0");
    }
    double s = 1.0 / std::sqrt(double(m.qk_head_dim()));
    if (rope.rope_type == "yarn" && rope.mscale_all_dim != 0.0) {
        const double ms = yarn_mscale(rope.factor, rope.mscale_all_dim);
        s *= ms * ms;
    }
    m.softmax_scale = float(s);
    return out;
}

void check_drafter_fits(const std::string& where, int64_t hidden_size, int64_t target_hidden_size, int64_t vocab_size,
                        const ModelInfo& target, const char* why) {
    SLUICE_CHECK(hidden_size == target.hidden_size, where, ": field 'hidden_size' ", hidden_size,
                 " differs from the target's hidden_size ", target.hidden_size, " (", why, ")");
    SLUICE_CHECK(target_hidden_size == target.hidden_size, where, ": field 'target_hidden_size' ", target_hidden_size,
                 " differs from the target's hidden_size ", target.hidden_size);
    SLUICE_CHECK(vocab_size == target.vocab_size, where, ": field 'vocab_size' ", vocab_size,
                 " differs from the target's vocab_size ", target.vocab_size);
}

MlaWeights bind_draft_mla(const Checkpoint& ck, const std::string& a, const MlaConfig& m, int64_t in_width) {
    const int64_t H = m.n_heads;
    MlaWeights w;
    w.q_a_proj = bind_linear(ck, a + "q_a_proj", m.q_lora_rank, in_width);
    w.q_a_layernorm = load_f32(ck, a + "q_a_layernorm.weight", {m.q_lora_rank});
    w.q_b_proj = bind_linear(ck, a + "q_b_proj", H * m.qk_head_dim(), m.q_lora_rank);
    w.kv_a_proj_with_mqa = bind_linear(ck, a + "kv_a_proj_with_mqa", m.cache_width(), in_width);
    w.kv_a_layernorm = load_f32(ck, a + "kv_a_layernorm.weight", {m.kv_lora_rank});
    w.kv_b_proj = bind_linear(ck, a + "kv_b_proj", H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank);
    w.o_proj = bind_linear(ck, a + "o_proj", m.hidden_size, H * m.v_head_dim);
    return w;
}

void write_draft_mla_cache(const MlaConfig& m, const MlaWeights& w, const Rope& rope, const float* x, int64_t n,
                           int64_t pos0, MlaCache& cache, float* kva, ExecContext& ctx) {
    const int64_t cw = m.cache_width();
    ops::matmul(w.kv_a_proj_with_mqa, x, n, kva, ctx);
    for (int64_t i = 0; i < n; ++i) {
        float* row = kva + i * cw;
        ops::rms_norm(row, w.kv_a_layernorm.data(), 1, m.kv_lora_rank, m.kv_a_eps, row);
        if (m.use_rope) rope.apply_interleaved(row + m.kv_lora_rank, 1, m.qk_rope_head_dim, pos0 + i);
        std::copy_n(row, cw, cache.data.write_row(pos0 + i));
    }
}

}  // namespace sluice
