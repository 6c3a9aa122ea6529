#include <cmath>

#include "ops/elementwise.h"
#include "ops/ops.h"

namespace sluice::ops::ref {

void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y) {
    for (int64_t i = 0; i < n; ++i) {
        const float* xi = x + i * dim;
        double ss = 0;
        for (int64_t j = 0; j < dim; ++j) ss += double(xi[j]) * xi[j];
        const float inv = float(1.0 / std::sqrt(ss / double(dim) + eps));
        for (int64_t j = 0; j < dim; ++j) y[i * dim + j] = (xi[j] * inv) * (weight ? weight[j] : 1.0f);
    }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void add(const float* a, const float* b, int64_t count, float* out) {
    for (int64_t i = 0; i < count; ++i) out[i] = float(double(a[i]) + double(b[i]));
}

void add_bias(float* y, const float* bias, int64_t n, int64_t width) {
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < width; ++j) y[i * width + j] = float(double(y[i * width + j]) + double(bias[j]));
}

void sigmoid(const float* x, int64_t count, float* y) {
    for (int64_t i = 0; i < count; ++i) y[i] = float(1.0 / (1.0 + std::exp(-double(x[i]))));
}

void mul_sigmoid(const float* gate, int64_t count, float* y) {
    for (int64_t i = 0; i < count; ++i) y[i] = float(double(y[i]) / (1.0 + std::exp(-double(gate[i]))));
}

// in long double, over the two inputs as one concatenated vector
float sigmoid_dot(const float* w, float bias, const float* x1, int64_t n1, const float* x2, int64_t n2) {
    long double z = bias;
    for (int64_t k = 0; k < n1 + n2; ++k) z += (long double)w[k] * (k < n1 ? x1[k] : x2[k - n1]);
    return float(1.0L / (1.0L + std::exp(-z)));
}

}  // namespace sluice::ops::ref
