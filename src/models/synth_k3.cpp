// Kimi K3 for `synth`: the released config (top level + text_config "kimi_linear") and tensor roster —
// KDA and gated NoPE-MLA layers (every 4th plus the last), Block AttnRes norms/projections, Stable LatentMoE
// with MXFP4 routed experts — per the K3 architecture digest (§1-2, §7). The vision tower is not synthesized.
#include <algorithm>
#include <cstring>
#include <cmath>
#include <nlohmann/json.hpp>

#include "models/synth_roster.h"
#include "models/synth_tokenizer.h"

using nlohmann::json;

namespace sluice::synth {

namespace {

// 0-based: MLA on every 4th layer (3, 7, ...) and on the last layer; KDA elsewhere.
bool is_mla_layer(int64_t l, int64_t n_layers) { return (l + 1) % 4 == 0 || l == n_layers - 1; }

}  // namespace

SynthDims k3_dims(const SynthOptions& o) {
    SynthDims d = kimi_dims(o, {.hidden_size = 7168, .num_attention_heads = 96, .q_lora_rank = 1536,
                                .kv_lora_rank = 512, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64,
                                .v_head_dim = 128, .intermediate_size = 33792, .moe_intermediate_size = 3072,
                                .num_experts_per_tok = 16, .n_shared_experts = 2});
    d.routed_expert_hidden_size = scaled_dim(3584, o.scale_down, 32, 32);
    return d;
}

std::string k3_config_json(const SynthDims& d, SynthDType t) {
    json kda = json::array(), full = json::array();  // 1-based, as in the release
    for (int64_t l = 0; l < d.num_hidden_layers; ++l) (is_mla_layer(l, d.num_hidden_layers) ? full : kda).push_back(l + 1);
    json text = {
        {"model_type", "kimi_linear"},
        {"hidden_size", d.hidden_size},
        {"num_hidden_layers", d.num_hidden_layers},
        {"vocab_size", d.vocab_size},
        {"max_position_embeddings", 1048576},
        {"rms_norm_eps", 1e-05},
        {"hidden_act", "situ"},
        {"activation_situ_beta", 4.0},
        {"activation_situ_linear_beta", 25.0},
        {"intermediate_size", d.intermediate_size},
        {"first_k_dense_replace", d.first_k_dense_replace},
        {"moe_layer_freq", 1},
        {"num_experts", d.n_routed_experts},
        {"num_experts_per_token", d.num_experts_per_tok},
        {"num_shared_experts", d.n_shared_experts},
        {"moe_intermediate_size", d.moe_intermediate_size},
        {"routed_expert_hidden_size", d.routed_expert_hidden_size},
        {"latent_moe_use_norm", true},
        {"moe_router_activation_func", "sigmoid"},
        {"moe_renormalize", true},
        {"routed_scaling_factor", 1.0},
        {"use_grouped_topk", true},
        {"num_expert_group", 1},
        {"topk_group", 1},
        {"num_attention_heads", d.num_attention_heads},
        {"num_key_value_heads", d.num_attention_heads},
        {"q_lora_rank", d.q_lora_rank},
        {"kv_lora_rank", d.kv_lora_rank},
        {"qk_nope_head_dim", d.qk_nope_head_dim},
        {"qk_rope_head_dim", d.qk_rope_head_dim},
        {"v_head_dim", d.v_head_dim},
        {"mla_use_nope", true},
        {"mla_use_output_gate", true},
        {"num_nextn_predict_layers", 0},
        {"attn_res_block_size", 12},
        {"linear_attn_config",
         {{"num_heads", d.linear_num_heads}, {"head_dim", d.linear_head_dim}, {"short_conv_kernel_size", 4},
          {"gate_lower_bound", -5.0}, {"use_full_rank_gate", true}, {"kda_layers", kda},
          {"full_attn_layers", full}}},
        {"tie_word_embeddings", false},
        {"bos_token_id", kSynthBosId},
        {"eos_token_id", kSynthEosId},
        {"pad_token_id", kSynthPadId},
        {"torch_dtype", "bfloat16"},
    };
    json c = {{"architectures", {"KimiK3ForConditionalGeneration"}},
              {"model_type", "kimi_k3"},
              {"bos_token_id", kSynthBosId},
              {"eos_token_id", kSynthEosId},
              {"pad_token_id", kSynthPadId},
              {"tie_word_embeddings", false},
              {"text_config", text}};
    if (t == SynthDType::Mxfp4)
        c["quantization_config"] = {
            {"quant_method", "compressed-tensors"},
            {"format", "mxfp4-pack-quantized"},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}},
                {"input_activations", nullptr},
                {"weights",
                 {{"num_bits", 4}, {"type", "float"}, {"group_size", 32}, {"strategy", "group"}, {"symmetric", true},
                  {"scale_dtype", "torch.uint8"}}}}}}},
            {"ignore",
             {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*lm_head.*",
              "re:.*vision_tower.*", "re:.*mm_projector.*"}},
            {"quantization_status", "compressed"}};
    return c.dump(2) + "\n";
}

std::vector<TensorToWrite> k3_roster(const SynthDims& d, uint64_t seed, SynthDType t) {
    Roster r(seed, t);
    const int64_t h = d.hidden_size, H = d.num_attention_heads, lat = d.routed_expert_hidden_size;
    const int64_t KH = d.linear_num_heads, KD = d.linear_head_dim, P = KH * KD;
    const std::string g = "language_model.model.";
    const float res_proj = std::sqrt(3.0f / float(h));
    r.embedding(g + "embed_tokens.weight", d.vocab_size, h);
    for (int64_t l = 0; l < d.num_hidden_layers; ++l) {
        const std::string p = g + "layers." + std::to_string(l) + ".";
        r.norm(p + "input_layernorm.weight", h);
        r.norm(p + "post_attention_layernorm.weight", h);
        r.norm(p + "self_attention_res_norm.weight", h);
        r.norm(p + "mlp_res_norm.weight", h);
        r.plain(p + "self_attention_res_proj.weight", DType::BF16, {1, h}, 0.0f, res_proj);
        r.plain(p + "mlp_res_proj.weight", DType::BF16, {1, h}, 0.0f, res_proj);
        const std::string a = p + "self_attn.";
        if (is_mla_layer(l, d.num_hidden_layers)) {
            r.mla(a, h, H, d.q_lora_rank, d.kv_lora_rank, d.qk_nope_head_dim, d.qk_rope_head_dim, d.v_head_dim, true);
        } else {
            for (const char* n : {"q_proj", "k_proj", "v_proj", "g_proj"}) r.linear(a + n, P, h, false);
            r.linear(a + "o_proj", h, P, false);
            r.linear(a + "f_a_proj", KD, h, false);
            r.linear(a + "f_b_proj", P, KD, false);
            r.linear(a + "b_proj", KH, h, false);
            for (const char* n : {"q_conv1d", "k_conv1d", "v_conv1d"})
                r.plain(a + n + ".weight", DType::F32, {P, 1, 4}, 0.0f, std::sqrt(3.0f / 4.0f));
            // Per-head values padded with zeros to a multiple of 128, as the release stores 96 heads in [128].
            const int64_t n_alog = (KH + 127) / 128 * 128;
            const auto alog_fill = uniform_fill(DType::F32, tensor_key(seed, a + "A_log"), 0.5f, 0.5f);
            r.tensors.push_back({a + "A_log", DType::F32, {n_alog}, [alog_fill, KH](uint64_t off, uint8_t* dst, uint64_t n) {
                                     alog_fill(off, dst, n);
                                     for (uint64_t i = off / 4; i < (off + n) / 4; ++i)
                                         if (int64_t(i) >= KH) std::memset(dst + (i * 4 - off), 0, 4);
                                 }});
            r.plain(a + "dt_bias", DType::F32, {P}, 0.0f, 0.5f);
            r.plain(a + "o_norm.weight", DType::F32, {KD}, 1.0f, 0.1f);
        }
        if (l < d.first_k_dense_replace) {
            r.swiglu(p + "mlp.", d.intermediate_size, h);
            continue;
        }
        const std::string m = p + "block_sparse_moe.";
        const int64_t E = d.n_routed_experts, w = d.moe_intermediate_size, s = d.n_shared_experts * w;
        r.sigmoid_router(m + "gate.", E, h);
        r.linear(m + "routed_expert_down_proj", lat, h, false);
        r.norm(m + "routed_expert_norm.weight", lat);
        r.linear(m + "routed_expert_up_proj", h, lat, false);
        r.swiglu(m + "shared_experts.", s, h);
        for (int64_t e = 0; e < E; ++e) {
            const std::string x = m + "experts." + std::to_string(e) + ".";
            r.linear(x + "w1", w, lat, true);
            r.linear(x + "w3", w, lat, true);
            r.linear(x + "w2", lat, w, true);
        }
    }
    r.norm(g + "norm.weight", h);
    r.norm(g + "output_attn_res_norm.weight", h);
    r.plain(g + "output_attn_res_proj.weight", DType::BF16, {1, h}, 0.0f, res_proj);
    r.lm_head("language_model.lm_head.weight", d.vocab_size, h);
    return std::move(r.tensors);
}

}  // namespace sluice::synth
