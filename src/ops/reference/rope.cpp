// Reference twin of RoPE's rotation (ops/rope.h), in double precision: the rotation of each pair by its angle.
#include "ops/rope.h"

namespace sluice::ops::ref {

void rope_rotate(RopeLayout layout, const float* c, const float* s, int64_t half, float* x, int64_t n_heads,
                 int64_t head_stride) {
    for (int64_t h = 0; h < n_heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
            const int64_t ia = layout == RopeLayout::Interleaved ? 2 * i : i;
            const int64_t ib = layout == RopeLayout::Interleaved ? 2 * i + 1 : i + half;
            float* v = x + h * head_stride;
            const double a = v[ia], b = v[ib];
            v[ia] = float(a * c[i] - b * s[i]);
            v[ib] = float(b * c[i] + a * s[i]);
        }
}

}  // namespace sluice::ops::ref
