#include "models/blocks/attn_res.h"

#include <algorithm>
#include <cmath>

#include "core/phase_times.h"

namespace sluice {

void attn_res(const float* running, const std::vector<const float*>& blocks, const AttnResWeights& w, int64_t n,
              int64_t d, float eps, float* out) {
    phase_times::Scope timed(phase_times::kAttnRes);
    const size_t J = blocks.size() + 1;
    std::vector<const float*> cand(J);
    std::vector<float> logit(J);
    for (int64_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < J; ++j) cand[j] = (j + 1 < J ? blocks[j] : running) + i * d;
        for (size_t j = 0; j < J; ++j) {
            const float* v = cand[j];
            float ss = 0;
            for (int64_t k = 0; k < d; ++k) ss += v[k] * v[k];
            const float inv = 1.0f / std::sqrt(ss / float(d) + eps);
            float s = 0;
            for (int64_t k = 0; k < d; ++k) s += (v[k] * inv * w.norm[size_t(k)]) * w.proj[size_t(k)];
            logit[j] = s;
        }
        const float mx = *std::max_element(logit.begin(), logit.end());
        float sum = 0;
        for (auto& l : logit) sum += (l = std::exp(l - mx));
        float* o = out + i * d;
        std::fill(o, o + d, 0.0f);
        for (size_t j = 0; j < J; ++j) {
            const float p = logit[j] / sum;
            for (int64_t k = 0; k < d; ++k) o[k] += p * cand[j][k];
        }
    }
}

}  // namespace sluice
