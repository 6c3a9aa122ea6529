// Shared by the synth model rosters: one helper per tensor kind (plain, norm, linear in the chosen format) so
// every model lays out quantized Linears the same way. Internal to src/models/synth*.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/synth.h"
#include "models/synth_random.h"
#include "models/synth_tokenizer.h"

namespace sluice::synth {

// A dimension scaled down by k: x / k rounded up to a multiple of `mult`, at least `min_value`.
inline int64_t scaled_dim(int64_t x, int64_t k, int64_t mult, int64_t min_value) {
    int64_t v = (x + k - 1) / k;
    v = (v + mult - 1) / mult * mult;
    return std::max(v, min_value);
}

// The released widths r scaled down by k, as every synthesized MLA model scales them (hidden size, heads, LoRA
// ranks, head dims, MLP widths); the other fields are r's.
inline SynthDims scaled_widths(SynthDims r, int64_t k) {
    r.hidden_size = scaled_dim(r.hidden_size, k, 32, 64);
    r.num_attention_heads = std::max<int64_t>(1, r.num_attention_heads / k);
    r.q_lora_rank = scaled_dim(r.q_lora_rank, k, 32, 32);
    r.kv_lora_rank = scaled_dim(r.kv_lora_rank, k, 32, 32);
    r.qk_nope_head_dim = scaled_dim(r.qk_nope_head_dim, k, 16, 16);
    r.qk_rope_head_dim = scaled_dim(r.qk_rope_head_dim, k, 8, 8);
    r.v_head_dim = scaled_dim(r.v_head_dim, k, 16, 16);
    r.intermediate_size = scaled_dim(r.intermediate_size, k, 32, 64);
    r.moe_intermediate_size = scaled_dim(r.moe_intermediate_size, k, 32, 32);
    return r;
}

// Every synthesized model's vocabulary: the synthetic tokenizer's, so that every id the head can produce decodes to
// text, unless --vocab-size asks for more rows (e.g. the real model's, for its embedding and head bytes).
inline int64_t synth_vocab_size(const SynthOptions& o) {
    if (o.vocab_size == 0) return synth_tokenizer_vocab_size();
    SLUICE_CHECK(o.vocab_size >= synth_tokenizer_vocab_size(), "synth: --vocab-size must be >= ",
                 synth_tokenizer_vocab_size(), " (the synthetic tokenizer's size), got ", o.vocab_size);
    return o.vocab_size;
}

// Builds the tensor list. Linear weights are uniform with std 1/sqrt(fan_in) (half-width sqrt(3/fan_in)), norms
// 1 +- 0.1, the router 2/sqrt(hidden) so sigmoid scores spread out, embeddings std 1.
class Roster {
public:
    Roster(uint64_t seed, SynthDType dtype) : seed_(seed), dtype_(dtype) {}
    std::vector<TensorToWrite> tensors;

    void plain(const std::string& name, DType dt, std::vector<int64_t> shape, float center, float half_width) {
        tensors.push_back({name, dt, std::move(shape), synth::uniform_fill(dt, key(name), center, half_width)});
    }
    void norm(const std::string& name, int64_t n) { plain(name, DType::BF16, {n}, 1.0f, 0.1f); }

    // prefix names the module (without ".weight"); `expert` selects the routed-expert format.
    void linear(const std::string& prefix, int64_t out, int64_t in, bool expert) {
        const float std_dev = 1.0f / std::sqrt(float(in));
        const float half = std::sqrt(3.0f) * std_dev;
        const std::string w = prefix + ".weight";
        if (dtype_ == SynthDType::Fp8) {
            // Codes span [-448, 448]; the block scale maps that range onto [-half, half] (+-25%).
            tensors.push_back({w, DType::F8_E4M3, {out, in}, synth::fp8_e4m3_fill(key(w))});
            const std::string s = prefix + ".weight_scale_inv";
            plain(s, DType::F32, {(out + 127) / 128, (in + 127) / 128}, half / 448.0f, 0.25f * half / 448.0f);
        } else if (expert && dtype_ == SynthDType::Int4) {
            SLUICE_ASSERT(in % 32 == 0, "int4 input width ", in);
            const std::string p = prefix + ".weight_packed";
            tensors.push_back({p, DType::I32, {out, in / 8}, synth::random_bits_fill(key(p))});
            // Uniform nibbles q - 8 in [-8, 7] have std ~4.61.
            const float scale = std_dev / 4.61f;
            plain(prefix + ".weight_scale", DType::BF16, {out, in / 32}, scale, 0.25f * scale);
            tensors.push_back({prefix + ".weight_shape", DType::I32, {2},
                               synth::int32_values_fill({int32_t(out), int32_t(in)})});
        } else if (expert && dtype_ == SynthDType::Mxfp4) {
            SLUICE_ASSERT(in % 32 == 0, "mxfp4 input width ", in);
            const std::string p = prefix + ".weight_packed", sc = prefix + ".weight_scale";
            tensors.push_back({p, DType::U8, {out, in / 2}, synth::random_bits_fill(key(p))});
            // Uniform E2M1 codes have rms ~2.93; the power-of-two block scale brings that to ~std_dev.
            const int e = int(std::lround(std::log2(std_dev / 2.93f))) + 1;
            tensors.push_back({sc, DType::U8, {out, in / 32}, synth::e8m0_fill(key(sc), e)});
        } else {
            plain(w, expert && dtype_ == SynthDType::F32 ? DType::F32 : DType::BF16, {out, in}, 0.0f, half);
        }
    }

    // A SwiGLU MLP under prefix (ending in "."): gate_proj and up_proj [inter, in], then down_proj [in, inter].
    void swiglu(const std::string& prefix, int64_t inter, int64_t in, bool expert = false) {
        linear(prefix + "gate_proj", inter, in, expert);
        linear(prefix + "up_proj", inter, in, expert);
        linear(prefix + "down_proj", in, inter, expert);
    }

    // A sigmoid router under prefix (ending in "gate."): weight [experts, h], then e_score_correction_bias.
    void sigmoid_router(const std::string& prefix, int64_t experts, int64_t h) {
        plain(prefix + "weight", DType::BF16, {experts, h}, 0.0f, 2.0f * std::sqrt(3.0f / float(h)));
        plain(prefix + "e_score_correction_bias", DType::F32, {experts}, 0.0f, 0.05f);
    }

    // An MLA block under a (ending in "self_attn."): q through q-LoRA (q_a_proj, its norm, q_b_proj) when
    // q_lora_rank > 0, else q_proj; the compressed kv; the output gate g_proj when output_gate; o_proj.
    void mla(const std::string& a, int64_t h, int64_t heads, int64_t q_lora_rank, int64_t kv_lora_rank, int64_t nope,
             int64_t rope, int64_t v, bool output_gate = false, int64_t in = 0) {
        if (in == 0) in = h;  // the projections' input width (EAGLE-3's layer reads 2 x hidden)
        if (q_lora_rank > 0) {
            linear(a + "q_a_proj", q_lora_rank, in, false);
            norm(a + "q_a_layernorm.weight", q_lora_rank);
            linear(a + "q_b_proj", heads * (nope + rope), q_lora_rank, false);
        } else {
            linear(a + "q_proj", heads * (nope + rope), in, false);
        }
        linear(a + "kv_a_proj_with_mqa", kv_lora_rank + rope, in, false);
        norm(a + "kv_a_layernorm.weight", kv_lora_rank);
        linear(a + "kv_b_proj", heads * (nope + v), kv_lora_rank, false);
        if (output_gate) linear(a + "g_proj", heads * v, h, false);
        linear(a + "o_proj", h, heads * v, false);
    }

    // The token embedding (std 1) and the LM head (std 1/sqrt(h)), both [vocab, h].
    void embedding(const std::string& name, int64_t vocab, int64_t h) {
        plain(name, DType::BF16, {vocab, h}, 0.0f, std::sqrt(3.0f));
    }
    void lm_head(const std::string& name, int64_t vocab, int64_t h) {
        plain(name, DType::BF16, {vocab, h}, 0.0f, std::sqrt(3.0f / float(h)));
    }

private:
    uint64_t key(const std::string& name) const { return synth::tensor_key(seed_, name); }
    uint64_t seed_;
    SynthDType dtype_;
};

// Kimi K3's DSpark drafter (models/synth_dspark.cpp): config and tensors sized from the target's config.json.
struct DSparkSynth {
    int64_t hidden_size = 0, vocab_size = 0, target_layers = 0, layers = 0, heads = 0, q_lora_rank = 0,
            kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0, intermediate_size = 0,
            markov_rank = 0, mask_token_id = 0;
    double rms_norm_eps = 1e-5;
    std::vector<int64_t> target_layer_ids;
    std::string config_json;
    std::vector<TensorToWrite> tensors;
};
DSparkSynth dspark_plan(const SynthOptions& o);
std::vector<int64_t> dspark_target_layer_ids(int64_t n_target_layers);

// What Kimi K3's drafters (DSpark, EAGLE-3) take from their target (o.target_dir's config.json: hidden size,
// vocabulary, layers, eps) and their MLA widths (the releases': 64 heads, LoRA 1536/512, head dims 128/64/128)
// scaled down by o.scale_down; `like` names the layout in errors.
struct K3DraftDims {
    int64_t hidden_size = 0, vocab_size = 0, target_layers = 0, heads = 0, q_lora_rank = 0, kv_lora_rank = 0,
            qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
    double rms_norm_eps = 1e-5;
};
K3DraftDims k3_draft_dims(const SynthOptions& o, const std::string& like);
// Adds the attention fields (widths, no NoPE, no output gate, eps, YaRN RoPE θ 50000 x32) to a drafter's config.
void add_k3_draft_attention(nlohmann::json& c, const K3DraftDims& t);
// embed_tokens.weight: a byte copy of the target's BF16 embedding [vocab_size, h].
TensorToWrite k3_target_embedding(const std::string& target_dir, int64_t vocab_size, int64_t h);

// Kimi K3's EAGLE-3 drafter (models/synth_eagle3.cpp): lightseekorg/kimi-k3-eagle3.1-mla's layout sized from the
// target; eagle3_aux_layer_ids maps the release's one-based ids [2, 46, 90] of 93 layers onto n layers.
struct Eagle3Synth {
    K3DraftDims dims;
    int64_t intermediate_size = 0;
    std::vector<int64_t> aux_layer_ids;
    std::string config_json;
    std::vector<TensorToWrite> tensors;
};
Eagle3Synth eagle3_plan(const SynthOptions& o);
std::vector<int64_t> eagle3_aux_layer_ids(int64_t n_target_layers);

// Kimi K3 (models/synth_k3.cpp).
SynthDims k3_dims(const SynthOptions& o);
std::string k3_config_json(const SynthDims& d, SynthDType t);
std::vector<TensorToWrite> k3_roster(const SynthDims& d, uint64_t seed, SynthDType t);

// Kimi Linear (models/synth_kimi_linear.cpp).
// Kimi Linear's and K3's dims: the released widths scaled down, o's layers and experts (top-k at most the released),
// one expert group, a dense first layer and KDA heads as many as the attention's.
SynthDims kimi_dims(const SynthOptions& o, const SynthDims& released);
SynthDims kimi_linear_dims(const SynthOptions& o);
std::string kimi_linear_config_json(const SynthDims& d, SynthDType t);
std::vector<TensorToWrite> kimi_linear_roster(const SynthDims& d, uint64_t seed, SynthDType t);

// Qwen3-MoE and Mixtral (models/synth_gqa.cpp).
SynthDims gqa_dims(SynthModel m, const SynthOptions& o);
std::string gqa_config_json(SynthModel m, const SynthDims& d, SynthDType t);
std::vector<TensorToWrite> gqa_roster(SynthModel m, const SynthDims& d, uint64_t seed, SynthDType t);

// gpt-oss (models/synth_gpt_oss.cpp); experts are always MXFP4.
SynthDims gpt_oss_dims(const SynthOptions& o);
std::string gpt_oss_config_json(const SynthDims& d);
std::vector<TensorToWrite> gpt_oss_roster(const SynthDims& d, uint64_t seed);

}  // namespace sluice::synth
