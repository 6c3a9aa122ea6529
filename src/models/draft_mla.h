// The MLA layer of Kimi K3's drafters (DSpark, models/dspark.h; EAGLE-3, models/eagle3.h): DeepSeek-V2 MLA with
// q-LoRA, YaRN RoPE on interleaved pairs and no output gate, read from the drafter's config.json under the hub's
// names and bound from its checkpoint (PREFIX.q_a_proj ... PREFIX.o_proj).
#pragma once

#include <cstdint>
#include <string>

#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "models/blocks/mla.h"
#include "models/blocks/rope.h"
#include "models/model.h"
#include "ops/exec_context.h"
#include "state/caches.h"

namespace sluice {

struct DraftMla {
    MlaConfig mla;
    RopeParameters rope;
};

// The layer fields of a drafter's config: hidden_act (silu: both drafters' MLPs are SiLU-GLU) and the attention's
// (num_attention_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, mla_use_nope,
// mla_use_output_gate, rope_theta, rope_scaling); the softmax scale is qk_head_dim^-1/2 times
// mscale(factor, mscale_all_dim)^2 under YaRN (as DeepSeek-V2 MLA). Errors name `where` and the field.
// max_position_embeddings stands in for a YaRN original_max_position_embeddings that is not given.
DraftMla parse_draft_mla(const JsonObject& j, const std::string& where, int64_t hidden_size, double rms_norm_eps,
                         int64_t max_position_embeddings);

// The widths a drafter shares with its target: hidden_size (why: what of the target it shares), target_hidden_size
// (its taps' width) and vocab_size equal the target's; errors name `where` and the field.
void check_drafter_fits(const std::string& where, int64_t hidden_size, int64_t target_hidden_size, int64_t vocab_size,
                        const ModelInfo& target, const char* why);

// PREFIX.{q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj}; the two down
// projections read in_width inputs (the hidden size; twice it in EAGLE-3's layer, which reads [embedding ; hidden]).
MlaWeights bind_draft_mla(const Checkpoint& ck, const std::string& prefix, const MlaConfig& m, int64_t in_width);

// The cache rows of n inputs x[n, in_width] at positions pos0.. without attending (kv_a_proj_with_mqa, latent norm,
// RoPE): the rows later queries read. kva: scratch of n * cache_width floats.
void write_draft_mla_cache(const MlaConfig& m, const MlaWeights& w, const Rope& rope, const float* x, int64_t n,
                           int64_t pos0, MlaCache& cache, float* kva, ExecContext& ctx);

}  // namespace sluice
