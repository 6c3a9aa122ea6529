// DeepseekV3ForCausalLM (DeepSeek-V3/R1, Kimi K2): pre-norm decoder layers of MLA attention and either a dense
// SwiGLU MLP (layers < first_k_dense_replace) or a sigmoid-routed MoE with shared experts.
// Reference: transformers models/deepseek_v3/modeling_deepseek_v3.py; DeepSeek-V3 inference/model.py.
#include <algorithm>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "experts/expert_source.h"
#include "experts/streaming_expert_source.h"
#include "formats/checkpoint.h"
#include "models/blocks/mla.h"
#include "models/blocks/moe.h"
#include "models/deepseek_v3_config.h"
#include "models/expert_setup.h"
#include "models/moe_model.h"
#include "models/forward_common.h"
#include "models/model_info.h"
#include "models/architectures.h"
#include "models/weights.h"
#include "ops/elementwise.h"
#include "ops/ops.h"

namespace sluice {

uint64_t deepseek_v3_activation_bytes(const DeepseekV3Config& c, int64_t rows, bool look_ahead);

namespace {

struct Layer {
    std::vector<float> input_layernorm, post_attention_layernorm;  // [hidden]
    MlaWeights attn;
    SigmoidMoeFfn ffn;
};

// Experts under the hub's per-expert names, or the fused tensors transformers 5 writes.
std::vector<ExpertWeights> bind_experts(const Checkpoint& ck, const std::string& prefix, int64_t E, int64_t inter,
                                        int64_t hidden) {
    if (auto fused_views = bind_fused_experts(ck, prefix, E, inter, hidden); !fused_views.empty()) return fused_views;
    std::vector<ExpertWeights> out(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
        const std::string p = prefix + std::to_string(e) + ".";
        out[size_t(e)].gate = bind_linear(ck, p + "gate_proj", inter, hidden);
        out[size_t(e)].up = bind_linear(ck, p + "up_proj", inter, hidden);
        out[size_t(e)].down = bind_linear(ck, p + "down_proj", hidden, inter);
    }
    return out;
}

SwigluWeights bind_swiglu(const Checkpoint& ck, const std::string& prefix, int64_t inter, int64_t hidden) {
    return {bind_linear(ck, prefix + "gate_proj", inter, hidden), bind_linear(ck, prefix + "up_proj", inter, hidden),
            bind_linear(ck, prefix + "down_proj", hidden, inter)};
}

MlaConfig mla_config(const DeepseekV3Config& c) {
    MlaConfig m = mla_shape(c);
    m.softmax_scale = c.softmax_scale();
    m.rope_interleave = c.rope_interleave;
    return m;
}

RouterParams router_params(const DeepseekV3Config& c) { return sigmoid_router_params(c); }

class DeepseekV3Model : public MoeModel {
public:
    DeepseekV3Model(const std::string& dir, const JsonObject& json, const LoadOptions& opt)
        : MoeModel(opt), ck_(dir), cfg_(DeepseekV3Config::from_json(json)) {
        const auto& c = cfg_;
        const int64_t d = c.hidden_size;
        mla_ = mla_config(c);
        rope_ = Rope(c.rope, c.qk_rope_head_dim);
        {
            auto layout = std::make_shared<StateLayout>();
            for (int64_t l = 0; l < c.num_hidden_layers; ++l) layout->add_latent(mla_.cache_width());
            layout_ = std::move(layout);
        }

        embed_ = bind_matrix(ck_, "model.embed_tokens.weight", c.vocab_size, d);
        norm_ = load_f32(ck_, "model.norm.weight", {d});
        lm_head_ = bind_lm_head(ck_, dir, embed_, c.vocab_size, d, c.tie_word_embeddings);

        const int64_t H = c.num_attention_heads, E = c.n_routed_experts;
        std::vector<std::vector<ExpertWeights>> experts(static_cast<size_t>(c.num_hidden_layers));
        for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
            const std::string p = "model.layers." + std::to_string(il) + ".";
            Layer L;
            L.input_layernorm = load_f32(ck_, p + "input_layernorm.weight", {d});
            L.post_attention_layernorm = load_f32(ck_, p + "post_attention_layernorm.weight", {d});
            const std::string a = p + "self_attn.";
            if (c.q_lora_rank > 0) {
                L.attn.q_a_proj = bind_linear(ck_, a + "q_a_proj", c.q_lora_rank, d);
                L.attn.q_a_layernorm = load_f32(ck_, a + "q_a_layernorm.weight", {c.q_lora_rank});
                L.attn.q_b_proj = bind_linear(ck_, a + "q_b_proj", H * c.qk_head_dim(), c.q_lora_rank);
            } else {
                L.attn.q_proj = bind_linear(ck_, a + "q_proj", H * c.qk_head_dim(), d);
            }
            L.attn.kv_a_proj_with_mqa = bind_linear(ck_, a + "kv_a_proj_with_mqa", mla_.cache_width(), d);
            L.attn.kv_a_layernorm = load_f32(ck_, a + "kv_a_layernorm.weight", {c.kv_lora_rank});
            L.attn.kv_b_proj = bind_linear(ck_, a + "kv_b_proj", H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
            L.attn.o_proj = bind_linear(ck_, a + "o_proj", d, H * c.v_head_dim);
            if (c.is_moe_layer(il)) {
                L.ffn.moe = true;
                L.ffn.router = bind_matrix(ck_, p + "mlp.gate.weight", E, d);
                if (ck_.has(p + "mlp.gate.e_score_correction_bias"))
                    L.ffn.router_bias = load_f32(ck_, p + "mlp.gate.e_score_correction_bias", {E});
                if (c.n_shared_experts > 0) {
                    L.ffn.has_shared = true;
                    L.ffn.shared =
                        bind_swiglu(ck_, p + "mlp.shared_experts.", c.n_shared_experts * c.moe_intermediate_size, d);
                }
                experts[size_t(il)] = bind_experts(ck_, p + "mlp.experts.", E, c.moe_intermediate_size, d);
            } else {
                L.ffn.mlp = bind_swiglu(ck_, p + "mlp.", c.intermediate_size, d);
            }
            layers_.push_back(std::move(L));
        }
        router_ = router_params(c);
        fill_info();
        SpineLayers spine;
        for (Layer& L : layers_) {
            auto& m = spine.emplace_back(L.attn.matrices());
            append_matrices(m, L.ffn.mlp.matrices());
            append_matrices(m, L.ffn.shared.matrices());
        }
        finish_loading(ck_, std::move(experts), opt, info_.spine_bytes,
                       [&](int64_t rows, bool look_ahead) {
                           return deepseek_v3_activation_bytes(cfg_, rows, look_ahead);
                       },
                       std::move(spine));
    }

    void forward(ExecContext& ctx, const Batch& batch, std::span<SequenceState* const> seqs,
                 std::vector<float>& logits) override {
        const auto& c = cfg_;
        const int64_t n = batch.size(), d = c.hidden_size;
        const RowGroups& rows_of = group_rows(rows_of_, batch, seqs, c.vocab_size, layout_.get());

        auto [pass, x, h, y] = EmbeddedPass(ctx, embed_, batch, d);

        std::vector<MlaSeqRows>& seq_rows = seq_rows_;  // grown once
        seq_rows.clear();
        for (auto& [s, rows] : rows_of) seq_rows.push_back({rows, nullptr});
        for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
            experts_.begin_layer(il);
            const Layer& L = layers_[size_t(il)];
            ops::rms_norm(x, L.input_layernorm.data(), n, d, float(c.rms_norm_eps), h);
            size_t j = 0;
            for (auto& [s, rows] : rows_of) seq_rows[j++].cache = &seqs[size_t(s)]->latent(il);
            mla_forward(mla_, L.attn, rope_, h, n, batch.positions.data(), seq_rows, y, ctx);
            ops::add(x, y, n * d, x);

            ops::rms_norm(x, L.post_attention_layernorm.data(), n, d, float(c.rms_norm_eps), h);
            const SigmoidMoeFfn* next = il + 1 < c.num_hidden_layers ? &layers_[size_t(il + 1)].ffn : nullptr;
            sigmoid_moe_ffn_forward(il, L.ffn, next, experts_.streaming != nullptr, router_, *experts_.source, h, n, d,
                                    y, ctx);
            ops::add(x, y, n * d, x);
        }
        finish_pass(ctx, batch, seqs, rows_of, x, d, float(c.rms_norm_eps), logits);
    }

private:
    void fill_info() {
        const int64_t n_moe = std::count_if(layers_.begin(), layers_.end(), [](const Layer& L) { return L.ffn.moe; });
        fill_model_info(info_, ck_, "DeepseekV3ForCausalLM", cfg_.model_type, cfg_, n_moe);
    }

    Checkpoint ck_;
    DeepseekV3Config cfg_;
    MlaConfig mla_;
    Rope rope_;
    RouterParams router_;
    std::vector<Layer> layers_;
    std::vector<MlaSeqRows> seq_rows_;  // a pass's sequences and their caches, per layer
};

}  // namespace

// x, h, y for the pass; then the largest of one layer's attention, one layer's FFN and the head.
uint64_t deepseek_v3_activation_bytes(const DeepseekV3Config& c, int64_t rows, bool look_ahead) {
    const int64_t n = rows, d = c.hidden_size;
    const MlaConfig mla = mla_config(c);
    const RouterParams router = router_params(c);
    const int64_t shared_inter = c.n_shared_experts > 0 ? c.n_shared_experts * c.moe_intermediate_size : 0;
    uint64_t peak = head_scratch_bytes(n, d);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const bool next_moe = l + 1 < c.num_hidden_layers && c.is_moe_layer(l + 1);
        peak = std::max({peak, mla_scratch_bytes(mla, n),
                         sigmoid_moe_ffn_scratch_bytes(n, c.is_moe_layer(l), router, d, c.intermediate_size,
                                                       c.moe_intermediate_size, shared_inter,
                                                       look_ahead && next_moe ? c.n_routed_experts : 0)});
    }
    return 3 * ScratchArena::f32_bytes(n * d) + peak;
}

uint64_t deepseek_v3_activation_bytes(const JsonObject& cfg, int64_t rows, bool look_ahead) {
    return deepseek_v3_activation_bytes(DeepseekV3Config::from_json(cfg), rows, look_ahead);
}

std::unique_ptr<Model> make_deepseek_v3(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt) {
    return std::make_unique<DeepseekV3Model>(dir, cfg, opt);
}

}  // namespace sluice
