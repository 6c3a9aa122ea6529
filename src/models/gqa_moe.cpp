#include "models/gqa_moe.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "experts/expert_source.h"
#include "formats/checkpoint.h"
#include "models/blocks/moe.h"
#include "models/blocks/rope.h"
#include "models/expert_setup.h"
#include "models/moe_model.h"
#include "models/forward_common.h"
#include "models/model_info.h"
#include "models/weights.h"
#include "ops/elementwise.h"
#include "ops/ops.h"

namespace sluice {

namespace {

struct Layer {
    std::vector<float> input_layernorm, post_attention_layernorm;  // [hidden]
    GqaWeights attn;
    bool moe = false;
    SwigluWeights mlp;  // dense layers
    Weight router;      // [E, hidden]
};

std::vector<float> optional_f32(const Checkpoint& ck, const std::string& name, int64_t n, bool want) {
    if (!want) return {};
    return load_f32(ck, name, {n});
}

// Per-expert hub names, or the fused tensors transformers 5 holds in memory ([E, 2I, H] gate rows then up rows).
std::vector<ExpertWeights> bind_experts(const Checkpoint& ck, const std::string& layer, const GqaMoeNames& nm, int64_t E,
                                        int64_t inter, int64_t hidden) {
    const std::string fused = layer + nm.fused_prefix + "experts.";
    if (auto fused_views = bind_fused_experts(ck, fused, E, inter, hidden); !fused_views.empty()) return fused_views;
    std::vector<ExpertWeights> out(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
        const std::string p = layer + nm.moe_prefix + "experts." + std::to_string(e) + ".";
        out[size_t(e)].gate = bind_linear(ck, p + nm.expert_gate, inter, hidden);
        out[size_t(e)].up = bind_linear(ck, p + nm.expert_up, inter, hidden);
        out[size_t(e)].down = bind_linear(ck, p + nm.expert_down, hidden, inter);
    }
    return out;
}

class GqaMoeModel : public MoeModel {
public:
    GqaMoeModel(const std::string& dir, const GqaMoeConfig& cfg, const GqaMoeNames& nm, const LoadOptions& opt)
        : MoeModel(opt), ck_(dir), cfg_(cfg) {
        const auto& c = cfg_;
        const int64_t d = c.hidden_size, D = c.attn.head_dim;
        cfg_.attn.hidden_size = d;
        rope_ = Rope(c.rope, D);
        layout_ = gqa_state_layout(c.num_hidden_layers, c.attn.kv_width());

        embed_ = bind_matrix(ck_, "model.embed_tokens.weight", c.vocab_size, d);
        norm_ = load_f32(ck_, "model.norm.weight", {d});
        lm_head_ = bind_lm_head(ck_, dir, embed_, c.vocab_size, d, c.tie_word_embeddings);

        const int64_t E = c.n_experts, qw = c.attn.q_width(), kw = c.attn.kv_width();
        std::vector<std::vector<ExpertWeights>> experts(static_cast<size_t>(c.num_hidden_layers));
        for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
            const std::string p = "model.layers." + std::to_string(il) + ".";
            Layer L;
            L.input_layernorm = load_f32(ck_, p + "input_layernorm.weight", {d});
            L.post_attention_layernorm = load_f32(ck_, p + "post_attention_layernorm.weight", {d});
            const std::string a = p + "self_attn.";
            L.attn.q_proj = bind_linear(ck_, a + "q_proj", qw, d);
            L.attn.k_proj = bind_linear(ck_, a + "k_proj", kw, d);
            L.attn.v_proj = bind_linear(ck_, a + "v_proj", kw, d);
            L.attn.o_proj = bind_linear(ck_, a + "o_proj", d, qw);
            L.attn.q_bias = optional_f32(ck_, a + "q_proj.bias", qw, c.attention_bias);
            L.attn.k_bias = optional_f32(ck_, a + "k_proj.bias", kw, c.attention_bias);
            L.attn.v_bias = optional_f32(ck_, a + "v_proj.bias", kw, c.attention_bias);
            L.attn.o_bias = optional_f32(ck_, a + "o_proj.bias", d, c.attention_bias);
            L.attn.q_norm = optional_f32(ck_, a + "q_norm.weight", D, c.qk_norm);
            L.attn.k_norm = optional_f32(ck_, a + "k_norm.weight", D, c.qk_norm);
            if (c.is_moe[size_t(il)]) {
                L.moe = true;
                const std::string hub_gate = p + nm.moe_prefix + "gate.weight";
                L.router = bind_matrix(ck_, ck_.has(hub_gate) ? hub_gate : p + nm.fused_prefix + "gate.weight", E, d);
                experts[size_t(il)] = bind_experts(ck_, p, nm, E, c.moe_intermediate_size, d);
            } else {
                L.mlp = {bind_linear(ck_, p + "mlp.gate_proj", c.intermediate_size, d),
                         bind_linear(ck_, p + "mlp.up_proj", c.intermediate_size, d),
                         bind_linear(ck_, p + "mlp.down_proj", d, c.intermediate_size)};
            }
            layers_.push_back(std::move(L));
        }
        router_.n_experts = E;
        router_.top_k = c.top_k;
        router_.norm_topk_prob = c.norm_topk_prob;
        fill_info();
        SpineLayers spine;
        for (Layer& L : layers_) {
            auto& m = spine.emplace_back(L.attn.matrices());
            append_matrices(m, L.mlp.matrices());
        }
        finish_loading(ck_, std::move(experts), opt, info_.spine_bytes,
                       [&](int64_t rows, bool) { return gqa_moe_activation_bytes(cfg_, rows); },
                       std::move(spine));
    }

    void forward(ExecContext& ctx, const Batch& batch, std::span<SequenceState* const> seqs,
                 std::vector<float>& logits) override {
        const auto& c = cfg_;
        const int64_t n = batch.size(), d = c.hidden_size;
        const float eps = float(c.rms_norm_eps);
        const RowGroups& rows_of = group_rows(rows_of_, batch, seqs, c.vocab_size, layout_.get());

        auto [pass, x, h, y] = EmbeddedPass(ctx, embed_, batch, d);

        std::vector<GqaSeqRows>& seq_rows = seq_rows_;  // grown once
        seq_rows.clear();
        for (auto& [s, rows] : rows_of) seq_rows.push_back({rows, nullptr});
        for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
            experts_.begin_layer(il);
            const Layer& L = layers_[size_t(il)];
            ops::rms_norm(x, L.input_layernorm.data(), n, d, eps, h);
            size_t j = 0;
            for (auto& [s, rows] : rows_of) seq_rows[j++].cache = &seqs[size_t(s)]->kv(il);
            gqa_forward(c.attn, L.attn, rope_, h, n, batch.positions.data(), seq_rows, y, ctx);
            ops::add(x, y, n * d, x);

            ops::rms_norm(x, L.post_attention_layernorm.data(), n, d, eps, h);
            if (L.moe) {
                const Routing& r = route_softmax(router_, L.router, h, n, ctx);
                moe_forward(il, r, *experts_.source, nullptr, h, n, d, y, ctx);
            } else {
                swiglu_forward(L.mlp, h, n, y, ctx);
            }
            ops::add(x, y, n * d, x);
        }
        finish_pass(ctx, batch, seqs, rows_of, x, d, eps, logits);
    }

private:
    void fill_info() {
        const auto& c = cfg_;
        info_.architecture = c.architecture;
        info_.model_type = c.model_type;
        info_.vocab_size = c.vocab_size;
        info_.hidden_size = c.hidden_size;
        info_.num_hidden_layers = c.num_hidden_layers;
        info_.n_routed_experts = c.n_experts;
        info_.num_experts_per_tok = c.top_k;
        info_.n_shared_experts = 0;
        info_.bos_token_id = c.bos_token_id;
        info_.eos_token_ids = c.eos_token_ids;
        info_.max_position_embeddings = c.max_position_embeddings;
        for (const auto& L : layers_) info_.n_moe_layers += L.moe ? 1 : 0;
        fill_param_counts(ck_, info_, c.n_experts, c.top_k, c.tie_word_embeddings, c.vocab_size, c.hidden_size);
    }

    Checkpoint ck_;
    GqaMoeConfig cfg_;
    Rope rope_;
    RouterParams router_;
    std::vector<Layer> layers_;
    std::vector<GqaSeqRows> seq_rows_;  // a pass's sequences and their caches, per layer
};

}  // namespace

// x, h, y for the pass; then the largest of one layer's attention, one layer's FFN and the head.
uint64_t gqa_moe_activation_bytes(const GqaMoeConfig& c, int64_t rows) {
    const int64_t n = rows, d = c.hidden_size;
    uint64_t peak = head_scratch_bytes(n, d);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const uint64_t ffn =
            c.is_moe[size_t(l)]
                ? std::max(route_scratch_bytes(n, c.n_experts),
                           moe_scratch_bytes(n, c.top_k, d, c.moe_intermediate_size, 0, 0))
                : swiglu_scratch_bytes(n, c.intermediate_size);
        peak = std::max({peak, gqa_scratch_bytes(c.attn, n), ffn});
    }
    return 3 * ScratchArena::f32_bytes(n * d) + peak;
}

GqaMoeConfig parse_gqa_moe_common(const JsonObject& j, double default_theta) {
    GqaMoeConfig c;
    c.vocab_size = j.get_int("vocab_size");
    c.hidden_size = j.get_int("hidden_size");
    c.num_hidden_layers = j.get_int("num_hidden_layers");
    c.attn.n_heads = j.get_int("num_attention_heads");
    c.attn.n_kv_heads = j.get_int("num_key_value_heads", c.attn.n_heads);
    SLUICE_CHECK(c.attn.n_heads > 0, j.what(), ": field 'num_attention_heads' must be > 0, got ", c.attn.n_heads);
    c.attn.head_dim = j.has("head_dim") ? j.get_int("head_dim") : c.hidden_size / c.attn.n_heads;
    c.rms_norm_eps = j.get_float("rms_norm_eps", 1e-6);
    c.rope = parse_rope_parameters(j);
    bool has_theta = j.has("rope_theta");
    for (const char* key : {"rope_parameters", "rope_scaling"})
        if (auto rp = j.get_object(key)) has_theta = has_theta || rp->has("rope_theta");
    if (!has_theta) c.rope.rope_theta = default_theta;
    c.tie_word_embeddings = j.get_bool("tie_word_embeddings", false);
    c.max_position_embeddings = j.get_int("max_position_embeddings", 4096);
    if (c.rope.rope_type == "yarn" && c.rope.original_max_position_embeddings == 0)
        c.rope.original_max_position_embeddings = c.max_position_embeddings;
    c.bos_token_id = int32_t(j.get_int("bos_token_id", -1));
    if (j.has("eos_token_id"))
        for (auto id : j.get_int_list("eos_token_id")) c.eos_token_ids.push_back(int32_t(id));
    const std::string act = j.get_string("hidden_act", "silu");
    SLUICE_CHECK(act == "silu", j.what(), ": field 'hidden_act' '", act, "' is not supported (silu)");
    c.attn.scale = float(1.0 / std::sqrt(double(c.attn.head_dim)));
    c.attn.qk_norm_eps = float(c.rms_norm_eps);
    return c;
}

void validate_gqa_moe(const GqaMoeConfig& c, const std::string& w) {
    auto positive = [&](const char* name, int64_t v) { SLUICE_CHECK(v > 0, w, ": field '", name, "' must be > 0, got ", v); };
    positive("vocab_size", c.vocab_size);
    positive("hidden_size", c.hidden_size);
    positive("num_hidden_layers", c.num_hidden_layers);
    positive("num_key_value_heads", c.attn.n_kv_heads);
    positive("head_dim", c.attn.head_dim);
    SLUICE_CHECK(c.attn.n_heads % c.attn.n_kv_heads == 0, w, ": num_attention_heads (", c.attn.n_heads,
                 ") must be a multiple of num_key_value_heads (", c.attn.n_kv_heads, ")");
    SLUICE_CHECK(c.attn.head_dim % 2 == 0, w, ": head_dim must be even for RoPE, got ", c.attn.head_dim);
    SLUICE_CHECK(c.rms_norm_eps > 0, w, ": field 'rms_norm_eps' must be > 0");
    SLUICE_CHECK(c.rope.rope_theta > 0, w, ": rope_theta must be > 0");
    SLUICE_CHECK(c.attn.window >= 0, w, ": field 'sliding_window' must be >= 0");
    SLUICE_CHECK(int64_t(c.is_moe.size()) == c.num_hidden_layers, w, ": MoE layer list does not cover every layer");
    const bool any_moe = std::find(c.is_moe.begin(), c.is_moe.end(), true) != c.is_moe.end();
    const bool any_dense = std::find(c.is_moe.begin(), c.is_moe.end(), false) != c.is_moe.end();
    if (any_moe) {
        positive("moe_intermediate_size", c.moe_intermediate_size);
        positive("num_experts", c.n_experts);
        SLUICE_CHECK(c.top_k > 0 && c.top_k <= c.n_experts, w, ": field 'num_experts_per_tok' must be in [1, ",
                     c.n_experts, "], got ", c.top_k);
    }
    if (any_dense) positive("intermediate_size", c.intermediate_size);
}

std::unique_ptr<Model> make_gqa_moe_model(const std::string& dir, const GqaMoeConfig& cfg, const GqaMoeNames& names,
                                          const LoadOptions& opt) {
    return std::make_unique<GqaMoeModel>(dir, cfg, names, opt);
}

}  // namespace sluice
