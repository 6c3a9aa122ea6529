#include <cmath>
#include <vector>

#include "ops/attn_res.h"

namespace sluice::ops::ref {

void attn_res(const float* const* cand, int64_t J, const float* norm, const float* proj, int64_t n, int64_t d,
              float eps, float* out) {
    std::vector<double> logit(static_cast<size_t>(J));
    for (int64_t i = 0; i < n; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < J; ++j) {
            const float* v = cand[j] + i * d;
            double ss = 0;
            for (int64_t k = 0; k < d; ++k) ss += double(v[k]) * v[k];
            const double inv = 1.0 / std::sqrt(ss / double(d) + eps);
            double s = 0;
            for (int64_t k = 0; k < d; ++k) s += double(v[k]) * inv * norm[k] * proj[k];
            logit[size_t(j)] = s;
            mx = std::max(mx, s);
        }
        double sum = 0;
        for (auto& l : logit) sum += (l = std::exp(l - mx));
        for (int64_t k = 0; k < d; ++k) {
            double o = 0;
            for (int64_t j = 0; j < J; ++j) o += logit[size_t(j)] / sum * cand[j][i * d + k];
            out[i * d + k] = float(o);
        }
    }
}

}  // namespace sluice::ops::ref
