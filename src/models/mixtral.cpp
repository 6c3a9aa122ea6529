// MixtralForCausalLM (Mixtral-8x7B / 8x22B): GQA with half-split RoPE, every layer a softmax top-k MoE
// (renormalised over the chosen experts), experts of intermediate_size with hub names
// block_sparse_moe.experts.E.w1 (gate) / w3 (up) / w2 (down); sliding_window applies to every layer when non-null.
// Reference: transformers models/mixtral/modeling_mixtral.py (rope_theta defaults to 1e6 there).
#include "core/error.h"
#include "models/architectures.h"
#include "models/gqa_moe.h"

namespace sluice {

namespace {
GqaMoeConfig parse(const JsonObject& j) {
    GqaMoeConfig c = parse_gqa_moe_common(j, 1000000.0);
    c.architecture = "MixtralForCausalLM";
    c.model_type = j.get_string("model_type", "mixtral");
    c.rms_norm_eps = j.get_float("rms_norm_eps", 1e-5);
    c.attn.qk_norm_eps = float(c.rms_norm_eps);
    c.moe_intermediate_size = j.get_int("intermediate_size", 14336);
    c.n_experts = j.has("num_local_experts") ? j.get_int("num_local_experts") : j.get_int("num_experts", 8);
    c.top_k = j.get_int("num_experts_per_tok", 2);
    c.norm_topk_prob = true;
    if (j.has("sliding_window")) c.attn.window = j.get_int("sliding_window");
    c.is_moe.assign(size_t(std::max<int64_t>(c.num_hidden_layers, 0)), true);
    validate_gqa_moe(c, j.what());
    return c;
}
}  // namespace

uint64_t mixtral_activation_bytes(const JsonObject& j, int64_t rows, bool) {
    return gqa_moe_activation_bytes(parse(j), rows);
}

std::unique_ptr<Model> make_mixtral(const std::string& dir, const JsonObject& j, const LoadOptions& opt) {
    const GqaMoeConfig c = parse(j);
    GqaMoeNames names{.moe_prefix = "block_sparse_moe.", .expert_gate = "w1", .expert_up = "w3", .expert_down = "w2"};
    return make_gqa_moe_model(dir, c, names, opt);
}

}  // namespace sluice
