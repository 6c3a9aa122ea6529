// GptOssForCausalLM (openai/gpt-oss-20b, -120b): pre-norm decoder layers of GQA attention with q/k/v/o biases,
// learned per-head sinks and a sliding window on the layers `layer_types` marks, half-split YaRN RoPE, and a MoE
// whose router has a bias (top-k on logits, softmax over the k) and whose experts are a clamped SwiGLU over one
// fused interleaved gate_up matrix, with biases. Experts are MXFP4 `_blocks`/`_scales` stacked per layer.
// Reference: transformers models/gpt_oss/modeling_gpt_oss.py, integrations/mxfp4.py.
#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "formats/checkpoint.h"
#include "models/architectures.h"
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

struct GptOssConfig {
    int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
    int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
    int64_t num_local_experts = 0, num_experts_per_tok = 0;
    int64_t sliding_window = 0;
    std::vector<bool> sliding;  // per layer
    double rms_norm_eps = 1e-5;
    float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;
    bool tie_word_embeddings = false;
    int64_t max_position_embeddings = 131072;
    RopeParameters rope;
    int32_t bos_token_id = -1;
    std::vector<int32_t> eos_token_ids;

    static GptOssConfig from_json(const JsonObject& j) {
        GptOssConfig c;
        const std::string& w = j.what();
        c.vocab_size = j.get_int("vocab_size");
        c.hidden_size = j.get_int("hidden_size");
        c.intermediate_size = j.get_int("intermediate_size");
        c.num_hidden_layers = j.get_int("num_hidden_layers");
        c.num_attention_heads = j.get_int("num_attention_heads");
        c.num_key_value_heads = j.get_int("num_key_value_heads", c.num_attention_heads);
        c.head_dim = j.get_int("head_dim", c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
        c.num_local_experts = j.get_int("num_local_experts");
        c.num_experts_per_tok = j.has("num_experts_per_tok") ? j.get_int("num_experts_per_tok")
                                                             : j.get_int("experts_per_token", 4);
        c.sliding_window = j.get_int("sliding_window", 0);
        c.rms_norm_eps = j.get_float("rms_norm_eps", 1e-5);
        c.swiglu_alpha = float(j.get_float("swiglu_alpha", 1.702));
        c.swiglu_limit = float(j.get_float("swiglu_limit", 7.0));
        c.tie_word_embeddings = j.get_bool("tie_word_embeddings", false);
        c.max_position_embeddings = j.get_int("max_position_embeddings", 131072);
        SLUICE_CHECK(j.get_bool("attention_bias", true), w, ": attention_bias false is not supported for gpt_oss");
        // transformers' defaults when the config names no rope at all: theta 150000, YaRN x32 over 4096, no truncate
        if (!j.has("rope_parameters") && !j.has("rope_scaling")) {
            c.rope.rope_type = "yarn";
            c.rope.factor = 32.0;
            c.rope.original_max_position_embeddings = 4096;
            c.rope.truncate = false;
            c.rope.rope_theta = j.get_float("rope_theta", 150000.0);
        } else {
            c.rope = parse_rope_parameters(j);
            const bool theta_given = j.has("rope_theta") ||
                                     (j.get_object("rope_parameters") && j.get_object("rope_parameters")->has("rope_theta"));
            if (!theta_given) c.rope.rope_theta = 150000.0;
        }
        if (c.rope.rope_type == "yarn" && c.rope.original_max_position_embeddings == 0)
            c.rope.original_max_position_embeddings = c.max_position_embeddings;
        if (j.has("layer_types")) {
            const auto types = j.get_string_list("layer_types");
            SLUICE_CHECK(int64_t(types.size()) == c.num_hidden_layers, w, ": layer_types has ", types.size(),
                         " entries for ", c.num_hidden_layers, " layers");
            for (size_t i = 0; i < types.size(); ++i) {
                SLUICE_CHECK(types[i] == "sliding_attention" || types[i] == "full_attention", w, ": layer_types[", i,
                             "] is '", types[i], "', expected sliding_attention or full_attention");
                c.sliding.push_back(types[i] == "sliding_attention");
            }
        } else {
            for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding.push_back((i + 1) % 2 != 0);
        }
        c.bos_token_id = int32_t(j.get_int("bos_token_id", -1));
        if (j.has("eos_token_id"))
            for (auto id : j.get_int_list("eos_token_id")) c.eos_token_ids.push_back(int32_t(id));

        SLUICE_CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.num_hidden_layers > 0, w,
                     ": vocab_size, hidden_size and num_hidden_layers must be positive");
        SLUICE_CHECK(c.num_attention_heads > 0 && c.num_key_value_heads > 0 &&
                         c.num_attention_heads % c.num_key_value_heads == 0,
                     w, ": num_attention_heads (", c.num_attention_heads, ") must be a positive multiple of "
                     "num_key_value_heads (", c.num_key_value_heads, ")");
        SLUICE_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, w, ": head_dim must be positive and even, got ", c.head_dim);
        SLUICE_CHECK(c.num_local_experts > 0 && c.num_experts_per_tok > 0 &&
                         c.num_experts_per_tok <= c.num_local_experts,
                     w, ": num_experts_per_tok (", c.num_experts_per_tok, ") must be in [1, num_local_experts = ",
                     c.num_local_experts, "]");
        SLUICE_CHECK(c.intermediate_size > 0 && c.hidden_size % 32 == 0 && c.intermediate_size % 32 == 0, w,
                     ": hidden_size and intermediate_size must be multiples of the 32-element MXFP4 block");
        SLUICE_CHECK(c.sliding_window >= 0, w, ": sliding_window must be >= 0");
        return c;
    }
};

struct Layer {
    std::vector<float> input_layernorm, post_attention_layernorm;  // [hidden]
    Weight q_proj, k_proj, v_proj, o_proj;
    std::vector<float> q_bias, k_bias, v_bias, o_bias;
    std::vector<float> sinks;  // [n_heads]
    int64_t window = 0;        // 0: full causal
    Weight router;             // [E, hidden]
    std::vector<float> router_bias;
    // Expert biases stay resident as views of the checkpoint (BF16 [E, 2I] and [E, hidden]), see bind_layer.
    Weight gate_up_bias, down_bias;
};

void add_bias(float* y, const std::vector<float>& b, int64_t n) { ops::add_bias(y, b.data(), n, int64_t(b.size())); }

class GptOssModel : public MoeModel {
public:
    GptOssModel(const std::string& dir, const JsonObject& json, const LoadOptions& opt)
        : MoeModel(opt), ck_(dir), cfg_(GptOssConfig::from_json(json)) {
        const auto& c = cfg_;
        const int64_t d = c.hidden_size;
        rope_ = Rope(c.rope, c.head_dim);
        layout_ = gqa_state_layout(c.num_hidden_layers, kv_width());
        embed_ = bind_matrix(ck_, "model.embed_tokens.weight", c.vocab_size, d);
        norm_ = load_f32(ck_, "model.norm.weight", {d});
        lm_head_ = bind_lm_head(ck_, dir, embed_, c.vocab_size, d, c.tie_word_embeddings);

        std::vector<std::vector<ExpertWeights>> experts(static_cast<size_t>(c.num_hidden_layers));
        uint64_t resident_bias_bytes = 0;
        for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
            layers_.push_back(bind_layer(il, experts[size_t(il)]));
            resident_bias_bytes += weight_bytes(layers_.back().gate_up_bias) + weight_bytes(layers_.back().down_bias);
        }
        fill_info();
        // The expert biases are named like experts (counted as routed) but stay resident: plan them as spine.
        SpineLayers spine;
        for (Layer& L : layers_) spine.push_back({&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj});
        finish_loading(ck_, std::move(experts), opt, info_.spine_bytes + resident_bias_bytes,
                       [&](int64_t rows, bool) { return activation_bytes_of(cfg_, rows); },
                       std::move(spine));
    }

    void forward(ExecContext& ctx, const Batch& batch, std::span<SequenceState* const> seqs,
                 std::vector<float>& logits) override {
        const auto& c = cfg_;
        const int64_t n = batch.size(), d = c.hidden_size;
        const RowGroups& rows_of = group_rows(rows_of_, batch, seqs, c.vocab_size, layout_.get());

        auto [pass, x, h, y] = EmbeddedPass(ctx, embed_, batch, d);
        const float eps = float(c.rms_norm_eps);
        for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
            experts_.begin_layer(il);
            const Layer& L = layers_[size_t(il)];
            ops::rms_norm(x, L.input_layernorm.data(), n, d, eps, h);
            attention(ctx, il, L, h, n, batch.positions.data(), rows_of, seqs, y);
            ops::add(x, y, n * d, x);
            ops::rms_norm(x, L.post_attention_layernorm.data(), n, d, eps, h);
            moe(ctx, il, L, h, n, y);
            ops::add(x, y, n * d, x);
        }
        finish_pass(ctx, batch, seqs, rows_of, x, d, eps, logits);
    }

    // x, h, y for the pass; then the largest of one layer's attention, its MoE and the head.
    static uint64_t activation_bytes_of(const GptOssConfig& c, int64_t rows) {
        using A = ScratchArena;
        const int64_t n = rows, d = c.hidden_size, qw = c.num_attention_heads * c.head_dim;
        const int64_t kvw = c.num_key_value_heads * c.head_dim, I = c.intermediate_size;
        const uint64_t attn = 4 * A::f32_bytes(n * qw) + 2 * A::f32_bytes(n * kvw) + A::bytes(uint64_t(n) * 8);
        const uint64_t moe = std::max(
            route_scratch_bytes(n, c.num_local_experts),
            A::f32_bytes(2 * I) + A::f32_bytes(d) + A::f32_bytes(n * 2 * I) + A::f32_bytes(n * I) +
                moe_with_scratch_bytes(n, c.num_experts_per_tok, d, 0, 0));
        return 3 * A::f32_bytes(n * d) + std::max({head_scratch_bytes(n, d), attn, moe});
    }

private:
    int64_t kv_width() const { return cfg_.num_key_value_heads * cfg_.head_dim; }

    Layer bind_layer(int64_t il, std::vector<ExpertWeights>& bank) {
        const auto& c = cfg_;
        const int64_t d = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim, kvw = kv_width();
        const int64_t E = c.num_local_experts, I = c.intermediate_size;
        const std::string p = "model.layers." + std::to_string(il) + ".";
        const std::string a = p + "self_attn.";
        Layer L;
        L.input_layernorm = load_f32(ck_, p + "input_layernorm.weight", {d});
        L.post_attention_layernorm = load_f32(ck_, p + "post_attention_layernorm.weight", {d});
        L.q_proj = bind_linear(ck_, a + "q_proj", H * hd, d);
        L.k_proj = bind_linear(ck_, a + "k_proj", kvw, d);
        L.v_proj = bind_linear(ck_, a + "v_proj", kvw, d);
        L.o_proj = bind_linear(ck_, a + "o_proj", d, H * hd);
        L.q_bias = load_f32(ck_, a + "q_proj.bias", {H * hd});
        L.k_bias = load_f32(ck_, a + "k_proj.bias", {kvw});
        L.v_bias = load_f32(ck_, a + "v_proj.bias", {kvw});
        L.o_bias = load_f32(ck_, a + "o_proj.bias", {d});
        L.sinks = load_f32(ck_, a + "sinks", {H});
        L.window = c.sliding[size_t(il)] ? c.sliding_window : 0;
        L.router = bind_matrix(ck_, p + "mlp.router.weight", E, d);
        L.router_bias = load_f32(ck_, p + "mlp.router.bias", {E});

        const std::string e = p + "mlp.experts.";
        if (!ck_.has(e + "gate_up_proj_blocks") && ck_.has(e + "gate_up_proj"))
            fail(ck_.dir(), ": tensor '", e, "gate_up_proj' is the dequantised [E, hidden, 2I] layout transformers "
                 "writes after loading; only the hub's MXFP4 '", e, "gate_up_proj_blocks'/'_scales' is supported");
        const Weight gu = bind_mxfp4_stacked(ck_, e + "gate_up_proj", E, 2 * I, d);
        const Weight dn = bind_mxfp4_stacked(ck_, e + "down_proj", E, d, I);
        // Expert biases are kept resident (not streamed): 2 bytes x (2I + hidden) per expert, about 0.13% of an
        // MXFP4 expert of gpt-oss-20b/120b (13 MB for all of 20b, 80 MB for 120b). Streaming them would add two
        // tiny 4 KiB-aligned reads to every expert fetch for no memory worth saving.
        L.gate_up_bias = bind_matrix(ck_, e + "gate_up_proj_bias", E, 2 * I);
        L.down_bias = bind_matrix(ck_, e + "down_proj_bias", E, d);
        bank.resize(size_t(E));
        for (int64_t x = 0; x < E; ++x) {
            bank[size_t(x)].gate = weight_rows(gu, x * 2 * I, 2 * I);  // fused, interleaved gate/up
            bank[size_t(x)].up = Weight{};
            bank[size_t(x)].down = weight_rows(dn, x * d, d);
        }
        return L;
    }

    void attention(ExecContext& ctx, int64_t il, const Layer& L, const float* x, int64_t n, const int64_t* positions,
                   const RowGroups& rows_of, std::span<SequenceState* const> seqs,
                   float* out) {
        const auto& c = cfg_;
        const int64_t H = c.num_attention_heads, Hkv = c.num_key_value_heads, hd = c.head_dim, kvw = kv_width();
        ScratchArena::Scope scope(ctx.arena());
        float* q = ctx.arena().f32(n * H * hd);
        float* k = ctx.arena().f32(n * kvw);
        float* v = ctx.arena().f32(n * kvw);
        ops::matmul(L.q_proj, x, n, q, ctx);
        ops::matmul(L.k_proj, x, n, k, ctx);
        ops::matmul(L.v_proj, x, n, v, ctx);
        add_bias(q, L.q_bias, n);
        add_bias(k, L.k_bias, n);
        add_bias(v, L.v_bias, n);
        for (int64_t i = 0; i < n; ++i) {
            rope_.apply_half(q + i * H * hd, H, hd, positions[i]);
            rope_.apply_half(k + i * kvw, Hkv, hd, positions[i]);
        }
        AttentionParams ap;
        ap.n_heads = H;
        ap.n_kv_heads = Hkv;
        ap.head_dim_k = hd;
        ap.head_dim_v = hd;
        ap.scale = float(1.0 / std::sqrt(double(hd)));
        ap.sinks = L.sinks.data();
        ap.window = L.window;
        float* o = ctx.arena().f32(n * H * hd);  // every row belongs to one sequence: all written
        float* qs = ctx.arena().f32(n * H * hd);
        float* os = ctx.arena().f32(n * H * hd);
        auto* pos = static_cast<int64_t*>(ctx.arena().carve(uint64_t(n) * sizeof(int64_t)));
        for (const auto& [s, rows] : rows_of) {
            KvCache& cache = seqs[size_t(s)]->kv(il);
            const int64_t m = int64_t(rows.size());
            for (int64_t j = 0; j < m; ++j) {
                const int64_t r = rows[size_t(j)], p = positions[r];
                std::copy_n(k + r * kvw, kvw, cache.k.write_row(p));
                std::copy_n(v + r * kvw, kvw, cache.v.write_row(p));
                std::copy_n(q + r * H * hd, H * hd, qs + j * H * hd);
                pos[j] = p;
            }
            ops::attention(ap, qs, m, pos, cache.k.view(), cache.v.view(), os, ctx);
            for (int64_t j = 0; j < m; ++j) std::copy_n(os + j * H * hd, H * hd, o + rows[size_t(j)] * H * hd);
        }
        ops::matmul(L.o_proj, o, n, out, ctx);
        add_bias(out, L.o_bias, n);
    }

    // Router: logits = W x + b; top-k on the logits; weights = softmax over the k selected (ascending expert id).
    // The result is routing_, reused by every layer and pass (grown once).
    const Routing& route(ExecContext& ctx, const Layer& L, const float* x, int64_t n) {
        const int64_t E = cfg_.num_local_experts, K = cfg_.num_experts_per_tok;
        ScratchArena::Scope scope(ctx.arena());
        float* logits = ctx.arena().f32(n * E);
        ops::matmul(L.router, x, n, logits, ctx);
        add_bias(logits, L.router_bias, n);
        Routing& r = routing_;
        r.top_k = K;
        r.experts.resize(size_t(n * K));
        r.weights.resize(size_t(n * K));
        ops::RouterSpec spec;
        spec.scoring = ops::RouterSpec::Scoring::TopkSoftmax;
        spec.n_experts = E;
        spec.top_k = K;
        ops::route(spec, logits, nullptr, n, r.experts.data(), r.weights.data(), ctx.pool());
        return r;
    }

    // Clamped SwiGLU expert: gu = W_gu x + b_gu (gate = even, up = odd rows); gate = min(gate, limit),
    // up = clamp(up, -limit, limit); h = (up + 1) * gate * sigmoid(alpha * gate); y = W_d h + b_d.
    void moe(ExecContext& ctx, int64_t il, const Layer& L, const float* x, int64_t n, float* out) {
        const auto& c = cfg_;
        const int64_t d = c.hidden_size, I = c.intermediate_size;
        ops::GluSpec act;
        act.kind = ops::GluSpec::Kind::ClampedSwiglu;
        act.alpha = c.swiglu_alpha;
        act.limit = c.swiglu_limit;
        const Routing& r = route(ctx, L, x, n);
        ScratchArena::Scope scope(ctx.arena());
        float* bias_gu = ctx.arena().f32(2 * I);
        float* bias_d = ctx.arena().f32(d);
        float* gu = ctx.arena().f32(n * 2 * I);  // an expert's rows: at most n
        float* hmid = ctx.arena().f32(n * I);
        auto expert = [&](int32_t e, const ExpertWeights& w, const float* xs, int64_t m, float* ys) {
            SLUICE_CHECK(w.gate.rows == 2 * I && w.gate.cols == d && w.down.rows == d && w.down.cols == I, "layer ", il,
                         " expert ", e, ": weight shapes do not match hidden ", d, " / intermediate ", I);
            ops::matmul(w.gate, xs, m, gu, ctx);
            ops::dequantize_row(L.gate_up_bias, e, bias_gu);
            ops::dequantize_row(L.down_bias, e, bias_d);
            ops::add_bias(gu, bias_gu, m, 2 * I);
            for (int64_t j = 0; j < m; ++j) ops::glu(act, gu + j * 2 * I, gu + j * 2 * I + 1, 2, I, hmid + j * I);
            ops::matmul(w.down, hmid, m, ys, ctx);
            ops::add_bias(ys, bias_d, m, d);
        };
        moe_forward_with(il, r, *experts_.source, expert, x, n, d, out, ctx);
    }

    void fill_info() {
        const auto& c = cfg_;
        info_.architecture = "GptOssForCausalLM";
        info_.model_type = "gpt_oss";
        info_.vocab_size = c.vocab_size;
        info_.hidden_size = c.hidden_size;
        info_.num_hidden_layers = c.num_hidden_layers;
        info_.n_moe_layers = c.num_hidden_layers;
        info_.n_routed_experts = c.num_local_experts;
        info_.num_experts_per_tok = c.num_experts_per_tok;
        info_.bos_token_id = c.bos_token_id;
        info_.eos_token_ids = c.eos_token_ids;
        info_.max_position_embeddings = c.max_position_embeddings;
        fill_param_counts(ck_, info_, c.num_local_experts, c.num_experts_per_tok, c.tie_word_embeddings, c.vocab_size,
                          c.hidden_size);
    }

    Checkpoint ck_;
    GptOssConfig cfg_;
    Rope rope_;
    std::vector<Layer> layers_;
    Routing routing_;  // a layer's routing (route()); a model runs one pass at a time
};

}  // namespace

uint64_t gpt_oss_activation_bytes(const JsonObject& cfg, int64_t rows, bool) {
    return GptOssModel::activation_bytes_of(GptOssConfig::from_json(cfg), rows);
}

std::unique_ptr<Model> make_gpt_oss(const std::string& dir, const JsonObject& cfg, const LoadOptions& opt) {
    return std::make_unique<GptOssModel>(dir, cfg, opt);
}

}  // namespace sluice
