// CPU attention: one (row, head) pair per task; scores in f32 with a max-subtracted softmax.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/simd.h"
#include "ops/ops.h"

namespace sluice::ops {

void attention(const AttentionParams& p, const float* q, int64_t n_rows, const int64_t* pos, RowView k, RowView v,
               float* out, ThreadPool& pool) {
    const int64_t group = p.n_heads / p.n_kv_heads;
    pool.parallel_for(n_rows * p.n_heads, [&](int64_t b, int64_t e) {
        std::vector<float> s;
        std::vector<float> acc(static_cast<size_t>(p.head_dim_v));
        for (int64_t task = b; task < e; ++task) {
            const int64_t r = task / p.n_heads, h = task % p.n_heads, g = h / group;
            const int64_t hi = pos[r] + 1;
            const int64_t lo = p.window > 0 ? std::max<int64_t>(0, hi - p.window) : 0;
            const float* qh = q + task * p.head_dim_k;
            s.resize(size_t(hi - lo));
            float mx = p.sinks ? p.sinks[h] : -INFINITY;
            for (int64_t t = lo; t < hi; ++t) {
                float d = cpu::dot_f32(qh, k.row(t) + g * p.head_dim_k, p.head_dim_k) * p.scale;
                s[size_t(t - lo)] = d;
                mx = std::max(mx, d);
            }
            float sum = p.sinks ? std::exp(p.sinks[h] - mx) : 0.0f;
            for (auto& x : s) sum += (x = std::exp(x - mx));
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t t = lo; t < hi; ++t) {
                const float pt = s[size_t(t - lo)];
                const float* vt = v.row(t) + g * p.head_dim_v;
                for (int64_t j = 0; j < p.head_dim_v; ++j) acc[size_t(j)] += pt * vt[j];
            }
            float* oh = out + task * p.head_dim_v;
            const float inv = 1.0f / sum;
            for (int64_t j = 0; j < p.head_dim_v; ++j) oh[j] = acc[size_t(j)] * inv;
        }
    });
}

}  // namespace sluice::ops
