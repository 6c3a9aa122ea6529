// Block Attention Residuals (Kimi K3) as an op: a learned per-site pseudo-query attends, for each row, over J
// candidate hidden states (the stored block snapshots, then the running sum): logit_j = (RMSNorm(v_j) * norm) . proj,
// p = softmax over j, out = sum_j p_j v_j of the raw candidates. The reference twin (ops::ref, in double) is checked
// by the op harness (tests/ops). Rows are independent: the CPU op splits them over the pool, which changes no bit.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace sluice::ops {

inline constexpr int64_t k_attn_res_max_candidates = 256;  // a stack array per row; K3 has at most ~20

// cand: J pointers to [n, d] f32 arrays (1 <= J <= k_attn_res_max_candidates); norm, proj: [d]; out: [n, d] (not
// one of the candidates).
void attn_res(const float* const* cand, int64_t J, const float* norm, const float* proj, int64_t n, int64_t d,
              float eps, float* out, ThreadPool& pool);

}  // namespace sluice::ops

namespace sluice::ops::ref {
void attn_res(const float* const* cand, int64_t J, const float* norm, const float* proj, int64_t n, int64_t d,
              float eps, float* out);
}  // namespace sluice::ops::ref
