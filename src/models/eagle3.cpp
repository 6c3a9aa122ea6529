#include "models/eagle3.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "formats/hf_config.h"
#include "models/draft_mla.h"
#include "models/weights.h"
#include "ops/elementwise.h"
#include "ops/ops.h"

namespace sluice {

namespace {

// Committed rows written to the cache per pass (bounds the [rows, tap_width] activations of a long prompt).
constexpr int64_t kIngestRows = 128;

const char* const kAuxIds = "eagle_config.eagle_aux_hidden_state_layer_ids";

bool has_eagle3_architecture(const JsonObject& j) {
    if (!j.has("architectures")) return false;
    for (const auto& a : j.get_string_list("architectures"))
        if (a == "Eagle3DeepseekV2ForCausalLM" || a == "Eagle3DeepseekV3ForCausalLM") return true;
    return false;
}

Eagle3Config parse_config(const JsonObject& j, const std::string& where, const ModelInfo& target) {
    SLUICE_CHECK(has_eagle3_architecture(j), where,
                 ": field 'architectures' must name Eagle3DeepseekV2ForCausalLM (an EAGLE-3 MLA drafter)");
    Eagle3Config c;
    c.hidden_size = j.get_int("hidden_size");
    c.intermediate_size = j.get_int("intermediate_size");
    c.num_hidden_layers = j.get_int("num_hidden_layers");
    c.vocab_size = j.get_int("vocab_size");
    c.draft_vocab_size = j.get_int("draft_vocab_size", c.vocab_size);
    c.target_hidden_size = j.get_int("target_hidden_size", c.hidden_size);
    const auto eagle = j.get_object("eagle_config");
    SLUICE_CHECK(eagle && eagle->has("eagle_aux_hidden_state_layer_ids"), where, ": field '", kAuxIds,
                 "' is missing (which of the target's hidden states the drafter reads)");
    c.aux_layer_ids = eagle->get_int_list("eagle_aux_hidden_state_layer_ids");
    c.fc_norm = j.get_bool("fc_norm", false);
    c.norm_output = j.get_bool("norm_output", false);
    c.norm_before_residual = j.get_bool("norm_before_residual", false);
    c.rms_norm_eps = j.get_float("rms_norm_eps", 1e-5);
    c.max_position_embeddings = j.get_int("max_position_embeddings", 0);
    require_positive(where, {{"hidden_size", c.hidden_size}, {"intermediate_size", c.intermediate_size},
                             {"num_hidden_layers", c.num_hidden_layers}});
    SLUICE_CHECK(c.num_hidden_layers == 1, where, ": field 'num_hidden_layers' ", c.num_hidden_layers,
                 " is not supported (the EAGLE-3 head has one layer)");
    // fit the target
    check_drafter_fits(where, c.hidden_size, c.target_hidden_size, c.vocab_size, target,
                       "the drafter reads the target's embedding");
    SLUICE_CHECK(c.draft_vocab_size >= 1 && c.draft_vocab_size <= c.vocab_size, where, ": field 'draft_vocab_size' ",
                 c.draft_vocab_size, " is outside [1, vocab_size ", c.vocab_size, "]");
    SLUICE_CHECK(!c.aux_layer_ids.empty(), where, ": field '", kAuxIds, "' is empty");
    for (int64_t id : c.aux_layer_ids)
        SLUICE_CHECK(id >= 1 && id <= target.num_hidden_layers, where, ": field '", kAuxIds, "' entry ", id,
                     " is outside the target's layers [1, ", target.num_hidden_layers,
                     "] (one-based: id k reads the output of layer k - 1)");
    if (j.has("num_aux_hidden_states"))
        SLUICE_CHECK(j.get_int("num_aux_hidden_states") == int64_t(c.aux_layer_ids.size()), where,
                     ": field 'num_aux_hidden_states' ", j.get_int("num_aux_hidden_states"), " differs from the ",
                     c.aux_layer_ids.size(), " entries of ", kAuxIds);
    DraftMla a = parse_draft_mla(j, where, c.hidden_size, c.rms_norm_eps, c.max_position_embeddings);
    c.mla = a.mla;
    c.rope = std::move(a.rope);
    return c;
}

}  // namespace

std::vector<int64_t> Eagle3Config::tapped_layers() const {
    std::vector<int64_t> l;
    for (int64_t id : aux_layer_ids) l.push_back(id - 1);
    return l;
}

bool is_eagle3_checkpoint(const std::string& dir) {
    std::error_code ec;
    const std::string path = dir + "/config.json";
    if (!std::filesystem::is_regular_file(path, ec)) return false;
    return has_eagle3_architecture(JsonObject::load_file(path));
}

std::unique_ptr<Eagle3Model> Eagle3Model::load(const std::string& dir, const Model& target, int n_threads) {
    const std::string where = dir + "/config.json";
    Eagle3Config cfg = parse_config(JsonObject::load_file(where), where, target.info());
    SLUICE_CHECK(target.token_embedding(), "EAGLE-3 drafter ", dir, ": the target (", target.info().architecture,
                 ") does not share its embedding");
    return std::unique_ptr<Eagle3Model>(new Eagle3Model(dir, std::move(cfg), target, n_threads));
}

Eagle3Model::Eagle3Model(const std::string& dir, Eagle3Config cfg, const Model& target, int n_threads)
    : ck_(dir), cfg_(std::move(cfg)), embed_(target.token_embedding()), ctx_(n_threads) {
    const auto& c = cfg_;
    const MlaConfig& m = c.mla;
    const int64_t d = c.hidden_size, I = c.intermediate_size, Ht = c.target_hidden_size;
    fc_ = bind_linear(ck_, "fc", d, c.tap_width());
    if (c.fc_norm)
        for (size_t i = 0; i < c.aux_layer_ids.size(); ++i)
            fc_norm_.push_back(load_f32(ck_, "fc_norm." + std::to_string(i) + ".weight", {Ht}));
    // the release names the layer layers.0 (vLLM maps EAGLE-3's usual midlayer to it)
    const std::string p = ck_.has("midlayer.hidden_norm.weight") ? "midlayer." : "layers.0.";
    hidden_norm_ = load_f32(ck_, p + "hidden_norm.weight", {d});
    input_layernorm_ = load_f32(ck_, p + "input_layernorm.weight", {d});
    post_attention_layernorm_ = load_f32(ck_, p + "post_attention_layernorm.weight", {d});
    attn_ = bind_draft_mla(ck_, p + "self_attn.", m, 2 * d);
    mlp_.gate = bind_linear(ck_, p + "mlp.gate_proj", I, d);
    mlp_.up = bind_linear(ck_, p + "mlp.up_proj", I, d);
    mlp_.down = bind_linear(ck_, p + "mlp.down_proj", d, I);
    norm_ = load_f32(ck_, "norm.weight", {d});
    load_d2t();
    lm_head_ = bind_linear(ck_, "lm_head", c.draft_vocab_size, d);
    // the release's copy of the target's embedding: checked for shape, never read (the target's is used)
    if (ck_.has("embed_tokens.weight")) ck_.get("embed_tokens.weight", {c.vocab_size, d});
    if (m.use_rope) rope_ = Rope(c.rope, m.qk_rope_head_dim);
    using A = ScratchArena;
    const int64_t k = kIngestRows, W = c.tap_width();
    const uint64_t ingest = 2 * A::f32_bytes(k * d) + A::f32_bytes(k * 2 * d) + A::f32_bytes(k * m.cache_width()) +
                            A::f32_bytes(k * W);
    const uint64_t row = 6 * A::f32_bytes(d) + A::f32_bytes(2 * d) + A::f32_bytes(W) +
                         std::max(mla_scratch_bytes(m, 1), swiglu_scratch_bytes(1, I));
    ctx_.arena().reserve(std::max(ingest, row));
}

// A head over fewer tokens than the target's (draft_vocab_size, as vLLM's EAGLE-3 heads): tensor d2t [draft vocab]
// (I64, or I32) maps draft id k to target id k + d2t[k]. Read whenever present; required for a reduced head.
void Eagle3Model::load_d2t() {
    const Eagle3Config& c = cfg_;
    if (!ck_.has("d2t")) {
        SLUICE_CHECK(c.draft_vocab_size == c.vocab_size, ck_.dir(), ": tensor 'd2t' is missing (field 'draft_vocab_size' ",
                     c.draft_vocab_size, " is below vocab_size ", c.vocab_size, ": the head's ids need d2t)");
        return;
    }
    const TensorView v = ck_.get("d2t", {c.draft_vocab_size});
    SLUICE_CHECK(v.dtype() == DType::I64 || v.dtype() == DType::I32, *v.path, ": tensor 'd2t' has dtype ",
                 dtype_name(v.dtype()), ", expected I64 or I32");
    d2t_.resize(size_t(c.draft_vocab_size));
    for (int64_t k = 0; k < c.draft_vocab_size; ++k) {
        int64_t off = 0;
        if (v.dtype() == DType::I64) {
            std::memcpy(&off, v.data + 8 * k, 8);
        } else {
            int32_t o32;
            std::memcpy(&o32, v.data + 4 * k, 4);
            off = o32;
        }
        SLUICE_CHECK(k + off >= 0 && k + off < c.vocab_size, *v.path, ": tensor 'd2t' entry ", k, " is ", off,
                     ": draft id ", k, " would be target id ", k + off, ", outside [0, ", c.vocab_size, ")");
        d2t_[size_t(k)] = off;
    }
}

Eagle3Model::Seq Eagle3Model::new_seq() const {
    Seq s;
    // outside the target's plan: a pool of its own
    const int64_t w = cfg_.mla.cache_width();
    s.cache.data.init(w, std::make_shared<PagePool>(PagedRows::k_page_rows * w, 16, 0, "an EAGLE-3 drafter's cache"));
    return s;
}

void Eagle3Model::fuse(const float* taps, int64_t k, float* normed, float* g) {
    const int64_t W = cfg_.tap_width(), Ht = cfg_.target_hidden_size;
    if (fc_norm_.empty()) {
        ops::matmul(fc_, taps, k, g, ctx_);
        return;
    }
    for (int64_t r = 0; r < k; ++r)
        for (size_t i = 0; i < fc_norm_.size(); ++i) {
            const int64_t o = r * W + int64_t(i) * Ht;
            ops::rms_norm(taps + o, fc_norm_[i].data(), 1, Ht, float(cfg_.rms_norm_eps), normed + o);
        }
    ops::matmul(fc_, normed, k, g, ctx_);
}

void Eagle3Model::layer_input(const int32_t* tokens, const float* g, int64_t k, float* x, float* residual) {
    const int64_t d = cfg_.hidden_size;
    const float eps = float(cfg_.rms_norm_eps);
    for (int64_t r = 0; r < k; ++r) {
        SLUICE_CHECK(tokens[r] >= 0 && tokens[r] < cfg_.vocab_size, "EAGLE-3: token ", tokens[r],
                     " is outside the vocabulary");
        float* e = x + r * 2 * d;
        ops::dequantize_row(*embed_, tokens[r], e);
        ops::rms_norm(e, input_layernorm_.data(), 1, d, eps, e);
        ops::rms_norm(g + r * d, hidden_norm_.data(), 1, d, eps, e + d);
        std::copy_n(cfg_.norm_before_residual ? e + d : g + r * d, d, residual + r * d);
    }
}

void Eagle3Model::layer_row(const float* x, float* h, int64_t pos, Seq& seq, float* out, float* feed) {
    const int64_t d = cfg_.hidden_size;
    const float eps = float(cfg_.rms_norm_eps);
    ScratchArena::Scope scope(ctx_.arena());
    float* y = ctx_.arena().f32(d);
    float* t = ctx_.arena().f32(d);
    const int64_t row0[] = {0};
    const MlaSeqRows sr[] = {{row0, &seq.cache}};
    mla_forward(cfg_.mla, attn_, rope_, x, 1, &pos, sr, y, ctx_);  // causal: the cache up to pos
    ops::add(h, y, d, h);
    ops::rms_norm(h, post_attention_layernorm_.data(), 1, d, eps, t);
    swiglu_forward(mlp_, t, 1, y, ctx_);
    ops::add(h, y, d, h);
    ops::rms_norm(h, norm_.data(), 1, d, eps, out);
    std::copy_n(cfg_.norm_output ? out : h, d, feed);
}

Eagle3Model::Chain Eagle3Model::propose(Seq& seq, const float* taps, const int32_t* next, int64_t n,
                                        int64_t n_drafts, const DraftPick* pick) {
    const auto& c = cfg_;
    const int64_t d = c.hidden_size, W = c.tap_width(), V = c.draft_vocab_size, cw = c.mla.cache_width();
    SLUICE_CHECK(n >= 1, "EAGLE-3: propose needs at least one committed row");
    n_drafts = std::max<int64_t>(n_drafts, 0);
    const int64_t L0 = seq.rows();
    // rows that only fill the cache: all but the last (which drafts), all of them when nothing is drafted
    const int64_t cache_only = n_drafts > 0 ? n - 1 : n;
    for (int64_t i0 = 0; i0 < cache_only; i0 += kIngestRows) {
        const int64_t k = std::min(kIngestRows, cache_only - i0);
        ScratchArena::Scope scope(ctx_.arena());
        float* normed = ctx_.arena().f32(k * W);
        float* g = ctx_.arena().f32(k * d);
        float* x = ctx_.arena().f32(k * 2 * d);
        float* res = ctx_.arena().f32(k * d);
        float* kva = ctx_.arena().f32(k * cw);
        fuse(taps + i0 * W, k, normed, g);
        layer_input(next + i0, g, k, x, res);
        write_draft_mla_cache(c.mla, attn_, rope_, x, k, L0 + i0, seq.cache, kva, ctx_);
    }
    Chain out;
    if (n_drafts == 0) return out;
    ScratchArena::Scope scope(ctx_.arena());
    float* normed = ctx_.arena().f32(W);
    float* g = ctx_.arena().f32(d);
    float* x = ctx_.arena().f32(2 * d);
    float* h = ctx_.arena().f32(d);
    float* o = ctx_.arena().f32(d);
    fuse(taps + (n - 1) * W, 1, normed, g);
    out.logits.resize(size_t(n_drafts * V));
    int32_t token = next[n - 1];
    for (int64_t i = 0; i < n_drafts; ++i) {
        layer_input(&token, g, 1, x, h);
        layer_row(x, h, L0 + n - 1 + i, seq, o, g);  // g: the hidden state the next row reads
        float* logits = out.logits.data() + i * V;
        ops::matmul(lm_head_, o, 1, logits, ctx_);
        token = pick_draft(pick, std::span<const float>(logits, size_t(V)), d2t_);
        out.drafts.push_back(token);
    }
    seq.truncate(L0 + n);  // the chain's rows go: only committed rows stay
    return out;
}

}  // namespace sluice
