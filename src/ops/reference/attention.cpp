#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/ops.h"

namespace sluice::ops::ref {

void attention(const AttentionParams& p, const float* q, int64_t n_rows, const int64_t* pos, const float* k,
               int64_t k_stride, const float* v, int64_t v_stride, float* out) {
    const int64_t group = p.n_heads / p.n_kv_heads;
    for (int64_t r = 0; r < n_rows; ++r) {
        const int64_t hi = pos[r] + 1;
        const int64_t lo = p.window > 0 ? std::max<int64_t>(0, hi - p.window) : 0;
        for (int64_t h = 0; h < p.n_heads; ++h) {
            const int64_t g = h / group;
            const float* qh = q + (r * p.n_heads + h) * p.head_dim_k;
            std::vector<double> s(static_cast<size_t>(hi - lo));
            double mx = p.sinks ? double(p.sinks[h]) : -INFINITY;
            for (int64_t t = lo; t < hi; ++t) {
                const float* kt = k + t * k_stride + g * p.head_dim_k;
                double d = 0;
                for (int64_t j = 0; j < p.head_dim_k; ++j) d += double(qh[j]) * kt[j];
                s[size_t(t - lo)] = d * p.scale;
                mx = std::max(mx, s[size_t(t - lo)]);
            }
            double sum = p.sinks ? std::exp(double(p.sinks[h]) - mx) : 0.0;
            for (auto& e : s) sum += (e = std::exp(e - mx));
            float* oh = out + (r * p.n_heads + h) * p.head_dim_v;
            for (int64_t j = 0; j < p.head_dim_v; ++j) {
                double acc = 0;
                for (int64_t t = lo; t < hi; ++t) acc += s[size_t(t - lo)] * v[t * v_stride + g * p.head_dim_v + j];
                oh[j] = float(acc / sum);
            }
        }
    }
}

}  // namespace sluice::ops::ref
