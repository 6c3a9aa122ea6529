// Kimi Linear (Kimi-Linear-48B-A3B) for `synth`: the hub config (model_type kimi_linear, 1-based kda_layers /
// full_attn_layers in linear_attn_config) and tensor roster — KDA layers with the low-rank output gate and
// A_log [1, 1, H, 1], NoPE MLA without q-LoRA (direct q_proj) on every 4th layer plus the last, a dense first
// layer, then sigmoid-routed MoE with correction bias and one shared expert — per the K3 digest §11.1-11.2.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "models/synth_roster.h"
#include "models/synth_tokenizer.h"

using nlohmann::json;

namespace sluice::synth {

namespace {

// 0-based: MLA on every 4th layer (3, 7, ...) and on the last; for 27 layers this is the release's 1-based
// full_attn_layers [4, 8, 12, 16, 20, 24, 27].
bool is_mla_layer(int64_t l, int64_t n_layers) { return (l + 1) % 4 == 0 || l == n_layers - 1; }

}  // namespace

SynthDims kimi_dims(const SynthOptions& o, const SynthDims& released) {
    const int64_t k = o.scale_down;
    SynthDims d = scaled_widths(released, k);
    d.vocab_size = synth_vocab_size(o);
    d.n_routed_experts = o.experts;
    d.num_experts_per_tok = std::min<int64_t>(released.num_experts_per_tok, o.experts);
    d.n_group = 1;
    d.topk_group = 1;
    d.num_hidden_layers = o.layers;
    d.first_k_dense_replace = std::min<int64_t>(1, std::max<int64_t>(o.layers - 1, 0));
    d.linear_num_heads = d.num_attention_heads;
    d.linear_head_dim = scaled_dim(128, k, 16, 16);
    return d;
}

SynthDims kimi_linear_dims(const SynthOptions& o) {
    SynthDims d = kimi_dims(o, {.hidden_size = 2304, .num_attention_heads = 32, .kv_lora_rank = 512,
                                .qk_nope_head_dim = 128, .qk_rope_head_dim = 64, .v_head_dim = 128,
                                .intermediate_size = 9216, .moe_intermediate_size = 1024, .num_experts_per_tok = 8,
                                .n_shared_experts = 1});
    d.q_lora_rank = 0;  // the release has no q-LoRA (q_lora_rank null)
    return d;
}

std::string kimi_linear_config_json(const SynthDims& d, SynthDType t) {
    json kda = json::array(), full = json::array();  // 1-based, as in the release
    for (int64_t l = 0; l < d.num_hidden_layers; ++l) (is_mla_layer(l, d.num_hidden_layers) ? full : kda).push_back(l + 1);
    json c = {
        {"architectures", {"KimiLinearForCausalLM"}},
        // The hub's auto_map is left out: it names modeling code this folder does not ship.
        {"bos_token_id", kSynthBosId},
        {"eos_token_id", kSynthEosId},
        {"pad_token_id", kSynthPadId},
        {"first_k_dense_replace", d.first_k_dense_replace},
        {"hidden_act", "silu"},
        {"hidden_size", d.hidden_size},
        {"initializer_range", 0.02},
        {"intermediate_size", d.intermediate_size},
        {"kv_lora_rank", d.kv_lora_rank},
        {"linear_attn_config",
         {{"full_attn_layers", full}, {"head_dim", d.linear_head_dim}, {"kda_layers", kda},
          {"num_heads", d.linear_num_heads}, {"short_conv_kernel_size", 4}}},
        {"mla_use_nope", true},
        {"model_max_length", 1048576},
        {"model_type", "kimi_linear"},
        {"moe_intermediate_size", d.moe_intermediate_size},
        {"moe_layer_freq", 1},
        {"moe_renormalize", true},
        {"moe_router_activation_func", "sigmoid"},
        {"num_attention_heads", d.num_attention_heads},
        {"num_expert_group", d.n_group},
        {"num_experts", d.n_routed_experts},
        {"num_experts_per_token", d.num_experts_per_tok},
        {"num_hidden_layers", d.num_hidden_layers},
        {"num_key_value_heads", d.num_attention_heads},
        {"num_nextn_predict_layers", 0},
        {"num_shared_experts", d.n_shared_experts},
        {"q_lora_rank", nullptr},
        {"qk_nope_head_dim", d.qk_nope_head_dim},
        {"qk_rope_head_dim", d.qk_rope_head_dim},
        {"rms_norm_eps", 1e-05},
        {"rope_scaling", nullptr},
        {"rope_theta", 10000.0},
        {"routed_scaling_factor", 2.446},
        {"tie_word_embeddings", false},
        {"topk_group", d.topk_group},
        {"torch_dtype", "bfloat16"},
        {"transformers_version", "4.56.2"},
        {"use_cache", true},
        {"use_grouped_topk", true},
        {"v_head_dim", d.v_head_dim},
        {"vocab_size", d.vocab_size},
    };
    if (t == SynthDType::Fp8)  // not a released format: the DeepSeek block-FP8 layout applied to every Linear
        c["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                    {"weight_block_size", {128, 128}}};
    return c.dump(2) + "\n";
}

std::vector<TensorToWrite> kimi_linear_roster(const SynthDims& d, uint64_t seed, SynthDType t) {
    Roster r(seed, t);
    const int64_t h = d.hidden_size, H = d.num_attention_heads;
    const int64_t KH = d.linear_num_heads, KD = d.linear_head_dim, P = KH * KD;
    r.embedding("model.embed_tokens.weight", d.vocab_size, h);
    for (int64_t l = 0; l < d.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        r.norm(p + "input_layernorm.weight", h);
        r.norm(p + "post_attention_layernorm.weight", h);
        const std::string a = p + "self_attn.";
        if (is_mla_layer(l, d.num_hidden_layers)) {
            r.mla(a, h, H, 0, d.kv_lora_rank, d.qk_nope_head_dim, d.qk_rope_head_dim, d.v_head_dim);
        } else {
            for (const char* n : {"q_proj", "k_proj", "v_proj"}) r.linear(a + n, P, h, false);
            for (const char* n : {"q_conv1d", "k_conv1d", "v_conv1d"})
                r.plain(a + n + ".weight", DType::BF16, {P, 1, 4}, 0.0f, std::sqrt(3.0f / 4.0f));
            r.linear(a + "f_a_proj", KD, h, false);
            r.linear(a + "f_b_proj", P, KD, false);
            r.linear(a + "b_proj", KH, h, false);
            // Per-head decay log-rates; exp(A_log) in [1, e] keeps the gate decaying but not vanishing.
            r.plain(a + "A_log", DType::F32, {1, 1, KH, 1}, 0.5f, 0.5f);
            r.plain(a + "dt_bias", DType::F32, {P}, 0.0f, 0.5f);
            r.linear(a + "g_a_proj", KD, h, false);
            r.linear(a + "g_b_proj", P, KD, false);
            r.norm(a + "o_norm.weight", KD);
            r.linear(a + "o_proj", h, P, false);
        }
        if (l < d.first_k_dense_replace) {
            r.swiglu(p + "mlp.", d.intermediate_size, h);
            continue;
        }
        const std::string m = p + "block_sparse_moe.";
        const int64_t E = d.n_routed_experts, w = d.moe_intermediate_size, s = d.n_shared_experts * w;
        r.sigmoid_router(m + "gate.", E, h);
        for (int64_t e = 0; e < E; ++e) {
            const std::string x = m + "experts." + std::to_string(e) + ".";
            r.linear(x + "w1", w, h, true);
            r.linear(x + "w2", h, w, true);
            r.linear(x + "w3", w, h, true);
        }
        r.swiglu(m + "shared_experts.", s, h);
    }
    r.norm("model.norm.weight", h);
    r.lm_head("lm_head.weight", d.vocab_size, h);
    return std::move(r.tensors);
}

}  // namespace sluice::synth
