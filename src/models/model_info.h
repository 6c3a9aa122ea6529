// Parameter and byte accounting from a checkpoint's tensor list: what `sluice inspect` reports and what a token
// must read. Routed experts are recognised by name (".experts." but not "shared_experts"; covers DeepSeek/K2
// `mlp.experts.E.*_proj`, fused `mlp.experts.gate_up_proj`, and Kimi Linear/K3 `block_sparse_moe.experts.E.w1..3`
// with MXFP4 `.weight_packed` and gpt-oss `_blocks` counted as 2 parameters per byte, scales as none). Active
// parameters exclude the untied embedding table (a token reads one row of it) and all but top_k routed experts.
#pragma once

#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "models/model.h"

namespace sluice {

struct TensorEntry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t nbytes = 0;
};

// The counting itself, over any tensor list (unit-tested on fabricated full-size K3 / DeepSeek lists).
void count_params(const std::vector<TensorEntry>& tensors, ModelInfo& info, int64_t n_routed_experts, int64_t top_k,
                  bool tied_embeddings);

// Copies the fields every DeepSeek-style config names the same way (Hugging Face names) and counts parameters.
// n_moe_layers is the caller's (it knows its layer schedule).
template <class Config>
void fill_model_info(ModelInfo& info, const Checkpoint& ck, std::string architecture, std::string model_type,
                     const Config& c, int64_t n_moe_layers) {
    info.architecture = std::move(architecture);
    info.model_type = std::move(model_type);
    info.vocab_size = c.vocab_size;
    info.hidden_size = c.hidden_size;
    info.num_hidden_layers = c.num_hidden_layers;
    info.n_routed_experts = c.n_routed_experts;
    info.num_experts_per_tok = c.num_experts_per_tok;
    info.n_shared_experts = c.n_shared_experts;
    info.bos_token_id = c.bos_token_id;
    info.eos_token_ids = c.eos_token_ids;
    info.max_position_embeddings = c.max_position_embeddings;
    info.n_moe_layers = n_moe_layers;
    fill_param_counts(ck, info, c.n_routed_experts, c.num_experts_per_tok, c.tie_word_embeddings, c.vocab_size,
                      c.hidden_size);
}

void fill_param_counts(const Checkpoint& ck, ModelInfo& info, int64_t n_routed_experts, int64_t top_k,
                       bool tied_embeddings, int64_t vocab_size, int64_t hidden_size);

}  // namespace sluice
