// Parameter and byte accounting from a checkpoint's tensor list: what `sluice inspect` reports and what a token
// must read. Routed experts are recognised by name (".experts." but not "shared_experts").
#pragma once

#include "formats/checkpoint.h"
#include "models/model.h"

namespace sluice {

void fill_param_counts(const Checkpoint& ck, ModelInfo& info, int64_t n_routed_experts, int64_t top_k,
                       bool tied_embeddings, int64_t vocab_size, int64_t hidden_size);

}  // namespace sluice
