// The gated delta rule of Kimi Delta Attention (Kimi Linear, Kimi K3) for one head: the recurrent form (token by
// token) and the chunked form (WY/UT transform per chunk, as transformers' chunk_kimi_delta_attention). They agree
// to fp32 rounding, not bit for bit; the recurrent form gives the same bits however its rows are split into calls,
// which is what lets a sequence's KDA state be rolled back by replaying rows (state/sequence_state.h).
#pragma once

#include <cstdint>

namespace sluice {

// The delta rule for one head over T tokens. q [T, D] (L2-normalised and scaled), k [T, D] (L2-normalised),
// v [T, D], g [T, D] log-decay (<= 0), beta [T]; S [D, D] (k-major) is read and updated; o [T, D].
// Rows are strided: element (t, d) of q/k/v/g/o is at t*stride + d, beta[t] at t*beta_stride.
struct KdaHeadIo {
    const float *q, *k, *v, *g, *beta;
    float* o;
    int64_t stride, beta_stride;
};
void kda_recurrent(const KdaHeadIo& io, int64_t T, int64_t D, float* S);
void kda_chunked(const KdaHeadIo& io, int64_t T, int64_t D, int64_t chunk, float* S);

}  // namespace sluice

namespace sluice::ops::ref {
// The reference twin (ops/reference/kda.cpp): S_t = diag(exp g_t) S_{t-1}; S_t += beta_t k_t (v_t - S_t^T k_t)^T;
// o_t = S_t^T q_t, in double precision (state and outputs). Reads io's q, k, v, g, beta and strides; not io.o.
void kda_delta_rule(const KdaHeadIo& io, int64_t T, int64_t D, double* S, double* o);
}  // namespace sluice::ops::ref
