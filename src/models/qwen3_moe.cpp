// Qwen3MoeForCausalLM (Qwen3-30B-A3B, Qwen3-235B-A22B): GQA with per-head q_norm/k_norm before half-split RoPE,
// softmax top-k router (renormalised only when norm_topk_prob), no shared expert; layers in mlp_only_layers or
// off the decoder_sparse_step grid are dense SwiGLU MLPs of intermediate_size. The sliding window applies to every
// layer only when use_sliding_window is true. Reference: transformers models/qwen3_moe/modeling_qwen3_moe.py.
#include <algorithm>

#include "core/error.h"
#include "models/architectures.h"
#include "models/gqa_moe.h"

namespace sluice {

namespace {
GqaMoeConfig parse(const JsonObject& j) {
    GqaMoeConfig c = parse_gqa_moe_common(j, 10000.0);
    const std::string& w = j.what();
    c.architecture = "Qwen3MoeForCausalLM";
    c.model_type = j.get_string("model_type", "qwen3_moe");
    c.intermediate_size = j.get_int("intermediate_size", 6144);
    c.moe_intermediate_size = j.get_int("moe_intermediate_size", 768);
    c.n_experts = j.has("num_experts") ? j.get_int("num_experts") : j.get_int("num_local_experts", 128);
    c.top_k = j.get_int("num_experts_per_tok", 8);
    c.norm_topk_prob = j.get_bool("norm_topk_prob", false);
    c.attention_bias = j.get_bool("attention_bias", false);
    c.qk_norm = true;
    if (j.get_bool("use_sliding_window", false) && j.has("sliding_window")) c.attn.window = j.get_int("sliding_window");
    const int64_t step = j.get_int("decoder_sparse_step", 1);
    SLUICE_CHECK(step > 0, w, ": field 'decoder_sparse_step' must be > 0, got ", step);
    std::vector<int64_t> dense_layers;
    if (j.has("mlp_only_layers")) dense_layers = j.get_int_list("mlp_only_layers");
    for (int64_t l : dense_layers)
        SLUICE_CHECK(l >= 0 && l < c.num_hidden_layers, w, ": field 'mlp_only_layers': layer ", l,
                     " is outside [0, num_hidden_layers=", c.num_hidden_layers, ")");
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const bool listed = std::find(dense_layers.begin(), dense_layers.end(), l) != dense_layers.end();
        c.is_moe.push_back(!listed && c.n_experts > 0 && (l + 1) % step == 0);
    }
    validate_gqa_moe(c, w);
    return c;
}
}  // namespace

uint64_t qwen3_moe_activation_bytes(const JsonObject& j, int64_t rows, bool) {
    return gqa_moe_activation_bytes(parse(j), rows);
}

std::unique_ptr<Model> make_qwen3_moe(const std::string& dir, const JsonObject& j, const LoadOptions& opt) {
    const GqaMoeConfig c = parse(j);
    GqaMoeNames names{.moe_prefix = "mlp.", .expert_gate = "gate_proj", .expert_up = "up_proj",
                      .expert_down = "down_proj"};
    return make_gqa_moe_model(dir, c, names, opt);
}

}  // namespace sluice
