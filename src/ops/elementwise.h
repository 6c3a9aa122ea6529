// The elementwise ops of a forward pass besides ops.h's norms and GLUs: the residual add, the bias add, the
// sigmoid, the sigmoid gate and a linear probe's sigmoid. Reference twins in ops::ref (ops/reference/elementwise.cpp),
// checked by the op harness (tests/ops). Each element's arithmetic is one float operation or function, so no bit
// depends on the rows around it.
#pragma once

#include <cstdint>

namespace sluice::ops {

// out[i] = a[i] + b[i] for i < count: the residual add (out may be a or b).
void add(const float* a, const float* b, int64_t count, float* out);
// y[r, j] += bias[j] for r < n, j < width.
void add_bias(float* y, const float* bias, int64_t n, int64_t width);
// y[i] = 1 / (1 + exp(-x[i])) for i < count (in place allowed).
void sigmoid(const float* x, int64_t count, float* y);
// y[i] *= 1 / (1 + exp(-gate[i])) for i < count: a sigmoid output gate (MLA's in Kimi K3).
void mul_sigmoid(const float* gate, int64_t count, float* y);
// sigmoid(bias + w[:n1] . x1 + w[n1:n1+n2] . x2), the sum and the sigmoid in double, products in index order: a
// linear probe over two inputs side by side (DSpark's confidence head over the normed hidden row and the Markov
// embedding).
float sigmoid_dot(const float* w, float bias, const float* x1, int64_t n1, const float* x2, int64_t n2);

}  // namespace sluice::ops

namespace sluice::ops::ref {
void add(const float* a, const float* b, int64_t count, float* out);
void add_bias(float* y, const float* bias, int64_t n, int64_t width);
void sigmoid(const float* x, int64_t count, float* y);
void mul_sigmoid(const float* gate, int64_t count, float* y);
float sigmoid_dot(const float* w, float bias, const float* x1, int64_t n1, const float* x2, int64_t n2);
}  // namespace sluice::ops::ref
