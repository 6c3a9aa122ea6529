#include "models/dspark.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "formats/hf_config.h"
#include "models/draft_mla.h"
#include "models/weights.h"
#include "ops/elementwise.h"
#include "ops/ops.h"

namespace sluice {

namespace {

// Rows of context ingested per pass (bounds the [rows, context_width] activations of a long prompt).
constexpr int64_t kIngestRows = 128;

DSparkConfig parse_config(const JsonObject& j, const std::string& where, const ModelInfo& target) {
    DSparkConfig c;
    const std::string mt = j.get_string("model_type", "");
    SLUICE_CHECK(mt == "k3_dspark", where, ": field 'model_type' must be k3_dspark, got '", mt, "'");
    c.hidden_size = j.get_int("hidden_size");
    c.intermediate_size = j.get_int("intermediate_size");
    c.num_hidden_layers = j.get_int("num_hidden_layers");
    c.vocab_size = j.get_int("vocab_size");
    c.target_hidden_size = j.get_int("target_hidden_size", c.hidden_size);
    c.target_layer_ids = j.get_int_list("target_layer_ids");
    c.mask_token_id = j.get_int("mask_token_id");
    c.markov_rank = j.get_int("markov_rank");
    c.block_size = j.get_int("block_size", 7);
    c.enable_confidence_head = j.get_bool("enable_confidence_head", false);
    c.confidence_head_with_markov = j.get_bool("confidence_head_with_markov", false);
    c.rms_norm_eps = j.get_float("rms_norm_eps", 1e-5);
    c.max_position_embeddings = j.get_int("max_position_embeddings", 0);
    require_positive(where, {{"hidden_size", c.hidden_size}, {"intermediate_size", c.intermediate_size},
                             {"num_hidden_layers", c.num_hidden_layers}, {"markov_rank", c.markov_rank},
                             {"block_size", c.block_size}});
    // fit the target
    check_drafter_fits(where, c.hidden_size, c.target_hidden_size, c.vocab_size, target,
                       "the drafter shares the target's embedding and LM head");
    if (j.has("draft_vocab_size"))
        SLUICE_CHECK(j.get_int("draft_vocab_size") == c.vocab_size, where, ": field 'draft_vocab_size' ",
                     j.get_int("draft_vocab_size"), " differs from vocab_size ", c.vocab_size,
                     " (a reduced draft vocabulary is not supported)");
    SLUICE_CHECK(!c.target_layer_ids.empty(), where, ": field 'target_layer_ids' is empty");
    for (int64_t id : c.target_layer_ids)
        SLUICE_CHECK(id >= 0 && id < target.num_hidden_layers, where, ": field 'target_layer_ids' entry ", id,
                     " is outside the target's layers [0, ", target.num_hidden_layers, ")");
    if (j.has("num_target_layers"))
        SLUICE_CHECK(j.get_int("num_target_layers") == int64_t(c.target_layer_ids.size()), where,
                     ": field 'num_target_layers' ", j.get_int("num_target_layers"), " differs from the ",
                     c.target_layer_ids.size(), " entries of target_layer_ids");
    SLUICE_CHECK(c.mask_token_id >= 0 && c.mask_token_id < c.vocab_size, where, ": field 'mask_token_id' ",
                 c.mask_token_id, " is outside the vocabulary [0, ", c.vocab_size, ")");
    const std::string mh = j.get_string("markov_head_type", "vanilla");
    SLUICE_CHECK(mh == "vanilla", where, ": field 'markov_head_type' '", mh, "' is not supported (vanilla only)");
    SLUICE_CHECK(!c.enable_confidence_head || c.confidence_head_with_markov, where,
                 ": field 'confidence_head_with_markov' false is not supported (the release has true)");
    DraftMla a = parse_draft_mla(j, where, c.hidden_size, c.rms_norm_eps, c.max_position_embeddings);
    c.mla = a.mla;
    c.rope = std::move(a.rope);
    return c;
}

}  // namespace

bool is_dspark_checkpoint(const std::string& dir) {
    std::error_code ec;
    const std::string path = dir + "/config.json";
    if (!std::filesystem::is_regular_file(path, ec)) return false;
    const JsonObject j = JsonObject::load_file(path);
    if (j.get_string("model_type", "") == "k3_dspark") return true;
    if (!j.has("architectures")) return false;
    for (const auto& a : j.get_string_list("architectures"))
        if (a == "K3DSparkModel") return true;
    return false;
}

std::unique_ptr<DSparkModel> DSparkModel::load(const std::string& dir, const Model& target, int n_threads) {
    const std::string where = dir + "/config.json";
    const JsonObject j = JsonObject::load_file(where);
    DSparkConfig cfg = parse_config(j, where, target.info());
    SLUICE_CHECK(target.token_embedding() && target.output_head(), "DSpark drafter ", dir, ": the target (",
                 target.info().architecture, ") does not share its embedding and LM head");
    return std::unique_ptr<DSparkModel>(new DSparkModel(dir, std::move(cfg), target, n_threads));
}

DSparkModel::DSparkModel(const std::string& dir, DSparkConfig cfg, const Model& target, int n_threads)
    : ck_(dir), cfg_(std::move(cfg)), embed_(target.token_embedding()), lm_head_(target.output_head()),
      ctx_(n_threads) {
    const auto& c = cfg_;
    const MlaConfig& m = c.mla;
    const int64_t d = c.hidden_size, V = c.vocab_size, r = c.markov_rank;
    context_proj_ = bind_linear(ck_, "context_proj", d, c.context_width());
    context_norm_ = load_f32(ck_, "context_norm.weight", {d});
    for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
        const std::string p = "layers." + std::to_string(il) + ".", a = p + "self_attn.";
        Layer L;
        L.input_layernorm = load_f32(ck_, p + "input_layernorm.weight", {d});
        L.post_attention_layernorm = load_f32(ck_, p + "post_attention_layernorm.weight", {d});
        L.attn = bind_draft_mla(ck_, a, m, d);
        L.mlp.gate = bind_linear(ck_, p + "mlp.gate_proj", c.intermediate_size, d);
        L.mlp.up = bind_linear(ck_, p + "mlp.up_proj", c.intermediate_size, d);
        L.mlp.down = bind_linear(ck_, p + "mlp.down_proj", d, c.intermediate_size);
        layers_.push_back(std::move(L));
    }
    final_norm_ = load_f32(ck_, "final_norm.weight", {d});
    markov_w1_ = bind_linear(ck_, "markov_head.markov_w1", V, r);
    markov_w2_ = bind_linear(ck_, "markov_head.markov_w2", V, r);
    if (c.enable_confidence_head) {
        confidence_w_ = load_f32(ck_, "confidence_head.proj.weight", {1, d + r});
        confidence_b_ = load_f32(ck_, "confidence_head.proj.bias", {1});
    }
    // the release's copy of the target's embedding: checked for shape, never read (the target's is used)
    ck_.get("embed_tokens.weight", {V, d});
    if (m.use_rope) rope_ = Rope(c.rope, m.qk_rope_head_dim);
    // the scratch of the larger of a block pass and an ingest pass, carved once
    using A = ScratchArena;
    const int64_t B = c.block_size;
    const uint64_t block =
        3 * A::f32_bytes(B * d) + std::max(mla_scratch_bytes(m, B), swiglu_scratch_bytes(B, c.intermediate_size));
    const uint64_t ingest = A::f32_bytes(kIngestRows * d) + A::f32_bytes(kIngestRows * m.cache_width());
    ctx_.arena().reserve(std::max(block, ingest));
}

DSparkModel::Seq DSparkModel::new_seq() const {
    Seq s;
    s.caches.resize(layers_.size());
    // the drafter's caches are outside the target's plan: one pool of their own, shared by the layers
    const int64_t w = cfg_.mla.cache_width();
    auto pool = std::make_shared<PagePool>(PagedRows::k_page_rows * w, 16, 0, "a DSpark drafter's caches");
    for (auto& c : s.caches) c.data.init(w, pool);
    return s;
}

void DSparkModel::ingest(Seq& seq, const float* taps, int64_t n) {
    const auto& c = cfg_;
    const MlaConfig& m = c.mla;
    const int64_t d = c.hidden_size, cw = m.cache_width(), W = c.context_width();
    for (int64_t i0 = 0; i0 < n; i0 += kIngestRows) {
        const int64_t k = std::min(kIngestRows, n - i0), pos0 = seq.rows();
        ScratchArena::Scope scope(ctx_.arena());
        float* x = ctx_.arena().f32(k * d);
        float* kva = ctx_.arena().f32(k * cw);
        ops::matmul(context_proj_, taps + i0 * W, k, x, ctx_);
        ops::rms_norm(x, context_norm_.data(), k, d, float(c.rms_norm_eps), x);
        for (size_t il = 0; il < layers_.size(); ++il)
            write_draft_mla_cache(m, layers_[il].attn, rope_, x, k, pos0, seq.caches[il], kva, ctx_);
    }
}

DSparkModel::Block DSparkModel::propose(Seq& seq, int32_t anchor, int64_t n_drafts, const DraftPick* pick,
                                       bool causal) {
    const auto& c = cfg_;
    const int64_t B = c.block_size, d = c.hidden_size, V = c.vocab_size, r = c.markov_rank;
    const float eps = float(c.rms_norm_eps);
    SLUICE_CHECK(anchor >= 0 && anchor < V, "DSpark: anchor token ", anchor, " is outside the vocabulary");
    n_drafts = std::clamp<int64_t>(n_drafts, 0, B);
    Block out;
    if (n_drafts == 0) return out;
    const int64_t L = seq.rows();
    ScratchArena::Scope scope(ctx_.arena());
    std::vector<int64_t> pos(static_cast<size_t>(B)), last(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) {
        pos[size_t(i)] = L + i;
        last[size_t(i)] = causal ? L + i : L + B - 1;
    }
    float* h = ctx_.arena().f32(B * d);
    float* t = ctx_.arena().f32(B * d);
    float* y = ctx_.arena().f32(B * d);
    for (int64_t i = 0; i < B; ++i) ops::dequantize_row(*embed_, i == 0 ? anchor : int32_t(c.mask_token_id), h + i * d);
    std::vector<int64_t> all_rows(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) all_rows[size_t(i)] = i;
    for (size_t il = 0; il < layers_.size(); ++il) {
        const Layer& Ly = layers_[il];
        ops::rms_norm(h, Ly.input_layernorm.data(), B, d, eps, t);
        const MlaSeqRows sr[] = {{all_rows, &seq.caches[il]}};
        mla_forward(c.mla, Ly.attn, rope_, t, B, pos.data(), sr, y, ctx_, last.data());
        ops::add(h, y, B * d, h);
        ops::rms_norm(h, Ly.post_attention_layernorm.data(), B, d, eps, t);
        swiglu_forward(Ly.mlp, t, B, y, ctx_);
        ops::add(h, y, B * d, h);
    }
    seq.truncate(L);  // the block's cache rows go: only context rows stay
    // only the rows that become drafts need the head
    ops::rms_norm(h, final_norm_.data(), n_drafts, d, eps, t);
    out.logits.resize(size_t(n_drafts * V));
    ops::matmul(*lm_head_, t, n_drafts, out.logits.data(), ctx_);
    std::vector<float> e(static_cast<size_t>(r)), bias(static_cast<size_t>(V));
    int32_t prev = anchor;
    for (int64_t i = 0; i < n_drafts; ++i) {
        ops::dequantize_row(markov_w1_, prev, e.data());
        ops::matmul(markov_w2_, e.data(), 1, bias.data(), ctx_);
        float* row = out.logits.data() + i * V;
        ops::add(row, bias.data(), V, row);
        if (!confidence_w_.empty())
            out.confidence.push_back(
                ops::sigmoid_dot(confidence_w_.data(), confidence_b_[0], t + i * d, d, e.data(), r));
        prev = pick_draft(pick, std::span<const float>(row, size_t(V)));
        out.drafts.push_back(prev);
    }
    return out;
}

}  // namespace sluice
