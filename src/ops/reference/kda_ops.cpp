// Reference twins of the KDA block's elementwise ops (ops/kda_ops.h), from transformers' KimiDeltaAttention
// (causal_conv1d with SiLU, l2norm, the gate functions, FusedRMSNormGated): plain loops in double precision, one
// element at a time, rounded to float at the end.
#include <cmath>

#include "ops/kda_ops.h"

namespace sluice::ops::ref {

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

void kda_short_conv(const float* weight, int64_t channels, int64_t kernel, float* taps, const float* raw, int64_t rows,
                    int64_t ld, float* out) {
    for (int64_t ch = 0; ch < channels; ++ch) {
        float* tp = taps + ch * (kernel - 1);
        for (int64_t j = 0; j < rows; ++j) {
            // the window: kernel-1 carried inputs, then this row's
            double s = double(weight[ch * kernel + kernel - 1]) * raw[j * ld + ch];
            for (int64_t i = 0; i < kernel - 1; ++i) s += double(weight[ch * kernel + i]) * tp[i];
            out[j * ld + ch] = float(s * sigmoid(s));
            for (int64_t i = 0; i + 1 < kernel - 1; ++i) tp[i] = tp[i + 1];
            if (kernel > 1) tp[kernel - 2] = raw[j * ld + ch];
        }
    }
}

void l2_norm_heads(float* x, int64_t rows, int64_t heads, int64_t dim, int64_t ld, float scale) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h) {
            float* v = x + r * ld + h * dim;
            double ss = 0;
            for (int64_t d = 0; d < dim; ++d) ss += double(v[d]) * v[d];
            const double k = double(scale) / std::sqrt(ss + 1e-6);
            for (int64_t d = 0; d < dim; ++d) v[d] = float(v[d] * k);
        }
}

void kda_decay_gate(const float* f, const float* A_log, const float* dt_bias, int64_t n, int64_t heads, int64_t dim,
                    float lower_bound, float* g) {
    for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t d = 0; d < dim; ++d) {
                const int64_t j = (i * heads + h) * dim + d;
                const double a = std::exp(double(A_log[h]));
                const double u = double(f[j]) + dt_bias[h * dim + d];
                g[j] = float(lower_bound < 0 ? lower_bound * sigmoid(a * u) : -a * (u > 30 ? u + std::exp(-u) : std::log1p(std::exp(u))));
            }
}

void kda_output_gate(const float* gate, const float* norm_weight, int64_t n, int64_t heads, int64_t dim, float eps,
                     float* o) {
    for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < heads; ++h) {
            float* oh = o + (i * heads + h) * dim;
            const float* gt = gate + (i * heads + h) * dim;
            double ss = 0;
            for (int64_t d = 0; d < dim; ++d) ss += double(oh[d]) * oh[d];
            const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
            for (int64_t d = 0; d < dim; ++d) oh[d] = float(oh[d] * inv * norm_weight[d] * sigmoid(gt[d]));
        }
}

}  // namespace sluice::ops::ref
