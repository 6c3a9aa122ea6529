// The KDA block's elementwise ops on the CPU (contracts in ops/kda_ops.h): channels or rows split over the thread
// pool; each element's arithmetic is fixed, so no bit depends on the split or on the other rows of the call.
#include <algorithm>
#include <cmath>

#include "ops/kda_ops.h"
#include "ops/ops.h"

namespace sluice::ops {

namespace {
float sigmoid1(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void kda_short_conv(const float* weight, int64_t channels, int64_t kernel, float* taps, const float* raw, int64_t rows,
                    int64_t ld, float* out, ThreadPool& pool) {
    const int64_t K = kernel;
    pool.parallel_for(channels, [&](int64_t c0, int64_t c1) {
        for (int64_t ch = c0; ch < c1; ++ch) {
            float* tp = taps + ch * (K - 1);
            const float* wc = weight + ch * K;
            for (int64_t j = 0; j < rows; ++j) {
                const float x = raw[j * ld + ch];
                float s = 0;
                for (int64_t i = 0; i < K - 1; ++i) s += wc[i] * tp[i];
                s += wc[K - 1] * x;
                out[j * ld + ch] = s / (1.0f + std::exp(-s));
                if (K > 1) {
                    std::copy(tp + 1, tp + K - 1, tp);
                    tp[K - 2] = x;
                }
            }
        }
    }, 64);
}

void l2_norm_heads(float* x, int64_t rows, int64_t heads, int64_t dim, int64_t ld, float scale, ThreadPool& pool) {
    pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t h = 0; h < heads; ++h) {
                float* v = x + r * ld + h * dim;
                float ss = 0;
                for (int64_t d = 0; d < dim; ++d) ss += v[d] * v[d];
                const float inv = 1.0f / std::sqrt(ss + 1e-6f);
                for (int64_t d = 0; d < dim; ++d) v[d] = v[d] * inv * scale;
            }
    });
}

void kda_decay_gate(const float* f, const float* A_log, const float* dt_bias, int64_t n, int64_t heads, int64_t dim,
                    float lower_bound, float* g, ThreadPool& pool) {
    const int64_t P = heads * dim;
    pool.parallel_for(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
            for (int64_t h = 0; h < heads; ++h) {
                const float a = std::exp(A_log[h]);
                for (int64_t d = 0; d < dim; ++d) {
                    const int64_t j = i * P + h * dim + d;
                    const float u = f[j] + dt_bias[h * dim + d];
                    if (lower_bound < 0) {
                        g[j] = lower_bound * sigmoid1(a * u);
                    } else {
                        const float sp = u > 20.0f ? u : std::log(1.0f + std::exp(u));
                        g[j] = -a * sp;
                    }
                }
            }
    });
}

void kda_output_gate(const float* gate, const float* norm_weight, int64_t n, int64_t heads, int64_t dim, float eps,
                     float* o, ThreadPool& pool) {
    const int64_t P = heads * dim;
    pool.parallel_for(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
            for (int64_t h = 0; h < heads; ++h) {
                float* oh = o + i * P + h * dim;
                rms_norm(oh, norm_weight, 1, dim, eps, oh);
                const float* gt = gate + i * P + h * dim;
                for (int64_t d = 0; d < dim; ++d) oh[d] *= sigmoid1(gt[d]);
            }
    });
}

}  // namespace sluice::ops
