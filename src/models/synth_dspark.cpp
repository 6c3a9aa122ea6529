// Kimi K3 DSpark drafter for `synth --like kimi-k3-dspark --target K3_DIR`: the published Inferact/Kimi-K3-DSpark
// layout (K3 digest section 9.2: config fields, the 68 tensor names; vLLM k3_dspark.py for the config fields it
// reads) sized to fit a (synthesized) K3 target: hidden size, vocabulary and the tapped layers come from the
// target's config.json, the drafter's own widths from --scale-down, its layer count from --layers (published: 5).
// embed_tokens is a byte copy of the target's (the release ships a copy of K3's). Also what K3's drafters share
// (synth_eagle3.cpp): the target's dimensions, the scaled MLA widths and their config fields, the embedding copy.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "models/synth_roster.h"

using nlohmann::json;

namespace sluice::synth {

namespace {

const std::string kTargetEmbed = "language_model.model.embed_tokens.weight";

}  // namespace

// The published taps [2, 23, 47, 71, 89] of K3's 93 layers, mapped onto n layers (id * (n-1) / 92, rounded), sorted
// and without repeats (a target of fewer than 5 layers gets fewer taps). Identity for n = 93.
std::vector<int64_t> dspark_target_layer_ids(int64_t n_target_layers) {
    std::vector<int64_t> ids;
    for (int64_t id : {2, 23, 47, 71, 89}) {
        const int64_t m = int64_t(std::lround(double(id) * double(n_target_layers - 1) / 92.0));
        const int64_t c = std::clamp<int64_t>(m, 0, n_target_layers - 1);
        if (std::find(ids.begin(), ids.end(), c) == ids.end()) ids.push_back(c);
    }
    std::sort(ids.begin(), ids.end());
    return ids;
}

DSparkSynth dspark_plan(const SynthOptions& o) {
    const K3DraftDims t = k3_draft_dims(o, "kimi-k3-dspark");
    DSparkSynth s;
    const int64_t k = o.scale_down;
    s.hidden_size = t.hidden_size;
    s.vocab_size = t.vocab_size;
    s.target_layers = t.target_layers;
    s.rms_norm_eps = t.rms_norm_eps;
    s.layers = o.layers;
    s.heads = t.heads;
    s.q_lora_rank = t.q_lora_rank;
    s.kv_lora_rank = t.kv_lora_rank;
    s.qk_nope_head_dim = t.qk_nope_head_dim;
    s.qk_rope_head_dim = t.qk_rope_head_dim;
    s.v_head_dim = t.v_head_dim;
    s.intermediate_size = scaled_dim(14336, k, 32, 64);
    s.markov_rank = scaled_dim(256, k, 8, 8);
    s.target_layer_ids = dspark_target_layer_ids(s.target_layers);
    s.mask_token_id = s.vocab_size - 3;  // 163837 of 163840 in the release: a reserved id near the end
    SLUICE_CHECK(s.mask_token_id > synth::kSynthPadId, "synth: target vocab_size ", s.vocab_size, " is too small");

    json c = {
        {"architectures", {"K3DSparkModel"}},
        {"model_type", "k3_dspark"},
        {"hidden_size", s.hidden_size},
        {"intermediate_size", s.intermediate_size},
        {"num_hidden_layers", s.layers},
        {"hidden_act", "silu"},
        {"vocab_size", s.vocab_size},
        {"draft_vocab_size", s.vocab_size},
        {"target_hidden_size", s.hidden_size},
        {"num_target_layers", int64_t(s.target_layer_ids.size())},
        {"target_layer_ids", s.target_layer_ids},
        {"mask_token_id", s.mask_token_id},
        {"block_size", 7},
        {"markov_rank", s.markov_rank},
        {"markov_head_type", "vanilla"},
        {"enable_confidence_head", true},
        {"confidence_head_with_markov", true},
        {"tie_word_embeddings", false},
        {"torch_dtype", "bfloat16"},
    };
    add_k3_draft_attention(c, t);
    s.config_json = c.dump(2) + "\n";

    Roster r(o.seed, SynthDType::Bf16);
    const int64_t h = s.hidden_size, H = s.heads, ctx = h * int64_t(s.target_layer_ids.size());
    r.linear("context_proj", h, ctx, false);
    r.norm("context_norm.weight", h);
    for (int64_t l = 0; l < s.layers; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        r.norm(p + "input_layernorm.weight", h);
        r.norm(p + "post_attention_layernorm.weight", h);
        const std::string a = p + "self_attn.";
        r.mla(a, h, H, s.q_lora_rank, s.kv_lora_rank, s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim);
        r.swiglu(p + "mlp.", s.intermediate_size, h);
    }
    r.norm("final_norm.weight", h);
    r.linear("markov_head.markov_w1", s.vocab_size, s.markov_rank, false);
    r.linear("markov_head.markov_w2", s.vocab_size, s.markov_rank, false);
    r.linear("confidence_head.proj", 1, h + s.markov_rank, false);
    r.plain("confidence_head.proj.bias", DType::BF16, {1}, 0.0f, 0.1f);
    r.tensors.push_back(k3_target_embedding(o.target_dir, s.vocab_size, h));
    s.tensors = std::move(r.tensors);
    return s;
}

K3DraftDims k3_draft_dims(const SynthOptions& o, const std::string& like) {
    SLUICE_CHECK(!o.target_dir.empty(), "synth: --like ", like, " needs --target DIR (a Kimi K3 checkpoint)");
    const JsonObject top = JsonObject::load_file(o.target_dir + "/config.json");
    SLUICE_CHECK(top.get_string("model_type", "") == "kimi_k3", o.target_dir,
                 "/config.json: field 'model_type' must be kimi_k3 for a ", like, " target, got '",
                 top.get_string("model_type", ""), "'");
    const auto text = top.get_object("text_config");
    const JsonObject& j = text ? *text : top;
    const int64_t k = o.scale_down;
    K3DraftDims t;
    t.hidden_size = j.get_int("hidden_size");
    t.vocab_size = j.get_int("vocab_size");
    t.target_layers = j.get_int("num_hidden_layers");
    t.rms_norm_eps = j.get_float("rms_norm_eps", 1e-5);
    t.heads = std::max<int64_t>(1, 64 / k);
    t.q_lora_rank = scaled_dim(1536, k, 32, 32);
    t.kv_lora_rank = scaled_dim(512, k, 32, 32);
    t.qk_nope_head_dim = scaled_dim(128, k, 16, 16);
    t.qk_rope_head_dim = scaled_dim(64, k, 8, 8);
    t.v_head_dim = scaled_dim(128, k, 16, 16);
    return t;
}

void add_k3_draft_attention(json& c, const K3DraftDims& t) {
    c.update(json{
        {"num_attention_heads", t.heads},
        {"num_key_value_heads", t.heads},
        {"q_lora_rank", t.q_lora_rank},
        {"kv_lora_rank", t.kv_lora_rank},
        {"qk_nope_head_dim", t.qk_nope_head_dim},
        {"qk_rope_head_dim", t.qk_rope_head_dim},
        {"v_head_dim", t.v_head_dim},
        {"mla_use_nope", false},
        {"mla_use_output_gate", false},
        {"rms_norm_eps", t.rms_norm_eps},
        {"max_position_embeddings", 1048576},
        {"rope_theta", 50000.0},
        {"rope_scaling",
         {{"type", "yarn"}, {"factor", 32.0}, {"original_max_position_embeddings", 32768}, {"beta_fast", 32.0},
          {"beta_slow", 1.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}}},
    });
}

TensorToWrite k3_target_embedding(const std::string& target_dir, int64_t vocab_size, int64_t h) {
    auto target = std::make_shared<Checkpoint>(target_dir);
    const TensorView e = target->get(kTargetEmbed, {vocab_size, h});
    SLUICE_CHECK(e.dtype() == DType::BF16, target_dir, ": ", kTargetEmbed, " must be BF16 to be copied");
    return {"embed_tokens.weight", DType::BF16, {vocab_size, h},
            [target, e](uint64_t off, uint8_t* dst, uint64_t n) { std::memcpy(dst, e.data + off, n); }};
}

}  // namespace sluice::synth
