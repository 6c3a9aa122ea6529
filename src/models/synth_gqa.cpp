// Qwen3-MoE (Qwen3-30B-A3B) and Mixtral (Mixtral-8x7B) for `synth`: hub config.json and tensor roster with the
// hub's names (Qwen3: mlp.experts.E.{gate,up,down}_proj, per-head q_norm/k_norm; Mixtral:
// block_sparse_moe.experts.E.w1/w2/w3). Dimensions are the released ones, divided by --scale-down.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "models/synth_roster.h"
#include "models/synth_tokenizer.h"

using nlohmann::json;

namespace sluice::synth {

SynthDims gqa_dims(SynthModel m, const SynthOptions& o) {
    const bool qwen = m == SynthModel::Qwen3Moe;
    const int64_t k = o.scale_down;
    SynthDims d{};
    d.hidden_size = scaled_dim(qwen ? 2048 : 4096, k, 32, 64);
    d.num_key_value_heads = std::max<int64_t>(1, (qwen ? 4 : 8) / k);
    // query heads: a multiple of the kv heads
    d.num_attention_heads = std::max<int64_t>(1, 32 / k) / d.num_key_value_heads * d.num_key_value_heads;
    d.num_attention_heads = std::max(d.num_attention_heads, d.num_key_value_heads);
    d.head_dim = scaled_dim(128, k, 16, 16);
    d.intermediate_size = qwen ? scaled_dim(6144, k, 32, 64) : 0;  // Qwen3: dense layers (none unless configured)
    d.moe_intermediate_size = scaled_dim(qwen ? 768 : 14336, k, 32, 32);
    d.vocab_size = synth_vocab_size(o);
    d.n_routed_experts = o.experts;
    d.num_experts_per_tok = std::min<int64_t>(qwen ? 8 : 2, o.experts);
    d.n_group = d.topk_group = 1;
    d.num_hidden_layers = o.layers;
    return d;
}

std::string gqa_config_json(SynthModel m, const SynthDims& d, SynthDType t) {
    json c;
    if (m == SynthModel::Qwen3Moe) {
        c = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"attention_bias", false},
             {"attention_dropout", 0.0}, {"decoder_sparse_step", 1}, {"head_dim", d.head_dim},
             {"intermediate_size", d.intermediate_size}, {"max_position_embeddings", 40960},
             {"max_window_layers", d.num_hidden_layers}, {"mlp_only_layers", json::array()},
             {"moe_intermediate_size", d.moe_intermediate_size}, {"norm_topk_prob", true},
             {"num_experts", d.n_routed_experts}, {"rms_norm_eps", 1e-06}, {"rope_scaling", nullptr},
             {"rope_theta", 1000000.0}, {"router_aux_loss_coef", 0.001}, {"sliding_window", nullptr},
             {"use_sliding_window", false}, {"transformers_version", "4.51.0"}};
    } else {
        c = {{"architectures", {"MixtralForCausalLM"}}, {"model_type", "mixtral"}, {"attention_dropout", 0.0},
             {"intermediate_size", d.moe_intermediate_size}, {"max_position_embeddings", 32768},
             {"num_local_experts", d.n_routed_experts}, {"rms_norm_eps", 1e-05}, {"rope_theta", 1000000.0},
             {"router_aux_loss_coef", 0.02}, {"sliding_window", nullptr}, {"transformers_version", "4.36.0"}};
        // the hub config has no head_dim: it is hidden / heads there; written only where scaling breaks that
        if (d.hidden_size != d.num_attention_heads * d.head_dim) c["head_dim"] = d.head_dim;
    }
    c["bos_token_id"] = kSynthBosId;
    c["eos_token_id"] = kSynthEosId;
    c["hidden_act"] = "silu";
    c["hidden_size"] = d.hidden_size;
    c["initializer_range"] = 0.02;
    c["num_attention_heads"] = d.num_attention_heads;
    c["num_experts_per_tok"] = d.num_experts_per_tok;
    c["num_hidden_layers"] = d.num_hidden_layers;
    c["num_key_value_heads"] = d.num_key_value_heads;
    c["output_router_logits"] = false;
    c["tie_word_embeddings"] = false;
    c["torch_dtype"] = "bfloat16";
    c["use_cache"] = true;
    c["vocab_size"] = d.vocab_size;
    if (t == SynthDType::Fp8)
        c["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                    {"weight_block_size", {128, 128}}};
    return c.dump(2) + "\n";
}

std::vector<TensorToWrite> gqa_roster(SynthModel m, const SynthDims& d, uint64_t seed, SynthDType t) {
    const bool qwen = m == SynthModel::Qwen3Moe;
    Roster r(seed, t);
    const int64_t h = d.hidden_size, qw = d.num_attention_heads * d.head_dim, kw = d.num_key_value_heads * d.head_dim;
    const int64_t E = d.n_routed_experts, I = d.moe_intermediate_size;
    r.embedding("model.embed_tokens.weight", d.vocab_size, h);
    for (int64_t l = 0; l < d.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        r.norm(p + "input_layernorm.weight", h);
        r.linear(p + "self_attn.q_proj", qw, h, false);
        r.linear(p + "self_attn.k_proj", kw, h, false);
        r.linear(p + "self_attn.v_proj", kw, h, false);
        r.linear(p + "self_attn.o_proj", h, qw, false);
        if (qwen) {
            r.norm(p + "self_attn.q_norm.weight", d.head_dim);
            r.norm(p + "self_attn.k_norm.weight", d.head_dim);
        }
        r.norm(p + "post_attention_layernorm.weight", h);
        const std::string moe = p + (qwen ? "mlp." : "block_sparse_moe.");
        r.plain(moe + "gate.weight", DType::BF16, {E, h}, 0.0f, 2.0f * std::sqrt(3.0f / float(h)));
        for (int64_t e = 0; e < E; ++e) {
            const std::string x = moe + "experts." + std::to_string(e) + ".";
            r.linear(x + (qwen ? "gate_proj" : "w1"), I, h, true);
            r.linear(x + (qwen ? "up_proj" : "w3"), I, h, true);
            r.linear(x + (qwen ? "down_proj" : "w2"), h, I, true);
        }
    }
    r.norm("model.norm.weight", h);
    r.lm_head("lm_head.weight", d.vocab_size, h);
    return std::move(r.tensors);
}

}  // namespace sluice::synth
