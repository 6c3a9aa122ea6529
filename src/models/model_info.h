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

void fill_param_counts(const Checkpoint& ck, ModelInfo& info, int64_t n_routed_experts, int64_t top_k,
                       bool tied_embeddings, int64_t vocab_size, int64_t hidden_size);

}  // namespace sluice
