#include "models/kimi_common.h"

#include <cmath>

#include "core/error.h"
#include "models/kimi_layout.h"
#include "models/weights.h"

namespace sluice {

namespace {
int64_t int_alias(const JsonObject& j, std::initializer_list<const char*> keys, int64_t fallback) {
    for (const char* k : keys)
        if (j.has(k)) return j.get_int(k);
    return fallback;
}
}  // namespace

KimiConfig KimiConfig::from_json(const JsonObject& j) {
    KimiConfig c;
    const std::string& w = j.what();
    c.model_type = j.get_string("model_type", "kimi_linear");
    c.vocab_size = j.get_int("vocab_size");
    c.hidden_size = j.get_int("hidden_size");
    c.intermediate_size = j.get_int("intermediate_size", 0);
    c.moe_intermediate_size = j.get_int("moe_intermediate_size", 0);
    c.num_hidden_layers = j.get_int("num_hidden_layers");
    read_mla_fields(j, c);
    c.n_routed_experts = int_alias(j, {"num_experts", "num_local_experts", "n_routed_experts"}, 0);
    c.num_experts_per_tok = int_alias(j, {"num_experts_per_token", "num_experts_per_tok"}, 0);
    c.n_shared_experts = int_alias(j, {"num_shared_experts", "n_shared_experts"}, 0);
    c.n_group = int_alias(j, {"num_expert_group", "n_group"}, 1);
    c.topk_group = j.get_int("topk_group", 1);
    c.norm_topk_prob = j.has("moe_renormalize") ? j.get_bool("moe_renormalize", true) : j.get_bool("norm_topk_prob", true);
    c.routed_scaling_factor = j.get_float("routed_scaling_factor", 1.0);
    c.rms_norm_eps = j.get_float("rms_norm_eps", 1e-5);
    const std::string act = j.get_string("hidden_act", "silu");
    if (act == "situ") {
        c.act.kind = GluActivation::Kind::Situ;
        c.act.beta = float(j.get_float("activation_situ_beta", 4.0));
        c.act.linear_beta = float(j.get_float("activation_situ_linear_beta", 25.0));
    } else {
        SLUICE_CHECK(act == "silu", w, ": field 'hidden_act' '", act, "' is not supported (silu or situ)");
    }
    c.tie_word_embeddings = j.get_bool("tie_word_embeddings", false);
    c.max_position_embeddings = int_alias(j, {"max_position_embeddings", "model_max_length"}, 0);
    c.bos_token_id = int32_t(j.get_int("bos_token_id", -1));
    if (j.has("eos_token_id"))
        for (auto id : j.get_int_list("eos_token_id")) c.eos_token_ids.push_back(int32_t(id));
    SLUICE_CHECK(j.get_bool("mla_use_nope", true), w,
                 ": field 'mla_use_nope' is false; only NoPE MLA (no rotary embedding) is supported");
    const std::string router = j.get_string("moe_router_activation_func", "sigmoid");
    SLUICE_CHECK(router == "sigmoid", w, ": field 'moe_router_activation_func' '", router, "' is not supported");

    // layer kinds and the KDA shape, from the hub's linear_attn_config or transformers 5's layer_types form
    KimiLayout lay = parse_kimi_layout(j, c.num_hidden_layers);
    c.kda_heads = lay.kda_heads;
    c.kda_head_dim = lay.kda_head_dim;
    c.conv_kernel = lay.conv_kernel;
    c.gate_lower_bound = lay.gate_lower_bound;
    c.full_rank_gate = lay.full_rank_gate;
    c.is_mla = std::move(lay.is_mla);
    c.is_sparse = std::move(lay.is_sparse);

    c.mla_output_gate = j.get_bool("mla_use_output_gate", false);
    c.attn_res_block_size = j.get_int("attn_res_block_size", 0);
    c.routed_expert_hidden_size = j.get_int("routed_expert_hidden_size", 0);
    c.latent_moe_use_norm = j.get_bool("latent_moe_use_norm", false);

    require_positive(w, {{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                         {"num_hidden_layers", c.num_hidden_layers}, {"num_attention_heads", c.num_attention_heads},
                         {"kv_lora_rank", c.kv_lora_rank}, {"v_head_dim", c.v_head_dim},
                         {lay.heads_field.c_str(), c.kda_heads}, {lay.head_dim_field.c_str(), c.kda_head_dim},
                         {lay.conv_field.c_str(), c.conv_kernel}});
    SLUICE_CHECK(c.qk_nope_head_dim >= 0 && c.qk_rope_head_dim >= 0 && c.q_lora_rank >= 0 && c.attn_res_block_size >= 0,
                 w, ": head dims, q_lora_rank and attn_res_block_size must be >= 0");
    SLUICE_CHECK(c.gate_lower_bound <= 0, w, ": linear_attn_config.gate_lower_bound must be <= 0");
    if (c.n_routed_experts > 0) {
        require_positive(w, {{"moe_intermediate_size", c.moe_intermediate_size}});
        SLUICE_CHECK(c.num_experts_per_tok > 0 && c.num_experts_per_tok <= c.n_routed_experts, w,
                     ": num_experts_per_token must be in [1, num_experts=", c.n_routed_experts, "]");
        SLUICE_CHECK(c.n_group > 0 && c.n_routed_experts % c.n_group == 0 && c.topk_group > 0 && c.topk_group <= c.n_group,
                     w, ": num_expert_group must divide num_experts and topk_group be in [1, num_expert_group]");
        SLUICE_CHECK(c.n_group == 1 || c.n_routed_experts / c.n_group >= 2, w, ": each expert group needs >= 2 experts");
    }
    bool any_dense = c.n_routed_experts == 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) any_dense = any_dense || !c.is_moe_layer(l);
    if (any_dense) require_positive(w, {{"intermediate_size", c.intermediate_size}});
    SLUICE_CHECK(c.rms_norm_eps > 0, w, ": field 'rms_norm_eps' must be > 0");
    return c;
}

KdaConfig KimiConfig::kda() const {
    KdaConfig k;
    k.hidden_size = hidden_size;
    k.n_heads = kda_heads;
    k.head_dim = kda_head_dim;
    k.conv_kernel = conv_kernel;
    k.norm_eps = float(rms_norm_eps);
    k.gate_lower_bound = gate_lower_bound;
    k.full_rank_gate = full_rank_gate;
    return k;
}

MlaConfig KimiConfig::mla() const {
    MlaConfig m = mla_shape(*this);
    m.softmax_scale = float(1.0 / std::sqrt(double(qk_head_dim())));
    m.use_rope = false;
    m.output_gate = mla_output_gate;
    return m;
}

RouterParams KimiConfig::router() const { return sigmoid_router_params(*this); }

KdaWeights bind_kda(const Checkpoint& ck, const std::string& a, const KimiConfig& c) {
    const int64_t d = c.hidden_size, H = c.kda_heads, D = c.kda_head_dim, P = H * D, K = c.conv_kernel;
    KdaWeights w;
    w.q_proj = bind_linear(ck, a + "q_proj", P, d);
    w.k_proj = bind_linear(ck, a + "k_proj", P, d);
    w.v_proj = bind_linear(ck, a + "v_proj", P, d);
    w.q_conv = load_f32(ck, a + "q_conv1d.weight", {P, 1, K});
    w.k_conv = load_f32(ck, a + "k_conv1d.weight", {P, 1, K});
    w.v_conv = load_f32(ck, a + "v_conv1d.weight", {P, 1, K});
    w.f_a_proj = bind_linear(ck, a + "f_a_proj", D, d);
    w.f_b_proj = bind_linear(ck, a + "f_b_proj", P, D);
    w.b_proj = bind_linear(ck, a + "b_proj", H, d);
    // A_log is per head: Kimi Linear stores [1, 1, H, 1]; K3 stores [128] = H values then zero padding.
    const TensorView al = ck.get(a + "A_log");
    const int64_t n_al = al.info->numel();
    SLUICE_CHECK(n_al >= H && (al.info->shape.size() == 1 || n_al == H), ck.dir(), ": tensor '", a, "A_log' has shape ",
                 shape_str(al.info->shape), ", expected [1, 1, ", H, ", 1], [", H, "] or a zero-padded [>= ", H, "]");
    w.A_log = load_f32(ck, a + "A_log", al.info->shape);
    w.A_log.resize(size_t(H));
    w.dt_bias = load_f32(ck, a + "dt_bias", {P});
    if (c.full_rank_gate) {
        w.g_proj = bind_linear(ck, a + "g_proj", P, d);
    } else {
        w.g_a_proj = bind_linear(ck, a + "g_a_proj", D, d);
        w.g_b_proj = bind_linear(ck, a + "g_b_proj", P, D);
    }
    w.o_norm = load_f32(ck, a + "o_norm.weight", {D});
    w.o_proj = bind_linear(ck, a + "o_proj", d, P);
    return w;
}

MlaWeights bind_mla(const Checkpoint& ck, const std::string& a, const KimiConfig& c) {
    const int64_t d = c.hidden_size, H = c.num_attention_heads;
    MlaWeights w;
    if (c.q_lora_rank > 0) {
        w.q_a_proj = bind_linear(ck, a + "q_a_proj", c.q_lora_rank, d);
        w.q_a_layernorm = load_f32(ck, a + "q_a_layernorm.weight", {c.q_lora_rank});
        w.q_b_proj = bind_linear(ck, a + "q_b_proj", H * c.qk_head_dim(), c.q_lora_rank);
    } else {
        w.q_proj = bind_linear(ck, a + "q_proj", H * c.qk_head_dim(), d);
    }
    w.kv_a_proj_with_mqa = bind_linear(ck, a + "kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_head_dim, d);
    w.kv_a_layernorm = load_f32(ck, a + "kv_a_layernorm.weight", {c.kv_lora_rank});
    w.kv_b_proj = bind_linear(ck, a + "kv_b_proj", H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
    if (c.mla_output_gate) w.g_proj = bind_linear(ck, a + "g_proj", H * c.v_head_dim, d);
    w.o_proj = bind_linear(ck, a + "o_proj", d, H * c.v_head_dim);
    return w;
}

SwigluWeights bind_swiglu(const Checkpoint& ck, const std::string& prefix, int64_t inter, int64_t hidden) {
    return {bind_linear(ck, prefix + "gate_proj", inter, hidden), bind_linear(ck, prefix + "up_proj", inter, hidden),
            bind_linear(ck, prefix + "down_proj", hidden, inter)};
}

std::shared_ptr<const StateLayout> kimi_state_layout(const KimiConfig& c) {
    auto layout = std::make_shared<StateLayout>();
    const KdaConfig k = c.kda();
    const MlaConfig m = c.mla();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (c.is_mla[size_t(l)])
            layout->add_latent(m.cache_width());
        else
            layout->add_kda(k.n_heads, k.head_dim, k.conv_kernel);
    }
    return layout;
}


// The layer's sequences with their caches: the calling thread's lists, grown once (a pass runs on one thread).
namespace {
thread_local std::vector<MlaSeqRows> t_mla_rows;
thread_local std::vector<KdaSeqRows> t_kda_rows;
}  // namespace

void kimi_attention_forward(int64_t il, bool mla, const MlaConfig& mla_cfg, const MlaWeights& attn,
                            const KdaConfig& kda_cfg, const KdaWeights& kda, KdaForm form, const float* h, int64_t n,
                            const Batch& batch, std::span<SequenceState* const> seqs,
                            const RowGroups& rows_of, float* y, ExecContext& ctx) {
    if (mla) {
        const Rope no_rope;
        std::vector<MlaSeqRows>& sr = t_mla_rows;
        sr.clear();
        for (const auto& [s, rows] : rows_of) sr.push_back({rows, &seqs[size_t(s)]->latent(il)});
        mla_forward(mla_cfg, attn, no_rope, h, n, batch.positions.data(), sr, y, ctx);
    } else {
        std::vector<KdaSeqRows>& sr = t_kda_rows;
        sr.clear();
        for (const auto& [s, rows] : rows_of) sr.push_back({rows, &seqs[size_t(s)]->kda(il)});
        kda_forward(kda_cfg, kda, h, n, sr, y, ctx, form);
    }
}

}  // namespace sluice
