#include <cmath>

#include "ops/cpu/simd.h"
#include "ops/elementwise.h"
#include "ops/ops.h"

namespace sluice::ops {

void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y) {
    for (int64_t i = 0; i < n; ++i) {
        const float* xi = x + i * dim;
        const float ss = cpu::dot_f32(xi, xi, dim);
        const float inv = 1.0f / std::sqrt(ss / float(dim) + eps);
        float* yi = y + i * dim;
        if (weight)
            for (int64_t j = 0; j < dim; ++j) yi[j] = (xi[j] * inv) * weight[j];
        else
            for (int64_t j = 0; j < dim; ++j) yi[j] = xi[j] * inv;
    }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void add(const float* a, const float* b, int64_t count, float* out) {
    for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

void add_bias(float* y, const float* bias, int64_t n, int64_t width) {
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < width; ++j) y[i * width + j] += bias[j];
}

void sigmoid(const float* x, int64_t count, float* y) {
    for (int64_t i = 0; i < count; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void mul_sigmoid(const float* gate, int64_t count, float* y) {
    for (int64_t i = 0; i < count; ++i) y[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
}

float sigmoid_dot(const float* w, float bias, const float* x1, int64_t n1, const float* x2, int64_t n2) {
    double z = bias;
    for (int64_t k = 0; k < n1; ++k) z += double(w[k]) * x1[k];
    for (int64_t k = 0; k < n2; ++k) z += double(w[n1 + k]) * x2[k];
    return float(1.0 / (1.0 + std::exp(-z)));
}

}  // namespace sluice::ops
