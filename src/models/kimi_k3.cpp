// KimiK3ForConditionalGeneration, text tower only (a vision_config is ignored): KDA / gated NoPE MLA layers on a
// Block-AttnRes residual stream, a dense SiTU-GLU layer 0, then Stable LatentMoE layers (sigmoid router on the full
// hidden state, MXFP4 experts in a latent space, routed_expert_norm, up-projection, fused shared experts).
// Tensors under language_model.model.* and language_model.lm_head. Layout and math: the project's K3 digest
// (shared research notes, sections 3-7); reference: tools/reference/make_kimi_k3_fixtures.py.
#include <algorithm>

#include "core/error.h"
#include "formats/checkpoint.h"
#include "models/architectures.h"
#include "models/blocks/attn_res.h"
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

const std::string kModel = "language_model.model.";

struct Layer {
    std::vector<float> input_layernorm, post_attention_layernorm;
    AttnResWeights attn_res, mlp_res;
    bool mla = false;
    KdaWeights kda;
    MlaWeights attn;
    bool moe = false;
    SwigluWeights mlp;                // dense layer 0
    Weight router;                    // [E, hidden]
    std::vector<float> router_bias;   // [E]
    Weight latent_down, latent_up;    // [latent, hidden], [hidden, latent]
    std::vector<float> latent_norm;   // [latent]
    SwigluWeights shared;             // width n_shared * moe_intermediate
};

class KimiK3Model : public MoeModel {
public:
    KimiK3Model(const std::string& dir, const JsonObject& top, const LoadOptions& opt)
        : MoeModel(opt), ck_(dir), cfg_(parse(top)),
          form_(opt.kda_chunked_prefill ? KdaForm::Chunked : KdaForm::Recurrent) {
        const auto& c = cfg_;
        layout_ = kimi_state_layout(c);
        const int64_t d = c.hidden_size, E = c.n_routed_experts, lat = c.routed_expert_hidden_size;
        SLUICE_CHECK(c.attn_res_block_size > 0, dir, "/config.json: text_config.attn_res_block_size must be > 0");
        SLUICE_CHECK(lat > 0 && c.n_routed_experts > 0, dir,
                     "/config.json: text_config needs num_experts and routed_expert_hidden_size (latent MoE)");
        kda_ = c.kda();
        mla_ = c.mla();
        mla_.q_a_eps = mla_.kv_a_eps = float(c.rms_norm_eps);
        router_ = c.router();
        embed_ = bind_matrix(ck_, kModel + "embed_tokens.weight", c.vocab_size, d);
        norm_ = load_f32(ck_, kModel + "norm.weight", {d});
        out_res_ = {load_f32(ck_, kModel + "output_attn_res_norm.weight", {d}),
                    load_f32(ck_, kModel + "output_attn_res_proj.weight", {1, d})};
        lm_head_ = bind_linear(ck_, "language_model.lm_head", c.vocab_size, d);
        std::vector<std::vector<ExpertWeights>> experts(size_t(c.num_hidden_layers));
        for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
            const std::string p = kModel + "layers." + std::to_string(il) + ".";
            Layer L;
            L.input_layernorm = load_f32(ck_, p + "input_layernorm.weight", {d});
            L.post_attention_layernorm = load_f32(ck_, p + "post_attention_layernorm.weight", {d});
            L.attn_res = {load_f32(ck_, p + "self_attention_res_norm.weight", {d}),
                          load_f32(ck_, p + "self_attention_res_proj.weight", {1, d})};
            L.mlp_res = {load_f32(ck_, p + "mlp_res_norm.weight", {d}), load_f32(ck_, p + "mlp_res_proj.weight", {1, d})};
            L.mla = c.is_mla[size_t(il)];
            if (L.mla)
                L.attn = bind_mla(ck_, p + "self_attn.", c);
            else
                L.kda = bind_kda(ck_, p + "self_attn.", c);
            if (c.is_moe_layer(il)) {
                const std::string m = p + "block_sparse_moe.";
                L.moe = true;
                L.router = bind_matrix(ck_, m + "gate.weight", E, d);
                L.router_bias = load_f32(ck_, m + "gate.e_score_correction_bias", {E});
                L.latent_down = bind_linear(ck_, m + "routed_expert_down_proj", lat, d);
                L.latent_up = bind_linear(ck_, m + "routed_expert_up_proj", d, lat);
                if (c.latent_moe_use_norm) L.latent_norm = load_f32(ck_, m + "routed_expert_norm.weight", {lat});
                L.shared = bind_swiglu(ck_, m + "shared_experts.", c.n_shared_experts * c.moe_intermediate_size, d);
                auto& bank = experts[size_t(il)];
                for (int64_t e = 0; e < E; ++e) {
                    const std::string x = m + "experts." + std::to_string(e) + ".";
                    bank.push_back({bind_linear(ck_, x + "w1", c.moe_intermediate_size, lat),
                                    bind_linear(ck_, x + "w3", c.moe_intermediate_size, lat),
                                    bind_linear(ck_, x + "w2", lat, c.moe_intermediate_size)});
                }
            } else {
                L.mlp = bind_swiglu(ck_, kimi_dense_mlp_prefix(ck_, p), c.intermediate_size, d);
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
            append_matrices(m, L.mlp.matrices());
            append_matrices(m, L.shared.matrices());
            append_matrices(m, {&L.latent_down, &L.latent_up});
        }
        finish_loading(ck_, std::move(experts), opt, info_.spine_bytes,
                       [&](int64_t rows, bool look_ahead) { return kimi_k3_activation_bytes(cfg_, rows, look_ahead); },
                       std::move(spine));
    }

    bool recompute_is_exact() const override { return form_ == KdaForm::Recurrent; }

    void forward(ExecContext& ctx, const Batch& batch, std::span<SequenceState* const> seqs,
                 std::vector<float>& logits) override {
        const auto& c = cfg_;
        const int64_t n = batch.size(), d = c.hidden_size, lat = c.routed_expert_hidden_size;
        const float eps = float(c.rms_norm_eps);
        const RowGroups& rows_of = group_rows(rows_of_, batch, seqs, c.vocab_size, layout_.get());

        // p: the running sum since the last snapshot; blocks: snapshots of p at layers l % block_size == 0
        const EmbeddedPass pass(ctx, embed_, batch, d);
        float *p = pass.x, *h = pass.h, *y = pass.y, *t = ctx.arena().f32(n * d);
        std::vector<const float*>& blocks = blocks_;  // grown once
        blocks.clear();
        for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
            experts_.begin_layer(il);
            const Layer& L = layers_[size_t(il)];
            if (blocks.empty())
                std::copy_n(p, n * d, t);
            else
                attn_res(p, blocks, L.attn_res, n, d, eps, t, ctx.pool());
            const bool snapshot = il % c.attn_res_block_size == 0;
            if (snapshot) {
                float* b = ctx.arena().f32(n * d);  // lives for the rest of the pass
                std::copy_n(p, n * d, b);
                blocks.push_back(b);
            }
            ops::rms_norm(t, L.input_layernorm.data(), n, d, eps, h);
            kimi_attention_forward(il, L.mla, mla_, L.attn, kda_, L.kda, form_, h, n, batch, seqs, rows_of, y, ctx);
            if (snapshot)
                std::copy_n(y, n * d, p);
            else
                ops::add(p, y, n * d, p);
            attn_res(p, blocks, L.mlp_res, n, d, eps, t, ctx.pool());
            ops::rms_norm(t, L.post_attention_layernorm.data(), n, d, eps, h);
            // the next MoE layer's look-ahead: its router applied to this layer's input
            auto hint_next = [&] {
                if (experts_.streaming && il + 1 < c.num_hidden_layers && layers_[size_t(il + 1)].moe) {
                    const auto& N = layers_[size_t(il + 1)];
                    prefetch_experts(*experts_.source, il + 1, router_, N.router, N.router_bias, h, n, ctx);
                }
            };
            if (L.moe) {
                const Routing& r = route_sigmoid(router_, L.router, L.router_bias, h, n, ctx);
                ScratchArena::Scope layer(ctx.arena());
                float* xl = ctx.arena().f32(n * lat);
                float* yl = ctx.arena().f32(n * lat);
                // while the routed experts are read: the next layer's look-ahead (this layer's experts are pinned by
                // then), the down-projection and the shared experts
                moe_forward(il, r, *experts_.source, nullptr, xl, n, lat, yl, ctx, nullptr, c.act, [&] {
                    hint_next();
                    ops::matmul(L.latent_down, h, n, xl, ctx);
                    swiglu_forward(L.shared, h, n, t, ctx, c.act);
                });
                if (!L.latent_norm.empty()) ops::rms_norm(yl, L.latent_norm.data(), n, lat, eps, yl);
                ops::matmul(L.latent_up, yl, n, y, ctx);
                ops::add(y, t, n * d, y);
            } else {
                hint_next();  // before the first MoE layer: its experts are read while this dense MLP computes
                swiglu_forward(L.mlp, h, n, y, ctx, c.act);
            }
            ops::add(p, y, n * d, p);
            write_taps(il, p, batch, seqs, rows_of);
        }
        attn_res(p, blocks, out_res_, n, d, eps, t, ctx.pool());
        finish_pass(ctx, batch, seqs, rows_of, t, d, eps, logits);
    }

    // The tap is p after the layer's FFN: the raw running sum since the last block snapshot (the AttnRes stream's
    // prefix sum, not an AttnRes blend), as deltafin's DSpark capture takes it (K3 digest 9.3 step 1).
    void set_hidden_taps(std::vector<int64_t> layer_ids) override {
        for (int64_t id : layer_ids)
            SLUICE_CHECK(id >= 0 && id < cfg_.num_hidden_layers, "hidden-state tap: layer ", id,
                         " is outside the target's layers [0, ", cfg_.num_hidden_layers, ")");
        taps_ = std::move(layer_ids);
    }
    const Weight* token_embedding() const override { return &embed_; }
    const Weight* output_head() const override { return &lm_head_; }

private:
    // text_config carries the model; token ids may sit at the top level only.
    static KimiConfig parse(const JsonObject& top) {
        auto text = top.get_object("text_config");
        KimiConfig c = KimiConfig::from_json(text ? *text : top);
        if (c.bos_token_id < 0) c.bos_token_id = int32_t(top.get_int("bos_token_id", -1));
        if (c.eos_token_ids.empty() && top.has("eos_token_id"))
            for (auto id : top.get_int_list("eos_token_id")) c.eos_token_ids.push_back(int32_t(id));
        return c;
    }

    // Copies layer il's output rows into each sequence's tap rows (every tap that names il). A sequence whose tap
    // rows do not reach its first row's position (a state restored from a file) gets none this pass.
    void write_taps(int64_t il, const float* p, const Batch& batch, std::span<SequenceState* const> seqs,
                    const RowGroups& rows_of) const {
        const int64_t d = cfg_.hidden_size, width = int64_t(taps_.size()) * d;
        for (size_t k = 0; k < taps_.size(); ++k) {
            if (taps_[k] != il) continue;
            for (const auto& [s, rows] : rows_of) {
                PagedRows& t = seqs[size_t(s)]->taps();
                if (t.width() != width) {
                    t.truncate(0);
                    seqs[size_t(s)]->init_taps(width);
                }
                if (t.rows() < batch.positions[size_t(rows.front())]) continue;
                for (int64_t r : rows) std::copy_n(p + r * d, d, t.write_row(batch.positions[size_t(r)]) + k * d);
            }
        }
    }

    void fill_info() {
        const int64_t n_moe = std::count_if(layers_.begin(), layers_.end(), [](const Layer& L) { return L.moe; });
        fill_model_info(info_, ck_, "KimiK3ForConditionalGeneration", "kimi_k3", cfg_, n_moe);
    }

    Checkpoint ck_;
    KimiConfig cfg_;
    KdaForm form_;
    KdaConfig kda_;
    MlaConfig mla_;
    RouterParams router_;
    AttnResWeights out_res_;
    std::vector<Layer> layers_;
    std::vector<const float*> blocks_;  // a pass's block snapshots (forward)
    std::vector<int64_t> taps_;  // layers whose output rows go to SequenceState::taps() (set_hidden_taps)
};

}  // namespace

// p, h, y, t and the block snapshots for the pass; then the largest of one layer's attention, one layer's FFN (the
// routing; or the latent rows, the experts and, while they are read, the look-ahead or the shared experts) and the
// head.
uint64_t kimi_k3_activation_bytes(const KimiConfig& c, int64_t rows, bool look_ahead) {
    using A = ScratchArena;
    const int64_t n = rows, d = c.hidden_size, lat = c.routed_expert_hidden_size;
    const int64_t snapshots = c.attn_res_block_size > 0
                                  ? (c.num_hidden_layers + c.attn_res_block_size - 1) / c.attn_res_block_size
                                  : 0;
    const int64_t shared_inter = c.n_shared_experts * c.moe_intermediate_size;
    uint64_t peak = head_scratch_bytes(n, d);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const bool next_moe = l + 1 < c.num_hidden_layers && c.is_moe_layer(l + 1);
        uint64_t ffn;
        if (c.is_moe_layer(l)) {
            const uint64_t reading = std::max(look_ahead && next_moe ? route_scratch_bytes(n, c.n_routed_experts) : 0,
                                              swiglu_scratch_bytes(n, shared_inter));
            ffn = std::max(route_scratch_bytes(n, c.n_routed_experts),
                           2 * A::f32_bytes(n * lat) + moe_scratch_bytes(n, c.num_experts_per_tok, lat,
                                                                         c.moe_intermediate_size, 0, reading));
        } else {
            ffn = std::max(swiglu_scratch_bytes(n, c.intermediate_size),
                           look_ahead && next_moe ? route_scratch_bytes(n, c.n_routed_experts) : 0);
        }
        const uint64_t attn = c.is_mla[size_t(l)] ? mla_scratch_bytes(c.mla(), n) : kda_scratch_bytes(c.kda(), n);
        peak = std::max({peak, attn, ffn});
    }
    return (4 + uint64_t(snapshots)) * A::f32_bytes(n * d) + peak;
}

uint64_t kimi_k3_activation_bytes(const JsonObject& top, int64_t rows, bool look_ahead) {
    auto text = top.get_object("text_config");
    return kimi_k3_activation_bytes(KimiConfig::from_json(text ? *text : top), rows, look_ahead);
}

std::unique_ptr<Model> make_kimi_k3(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt) {
    return std::make_unique<KimiK3Model>(dir, cfg, opt);
}

}  // namespace sluice
