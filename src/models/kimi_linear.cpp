// KimiLinearForCausalLM (Kimi-Linear-48B-A3B): pre-norm decoder layers of either Kimi Delta Attention or NoPE MLA,
// then a dense SwiGLU MLP or a sigmoid-routed MoE with correction bias and shared experts; which is which comes
// from either config form (kimi_layout.h). Weights under the hub names (self_attn.{q,k,v}_conv1d,
// block_sparse_moe.experts.E.w{1,2,3}), which transformers 5's save_pretrained also writes.
// Reference: transformers models/kimi_linear/modeling_kimi_linear.py.
#include <algorithm>

#include "core/error.h"
#include "formats/checkpoint.h"
#include "models/architectures.h"
#include "models/expert_setup.h"
#include "models/moe_model.h"
#include "models/forward_common.h"
#include "models/kimi_common.h"
#include "models/kimi_layout.h"
#include "models/model_info.h"
#include "models/weights.h"
#include "ops/elementwise.h"
#include "ops/ops.h"

namespace sluice {

namespace {

struct Layer {
    std::vector<float> input_layernorm, post_attention_layernorm;
    bool mla = false;
    KdaWeights kda;
    MlaWeights attn;
    SigmoidMoeFfn ffn;
};

class KimiLinearModel : public MoeModel {
public:
    KimiLinearModel(const std::string& dir, const JsonObject& json, const LoadOptions& opt)
        : MoeModel(opt), ck_(dir), cfg_(KimiConfig::from_json(json)),
          form_(opt.kda_chunked_prefill ? KdaForm::Chunked : KdaForm::Recurrent) {
        const auto& c = cfg_;
        layout_ = kimi_state_layout(c);
        const int64_t d = c.hidden_size, E = c.n_routed_experts;
        SLUICE_CHECK(c.attn_res_block_size == 0 && c.routed_expert_hidden_size == 0, dir,
                     "/config.json: AttnRes / latent MoE fields are Kimi K3's; use KimiK3ForConditionalGeneration");
        kda_ = c.kda();
        mla_ = c.mla();
        router_ = c.router();
        embed_ = bind_matrix(ck_, "model.embed_tokens.weight", c.vocab_size, d);
        norm_ = load_f32(ck_, "model.norm.weight", {d});
        lm_head_ = bind_lm_head(ck_, dir, embed_, c.vocab_size, d, c.tie_word_embeddings);
        std::vector<std::vector<ExpertWeights>> experts(size_t(c.num_hidden_layers));
        for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
            const std::string p = "model.layers." + std::to_string(il) + ".";
            Layer L;
            L.input_layernorm = load_f32(ck_, p + "input_layernorm.weight", {d});
            L.post_attention_layernorm = load_f32(ck_, p + "post_attention_layernorm.weight", {d});
            L.mla = c.is_mla[size_t(il)];
            if (L.mla)
                L.attn = bind_mla(ck_, p + "self_attn.", c);
            else
                L.kda = bind_kda(ck_, p + "self_attn.", c);
            if (c.is_moe_layer(il)) {
                const std::string m = p + "block_sparse_moe.";
                L.ffn.moe = true;
                L.ffn.router = bind_matrix(ck_, m + "gate.weight", E, d);
                if (ck_.has(m + "gate.e_score_correction_bias"))
                    L.ffn.router_bias = load_f32(ck_, m + "gate.e_score_correction_bias", {E});
                if (c.n_shared_experts > 0) {
                    L.ffn.has_shared = true;
                    L.ffn.shared =
                        bind_swiglu(ck_, m + "shared_experts.", c.n_shared_experts * c.moe_intermediate_size, d);
                }
                auto& bank = experts[size_t(il)];
                for (int64_t e = 0; e < E; ++e) {
                    const std::string x = m + "experts." + std::to_string(e) + ".";
                    bank.push_back({bind_linear(ck_, x + "w1", c.moe_intermediate_size, d),
                                    bind_linear(ck_, x + "w3", c.moe_intermediate_size, d),
                                    bind_linear(ck_, x + "w2", d, c.moe_intermediate_size)});
                }
            } else {
                L.ffn.mlp = bind_swiglu(ck_, kimi_dense_mlp_prefix(ck_, p), c.intermediate_size, d);
            }
            layers_.push_back(std::move(L));
        }
        fill_info();
        // the state reserved (finish_loading): the fixed KDA state of each of max_sequences sequences plus the MLA
        // latent cache for max_context_tokens tokens in all
        SLUICE_CHECK(opt.max_sequences >= 1, "LoadOptions::max_sequences must be >= 1, got ", opt.max_sequences);
        SpineLayers spine;
        for (Layer& L : layers_) {
            auto& m = spine.emplace_back(L.attn.matrices());
            append_matrices(m, L.kda.matrices());
            append_matrices(m, L.ffn.mlp.matrices());
            append_matrices(m, L.ffn.shared.matrices());
        }
        finish_loading(ck_, std::move(experts), opt, info_.spine_bytes,
                       [&](int64_t rows, bool look_ahead) { return kimi_linear_activation_bytes(cfg_, rows, look_ahead); },
                       std::move(spine));
    }

    bool recompute_is_exact() const override { return form_ == KdaForm::Recurrent; }

    void forward(ExecContext& ctx, const Batch& batch, std::span<SequenceState* const> seqs,
                 std::vector<float>& logits) override {
        const auto& c = cfg_;
        const int64_t n = batch.size(), d = c.hidden_size;
        const RowGroups& rows_of = group_rows(rows_of_, batch, seqs, c.vocab_size, layout_.get());

        auto [pass, x, h, y] = EmbeddedPass(ctx, embed_, batch, d);
        for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
            experts_.begin_layer(il);
            const Layer& L = layers_[size_t(il)];
            ops::rms_norm(x, L.input_layernorm.data(), n, d, float(c.rms_norm_eps), h);
            kimi_attention_forward(il, L.mla, mla_, L.attn, kda_, L.kda, form_, h, n, batch, seqs, rows_of, y, ctx);
            ops::add(x, y, n * d, x);
            ops::rms_norm(x, L.post_attention_layernorm.data(), n, d, float(c.rms_norm_eps), h);
            const SigmoidMoeFfn* next = il + 1 < c.num_hidden_layers ? &layers_[size_t(il + 1)].ffn : nullptr;
            sigmoid_moe_ffn_forward(il, L.ffn, next, experts_.streaming != nullptr, router_, *experts_.source,
                                    h, n, d, y, ctx);
            ops::add(x, y, n * d, x);
        }
        finish_pass(ctx, batch, seqs, rows_of, x, d, float(c.rms_norm_eps), logits);
    }

private:
    void fill_info() {
        const int64_t n_moe = std::count_if(layers_.begin(), layers_.end(), [](const Layer& L) { return L.ffn.moe; });
        fill_model_info(info_, ck_, "KimiLinearForCausalLM", cfg_.model_type, cfg_, n_moe);
    }

    Checkpoint ck_;
    KimiConfig cfg_;
    KdaForm form_;
    KdaConfig kda_;
    MlaConfig mla_;
    RouterParams router_;
    std::vector<Layer> layers_;
};

}  // namespace

// x, h, y for the pass; then the largest of one layer's attention (MLA or KDA), one layer's FFN and the head.
uint64_t kimi_linear_activation_bytes(const KimiConfig& c, int64_t rows, bool look_ahead) {
    const int64_t n = rows, d = c.hidden_size;
    const int64_t shared_inter = c.n_shared_experts > 0 ? c.n_shared_experts * c.moe_intermediate_size : 0;
    uint64_t peak = head_scratch_bytes(n, d);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const bool next_moe = l + 1 < c.num_hidden_layers && c.is_moe_layer(l + 1);
        peak = std::max({peak, c.is_mla[size_t(l)] ? mla_scratch_bytes(c.mla(), n) : kda_scratch_bytes(c.kda(), n),
                         sigmoid_moe_ffn_scratch_bytes(n, c.is_moe_layer(l), c.router(), d, c.intermediate_size,
                                                       c.moe_intermediate_size, shared_inter,
                                                       look_ahead && next_moe ? c.n_routed_experts : 0)});
    }
    return 3 * ScratchArena::f32_bytes(n * d) + peak;
}

uint64_t kimi_linear_activation_bytes(const JsonObject& cfg, int64_t rows, bool look_ahead) {
    return kimi_linear_activation_bytes(KimiConfig::from_json(cfg), rows, look_ahead);
}

std::unique_ptr<Model> make_kimi_linear(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt) {
    return std::make_unique<KimiLinearModel>(dir, cfg, opt);
}

}  // namespace sluice
