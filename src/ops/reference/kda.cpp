// Reference twin of Kimi Delta Attention's gated delta rule (ops/kda.h), written from its definition in the Kimi
// Linear paper and transformers' recurrent reference: one token at a time, in double precision.
#include <cmath>

#include "ops/kda.h"

namespace sluice::ops::ref {

void kda_delta_rule(const KdaHeadIo& io, int64_t T, int64_t D, double* S, double* o) {
    for (int64_t t = 0; t < T; ++t) {
        const float* q = io.q + t * io.stride;
        const float* k = io.k + t * io.stride;
        const float* v = io.v + t * io.stride;
        const float* g = io.g + t * io.stride;
        const double beta = io.beta[t * io.beta_stride];
        for (int64_t a = 0; a < D; ++a)
            for (int64_t b = 0; b < D; ++b) S[a * D + b] *= std::exp(double(g[a]));
        for (int64_t b = 0; b < D; ++b) {
            double mem = 0;
            for (int64_t a = 0; a < D; ++a) mem += S[a * D + b] * k[a];
            const double delta = (v[b] - mem) * beta;
            for (int64_t a = 0; a < D; ++a) S[a * D + b] += k[a] * delta;
        }
        for (int64_t b = 0; b < D; ++b) {
            double acc = 0;
            for (int64_t a = 0; a < D; ++a) acc += S[a * D + b] * q[a];
            o[t * D + b] = acc;
        }
    }
}

}  // namespace sluice::ops::ref
