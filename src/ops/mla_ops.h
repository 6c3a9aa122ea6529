// Multi-head latent attention's weight absorption (DeepSeek-V2/V3, Kimi): kv_b_proj holds, for each head h, the
// `nope` rows of W_UK^h and then the `v` rows of W_UV^h, each `rank` (kv_lora_rank) wide. Attention runs over the
// cached latents: queries are taken into latent space (absorb) and the attended latents out of it (unabsorb).
// Reference twins in ops::ref (ops/reference/mla_ops.cpp); rows are independent (no bit depends on the batch).
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "ops/weight.h"

namespace sluice::ops {

struct MlaHeads {
    int64_t heads = 0, nope = 0, rope = 0, v = 0, rank = 0;
};

// q [n, heads, nope + rope] -> q_cat [n, heads, rank + rope]: q_cat[r, h, :rank] = W_UK^h^T q[r, h, :nope] (a sum
// over the nope rows in order), then q[r, h, nope:] copied after it.
void mla_absorb(const MlaHeads& m, const Weight& kv_b, const float* q, int64_t n, float* q_cat, ThreadPool& pool);
// lat [n, heads, rank] -> o [n, heads, v]: o[r, h, i] = W_UV^h[i, :] . lat[r, h, :].
void mla_unabsorb(const MlaHeads& m, const Weight& kv_b, const float* lat, int64_t n, float* o, ThreadPool& pool);

}  // namespace sluice::ops

namespace sluice::ops::ref {
void mla_absorb(const MlaHeads& m, const Weight& kv_b, const float* q, int64_t n, float* q_cat);
void mla_unabsorb(const MlaHeads& m, const Weight& kv_b, const float* lat, int64_t n, float* o);
}  // namespace sluice::ops::ref
