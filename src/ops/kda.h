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
