#include "ops/attn_res.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace sluice::ops {

void attn_res(const float* const* cand, int64_t J, const float* norm, const float* proj, int64_t n, int64_t d,
              float eps, float* out, ThreadPool& pool) {
    SLUICE_CHECK(J >= 1 && J <= k_attn_res_max_candidates, "attn_res: ", J, " candidates (1 to ",
                 k_attn_res_max_candidates, ")");
    // each row: J norms and dot products and a weighted sum over d (about 5 J d flops); rows split over the pool
    const int64_t min_rows = std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, J * d));
    pool.parallel_for(n, [&](int64_t i0, int64_t i1) {
        float logit[k_attn_res_max_candidates];
        for (int64_t i = i0; i < i1; ++i) {
            for (int64_t j = 0; j < J; ++j) {
                const float* v = cand[j] + i * d;
                float ss = 0;
                for (int64_t k = 0; k < d; ++k) ss += v[k] * v[k];
                const float inv = 1.0f / std::sqrt(ss / float(d) + eps);
                float s = 0;
                for (int64_t k = 0; k < d; ++k) s += (v[k] * inv * norm[k]) * proj[k];
                logit[j] = s;
            }
            const float mx = *std::max_element(logit, logit + J);
            float sum = 0;
            for (int64_t j = 0; j < J; ++j) sum += (logit[j] = std::exp(logit[j] - mx));
            float* o = out + i * d;
            std::fill(o, o + d, 0.0f);
            for (int64_t j = 0; j < J; ++j) {
                const float p = logit[j] / sum;
                const float* v = cand[j] + i * d;
                for (int64_t k = 0; k < d; ++k) o[k] += p * v[k];
            }
        }
    }, min_rows);
}

}  // namespace sluice::ops
