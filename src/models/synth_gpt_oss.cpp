// gpt-oss for `synth`: the openai/gpt-oss-20b config.json form (rope_theta + YaRN rope_scaling, layer_types,
// quantization_config mxfp4) and tensor roster — BF16 spine with attention biases and sinks, routers with bias,
// and MXFP4 experts stacked per layer as `mlp.experts.{gate_up,down}_proj_{blocks,scales}` + BF16 biases.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "models/synth_roster.h"
#include "models/synth_tokenizer.h"

using nlohmann::json;

namespace sluice::synth {

SynthDims gpt_oss_dims(const SynthOptions& o) {
    const int64_t k = o.scale_down;
    SynthDims d{};
    d.hidden_size = scaled_dim(2880, k, 32, 64);
    d.num_key_value_heads = std::max<int64_t>(1, 8 / k);
    d.num_attention_heads = std::max<int64_t>(d.num_key_value_heads, 64 / k / d.num_key_value_heads * d.num_key_value_heads);
    d.head_dim = scaled_dim(64, k, 16, 16);
    d.moe_intermediate_size = scaled_dim(2880, k, 32, 32);
    d.intermediate_size = d.moe_intermediate_size;
    d.vocab_size = synth_vocab_size(o);
    d.n_routed_experts = o.experts;
    d.num_experts_per_tok = std::min<int64_t>(4, o.experts);
    d.n_group = 1;
    d.topk_group = 1;
    d.num_hidden_layers = o.layers;
    d.sliding_window = std::max<int64_t>(8, 128 / k);
    return d;
}

std::string gpt_oss_config_json(const SynthDims& d) {
    json types = json::array();
    for (int64_t l = 0; l < d.num_hidden_layers; ++l) types.push_back((l + 1) % 2 ? "sliding_attention" : "full_attention");
    json c = {
        {"architectures", {"GptOssForCausalLM"}},
        {"attention_bias", true},
        {"attention_dropout", 0.0},
        {"bos_token_id", kSynthBosId},
        {"eos_token_id", kSynthEosId},
        {"experts_per_token", d.num_experts_per_tok},
        {"head_dim", d.head_dim},
        {"hidden_act", "silu"},
        {"hidden_size", d.hidden_size},
        {"initial_context_length", 4096},
        {"initializer_range", 0.02},
        {"intermediate_size", d.moe_intermediate_size},
        {"layer_types", types},
        {"max_position_embeddings", 131072},
        {"model_type", "gpt_oss"},
        {"num_attention_heads", d.num_attention_heads},
        {"num_experts_per_tok", d.num_experts_per_tok},
        {"num_hidden_layers", d.num_hidden_layers},
        {"num_key_value_heads", d.num_key_value_heads},
        {"num_local_experts", d.n_routed_experts},
        {"output_router_logits", false},
        {"pad_token_id", kSynthPadId},
        {"quantization_config",
         {{"modules_to_not_convert",
           {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
          {"quant_method", "mxfp4"}}},
        {"rms_norm_eps", 1e-05},
        {"rope_scaling",
         {{"beta_fast", 32.0}, {"beta_slow", 1.0}, {"factor", 32.0}, {"original_max_position_embeddings", 4096},
          {"rope_type", "yarn"}, {"truncate", false}}},
        {"rope_theta", 150000},
        {"router_aux_loss_coef", 0.9},
        {"sliding_window", d.sliding_window},
        {"swiglu_limit", 7.0},
        {"tie_word_embeddings", false},
        {"transformers_version", "4.55.0.dev0"},
        {"use_cache", true},
        {"vocab_size", d.vocab_size},
    };
    return c.dump(2) + "\n";
}

std::vector<TensorToWrite> gpt_oss_roster(const SynthDims& d, uint64_t seed) {
    Roster r(seed, SynthDType::Bf16);
    const int64_t h = d.hidden_size, H = d.num_attention_heads, kv = d.num_key_value_heads * d.head_dim;
    const int64_t q = H * d.head_dim, E = d.n_routed_experts, I = d.moe_intermediate_size;
    // E2M1 codes have rms ~2.93; the power-of-two scale brings an expert row to std ~1/sqrt(fan_in).
    auto e8m0_exponent = [](int64_t fan_in) { return int(std::lround(std::log2(1.0f / std::sqrt(float(fan_in)) / 2.93f))) + 1; };
    auto mxfp4 = [&](const std::string& prefix, int64_t rows, int64_t cols) {
        const std::string b = prefix + "_blocks", s = prefix + "_scales";
        r.tensors.push_back({b, DType::U8, {E, rows, cols / 32, 16}, random_bits_fill(tensor_key(seed, b))});
        r.tensors.push_back({s, DType::U8, {E, rows, cols / 32}, e8m0_fill(tensor_key(seed, s), e8m0_exponent(cols))});
        r.plain(prefix + "_bias", DType::BF16, {E, rows}, 0.0f, 0.1f);
    };
    r.embedding("model.embed_tokens.weight", d.vocab_size, h);
    for (int64_t l = 0; l < d.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".", a = p + "self_attn.";
        r.norm(p + "input_layernorm.weight", h);
        const std::pair<const char*, int64_t> projs[] = {{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}};
        for (const auto& [n, rows] : projs) {
            r.linear(a + n, rows, h, false);
            r.plain(a + n + ".bias", DType::BF16, {rows}, 0.0f, 0.1f);
        }
        r.linear(a + "o_proj", h, q, false);
        r.plain(a + "o_proj.bias", DType::BF16, {h}, 0.0f, 0.1f);
        r.plain(a + "sinks", DType::BF16, {H}, 0.0f, 1.0f);
        r.norm(p + "post_attention_layernorm.weight", h);
        r.plain(p + "mlp.router.weight", DType::BF16, {E, h}, 0.0f, 2.0f * std::sqrt(3.0f / float(h)));
        r.plain(p + "mlp.router.bias", DType::BF16, {E}, 0.0f, 0.1f);
        mxfp4(p + "mlp.experts.gate_up_proj", 2 * I, h);
        mxfp4(p + "mlp.experts.down_proj", h, I);
    }
    r.norm("model.norm.weight", h);
    r.lm_head("lm_head.weight", d.vocab_size, h);
    return std::move(r.tensors);
}

}  // namespace sluice::synth
