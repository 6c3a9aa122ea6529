// The elementwise pieces of the Kimi Delta Attention block (models/blocks/kda.cpp) around its delta rule (ops/kda.h):
// the short causal convolutions of q/k/v, the per-head L2 normalisation, the decay gate, and the gated RMSNorm of
// the output. Reference twins in ops::ref (ops/reference/kda_ops.cpp, double precision); the op harness
// (tests/ops) checks one against the other. Rows are independent except in the convolution, whose carried taps make
// a sequence's rows run in order: there, rows split over several calls give the bits of one call.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace sluice::ops {

// Causal depthwise convolution of `rows` rows of `channels` channels, then SiLU. raw/out: row j at j * ld.
// weight [channels, kernel]: tap kernel-1 multiplies the current row, tap i < kernel-1 the row kernel-1-i back.
// taps [channels, kernel - 1] holds each channel's previous kernel-1 raw inputs (oldest first) and is updated, so a
// sequence's next call continues where this one ended.
void kda_short_conv(const float* weight, int64_t channels, int64_t kernel, float* taps, const float* raw, int64_t rows,
                    int64_t ld, float* out, ThreadPool& pool);

// x[r, h, :] *= scale / sqrt(sum x[r, h, :]^2 + 1e-6) for `heads` heads of `dim` at row r * ld, in place.
void l2_norm_heads(float* x, int64_t rows, int64_t heads, int64_t dim, int64_t ld, float scale, ThreadPool& pool);

// The per-channel log-decay gate from f [n, heads * dim]: u = f + dt_bias[h * dim + d], a = exp(A_log[h]);
// lower_bound < 0 (Kimi K3): g = lower_bound * sigmoid(a u); else (Kimi Linear): g = -a softplus(u) (u past 20: u).
void kda_decay_gate(const float* f, const float* A_log, const float* dt_bias, int64_t n, int64_t heads, int64_t dim,
                    float lower_bound, float* g, ThreadPool& pool);

// The output gate, per row and head, in place: o = rms_norm(o, norm_weight [dim], eps) * sigmoid(gate), with o and
// gate [n, heads * dim].
void kda_output_gate(const float* gate, const float* norm_weight, int64_t n, int64_t heads, int64_t dim, float eps,
                     float* o, ThreadPool& pool);

}  // namespace sluice::ops

namespace sluice::ops::ref {
void kda_short_conv(const float* weight, int64_t channels, int64_t kernel, float* taps, const float* raw, int64_t rows,
                    int64_t ld, float* out);
void l2_norm_heads(float* x, int64_t rows, int64_t heads, int64_t dim, int64_t ld, float scale);
void kda_decay_gate(const float* f, const float* A_log, const float* dt_bias, int64_t n, int64_t heads, int64_t dim,
                    float lower_bound, float* g);
void kda_output_gate(const float* gate, const float* norm_weight, int64_t n, int64_t heads, int64_t dim, float eps,
                     float* o);
}  // namespace sluice::ops::ref
