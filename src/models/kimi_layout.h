// Which layers of a Kimi model are MLA or KDA and which have a dense MLP or an MoE, and the KDA shape, read from
// either config form:
//   hub:            linear_attn_config {full_attn_layers, kda_layers (1-based lists), num_heads, head_dim,
//                   short_conv_kernel_size, gate_lower_bound, use_full_rank_gate} + first_k_dense_replace
//   transformers 5: layer_types ["full_attention" | "linear_attention"], mlp_layer_types ["dense" | "sparse"],
//                   linear_num_heads, linear_head_dim, linear_conv_kernel_dim (what save_pretrained writes for
//                   a config built without the hub fields; defaults 32, 128, 4 as KimiLinearConfig's)
// A config saved from a hub config carries both; then they must agree. Neither form: the error names the fields.
// Also the tensor prefix of a dense MLP layer, which save_pretrained writes under block_sparse_moe. too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/hf_config.h"

namespace sluice {

struct KimiLayout {
    std::vector<bool> is_mla;     // [layers]
    std::vector<bool> is_sparse;  // [layers]: MoE (true) or dense MLP
    int64_t kda_heads = 0, kda_head_dim = 0, conv_kernel = 4;
    float gate_lower_bound = 0;   // hub form only (Kimi K3); 0 = unbounded
    bool full_rank_gate = false;  // hub form only (Kimi K3)
    // the field each KDA dimension came from, for errors
    std::string heads_field, head_dim_field, conv_field;
};

KimiLayout parse_kimi_layout(const JsonObject& cfg, int64_t num_hidden_layers);  // errors name the field

// "<layer_prefix>mlp." as the hub has it, or "<layer_prefix>block_sparse_moe." where only that holds the dense
// MLP (transformers 5's save_pretrained renames every ".mlp." to ".block_sparse_moe.", dense layers included).
std::string kimi_dense_mlp_prefix(const Checkpoint& ck, const std::string& layer_prefix);

}  // namespace sluice
