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

namespace sluice {
class ThreadPool;
class ExecContext;
}  // namespace sluice

namespace sluice::ops {
enum class Backend : uint8_t;  // ops/ops.h
// The recurrent form for `heads` heads of one sequence at once: head h's q/k/v/g/o columns at h * D of each row,
// its beta at io.beta + h, its state at S + h * D * D; io.o may be null (a replay needs only the state). On the card
// under the CUDA backend when cuda::kda_supports(D) and the call has at least kKdaCudaMinRows rows (below that, the
// state's copies across cost more than the rows' arithmetic: a decode step stays on the CPU), else kda_recurrent per
// head over the pool's threads. Both sides give the same bits (ops/cuda/kda.cu), so where a row runs never changes
// it: a sequence's rows give the same bits in one call as split over several.
constexpr int64_t kKdaCudaMinRows = 64;
// In a pass: on ctx's backend, over its pool.
void kda_recurrent_heads(const KdaHeadIo& io, int64_t heads, int64_t T, int64_t D, float* S, ExecContext& ctx);
// For a caller that has no context (a rollback's replay, state/caches.cpp): on `backend`, which it names, over
// `pool` (null: the calling thread). Backend::Cpu runs on the CPU whatever the process default is.
void kda_recurrent_heads(const KdaHeadIo& io, int64_t heads, int64_t T, int64_t D, float* S, Backend backend,
                         ThreadPool* pool);
}  // namespace sluice::ops

namespace sluice::ops::ref {
// The reference twin (ops/reference/kda.cpp): S_t = diag(exp g_t) S_{t-1}; S_t += beta_t k_t (v_t - S_t^T k_t)^T;
// o_t = S_t^T q_t, in double precision (state and outputs). Reads io's q, k, v, g, beta and strides; not io.o.
void kda_delta_rule(const KdaHeadIo& io, int64_t T, int64_t D, double* S, double* o);
}  // namespace sluice::ops::ref
