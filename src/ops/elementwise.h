// The elementwise ops of a forward pass besides ops.h's norms and GLUs: the residual add, the bias add, the
// sigmoid and the sigmoid gate. Reference twins in ops::ref (ops/reference/elementwise.cpp), checked by the op harness (tests/ops). Each
// element's arithmetic is one float operation or function, so no bit depends on the rows around it.
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

}  // namespace sluice::ops

namespace sluice::ops::ref {
void add(const float* a, const float* b, int64_t count, float* out);
void add_bias(float* y, const float* bias, int64_t n, int64_t width);
void sigmoid(const float* x, int64_t count, float* y);
void mul_sigmoid(const float* gate, int64_t count, float* y);
}  // namespace sluice::ops::ref
