// Block Attention Residuals (Kimi K3): a learned per-site pseudo-query attends over the stored block snapshots and
// the running sum, per row: logit_j = (RMSNorm(v_j) * norm_weight) . proj_weight, softmax over j, output
// sum_j p_j v_j of the raw candidates. Candidates are f32 [n, d] arrays: snapshots first, the running sum last.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace sluice {

struct AttnResWeights {
    std::vector<float> norm;  // [d] *_res_norm.weight
    std::vector<float> proj;  // [d] *_res_proj.weight (one row)
};

// The op (ops/attn_res.h) over the snapshots and the running sum, rows split over the pool.
void attn_res(const float* running, const std::vector<const float*>& blocks, const AttnResWeights& w, int64_t n,
              int64_t d, float eps, float* out, ThreadPool& pool);

}  // namespace sluice
